"""Inbound S3 pointers are bounded: the bucket they may name and the size of the object they
may point at. Each refusal is a rejection with a short, stable reason that quotes nothing of
the message; a 403 stays a retry and is logged as the configuration fault it is."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from tests.conftest import captured_logs
from tests.conftest import settings as placeholder_settings
from worker.delivery.pointers import SIZE_ATTRIBUTE, InboundPayloads, pointer_body
from worker.errors import (
    ObjectAccessDenied,
    ObjectMissing,
    ObjectTooLarge,
    RejectedCommand,
    WorkerError,
)
from worker.ports import ReceivedMessage
from worker.turn.payloads import resolve_body

COMMAND = json.dumps(
    {"type": "converse", "command_id": "c-1", "conversation_id": "m-1", "message": "PRIVILEGED"}
).encode()
INBOUND = InboundPayloads(buckets=frozenset({"mira-payloads", "producer-bucket"}), max_bytes=1000)


@dataclass
class Objects:
    """An ObjectStore over a dict that records each read and the bound it was given, and
    raises what it is told to for a key."""

    objects: dict[tuple[str, str], bytes] = field(default_factory=dict)
    errors: dict[str, WorkerError] = field(default_factory=dict)
    reads: list[tuple[str, str, int]] = field(default_factory=list)

    async def put(self, bucket: str, key: str, data: bytes) -> None:
        raise AssertionError("resolving a command writes nothing")

    async def get(self, bucket: str, key: str, *, max_bytes: int) -> bytes:
        self.reads.append((bucket, key, max_bytes))
        if key in self.errors:
            raise self.errors[key]
        try:
            data = self.objects[bucket, key]
        except KeyError:
            raise ObjectMissing(key) from None
        if len(data) > max_bytes:
            raise ObjectTooLarge(max_bytes)
        return data


def pointer_message(bucket: str, key: str = "in/c-1.json") -> ReceivedMessage:
    return ReceivedMessage(
        "m-1", "r-1", pointer_body(bucket, key), attributes={SIZE_ATTRIBUTE: "5000000"}
    )


async def test_a_pointer_to_a_bucket_read_is_resolved_with_the_bound_passed_to_the_store() -> None:
    store = Objects({("producer-bucket", "in/c-1.json"): COMMAND})
    body = await resolve_body(pointer_message("producer-bucket"), store, INBOUND)
    assert body == COMMAND.decode()
    assert store.reads == [("producer-bucket", "in/c-1.json", 1000)]


async def test_an_inline_body_is_the_command_and_touches_no_store() -> None:
    store = Objects()
    message = ReceivedMessage("m-1", "r-1", COMMAND.decode())
    assert await resolve_body(message, store, INBOUND) == COMMAND.decode()
    assert store.reads == []


async def test_a_pointer_to_another_bucket_is_rejected_naming_it_before_any_s3_call() -> None:
    store = Objects({("elsewhere", "in/c-1.json"): COMMAND})
    with pytest.raises(RejectedCommand) as caught:
        await resolve_body(pointer_message("elsewhere"), store, INBOUND)
    assert (
        caught.value.reason == "the S3 pointer names a bucket this stage does not read: elsewhere"
    )
    assert store.reads == []


async def test_a_pointer_whose_bucket_is_no_bucket_name_is_not_echoed_into_the_reason() -> None:
    """The reason is a message attribute and a log field: a pointer that carries text where a
    bucket name goes does not get that text into either."""
    with pytest.raises(RejectedCommand) as caught:
        await resolve_body(pointer_message("PRIVILEGED text of a matter"), Objects(), INBOUND)
    assert caught.value.reason == (
        "the S3 pointer names a bucket this stage does not read: (not a bucket name)"
    )


async def test_without_any_bucket_configured_every_pointer_is_rejected_saying_so() -> None:
    """A stage given no bucket reads none: rejected (a redrive sends it back once the
    setting is fixed), never retried into maxReceiveCount."""
    store = Objects({("mira-payloads", "in/c-1.json"): COMMAND})
    nothing = InboundPayloads(buckets=frozenset(), max_bytes=1000)
    with pytest.raises(RejectedCommand) as caught:
        await resolve_body(pointer_message("mira-payloads"), store, nothing)
    assert caught.value.reason == "the S3 pointer names a bucket, but PAYLOAD_BUCKET is not set"
    assert store.reads == []


async def test_an_object_over_the_bound_is_rejected_with_the_bound_and_no_size_or_key() -> None:
    store = Objects({("mira-payloads", "in/c-1.json"): b"x" * 1001})
    with pytest.raises(RejectedCommand) as caught:
        await resolve_body(pointer_message("mira-payloads"), store, INBOUND)
    assert caught.value.reason == "the S3 pointer's object is over PAYLOAD_MAX_BYTES (1000)"


async def test_a_missing_object_is_rejected() -> None:
    with pytest.raises(RejectedCommand) as caught:
        await resolve_body(pointer_message("mira-payloads"), Objects(), INBOUND)
    assert caught.value.reason == "the S3 pointer names an object that does not exist"


async def test_an_access_denied_read_is_retried_and_logged_naming_the_bucket_and_code() -> None:
    denied = ObjectAccessDenied(
        "s3.GetObject failed: AccessDenied (HTTP 403)", bucket="mira-payloads", code="AccessDenied"
    )
    store = Objects(errors={"in/c-1.json": denied})
    with captured_logs() as logs, pytest.raises(ObjectAccessDenied):
        await resolve_body(pointer_message("mira-payloads"), store, INBOUND)
    [event] = [e for e in logs if e["event"] == "clerk.converse_payload_access_denied"]
    assert event["log_level"] == "error"
    assert (event["bucket"], event["code"]) == ("mira-payloads", "AccessDenied")
    assert "s3:ListBucket" in event["hint"]
    assert "in/c-1.json" not in repr(logs)


async def test_the_settings_read_payload_bucket_and_the_extra_buckets_and_bound_the_size() -> None:
    inbound = placeholder_settings(
        payload_bucket="mira-payloads", payload_read_buckets=("producer-bucket",)
    ).inbound_payloads
    assert inbound == InboundPayloads(
        buckets=frozenset({"mira-payloads", "producer-bucket"}), max_bytes=4 * 1024 * 1024
    )
    assert placeholder_settings().inbound_payloads.buckets == frozenset()
