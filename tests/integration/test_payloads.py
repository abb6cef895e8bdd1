"""Payloads of any size: the S3 offload, its exact threshold, and interoperability with the
Amazon SQS Extended Client (the real library, sync boto3, against the same moto server)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from localaws.fault_proxy import Fault, FaultProxy
from tests.conftest import captured_logs
from tests.converse_rules import assert_model_ready
from tests.integration.conftest import Stack, body_of, running_worker
from worker.app.resources import Resources
from worker.delivery.pointers import POINTER_CLASS, SIZE_ATTRIBUTE, message_size
from worker.memory import FoldState, bound_history, render_converse
from worker.settings import Settings
from worker.turn.commands import ConverseCommand, encode_body, prompt_payload

pytestmark = pytest.mark.integration

RETRY = "clerk.converse_command_retry"


def command(command_id: str, message: str, conversation_id: str = "matter-p") -> dict[str, str]:
    return {
        "type": "converse",
        "command_id": command_id,
        "conversation_id": conversation_id,
        "message": message,
    }


async def s3_object(stack: Stack, bucket: str, key: str) -> tuple[bytes, dict[str, Any]]:
    response = await stack.clients.s3.get_object(Bucket=bucket, Key=key)
    async with response["Body"] as stream:
        return await stream.read(), response


def read_like_the_extended_client(message: dict[str, Any]) -> tuple[str, str]:
    """The Extended Client's own test for a pointer: the size attribute (either name),
    a body that is a two-element array, its second element naming bucket and key."""
    attributes = message.get("MessageAttributes", {})
    assert "ExtendedPayloadSize" in attributes or "SQSLargePayloadSize" in attributes
    body = json.loads(message["Body"])
    assert isinstance(body, list)
    assert len(body) == 2
    assert isinstance(body[1], dict)
    return body[1]["s3BucketName"], body[1]["s3Key"]


async def test_a_600_kb_current_message_reaches_the_model_queue_through_s3(stack: Stack) -> None:
    pasted = "".join(f"{i:06d} The Supplier warrants the goods. " for i in range(16_000))
    assert 600_000 <= len(pasted.encode()) < 700_000
    await stack.send_raw(json.dumps(command("c-600k", pasted)))
    async with running_worker(stack.settings()):
        [message] = await stack.drain("MODEL_QUEUE_URL", expect=1)
    bucket, key = read_like_the_extended_client(message)
    assert message["Body"] == json.dumps([POINTER_CLASS, {"s3BucketName": bucket, "s3Key": key}])
    assert bucket == stack.env["PAYLOAD_BUCKET"]
    assert key.startswith("payloads/")
    data, response = await s3_object(stack, bucket, key)
    assert message["MessageAttributes"][SIZE_ATTRIBUTE] == {
        "StringValue": str(len(data)),
        "DataType": "Number",
    }
    assert response["ContentType"] == "application/json"
    assert response["ServerSideEncryption"] == "AES256"
    payload = json.loads(data)
    assert payload["message"] == pasted  # byte for byte, never trimmed
    assert payload["command_id"] == "c-600k"


async def test_a_2_mb_command_sent_by_the_extended_client_is_served(stack: Stack) -> None:
    """The real Amazon SQS Extended Client offloads a 2 MB command; the stage reads it,
    and the Extended Client in turn reads the stage's offloaded prompt."""
    from sqs_extended_client import SQSExtendedClientSession

    pasted = "Schedule 4, pricing. " * 100_000
    assert len(pasted) > 2_000_000
    bucket = stack.env["PAYLOAD_BUCKET"]

    def producer_and_consumer() -> Any:
        sqs = SQSExtendedClientSession().client("sqs", region_name="us-east-1")
        sqs.large_payload_support = bucket
        sqs.use_legacy_attribute = False
        sqs.send_message(
            QueueUrl=stack.env["CONVERSE_QUEUE_URL"],
            MessageBody=json.dumps(command("c-2mb", pasted)),
        )
        return sqs

    sqs = await asyncio.to_thread(producer_and_consumer)
    async with running_worker(stack.settings()):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60  # fails only if it never comes: a slow machine waits
        received: list[dict[str, Any]] = []
        while not received and loop.time() < deadline:
            response = await asyncio.to_thread(
                sqs.receive_message,
                QueueUrl=stack.env["MODEL_QUEUE_URL"],
                MessageAttributeNames=["All"],
                WaitTimeSeconds=1,
            )
            received = response.get("Messages", [])
    [message] = received
    payload = json.loads(message["Body"])  # the Extended Client already fetched it from S3
    assert payload["command_id"] == "c-2mb"
    assert payload["message"] == pasted
    assert_model_ready(payload)


