"""Payloads of any size, both ways: bodies over the inline limit go to S3 behind the
Extended Client's pointer (:mod:`worker.delivery.pointers`); inbound pointers are read.

Nothing is ever truncated. The stage never deletes an object: the bucket's lifecycle
rule expires them, after every stage that reads them has had its chance.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from worker.delivery.pointers import SIZE_ATTRIBUTE, message_size, parse_pointer, pointer_body
from worker.errors import ObjectMissing, PayloadTooLarge, RejectedCommand
from worker.ports import MessageSender, ObjectStore, ReceivedMessage
from worker.telemetry import turn as telemetry

#: Objects are written under this prefix; the bucket's lifecycle rule expires it.
KEY_PREFIX = "payloads/"


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
