"""The queue consumer: poll, hand each message to the stage, act on its outcome, drain on stop.

- Back pressure: it asks SQS for no more messages than it has free slots, and while
  work is in flight it waits until a whole batch fits (ten, or the concurrency if lower):
  a slot freed one at a time would otherwise be refilled by a ReceiveMessage of one.
- Leases: while a message is handled its visibility is extended, one
  ``ChangeMessageVisibilityBatch`` per beat for every message that needs it, up to
  ``lease_max_seconds`` in all; a receipt handle SQS no longer knows is dropped.
- Retries: a message that failed for a passing reason returns to the queue after a
  backoff by receive count (exponential, jittered); while dependencies fail, polling
  slows too, so an outage does not burn receive counts towards the dead-letter queue.
- A failed receive is logged and backed off; the loop never busy-spins on a dead endpoint.
- Deletes are batched (:class:`Batcher`: ten at a time, or after a short linger) and each
  failed entry of a batch response is logged, not assumed away.
- Stop: the parked long poll is cancelled, messages received but not started are
  released (visibility 0), in-flight work gets ``grace_seconds`` to finish, what it
  abandons is released, deletes are flushed.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from structlog.contextvars import bound_contextvars

from worker.batching import MAX_BATCH, Batcher
from worker.errors import RetryableError
from worker.logs import get_logger
from worker.ports import DeleteFailure, MessageSender, MessageSource, ReceivedMessage
from worker.settings import Settings
from worker.stage import Done, Outcome, Rejected, Retry

log = get_logger()

#: How long a finished message may wait for nine others before its delete is sent.
DELETE_LINGER_SECONDS = 0.05
RECEIVE_BACKOFF_BASE = 0.5
RECEIVE_BACKOFF_CAP = 20.0
PAUSE_BASE = 0.25
PAUSE_CAP = 5.0
#: On stop, a receive already under way gets this long to bring back what SQS handed it
#: (then released at once); a poll still parked after it holds nothing and is cancelled.
RECEIVE_SETTLE_SECONDS = 1.0
#: Codes with which SQS says a receipt handle is no longer this worker's to extend.
STALE_RECEIPT_CODES = frozenset(
    {"ReceiptHandleIsInvalid", "MessageNotInflight", "InvalidParameterValue"}
)


class Stage(Protocol):
    async def handle(self, message: ReceivedMessage) -> Outcome: ...

    async def renew(self, message_ids: Iterable[str]) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class ConsumerPolicy:
    concurrency: int = 16
    wait_seconds: int = 20
    grace_seconds: float = 20.0
    visibility_timeout: int = 60
    retry_base_seconds: float = 2.0
    retry_max_seconds: float = 300.0
    lease_max_seconds: float = 900.0

    @classmethod
    def from_settings(cls, settings: Settings, *, visibility_timeout: int) -> ConsumerPolicy:
        return cls(
            concurrency=settings.worker_concurrency,
            wait_seconds=settings.receive_wait_seconds,
            grace_seconds=settings.shutdown_grace_seconds,
            visibility_timeout=visibility_timeout,
            retry_base_seconds=settings.retry_base_seconds,
            retry_max_seconds=settings.retry_max_seconds,
            lease_max_seconds=settings.lease_max_seconds,
        )

    @property
    def beat_seconds(self) -> float:
        return max(1.0, self.visibility_timeout / 3)

    def retry_delay(self, receive_count: int) -> int:
        """Seconds a failed message stays away: exponential in its receive count, jittered."""
        ceiling = min(self.retry_max_seconds, self.retry_base_seconds * 2 ** (receive_count - 1))
        return max(1, round(random.uniform(ceiling / 2, ceiling)))


@dataclass(slots=True)
class _Lease:
    message: ReceivedMessage
    received_at: float
    visible_until: float
    capped: bool = False


class Consumer:
    def __init__(
        self,
        *,
        source: MessageSource,
        stage: Stage,
        dead_letters: MessageSender,
        policy: ConsumerPolicy,
    ) -> None:
        self._source = source
        self._stage = stage
        self._dead_letters = dead_letters
        self._policy = policy
        self._deleter: Batcher[ReceivedMessage, None] = Batcher(
            self._delete_batch,
            linger=DELETE_LINGER_SECONDS,
            max_linger=DELETE_LINGER_SECONDS,  # from the first delete: not on any latency path
            name="delete-batch",
        )
        self._in_flight: dict[asyncio.Task[None], ReceivedMessage] = {}
        #: Messages one receive asks for when the worker is busy: a full batch.
        self._batch = min(MAX_BATCH, policy.concurrency)
        self._leases: dict[str, _Lease] = {}
        self._failure_streak = 0

    async def run(self, stopping: asyncio.Event) -> None:
        """Consume until ``stopping`` is set, then drain and return."""
        policy = self._policy
        heartbeat = asyncio.create_task(self._heartbeat(), name="lease-heartbeat")
        log.info(
            "clerk.converse_worker_started",
            concurrency=policy.concurrency,
            visibility_timeout=policy.visibility_timeout,
        )
        receive_failures = 0
        try:
            while not stopping.is_set():
                if self._failure_streak:
                    await _sleep_unless(stopping, _pause(self._failure_streak))
                    if stopping.is_set():
                        break
                free = policy.concurrency - len(self._in_flight)
                if free < self._batch and self._in_flight:
                    await self._wait_for_a_slot(stopping)
                    continue
                try:
                    messages = await self._receive(min(MAX_BATCH, free), stopping)
                except RetryableError as exc:
                    receive_failures += 1
                    delay = _backoff(receive_failures)
                    log.warning("clerk.converse_receive_failed", error=str(exc), retry_in=delay)
                    await _sleep_unless(stopping, delay)
                    continue
                receive_failures = 0
                if stopping.is_set():
                    await self._release(messages)  # received as the stop came: not started
                    break
                for message in messages:
                    self._start(message)
        finally:
            await self._drain()
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
            await self._deleter.close()
            log.info("clerk.converse_worker_stopped")

    def _start(self, message: ReceivedMessage) -> None:
        now = asyncio.get_running_loop().time()
        self._leases[message.message_id] = _Lease(
            message, received_at=now, visible_until=now + self._policy.visibility_timeout
        )
        task = asyncio.create_task(self._process(message))
        self._in_flight[task] = message
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        message = self._in_flight.pop(task, None)
        if message is not None:
            self._leases.pop(message.message_id, None)

    async def _receive(self, max_messages: int, stopping: asyncio.Event) -> list[ReceivedMessage]:
        """One long poll; if the stop comes first, it is given a moment, then cancelled."""
        receive = asyncio.ensure_future(
            self._source.receive(max_messages, self._policy.wait_seconds)
        )
        stop = asyncio.ensure_future(stopping.wait())
        try:
            await asyncio.wait({receive, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if not receive.done():
            await asyncio.wait({receive}, timeout=RECEIVE_SETTLE_SECONDS)
        if not receive.done():
            receive.cancel()
            with contextlib.suppress(asyncio.CancelledError, RetryableError):
                await receive
            return []
        return receive.result()

    async def _wait_for_a_slot(self, stopping: asyncio.Event) -> None:
        stop = asyncio.ensure_future(stopping.wait())
        try:
            await asyncio.wait({stop, *self._in_flight}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()

    async def _process(self, message: ReceivedMessage) -> None:
        with bound_contextvars(message_id=message.message_id):
            try:
                outcome = await self._stage.handle(message)
            except Exception as exc:  # a defect, not the message's fault: let it come back
                log.error("clerk.converse_command_failed", error_type=type(exc).__name__)
                self._failure_streak += 1
                return
            match outcome:
                case Done():
                    self._failure_streak = 0
                    self._deleter.submit(message)
                case Rejected(reason=reason):
                    await self._dead_letter(message, reason)
                case Retry(delay=delay, failure=failure):
                    if failure:
                        self._failure_streak += 1
                    seconds = (
                        round(delay)
                        if delay is not None
                        else self._policy.retry_delay(message.receive_count)
                    )
                    await self._set_visibility([message], seconds, "clerk.converse_retry_failed")

    async def _dead_letter(self, message: ReceivedMessage, reason: str) -> None:
        log.warning("clerk.converse_command_rejected", reason=reason)
        try:
            await self._dead_letters.send(
                message.body,
                group_id=message.message_id,
                deduplication_id=message.message_id,
                attributes={"RejectionReason": reason, "RejectedMessageId": message.message_id},
            )
        except RetryableError as exc:
            log.warning("clerk.converse_dead_letter_failed", error=str(exc))
            return  # not deleted: it comes back and is rejected again
        self._deleter.submit(message)

    async def _delete_batch(self, batch: Sequence[ReceivedMessage]) -> list[None]:
        try:
            failures = await self._source.delete_batch(batch)
        except RetryableError as exc:
            # The messages come back after their visibility timeout; the ledger makes
            # a redelivery a no-op.
            log.warning("clerk.converse_delete_failed", count=len(batch), error=str(exc))
        else:
            _log_failures("clerk.converse_delete_failed", failures)
        return [None] * len(batch)

    async def _heartbeat(self) -> None:
        """Each beat, extend every in-flight message that would otherwise expire before the
        next one, in batches of ten, and renew the command leases that go with them."""
        policy = self._policy
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(policy.beat_seconds)
            now = loop.time()
            due = []
            for lease in list(self._leases.values()):
                if lease.visible_until - now > 2 * policy.beat_seconds:
                    continue
                if now - lease.received_at + policy.visibility_timeout > policy.lease_max_seconds:
                    if not lease.capped:
                        lease.capped = True
                        log.warning(
                            "clerk.converse_lease_cap_reached",
                            message_id=lease.message.message_id,
                            lease_max_seconds=policy.lease_max_seconds,
                        )
                    continue
                due.append(lease)
            extended = await self._set_visibility(
                [lease.message for lease in due],
                policy.visibility_timeout,
                "clerk.converse_lease_extend_failed",
            )
            for lease in due:
                if lease.message.message_id in extended:
                    lease.visible_until = now + policy.visibility_timeout
            lost = await self._stage.renew(extended)
            for message_id in lost:
                log.warning("clerk.converse_command_lease_lost", message_id=message_id)

    async def _set_visibility(
        self, messages: Sequence[ReceivedMessage], seconds: int, failure_event: str
    ) -> set[str]:
        """Change visibility in batches of ten; returns the ids SQS accepted. Stale receipt
        handles are dropped from the lease book rather than retried."""
        accepted: set[str] = set()
        for start in range(0, len(messages), MAX_BATCH):
            batch = messages[start : start + MAX_BATCH]
            try:
                failures = await self._source.change_visibility_batch(batch, seconds)
            except RetryableError as exc:
                log.warning(failure_event, count=len(batch), error=str(exc))
                continue
            _log_failures(failure_event, failures)
            refused = {f.message_id for f in failures}
            for failure in failures:
                if failure.code in STALE_RECEIPT_CODES:
                    self._leases.pop(failure.message_id, None)
            accepted.update(m.message_id for m in batch if m.message_id not in refused)
        return accepted

    async def _release(self, messages: Sequence[ReceivedMessage]) -> None:
        """Make messages this worker will not finish visible again at once."""
        released = await self._set_visibility(messages, 0, "clerk.converse_release_failed")
        if released:
            log.info("clerk.converse_messages_released", count=len(released))

    async def _drain(self) -> None:
        if not self._in_flight:
            return
        log.info("clerk.converse_worker_draining", in_flight=len(self._in_flight))
        _, unfinished = await asyncio.wait(set(self._in_flight), timeout=self._policy.grace_seconds)
        if not unfinished:
            return
        abandoned = [self._in_flight[task] for task in unfinished]
        for task in unfinished:
            task.cancel()
        await asyncio.wait(unfinished)
        log.warning("clerk.converse_drain_timed_out", unfinished=len(unfinished))
        await self._release(abandoned)


def _log_failures(event: str, failures: Iterable[DeleteFailure]) -> None:
    for failure in failures:
        log.warning(event, message_id=failure.message_id, code=failure.code)


def _backoff(failures: int) -> float:
    """Full jitter over an exponential ceiling."""
    ceiling = min(RECEIVE_BACKOFF_CAP, RECEIVE_BACKOFF_BASE * 2 ** (failures - 1))
    return random.uniform(ceiling / 2, ceiling)


def _pause(failure_streak: int) -> float:
    """How long polling waits while handled messages keep failing: short, but enough that
    an outage does not cycle every queued message through its receive count."""
    ceiling = min(PAUSE_CAP, PAUSE_BASE * 2 ** (failure_streak - 1))
    return random.uniform(ceiling / 2, ceiling)


async def _sleep_unless(stopping: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stopping.wait()