async def test_a_legacy_pointer_with_the_old_attribute_name_is_read(stack: Stack) -> None:
    bucket = stack.env["PAYLOAD_BUCKET"]
    body = json.dumps(command("c-legacy", "What does clause 9 say?"))
    await stack.clients.s3.put_object(Bucket=bucket, Key="in/legacy.json", Body=body.encode())
    pointer = json.dumps(
        [
            "com.amazon.sqs.javamessaging.MessageS3Pointer",
            {"s3BucketName": bucket, "s3Key": "in/legacy.json"},
        ],
        separators=(",", ":"),  # as Java's Jackson writes it
    )
    await stack.clients.sqs.send_message(
        QueueUrl=stack.env["CONVERSE_QUEUE_URL"],
        MessageBody=pointer,
        MessageAttributes={
            "SQSLargePayloadSize": {"DataType": "Number", "StringValue": str(len(body))}
        },
    )
    async with running_worker(stack.settings()):
        [message] = await stack.drain("MODEL_QUEUE_URL", expect=1)
    assert body_of(message)["command_id"] == "c-legacy"


async def test_the_threshold_is_exact(stack: Stack) -> None:
    """A payload of exactly PAYLOAD_INLINE_MAX_BYTES travels inline; one byte more, via S3."""

    def payload_size(command_id: str, message: str) -> int:
        cmd = ConverseCommand.model_validate(command(command_id, message))
        window = bound_history([], Settings.at_defaults().window_limits)
        view = render_converse(window, cmd.message, None)
        return message_size(encode_body(prompt_payload(cmd, window, FoldState(), view)))

    # The message rides twice (`message` and the converse view); the command id once, so a
    # one-character longer id makes a payload exactly one byte larger.
    text = "a" * 9_000
    limit = payload_size("c-x", text)
    assert payload_size("c-xy", text) == limit + 1
    await stack.send_raw(json.dumps(command("c-x", text)))
    await stack.send_raw(json.dumps(command("c-xy", text)))
    async with running_worker(stack.settings(payload_inline_max_bytes=limit)):
        messages = await stack.drain("MODEL_QUEUE_URL", expect=2)
    by_size = sorted(messages, key=lambda m: len(m["Body"]))
    pointer, inline = by_size
    assert len(inline["Body"].encode()) == limit
    assert body_of(inline)["message"] == text
    assert SIZE_ATTRIBUTE not in inline.get("MessageAttributes", {})
    bucket, key = read_like_the_extended_client(pointer)
    data, _ = await s3_object(stack, bucket, key)
    assert len(data) == limit + 1
    assert json.loads(data)["command_id"] == "c-xy"


async def test_a_pointer_to_a_missing_object_is_rejected_with_a_reason(stack: Stack) -> None:
    pointer = json.dumps(
        [POINTER_CLASS, {"s3BucketName": stack.env["PAYLOAD_BUCKET"], "s3Key": "gone.json"}]
    )
    await stack.clients.sqs.send_message(
        QueueUrl=stack.env["CONVERSE_QUEUE_URL"],
        MessageBody=pointer,
        MessageAttributes={SIZE_ATTRIBUTE: {"DataType": "Number", "StringValue": "123"}},
    )
    async with running_worker(stack.settings()):
        [dead] = await stack.drain(await stack.dead_letter_url(), expect=1)
    assert dead["Body"] == pointer
    reason = dead["MessageAttributes"]["RejectionReason"]["StringValue"]
    assert reason == "the S3 pointer names an object that does not exist"


async def test_without_a_bucket_an_inbound_pointer_is_rejected_at_once_with_a_reason(
    stack: Stack,
) -> None:
    """A stage given no PAYLOAD_BUCKET reads no bucket: a pointer command goes to the
    dead-letter queue on its first receive, saying why (no retries into maxReceiveCount),
    and `worker dlq redrive --include-rejected` can send it back once the setting is fixed."""
    bucket = stack.env["PAYLOAD_BUCKET"]
    body = json.dumps(command("c-nobucket", "What does clause 9 say?"))
    await stack.clients.s3.put_object(Bucket=bucket, Key="in/c.json", Body=body.encode())
    pointer = json.dumps([POINTER_CLASS, {"s3BucketName": bucket, "s3Key": "in/c.json"}])
    await stack.clients.sqs.send_message(
        QueueUrl=stack.env["CONVERSE_QUEUE_URL"],
        MessageBody=pointer,
        MessageAttributes={SIZE_ATTRIBUTE: {"DataType": "Number", "StringValue": "100"}},
    )
    with captured_logs() as logs:
        async with running_worker(stack.settings(payload_bucket=None)):
            [dead] = await stack.drain(await stack.dead_letter_url(), expect=1)
    assert dead["Body"] == pointer
    reason = dead["MessageAttributes"]["RejectionReason"]["StringValue"]
    assert reason == "the S3 pointer names a bucket, but PAYLOAD_BUCKET is not set"
    assert not [e for e in logs if e["event"] == "clerk.converse_command_retry"]


