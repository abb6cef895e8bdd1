"""Settling a message: the consumer acting on the stage's outcome for it.

Each received message yields one :data:`~worker.delivery.outcomes.Outcome`. ``Done``
deletes it (each entry SQS refuses is logged). Deletes leave in batches of ten: a delete waits
for those of the messages still being handled (``coming``), up to a short linger, and leaves
at once when none are, so a lone command's delete is not left to land on the next command's
path;
``Rejected`` sends it to the dead-letter queue with the reason, then deletes it;
``Retry`` and ``Failed`` return it to the queue after a delay, by default a jittered backoff
on its receive count. On a message's last receive (the redrive policy's ``maxReceiveCount``),
a failure is dead-lettered here, with ``LastFailure`` saying what failed, rather than left
for SQS to move with nothing to say why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from worker.consumer.leases import Leases, log_refused
from worker.consumer.pacing import DELETE_LINGER_SECONDS, ConsumerPolicy
from worker.delivery.batching import Batcher
from worker.delivery.outcomes import (
    DEAD_LETTERED_ID,
    LAST_FAILURE,
    REJECTION_REASON,
    Done,
    Failed,
    Outcome,
    Rejected,
    Retry,
)
from worker.logs import get_logger, log_failure
from worker.ports import MessageSender, MessageSource, ReceivedMessage
from worker.timing import Clock, Jitter

log = get_logger()


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
        coming: Callable[[], int] | None = None,
    ) -> None:
        self._source = source
        self._dead_letters = dead_letters
        self._leases = leases
        self._policy = policy
        self._jitter = jitter
        self._deleter: Batcher[ReceivedMessage, None] = Batcher(
            self._delete_batch,
            linger=DELETE_LINGER_SECONDS,
            max_linger=DELETE_LINGER_SECONDS,  # from the first delete
            name="delete-batch",
            clock=clock,
            coming=coming,
        )

    async def act(self, message: ReceivedMessage, outcome: Outcome) -> None:
        last = self._policy.last_receive(message.receive_count)
        match outcome:
            case Done():
                self._deleter.submit(message)
            case Rejected(reason=reason):
                log.warning("clerk.converse_command_rejected", reason=reason)
                await self._dead_letter(message, {REJECTION_REASON: reason})
            case Retry(error=error, failure=True) | Failed(error=error) if last:
                # SQS would move it on the next receive, with nothing to say why.
                log.warning("clerk.converse_command_retries_exhausted", error=error)
                await self._dead_letter(message, {LAST_FAILURE: error})
            case Retry(delay=delay) if delay is not None:
                await self._leases.set_visibility(
                    [message], round(delay), "clerk.converse_retry_failed"
                )
            case Retry() | Failed():
                seconds = self._policy.retry_delay(message.receive_count, self._jitter)
                await self._leases.set_visibility([message], seconds, "clerk.converse_retry_failed")

    def nudge(self) -> None:
        """A message has been acted on: a delete batch waiting for it looks again."""
        self._deleter.nudge()

    async def close(self) -> None:
        await self._deleter.close()

    async def _dead_letter(self, message: ReceivedMessage, why: dict[str, str]) -> None:
        """Send ``message`` to the dead-letter queue with ``why`` among its attributes, then
        delete it; a failed send leaves it to come back."""
        try:
            await self._dead_letters.send(
                message.body,
                group_id=message.message_id,
                deduplication_id=message.message_id,
                attributes={**why, DEAD_LETTERED_ID: message.message_id},
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
