"""``worker erase``'s scan of the converse queue's dead-letter queue: which dead letters are
the conversation's, found by reading each one's body.

A dead letter is the conversation's when its body is a JSON object naming it
(``conversation_id``), or an S3 pointer to such a body: a pointer under the conversation's
own prefix in the payload bucket says so by its key alone; any other pointer (a producer's
object, an unattributed or older key of the stage's) is followed, a few levels deep at most,
in the buckets the stage reads. The conversation's dead letters are deleted as each batch is
read, and the stage's own objects their pointers name (under ``payloads/`` in
``PAYLOAD_BUCKET``) are handed back for deletion; every other message is held invisible while
the scan runs and released (visibility 0) when it ends, body and attributes untouched.

What a receive changes: each message looked at counts one more ``ApproximateReceiveCount``
(and gets a first-receive time if it had none). A dead letter's retention runs from its
``SentTimestamp``, which no receive moves, and a redrive sends a copy with a count of its
own; only a dead-letter queue with a RedrivePolicy of its own would act on the count, and
the scan reports that queue's ``maxReceiveCount``. What it cannot see is counted, never
guessed: messages in flight with another reader when the scan began, and messages visible
when it ended (arrived since, or held back behind another of their FIFO group).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from worker.adapters.sqs import SqsQueue
from worker.adapters.sqs_admin import QueueAdmin
from worker.cli.dlq_operations import HOLD_SECONDS, release
from worker.delivery.pointers import InboundPayloads, parse_pointer
from worker.errors import (
    ObjectAccessDenied,
    ObjectKeyRefused,
    ObjectMissing,
    ObjectTooLarge,
    RejectedCommand,
)
from worker.ports import ObjectStore, ReceivedMessage
from worker.turn.payloads import KEY_PREFIX, conversation_of, conversation_prefix, kind_of_key

#: Pointers followed from one dead letter: a pointer to an object holding a pointer (an
#: offloaded dead letter whose body was a producer's pointer) is two.
MAX_POINTER_DEPTH = 3


class Verdict(enum.Enum):
    THIS = "the conversation's"
    OTHER = "another's, or no conversation's"
    GONE = "a pointer to a missing object: nothing of it left to read"
    UNCHECKED = "a pointer whose object could not be read"


@dataclass(frozen=True, slots=True)
class Attribution:
    verdict: Verdict
    #: The stage's own objects (keys in its bucket, under ``payloads/``) met on the way.
    stage_objects: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PointerReader:
    """How pointers are followed: the stage's own bucket, and the buckets and bound the
    stage reads inbound pointers with."""

    store: ObjectStore
    own_bucket: str | None
    inbound: InboundPayloads


async def attribute(
    body: str,
    attributes: dict[str, str],
    conversation_id: str,
    reader: PointerReader,
    *,
    depth: int = 0,
) -> Attribution:
    """Whose a dead letter (or an object a pointer named) is."""
    try:
        pointer = parse_pointer(body, attributes)
    except RejectedCommand:  # a size attribute on a body that is no pointer: read the body
        pointer = None
    if pointer is None:
        named = conversation_of(body)
        return Attribution(Verdict.THIS if named == conversation_id else Verdict.OTHER)
    bucket, key = pointer
    own = bucket == reader.own_bucket and key.startswith(KEY_PREFIX)
    if own and key.startswith(conversation_prefix(conversation_id)):
        return Attribution(Verdict.THIS, (key,))
    if own and kind_of_key(key) is not None and not key.startswith(conversation_prefix(None)):
        return Attribution(Verdict.OTHER)  # filed under another conversation's prefix
    if depth >= MAX_POINTER_DEPTH or bucket not in reader.inbound.buckets:
        return Attribution(Verdict.UNCHECKED)
    try:
        data = await reader.store.get(bucket, key, max_bytes=reader.inbound.max_bytes)
        text = data.decode("utf-8")
    except ObjectMissing:
        return Attribution(Verdict.GONE)
    except (ObjectTooLarge, ObjectKeyRefused, ObjectAccessDenied, UnicodeDecodeError):
        return Attribution(Verdict.UNCHECKED)
    inner = await attribute(text, {}, conversation_id, reader, depth=depth + 1)
    return Attribution(inner.verdict, ((key,) if own else ()) + inner.stage_objects)


@dataclass
class DeadLetterScan:
    """What the scan found: the conversation's dead letters (deleted unless a dry run) and
    the stage's objects their pointers named, the others kept, and what it could not see."""

    matched: int = 0
    stage_objects: set[str] = field(default_factory=set)
    kept: int = 0
    gone: int = 0
    unchecked: int = 0
    in_flight: int = 0
    unseen: int = 0
    #: The dead-letter queue's own maxReceiveCount, when it has a RedrivePolicy.
    max_receive_count: int | None = None
    #: The conversation's dead letters whose delete SQS refused: they are still there.
    refused: int = 0
    #: Releases SQS refused: those messages come back when their hold runs out.
    unreleased: int = 0


async def scan_dead_letters(
    dlq: SqsQueue,
    conversation_id: str,
    reader: PointerReader,
    *,
    admin: QueueAdmin,
    dry_run: bool,
) -> DeadLetterScan:
    """Read every visible dead letter once; delete the conversation's (unless ``dry_run``),
    release the rest. What the scan could not see is read from the queue's counts (through
    ``admin``) before it begins and before it releases what it holds."""
    before = await admin.depth(dlq.url)
    scan = DeadLetterScan(in_flight=before.in_flight, max_receive_count=before.max_receive_count)
    held: dict[str, ReceivedMessage] = {}
    seen: set[str] = set()
    try:
        while batch := await dlq.receive(10, 1, visibility_timeout=HOLD_SECONDS):
            mine: list[ReceivedMessage] = []
            for message in batch:
                if message.message_id in seen:  # back after its hold ran out: the new handle
                    if message.message_id in held:
                        held[message.message_id] = message
                    continue
                seen.add(message.message_id)
                found = await attribute(
                    message.body, dict(message.attributes), conversation_id, reader
                )
                if found.verdict is Verdict.THIS:
                    mine.append(message)
                    scan.stage_objects.update(found.stage_objects)
                    continue
                held[message.message_id] = message
                scan.kept += 1
                scan.gone += found.verdict is Verdict.GONE
                scan.unchecked += found.verdict is Verdict.UNCHECKED
            scan.matched += len(mine)
            if dry_run:
                held.update((m.message_id, m) for m in mine)
            elif mine:
                scan.refused += len(await dlq.delete_batch(mine))
        scan.unseen = (await admin.depth(dlq.url)).visible
    finally:
        scan.unreleased += len(await release(dlq, list(held.values())))
    return scan
