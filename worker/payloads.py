"""Payloads of any size: the Amazon SQS Extended Client's S3 pointer, both ways.

Outbound, a body whose size (UTF-8 bytes, plus its message attributes counted as SQS
counts them) is over ``PAYLOAD_INLINE_MAX_BYTES`` is written to ``PAYLOAD_BUCKET`` and
the message carries the pointer ``["software.amazon.payloadoffloading.PayloadS3Pointer",
{"s3BucketName": …, "s3Key": …}]`` with the ``ExtendedPayloadSize`` attribute, exactly as
the Extended Client (Java and Python) writes it. Nothing is ever truncated. Inbound, a
command that is such a pointer (either attribute name, either pointer class) is read
from S3. The stage never deletes an object: the bucket's lifecycle rule expires them,
after every stage that reads them has had its chance.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from worker import telemetry
from worker.errors import ObjectMissing, PayloadTooLarge, RejectedCommand
from worker.ports import MessageSender, ObjectStore, ReceivedMessage

POINTER_CLASS = "software.amazon.payloadoffloading.PayloadS3Pointer"
LEGACY_POINTER_CLASS = "com.amazon.sqs.javamessaging.MessageS3Pointer"
SIZE_ATTRIBUTE = "ExtendedPayloadSize"
LEGACY_SIZE_ATTRIBUTE = "SQSLargePayloadSize"
#: Objects are written under this prefix; the bucket's lifecycle rule expires it.
KEY_PREFIX = "payloads/"


def attributes_size(attributes: Mapping[str, str | int] | None) -> int:
    """Bytes SQS counts for message attributes: each name, data type and value."""
    total = 0
    for name, value in (attributes or {}).items():
        data_type = "Number" if isinstance(value, int) else "String"
        total += len(name.encode()) + len(data_type) + len(str(value).encode())
    return total


def message_size(body: str, attributes: Mapping[str, str | int] | None = None) -> int:
    return len(body.encode("utf-8", "surrogatepass")) + attributes_size(attributes)


def pointer_body(bucket: str, key: str) -> str:
    """The pointer as the Extended Client serializes it (``json.dumps`` defaults)."""
    return json.dumps([POINTER_CLASS, {"s3BucketName": bucket, "s3Key": key}])


def parse_pointer(body: str, attributes: Mapping[str, str]) -> tuple[str, str] | None:
    """``(bucket, key)`` if the message is an Extended Client pointer, else None.

    A pointer is recognised by the size attribute (the Extended Client's own test) or,
    without it, by its unmistakable shape: a two-element array of a pointer class name
    and an object holding ``s3BucketName`` and ``s3Key``.
    """
    flagged = SIZE_ATTRIBUTE in attributes or LEGACY_SIZE_ATTRIBUTE in attributes
    if not flagged and not body.lstrip().startswith('["'):
        return None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        data = None
    shaped = (
        isinstance(data, list)
        and len(data) == 2
        and data[0] in (POINTER_CLASS, LEGACY_POINTER_CLASS)
        and isinstance(data[1], dict)
        and isinstance(data[1].get("s3BucketName"), str)
        and isinstance(data[1].get("s3Key"), str)
    )
    if shaped:
        assert isinstance(data, list)
        return data[1]["s3BucketName"], data[1]["s3Key"]
    if flagged:
        raise RejectedCommand(f"message has {SIZE_ATTRIBUTE} but its body is not an S3 pointer")
    return None


async def resolve_body(message: ReceivedMessage, store: ObjectStore) -> str:
    """The command text: the body itself, or the S3 object its pointer names."""
    pointer = parse_pointer(message.body, message.attributes)
    if pointer is None:
        return message.body
    bucket, key = pointer
    try:
        data = await store.get(bucket, key)
    except ObjectMissing:
        raise RejectedCommand("the S3 pointer names an object that does not exist") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise RejectedCommand("the S3 pointer's object is not UTF-8 text") from None


def payload_key(group_id: str, deduplication_id: str) -> str:
    """One key per logical message, so a retried send overwrites rather than litters."""
    digest = hashlib.sha256(f"{group_id}\0{deduplication_id}".encode("utf-8", "surrogatepass"))
    return f"{KEY_PREFIX}{digest.hexdigest()}.json"


class OffloadingSender:
    """A MessageSender that moves bodies over the inline limit to S3 and sends the pointer."""

    def __init__(
        self,
        queue: MessageSender,
        store: ObjectStore,
        *,
        bucket: str | None,
        inline_max_bytes: int,
    ) -> None:
        self._queue = queue
        self._store = store
        self._bucket = bucket
        self._inline_max_bytes = inline_max_bytes

    async def send(
        self,
        body: str,
        *,
        group_id: str,
        deduplication_id: str,
        attributes: Mapping[str, str | int] | None = None,
    ) -> str:
        size = message_size(body, attributes)
        if size <= self._inline_max_bytes:
            return await self._queue.send(
                body, group_id=group_id, deduplication_id=deduplication_id, attributes=attributes
            )
        if self._bucket is None:
            raise PayloadTooLarge(
                f"a payload of {size} bytes is over PAYLOAD_INLINE_MAX_BYTES "
                f"({self._inline_max_bytes}) and PAYLOAD_BUCKET is not set"
            )
        data = body.encode("utf-8", "surrogatepass")
        key = payload_key(group_id, deduplication_id)
        await self._store.put(self._bucket, key, data)
        telemetry.payload_offloaded()
        return await self._queue.send(
            pointer_body(self._bucket, key),
            group_id=group_id,
            deduplication_id=deduplication_id,
            attributes={**(attributes or {}), SIZE_ATTRIBUTE: len(data)},
        )
