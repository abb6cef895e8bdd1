"""Outcomes: what the stage decided for a message, and the consumer acting on it.

Each received message yields one :data:`Outcome`. ``Done`` deletes it (deletes leave in
batches of ten, or after a short linger, and each entry SQS refuses is logged);
``Rejected`` sends it to the dead-letter queue with the reason, then deletes it;
``Retry`` returns it to the queue after a delay, by default a jittered backoff on its
receive count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from worker.batching import Batcher
from worker.leases import Leases, log_refused
from worker.logs import get_logger, log_failure
from worker.policy import DELETE_LINGER_SECONDS, ConsumerPolicy
from worker.ports import MessageSender, MessageSource, ReceivedMessage
from worker.timing import Clock, Jitter

log = get_logger()


@dataclass(frozen=True, slots=True)
class Done:
    """Served (or served before): delete the command."""


@dataclass(frozen=True, slots=True)
class Rejected:
    """Never servable: dead-letter it with the reason, then delete it."""

    reason: str


@dataclass(frozen=True, slots=True)
class Retry:
    """Not served this time: return it to the queue.

    ``delay`` is how long it should stay invisible (None: back off by receive count);
    ``failure`` says whether a dependency failed (the consumer then slows its polling).
    """

    error: str
    delay: float | None = None
    failure: bool = True


Outcome = Done | Rejected | Retry


class Outcomes:
    """Acts on outcomes for one consumer; :meth:`close` flushes the deletes still queued."""

    def __init__(
        self,
        *,
        source: MessageSource,
        dead_letters: MessageSender,
        leases: Leases,
        policy: ConsumerPolicy,
        clock: Clock,
        jitter: Jitter,
    ) -> None:
        self._source = source
        self._dead_letters = dead_letters
        self._leases = leases
        self._policy = policy
        self._jitter = jitter
        self._deleter: Batcher[ReceivedMessage, None] = Batcher(
            self._delete_batch,
            linger=DELETE_LINGER_SECONDS,
            max_linger=DELETE_LINGER_SECONDS,  # from the first delete: not on any latency path
            name="delete-batch",
            clock=clock,
        )

    async def act(self, message: ReceivedMessage, outcome: Outcome) -> None:
        match outcome:
            case Done():
                self._deleter.submit(message)
            case Rejected(reason=reason):
                await self._dead_letter(message, reason)
            case Retry(delay=delay):
                seconds = (
                    round(delay)
                    if delay is not None
                    else self._policy.retry_delay(message.receive_count, self._jitter)
                )
                await self._leases.set_visibility([message], seconds, "clerk.converse_retry_failed")

    async def close(self) -> None:
        await self._deleter.close()

    async def _dead_letter(self, message: ReceivedMessage, reason: str) -> None:
        log.warning("clerk.converse_command_rejected", reason=reason)
        try:
            await self._dead_letters.send(
                message.body,
                group_id=message.message_id,
                deduplication_id=message.message_id,
                attributes={"RejectionReason": reason, "RejectedMessageId": message.message_id},
            )
        except Exception as exc:
            log_failure("clerk.converse_dead_letter_failed", exc)
            return  # not deleted: it comes back and is rejected again
        self._deleter.submit(message)

    async def _delete_batch(self, batch: Sequence[ReceivedMessage]) -> list[None]:
        try:
            failures = await self._source.delete_batch(batch)
        except Exception as exc:
            # The messages come back after their visibility timeout; the ledger makes
            # a redelivery a no-op.
            log_failure("clerk.converse_delete_failed", exc, count=len(batch))
        else:
            log_refused("clerk.converse_delete_failed", failures)
        return [None] * len(batch)
