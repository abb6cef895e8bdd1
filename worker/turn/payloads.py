"""Payloads of any size, both ways: bodies over the inline limit go to S3 behind the
Extended Client's pointer (:mod:`worker.delivery.pointers`); inbound pointers are read.

Nothing is ever truncated. The worker never deletes an object: the bucket's lifecycle rule
expires them, after every stage that reads them has had its chance; ``worker erase`` removes
a conversation's.

The key scheme (docs/RETENTION.md): ``payloads/<owner>/<kind>/<leaf>.json``, where ``owner``
is the first 32 hex digits of the SHA-256 of the conversation id (``unattributed`` when the
body names none: a dead letter that is not a command), ``kind`` one of :class:`PayloadKind`,
and ``leaf`` the SHA-256 of the message's deduplication id. A conversation's objects are one
ListObjectsV2 prefix away, and no conversation's prefix is the start of another's: the owner
has a fixed length and no ``/``, whatever the ids (``a`` and ``a/b``) hold, and the key
carries no conversation id in clear.
"""

from __future__ import annotations

import enum
import hashlib
import json
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
#: Hex digits of the SHA-256 of a conversation id that name its objects' prefix: 128 bits,
#: so two conversations share a prefix only by a collision no one will meet.
OWNER_HEX_DIGITS = 32
#: The owner segment of objects whose body names no conversation.
UNATTRIBUTED = "unattributed"
_OWNER = re.compile(f"[0-9a-f]{{{OWNER_HEX_DIGITS}}}|{UNATTRIBUTED}")


class PayloadKind(enum.StrEnum):
    """What an offloaded object holds: a prompt payload (the model queue), a fold request
    (the compaction queue), a dead letter (the converse queue's dead-letter queue)."""

    PROMPT = "prompt"
    FOLD = "fold"
    DEAD_LETTER = "dead-letter"


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


def conversation_prefix(conversation_id: str | None) -> str:
    """The prefix of every object written for ``conversation_id`` (None: for no known
    conversation), ``/`` included."""
    if conversation_id is None:
        return f"{KEY_PREFIX}{UNATTRIBUTED}/"
    digest = hashlib.sha256(conversation_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{KEY_PREFIX}{digest[:OWNER_HEX_DIGITS]}/"


def payload_key(
    conversation_id: str | None,
    deduplication_id: str,
    kind: PayloadKind = PayloadKind.PROMPT,
) -> str:
    """One key per logical message, so a retried send overwrites rather than litters."""
    leaf = hashlib.sha256(deduplication_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{conversation_prefix(conversation_id)}{kind}/{leaf}.json"


def kind_of_key(key: str) -> PayloadKind | None:
    """The kind of an object of this scheme by its key; None for any other key."""
    parts = key.split("/")
    if len(parts) != 4 or f"{parts[0]}/" != KEY_PREFIX or not _OWNER.fullmatch(parts[1]):
        return None
    try:
        return PayloadKind(parts[2])
    except ValueError:
        return None


def conversation_of(body: str) -> str | None:
    """The conversation a body names: the ``conversation_id`` string of a JSON object (a
    command, a prompt payload, a fold request), or None. Lenient on purpose: a command
    rejected for any reason (a blank message, an id reused) still holds its conversation's
    text, and its dead letter is filed, and erased, under that conversation."""
    if not body.lstrip().startswith("{"):
        return None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    found = data.get("conversation_id") if isinstance(data, dict) else None
    return found if isinstance(found, str) and found else None


def owner_of_payload(kind: PayloadKind, body: str, options: SendOptions) -> str | None:
    """The conversation an offloaded body is filed under. A prompt or a fold request goes to
    its conversation's FIFO group (``group_id``, as the turn addresses both); a dead letter's
    group is its own message id, so its conversation is read from the body."""
    if kind is PayloadKind.DEAD_LETTER:
        return conversation_of(body)
    return options["group_id"]


class OffloadingSender:
    """A MessageSender that moves bodies over the inline limit to S3, under the key scheme
    for ``kind``, and sends the pointer."""

    def __init__(
        self,
        queue: MessageSender,
        store: ObjectStore,
        *,
        bucket: str | None,
        inline_max_bytes: int,
        kind: PayloadKind,
    ) -> None:
        self._queue = queue
        self._store = store
        self._bucket = bucket
        self._inline_max_bytes = inline_max_bytes
        self._kind = kind

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
        owner = owner_of_payload(self._kind, body, options)
        key = payload_key(owner, options["deduplication_id"], self._kind)
        await self._store.put(self._bucket, key, data)
        telemetry.payload_offloaded()
        return await self._queue.send(
            pointer_body(self._bucket, key),
            group_id=options["group_id"],
            deduplication_id=options["deduplication_id"],
            attributes={**(attributes or {}), SIZE_ATTRIBUTE: len(data)},
        )
