"""The template, deployed to a moto server, runs the stage: the real worker, pointed at the
stack's outputs only, turns a converse command into a prompt payload and dead-letters a
bad one through the redrive the template declared."""

from __future__ import annotations

import json

import pytest

from tests.infra.cfn_deploy import deploy_stack
from tests.integration.conftest import Stack, body_of, exchanges, running_worker
from worker.app.runtime import aws_clients

pytestmark = pytest.mark.integration


async def test_the_worker_serves_from_what_the_template_deployed(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs = deploy_stack(moto_endpoint, stack_name="deployed")
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    env = {
        "CONVERSE_QUEUE_URL": outputs["ConverseQueueUrl"],
        "MODEL_QUEUE_URL": outputs["ModelQueueUrl"],
        "COMPACTION_QUEUE_URL": outputs["CompactionQueueUrl"],
        "HISTORY_TABLE": outputs["HistoryTableName"],
        "PAYLOAD_BUCKET": outputs["PayloadBucketName"],
    }
    async with aws_clients() as clients:
        stack = Stack(endpoint=moto_endpoint, env=env, clients=clients)
        await stack.seed("matter-cfn", exchanges(20), folded_through=0)
        await stack.send_command(command_id="c-cfn", conversation_id="matter-cfn")
        await stack.send_raw("{not a command")
        async with running_worker(stack.settings()):
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
    assert json.loads(fold["Body"])["through"] == 40
    assert dead["Body"] == "{not a command"
    assert "RejectionReason" in dead["MessageAttributes"]
