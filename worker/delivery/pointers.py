"""The Amazon SQS Extended Client's S3 pointer format, and message size as SQS counts it.

Shared by the turn (:mod:`worker.turn.payloads`), the SQS adapter and the DLQ tools.

The payloads it carries:

Outbound, a body whose size (UTF-8 bytes, plus its message attributes counted as SQS
counts them) is over ``PAYLOAD_INLINE_MAX_BYTES`` is written to ``PAYLOAD_BUCKET`` and
the message carries the pointer ``["software.amazon.payloadoffloading.PayloadS3Pointer",
{"s3BucketName": …, "s3Key": …}]`` with the ``ExtendedPayloadSize`` attribute, exactly as
the Extended Client (Java and Python) writes it. Nothing is ever truncated. Inbound, a
command that is such a pointer (either attribute name, either pointer class) is read
from S3 when it names a bucket the stage reads and an object of at most
``PAYLOAD_MAX_BYTES`` (:class:`InboundPayloads`); otherwise it is rejected. The stage
never deletes an object: the bucket's lifecycle rule expires them, after every stage that
reads them has had its chance.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from worker.errors import RejectedCommand

POINTER_CLASS = "software.amazon.payloadoffloading.PayloadS3Pointer"
LEGACY_POINTER_CLASS = "com.amazon.sqs.javamessaging.MessageS3Pointer"
SIZE_ATTRIBUTE = "ExtendedPayloadSize"
LEGACY_SIZE_ATTRIBUTE = "SQSLargePayloadSize"


@dataclass(frozen=True, slots=True)
class InboundPayloads:
    """What an inbound pointer may name: one of ``buckets`` (none: no pointer is read), and
    an object of at most ``max_bytes``."""

    buckets: frozenset[str]
    max_bytes: int


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
