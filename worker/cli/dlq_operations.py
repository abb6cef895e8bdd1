"""``worker dlq``: look into the converse queue's dead-letter queue, and send back what may
still be served.

Two kinds of message end up there. *Rejected* commands were put there by the stage itself,
with a ``RejectionReason`` attribute: they are invalid and stay invalid. *Retry-exhausted*
commands failed on every receive (an outage, a permission, a defect since fixed): the stage
dead-letters one that fails on its last receive itself, with a ``LastFailure`` attribute
saying what failed; SQS's redrive policy moves any other after ``maxReceiveCount`` receives,
with no reason. Redriving them is what the dead-letter queue is for. A redriven command that
was in fact served before is deleted by the stage without a second forward (the ``cmd#``
ledger).

Nothing here prints or logs a body. Inspection holds each message invisible while it
counts, then makes it visible again; a redrive deletes a message only once its copy was
sent to the converse queue.

Inspection says when SQS will delete each message: the dead-letter queue's
``MessageRetentionPeriod`` after the message was first sent (``SentTimestamp``). SQS moves a
standard queue's message with its first enqueue time, and a rejected command is sent anew,
so both count from their ``SentTimestamp``. (A FIFO dead-letter queue restarts the count at
the move: there the figure is the least time left.)
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from worker.adapters.sqs import OutboundMessage, SqsQueue
from worker.adapters.sqs_admin import QueueAdmin
from worker.cli.arguments import MAX_RATE, MIN_RATE
from worker.delivery.outcomes import DEAD_LETTERED_ID, LAST_FAILURE, REJECTION_REASON
from worker.delivery.pointers import LEGACY_SIZE_ATTRIBUTE, SIZE_ATTRIBUTE
from worker.ports import DeleteFailure, ReceivedMessage

REASON_ATTRIBUTE = REJECTION_REASON
#: Attributes the stage adds when it dead-letters; a redriven copy goes back without them.
STAGE_ATTRIBUTES = frozenset({REJECTION_REASON, LAST_FAILURE, DEAD_LETTERED_ID})
#: Attributes SQS types as Number (the Extended Client's size); the rest are strings.
NUMBER_ATTRIBUTES = frozenset({SIZE_ATTRIBUTE, LEGACY_SIZE_ATTRIBUTE})
RETRY_EXHAUSTED = "(retry exhausted: no RejectionReason)"
AGE_BUCKETS: tuple[tuple[float, str], ...] = (
    (3_600, "< 1 h"),
    (86_400, "1 h – 1 d"),
    (7 * 86_400, "1 d – 7 d"),
    (float("inf"), ">= 7 d"),
)
#: How long a message is held invisible while a run looks at it.
HOLD_SECONDS = 120
#: How often a running move task is looked at.
MOVE_TASK_POLL_SECONDS = 1.0


def age_bucket(sent_timestamp_ms: int | None, now: float) -> str:
    """The age bucket of a message by its ``SentTimestamp`` (when it was first sent)."""
    if sent_timestamp_ms is None:
        return "unknown"
    age = max(0.0, now - sent_timestamp_ms / 1000)
    return next(label for limit, label in AGE_BUCKETS if age < limit)


def seconds_left(sent_timestamp_ms: int | None, retention_seconds: int, now: float) -> float | None:
    """Seconds before SQS deletes a message of a queue keeping ``retention_seconds``, by its
    ``SentTimestamp``; None without one. Negative: it is past its time."""
    if sent_timestamp_ms is None:
        return None
    return retention_seconds - (now - sent_timestamp_ms / 1000)


def expiry(left: float | None) -> str:
    """``expires in 3d 04h`` (from a day), ``expires in 5h 07m``, ``expires in 12m``: whole
    units, rounded down, so it never promises more time than is left."""
    if left is None:
        return "expiry unknown"
    if left <= 0:
        return "expired: SQS deletes it any moment"
    minutes = int(left // 60)
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    if days:
        return f"expires in {days}d {hours:02d}h"
    if hours:
        return f"expires in {hours}h {minutes:02d}m"
    if minutes:
        return f"expires in {minutes}m"
    return "expires in under a minute"


def reason_of(message: ReceivedMessage) -> str:
    """A rejected command's reason; for a retry-exhausted one, its last failure when the
    stage dead-lettered it on its last receive, else that SQS moved it without one."""
    if rejected := message.attributes.get(REJECTION_REASON):
        return rejected
    if failure := message.attributes.get(LAST_FAILURE):
        return f"(retry exhausted: {failure})"
    return RETRY_EXHAUSTED


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One message as inspected: its id, reason, age bucket and seconds before SQS deletes it."""

    message_id: str
    reason: str
    age: str
    seconds_left: float | None


@dataclass
class Inspection:
    """What the dead-letter queue holds: counts by reason and by age, and each message."""

    by_reason: Counter[str] = field(default_factory=Counter)
    by_age: Counter[str] = field(default_factory=Counter)
    messages: list[DeadLetter] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.by_reason.values())

    @property
    def soonest(self) -> float | None:
        """The least time left of any message whose time is known."""
        known = [m.seconds_left for m in self.messages if m.seconds_left is not None]
        return min(known, default=None)

    def lines(self, *, with_ids: bool) -> list[str]:
        out = [f"{self.total} message(s) in the dead-letter queue", "by reason:"]
        out += [f"  {count:>6}  {reason}" for reason, count in self.by_reason.most_common()]
        out.append("by age (since first sent):")
        labels = [label for _, label in AGE_BUCKETS] + ["unknown"]
        out += [f"  {self.by_age[label]:>6}  {label}" for label in labels if self.by_age[label]]
        if self.soonest is not None:
            out.append(f"the soonest {expiry(self.soonest)}")
        if with_ids:
            out.append("ids:")
            out += [
                f"  {m.message_id}  {m.age:<9}  {expiry(m.seconds_left):<18}  {m.reason}"
                for m in self.messages
            ]
        return out


