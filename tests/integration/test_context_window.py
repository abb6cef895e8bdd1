"""A command whose message alone cannot fit the model's context window, through the real
worker: dead-lettered at once with its reason, never forwarded, the ledger untouched."""

from __future__ import annotations

import json

import pytest

from localaws.bedrock_cache import STAND_IN_MODEL_ID
from tests.conftest import captured_logs
from tests.integration.conftest import Stack, body_of, exchanges, running_worker
from worker.delivery.pointers import POINTER_CLASS, SIZE_ATTRIBUTE

pytestmark = pytest.mark.integration

SECRET = "PRIVILEGED-7Q"


def command(command_id: str, message: str) -> str:
    return json.dumps(
        {
            "type": "converse",
            "command_id": command_id,
            "conversation_id": "matter-cw",
            "message": message,
        }
    )


async def test_a_message_larger_than_the_context_window_is_dead_lettered_with_its_reason(
    stack: Stack,
) -> None:
    """GIVEN the cache-aligned worker told its model (Claude Sonnet 4.5: 200,000 tokens),
    WHEN a producer offloads an 850,006-character question to S3 (as it must: SQS takes 256
    KiB) and sends an ordinary one after it, THEN the large one goes to the dead-letter queue
    with a reason of sizes and the model, is never forwarded nor claimed in the ledger, and
    no log line carries its text; the ordinary one is served."""
    await stack.seed("matter-cw", exchanges(2))
    bucket = stack.env["PAYLOAD_BUCKET"]
    oversized = command("c-large", f"{SECRET} " + "Schedule 4, clause 9. " * 38_636)
    assert len(json.loads(oversized)["message"]) == 850_006
    await stack.clients.s3.put_object(Bucket=bucket, Key="in/c-large.json", Body=oversized)
    pointer = json.dumps([POINTER_CLASS, {"s3BucketName": bucket, "s3Key": "in/c-large.json"}])
    await stack.clients.sqs.send_message(
        QueueUrl=stack.env["CONVERSE_QUEUE_URL"],
        MessageBody=pointer,
        MessageAttributes={
            SIZE_ATTRIBUTE: {"DataType": "Number", "StringValue": str(len(oversized))}
        },
    )
    await stack.send_raw(command("c-small", f"{SECRET} and clause 10?"))
    settings = stack.settings(history_window_mode="cache-aligned", model_id=STAND_IN_MODEL_ID)
    with captured_logs() as logs:
        async with running_worker(settings):
            [dead] = await stack.drain(await stack.dead_letter_url(), expect=1)
            [prompt] = await stack.drain("MODEL_QUEUE_URL", expect=1)
            await stack.until_empty("CONVERSE_QUEUE_URL")
        later = await stack.drain("MODEL_QUEUE_URL")

    reason = (
        "message is larger than the model's context window: ~212,502 tokens estimated, "
        "Claude Sonnet 4.5 takes 200,000"
    )
    assert dead["Body"] == pointer  # the command as it came, for a redrive
    assert dead["MessageAttributes"]["RejectionReason"]["StringValue"] == reason
    assert body_of(prompt)["command_id"] == "c-small" and later == []
    ledger = await stack.clients.dynamodb.scan(TableName=stack.env["LEDGER_TABLE"])
    assert [item["sk"]["S"] for item in ledger["Items"]] == ["cmd#c-small"]
    [rejected] = [e for e in logs if e["event"] == "clerk.converse_command_rejected"]
    assert (rejected["log_level"], rejected["reason"]) == ("warning", reason)
    assert SECRET not in repr(logs) and "Schedule 4" not in repr(logs)
