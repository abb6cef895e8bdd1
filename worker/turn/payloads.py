"""Payloads of any size, both ways: bodies over the inline limit go to S3 behind the
Extended Client's pointer (:mod:`worker.delivery.pointers`); inbound pointers are read.

Nothing is ever truncated. The stage never deletes an object: the bucket's lifecycle
rule expires them, after every stage that reads them has had its chance.
"""

from __future__ import annotations

import hashlib
import re
from typing import Unpack

from worker.delivery.pointers import (
    SIZE_ATTRIBUTE,
    InboundPayloads,
    message_size,
    parse_pointer,
    pointer_body,
)
from worker.errors import (
    ObjectAccessDenied,
    ObjectKeyRefused,
    ObjectMissing,
    ObjectTooLarge,
    PayloadTooLarge,
    RejectedCommand,
)
from worker.logs import get_logger
from worker.ports import MessageSender, ObjectStore, ReceivedMessage, SendOptions
from worker.telemetry import hooks as telemetry

log = get_logger()

#: Objects are written under this prefix; the bucket's lifecycle rule expires it.
KEY_PREFIX = "payloads/"
#: What S3 accepts as a bucket name (legacy names included). Anything else a pointer names
#: is not echoed into a reason: a reason is a message attribute and a log field.
_BUCKET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{1,61}[A-Za-z0-9]")


async def resolve_body(
    message: ReceivedMessage, store: ObjectStore, inbound: InboundPayloads
) -> str:
    """The command text: the body itself, or the S3 object its pointer names.

    A pointer is rejected before any S3 call when it names a bucket the stage does not read,
    and when its object is over ``inbound.max_bytes`` (decided from ``ContentLength`` by the
    store, which never reads more than one byte past the bound). A 403 is retried: a policy
    fixed in time recovers the command; it is logged as what it is, a configuration fault.
    """
    pointer = parse_pointer(message.body, message.attributes)
    if pointer is None:
        return message.body
    bucket, key = pointer
    if bucket not in inbound.buckets:
        raise RejectedCommand(refused_bucket_reason(bucket, inbound))
    try:
        data = await store.get(bucket, key, max_bytes=inbound.max_bytes)
    except ObjectMissing:
        raise RejectedCommand("the S3 pointer names an object that does not exist") from None
    except ObjectTooLarge:
        raise RejectedCommand(
            f"the S3 pointer's object is over PAYLOAD_MAX_BYTES ({inbound.max_bytes})"
        ) from None
    except ObjectKeyRefused as exc:
        # Another key's object stays unreadable however often it is tried: refused at once.
        raise RejectedCommand(
            f"the S3 pointer's object is encrypted under a KMS key this stage may not use: "
            f"{exc.key_id}"
        ) from None
    except ObjectAccessDenied as exc:
        log.error(
            "clerk.converse_payload_access_denied",
            bucket=exc.bucket,
            code=exc.code,
            hint="the role needs s3:GetObject on the bucket's objects and s3:ListBucket on the "
            "bucket (without ListBucket a missing key answers 403)",
        )
        raise
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise RejectedCommand("the S3 pointer's object is not UTF-8 text") from None


def refused_bucket_reason(bucket: str, inbound: InboundPayloads) -> str:
    """Short and stable: the bucket's name when it is one, never other text of the pointer."""
    if not inbound.buckets:
        return "the S3 pointer names a bucket, but PAYLOAD_BUCKET is not set"
    name = bucket if _BUCKET_NAME.fullmatch(bucket) else "(not a bucket name)"
    return f"the S3 pointer names a bucket this stage does not read: {name}"


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

    async def send(self, body: str, **options: Unpack[SendOptions]) -> str:
        attributes = options.get("attributes")
        size = message_size(body, attributes)
        if size <= self._inline_max_bytes:
            return await self._queue.send(body, **options)
        if self._bucket is None:
            raise PayloadTooLarge(
                f"a payload of {size} bytes is over PAYLOAD_INLINE_MAX_BYTES "
                f"({self._inline_max_bytes}) and PAYLOAD_BUCKET is not set"
            )
        data = body.encode("utf-8", "surrogatepass")
        key = payload_key(options["group_id"], options["deduplication_id"])
        await self._store.put(self._bucket, key, data)
        telemetry.payload_offloaded()
        return await self._queue.send(
            pointer_body(self._bucket, key),
            group_id=options["group_id"],
            deduplication_id=options["deduplication_id"],
            attributes={**(attributes or {}), SIZE_ATTRIBUTE: len(data)},
        )
