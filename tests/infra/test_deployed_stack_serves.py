"""The templates, deployed to a moto server, run the stage: the pipeline stack (the history
table, the model queue standard or FIFO, the compaction queue), then the converse stack
joined to it; the real worker, given the environment the converse stack's task definition
holds, turns a converse command into a prompt payload on the model queue the pipeline made,
and dead-letters a bad one through the redrive the converse template declared."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.infra.cfn_deploy import aws_client, deploy_stack
from tests.infra.cfn_outputs import RESOURCE_VARIABLES
from tests.integration.conftest import Stack, body_of, exchanges, running_worker
from worker.app.runtime import aws_clients

pytestmark = pytest.mark.integration


def task_environment(endpoint: str, stack_name: str) -> dict[str, str]:
    """The worker's resource variables as the deployed task definition holds them."""
    ecs = aws_client("ecs", endpoint)
    family = f"{stack_name}-converse-worker"
    (container,) = ecs.describe_task_definition(taskDefinition=family)["taskDefinition"][
        "containerDefinitions"
    ]
    # moto keeps an entry CloudFormation would leave out (AWS::NoValue) as None.
    environment = {e["name"]: e["value"] for e in container["environment"] if e is not None}
    return {name: environment[name] for name in (*RESOURCE_VARIABLES, "LEDGER_LEGACY_READS")}


async def received_with_group(stack: Stack, queue_url: str) -> dict[str, Any]:
    """The one message on a FIFO queue, with its MessageGroupId and deduplication id."""
    for _ in range(60):
        response = await stack.clients.sqs.receive_message(
            QueueUrl=queue_url,
            WaitTimeSeconds=1,
            MessageSystemAttributeNames=["MessageGroupId", "MessageDeduplicationId"],
        )
        if response.get("Messages"):
            (message,) = response["Messages"]
            return dict(message)
    raise AssertionError(f"nothing arrived on {queue_url}")


@pytest.mark.parametrize("model_queue_type", ["standard", "fifo"])
async def test_the_worker_serves_from_what_the_two_stacks_deployed(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, model_queue_type: str
) -> None:
    stack_name = f"deployed-{model_queue_type}"
    outputs = deploy_stack(
        moto_endpoint,
        stack_name=stack_name,
        pipeline_parameters={"ModelQueueType": model_queue_type},
    )
    env = task_environment(moto_endpoint, stack_name)
    fifo = model_queue_type == "fifo"
    # The URL the converse stack derived from the ARN it joined is the pipeline's own queue.
    assert env["MODEL_QUEUE_URL"] == outputs["ModelQueueUrl"]
    assert env["MODEL_QUEUE_URL"].endswith(".fifo") is fifo
    model_queue = aws_client("sqs", moto_endpoint).get_queue_attributes(
        QueueUrl=env["MODEL_QUEUE_URL"], AttributeNames=["All"]
    )["Attributes"]
    assert model_queue.get("FifoQueue", "false") == str(fifo).lower()
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    async with aws_clients() as clients:
        stack = Stack(endpoint=moto_endpoint, env=env, clients=clients)
        await stack.seed("matter-cfn", exchanges(20), folded_through=0)
        await stack.send_command(command_id="c-cfn", conversation_id="matter-cfn")
        await stack.send_raw("{not a command")
        async with running_worker(stack.settings()):
            if fifo:
                prompt = await received_with_group(stack, env["MODEL_QUEUE_URL"])
            else:
                [prompt] = await stack.drain("MODEL_QUEUE_URL", expect=1)
            [fold] = await stack.drain("COMPACTION_QUEUE_URL", expect=1)
            [dead] = await stack.drain(outputs["ConverseDeadLetterQueueUrl"], expect=1)
    payload = body_of(prompt)
    assert payload["command_id"] == "c-cfn"
    assert payload["window"] == {
        "kept": 24,
        "dropped": 16,
        "trimmed": 0,
        "estimated_tokens": 240,
        "left_out": 0,
    }
    if fifo:
        # One conversation's prompts in order, one command's resend dropped by SQS.
        assert prompt["Attributes"]["MessageGroupId"] == "matter-cfn"
        assert prompt["Attributes"]["MessageDeduplicationId"] == "c-cfn"
    assert json.loads(fold["Body"])["through"] == 40
    assert dead["Body"] == "{not a command"
    assert "RejectionReason" in dead["MessageAttributes"]