async def receive_each_once(dlq: SqsQueue) -> list[ReceivedMessage]:
    """Every message currently in ``dlq``, each once, held invisible for HOLD_SECONDS."""
    seen: dict[str, ReceivedMessage] = {}
    while True:
        batch = await dlq.receive(10, 1, visibility_timeout=HOLD_SECONDS)
        if not batch:
            return list(seen.values())
        for message in batch:
            seen.setdefault(message.message_id, message)


async def release(queue: SqsQueue, messages: list[ReceivedMessage]) -> list[DeleteFailure]:
    """Make ``messages`` visible again at once; returns the entries SQS refused (a message
    whose hold ran out is visible anyway)."""
    refused: list[DeleteFailure] = []
    for start in range(0, len(messages), 10):
        refused += await queue.change_visibility_batch(messages[start : start + 10], 0)
    return refused


async def inspect(
    dlq: SqsQueue, *, retention_seconds: int, now: Callable[[], float] = time.time
) -> Inspection:
    """Count the dead-letter queue's messages by reason and age, and say when SQS deletes
    each (the queue keeping ``retention_seconds``); every one stays there."""
    messages = await receive_each_once(dlq)
    inspection = Inspection()
    moment = now()
    for message in messages:
        sent = message.sent_timestamp_ms
        reason, age = reason_of(message), age_bucket(sent, moment)
        inspection.by_reason[reason] += 1
        inspection.by_age[age] += 1
        left = seconds_left(sent, retention_seconds, moment)
        inspection.messages.append(DeadLetter(message.message_id, reason, age, left))
    await release(dlq, messages)
    return inspection


@dataclass
class Redrive:
    sent: int = 0
    skipped_rejected: int = 0
    failed: int = 0
    via_move_task: bool = False
    #: How SQS's move task ended when it did not complete: its status and FailureReason.
    move_task_failure: str | None = None


def copy_of(message: ReceivedMessage) -> OutboundMessage:
    """The command as it was first sent: same body, same attributes, the stage's removed."""
    attributes: dict[str, str | int] = {
        name: int(value) if name in NUMBER_ATTRIBUTES and value.isdigit() else value
        for name, value in message.attributes.items()
        if name not in STAGE_ATTRIBUTES
    }
    return OutboundMessage(
        message.body,
        group_id=message.message_id,
        deduplication_id=message.message_id,
        attributes=attributes or None,
        trace_header=message.trace_header,  # the redriven command stays in its trace
    )


async def redrive(
    dlq: SqsQueue,
    converse: SqsQueue,
    *,
    include_rejected: bool,
    per_second: int,
    limit: int | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Redrive:
    """Send retry-exhausted messages (and rejected ones with ``include_rejected``) back to
    the converse queue at most ``per_second`` a second; delete each only after its copy
    was sent. Rejected messages left behind become visible again at the end."""
    if not MIN_RATE <= per_second <= MAX_RATE:
        raise ValueError(f"per_second must be from {MIN_RATE} to {MAX_RATE}")
    result = Redrive()
    kept_back: list[ReceivedMessage] = []
    started = clock()
    while limit is None or result.sent < limit:
        room = 10 if limit is None else min(10, limit - result.sent)
        batch = await dlq.receive(room, 1, visibility_timeout=HOLD_SECONDS)
        if not batch:
            break
        chosen = [m for m in batch if include_rejected or REASON_ATTRIBUTE not in m.attributes]
        kept_back += [m for m in batch if m not in chosen]
        result.skipped_rejected += len(batch) - len(chosen)
        if not chosen:
            continue
        outcomes = await converse.send_batch([copy_of(m) for m in chosen])
        sent = [m for m, outcome in zip(chosen, outcomes, strict=True) if isinstance(outcome, str)]
        kept_back += [m for m, o in zip(chosen, outcomes, strict=True) if not isinstance(o, str)]
        result.failed += len(chosen) - len(sent)
        if sent:
            refused = await dlq.delete_batch(sent)
            # A refused delete leaves a copy in both queues; the ledger makes the second
            # delivery a no-op, so it is reported, not undone.
            result.failed += len(refused)
        result.sent += len(sent)
        ahead = result.sent / per_second - (clock() - started)
        if ahead > 0:
            await sleep(ahead)
    await release(dlq, kept_back)
    return result


async def redrive_everything(
    admin: QueueAdmin,
    dlq: SqsQueue,
    converse: SqsQueue,
    *,
    per_second: int,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> Redrive | None:
    """SQS's own move task, for a redrive that filters nothing; None where the endpoint has
    no such task (moto), so the caller falls back to :func:`redrive` at the same rate.

    A task that ends other than COMPLETED (FAILED, CANCELLING, CANCELLED) is reported in
    ``move_task_failure`` with SQS's FailureReason, never replaced by another path: the
    messages it did not move stay in the dead-letter queue. A refused start is raised.
    """
    if not MIN_RATE <= per_second <= MAX_RATE:
        raise ValueError(f"per_second must be from {MIN_RATE} to {MAX_RATE}")
    source = await admin.arn(dlq.url)
    handle = await admin.start_move(source, await admin.arn(converse.url), per_second)
    if handle is None:
        return None
    while True:
        task = await admin.move_task(source, handle)
        if task is not None and task.status != "RUNNING":
            result = Redrive(sent=task.moved, via_move_task=True)
            if task.status != "COMPLETED":
                reason = f": {task.failure_reason}" if task.failure_reason else ""
                result.move_task_failure = f"{task.status}{reason}"
            return result
        await sleep(MOVE_TASK_POLL_SECONDS)