async def test_without_a_bucket_a_large_payload_is_retried_with_a_clear_error_and_not_lost(
    stack: Stack,
) -> None:
    stack = await stack.with_resources(Resources(prefix="nobucket", converse_visibility_timeout=4))
    secret = "PRIVILEGED " + "x" * 300_000
    await stack.send_raw(json.dumps(command("c-big", secret)))
    without_bucket = stack.settings(
        payload_bucket=None, shutdown_grace_seconds=2.0, retry_base_seconds=1.0
    )
    with captured_logs() as logs:
        async with running_worker(without_bucket):
            async with asyncio.timeout(60):  # the turn ended in a retry: nothing was sent
                while not (retries := [e for e in logs if e["event"] == RETRY]):
                    await asyncio.sleep(0.05)
            assert await stack.drain("MODEL_QUEUE_URL") == []
    assert (
        "over PAYLOAD_INLINE_MAX_BYTES (262144) and PAYLOAD_BUCKET is not set"
        in retries[0]["error"]
    )
    assert "PRIVILEGED" not in repr(logs)

    # Configured, the same command is served: it was neither dropped nor dead-lettered.
    # (The backoff that keeps its receive count low is pinned exactly in tests/unit.)
    async with running_worker(stack.settings(shutdown_grace_seconds=2.0)):
        [message] = await stack.drain("MODEL_QUEUE_URL", expect=1, within=20)
    bucket, key = read_like_the_extended_client(message)
    data, _ = await s3_object(stack, bucket, key)
    assert json.loads(data)["message"] == secret


async def test_a_pointer_to_an_object_under_another_kms_key_is_refused_at_once_naming_it(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN a producer wrote the command's object under a KMS key of its own, which the
    stage's role may not use (S3 answers GetObject 403, and shows the object's key on
    HeadObject: moto checks no key policy, so a proxy in front of its S3 answers the 403),
    THEN the command goes to the dead-letter queue on its first receive with the key named,
    not retried into it with no reason."""
    bucket = stack.env["PAYLOAD_BUCKET"]
    key = await _kms_key(stack)
    body = json.dumps(command("c-other-key", "What does clause 9 say?"))
    await stack.clients.s3.put_object(
        Bucket=bucket,
        Key="in/other-key.json",
        Body=body.encode(),
        ServerSideEncryption="aws:kms",
        SSEKMSKeyId=key,
    )
    pointer = json.dumps([POINTER_CLASS, {"s3BucketName": bucket, "s3Key": "in/other-key.json"}])
    await stack.clients.sqs.send_message(
        QueueUrl=stack.env["CONVERSE_QUEUE_URL"],
        MessageBody=pointer,
        MessageAttributes={SIZE_ATTRIBUTE: {"DataType": "Number", "StringValue": str(len(body))}},
    )
    proxy = FaultProxy(stack.endpoint)
    endpoint = await proxy.start()
    try:
        proxy.inject(Fault("s3", "denied", operations=("GetObject",)))
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)
        with captured_logs() as logs:
            async with running_worker(stack.settings()):
                [dead] = await stack.drain(await stack.dead_letter_url(), expect=1)
    finally:
        await proxy.close()
    assert dead["Body"] == pointer
    [rejected] = [e for e in logs if e["event"] == "clerk.converse_command_rejected"]
    assert rejected["receive_count"] == 1
    reason = dead["MessageAttributes"]["RejectionReason"]["StringValue"]
    assert reason == (
        f"the S3 pointer's object is encrypted under a KMS key this stage may not use: {key}"
    )
    assert proxy.snapshot().of("s3", "GetObject") == (1, 1)


async def _kms_key(stack: Stack) -> str:
    """A key in moto's KMS: the producer's own."""
    import boto3

    from localaws.endpoints import DUMMY_CLIENT_ARGS

    kms = boto3.client("kms", endpoint_url=stack.endpoint, **DUMMY_CLIENT_ARGS)
    return str(kms.create_key(Description="a producer's own key")["KeyMetadata"]["Arn"])
