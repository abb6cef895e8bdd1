"""The queue consumer: poll, hand each message to the stage, act on its outcome, drain on stop.

- Back pressure: it asks SQS for no more messages than it has free slots.
- A failed receive is logged and backed off; the loop never busy-spins on a dead endpoint.
- Deletes are batched (ten at a time, or after a short linger) and each failed entry of a
  batch response is logged, not assumed away.
- Stop: the parked long poll is cancelled, in-flight work gets ``grace_seconds`` to
  finish, deletes are flushed. Whatever was not deleted returns to the queue by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Sequence
from typing import Protocol

from structlog.contextvars import bound_contextvars

from worker.errors import RetryableError
from worker.logs import get_logger
from worker.ports import MessageSender, MessageSource, ReceivedMessage
from worker.stage import Done, Outcome, Rejected, Retry

log = get_logger()

MAX_BATCH = 10
#: How long a finished message may wait for nine others before its delete is sent.
DELETE_LINGER_SECONDS = 0.05
RECEIVE_BACKOFF_BASE = 0.5
RECEIVE_BACKOFF_CAP = 20.0
#: On stop, a receive already under way gets this long to bring back what SQS handed it
#: (then released at once); a poll still parked after it holds nothing and is cancelled.
RECEIVE_SETTLE_SECONDS = 1.0


class Stage(Protocol):
    async def handle(self, message: ReceivedMessage) -> Outcome: ...


class _Close:
    """Queued last by :meth:`BatchDeleter.close`: flush what came before, then stop."""


class BatchDeleter:
    """Collects finished messages and deletes them in batches of up to ten.

    It is never cancelled: ``close`` queues a marker behind the last message, so every
    delete queued before it is sent. (Cancelling a task parked in ``wait_for`` can lose
    the cancellation on Python 3.11; a marker has no such race.)
    """

    def __init__(self, source: MessageSource, linger: float = DELETE_LINGER_SECONDS) -> None:
        self._source = source
        self._linger = linger
        self._queue: asyncio.Queue[ReceivedMessage | _Close] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="batch-deleter")

    def delete(self, message: ReceivedMessage) -> None:
        self._queue.put_nowait(message)

    async def close(self) -> None:
        """Send every delete queued so far, then stop."""
        if self._task is not None:
            self._queue.put_nowait(_Close())
            await self._task

    async def _run(self) -> None:
        closing = False
        while not closing:
            first = await self._queue.get()
            if isinstance(first, _Close):
                return
            batch = [first]
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._linger):
                    while len(batch) < MAX_BATCH:
                        item = await self._queue.get()
                        if isinstance(item, _Close):
                            closing = True
                            break
                        batch.append(item)
            await self._flush(batch)

    async def _flush(self, batch: Sequence[ReceivedMessage]) -> None:
        try:
            failures = await self._source.delete_batch(batch)
        except RetryableError as exc:
            # The messages come back after their visibility timeout; redelivery is safe.
            log.warning("clerk.converse_delete_failed", count=len(batch), error=str(exc))
            return
        for failure in failures:
            log.warning(
                "clerk.converse_delete_failed", message_id=failure.message_id, code=failure.code
            )


class Consumer:
    def __init__(
        self,
        *,
        source: MessageSource,
        stage: Stage,
        dead_letters: MessageSender,
        concurrency: int,
        wait_seconds: int,
        grace_seconds: float,
    ) -> None:
        self._source = source
        self._stage = stage
        self._dead_letters = dead_letters
        self._concurrency = concurrency
        self._wait_seconds = wait_seconds
        self._grace_seconds = grace_seconds
        self._deleter = BatchDeleter(source)
        self._in_flight: dict[asyncio.Task[None], ReceivedMessage] = {}

    async def run(self, stopping: asyncio.Event) -> None:
        """Consume until ``stopping`` is set, then drain and return."""
        self._deleter.start()
        log.info("clerk.converse_worker_started", concurrency=self._concurrency)
        failures = 0
        try:
            while not stopping.is_set():
                free = self._concurrency - len(self._in_flight)
                if free <= 0:
                    await self._wait_for_a_slot(stopping)
                    continue
                try:
                    messages = await self._receive(min(MAX_BATCH, free), stopping)
                    if stopping.is_set():
                        await self._release(messages)  # received as the stop came: not started
                        break
                except RetryableError as exc:
                    failures += 1
                    delay = _backoff(failures)
                    log.warning("clerk.converse_receive_failed", error=str(exc), retry_in=delay)
                    await _sleep_unless(stopping, delay)
                    continue
                failures = 0
                for message in messages:
                    task = asyncio.create_task(self._process(message))
                    self._in_flight[task] = message
                    task.add_done_callback(self._forget)
        finally:
            await self._drain()

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._in_flight.pop(task, None)

    async def _receive(self, max_messages: int, stopping: asyncio.Event) -> list[ReceivedMessage]:
        """One long poll; if the stop comes first, it is given a moment, then cancelled."""
        receive = asyncio.ensure_future(self._source.receive(max_messages, self._wait_seconds))
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

    async def _release(self, messages: Sequence[ReceivedMessage]) -> None:
        """Make messages this worker will not finish visible again at once."""
        for start in range(0, len(messages), MAX_BATCH):
            batch = messages[start : start + MAX_BATCH]
            try:
                failures = await self._source.change_visibility_batch(batch, 0)
            except RetryableError as exc:
                log.warning("clerk.converse_release_failed", count=len(batch), error=str(exc))
                continue
            for failure in failures:
                log.warning(
                    "clerk.converse_release_failed",
                    message_id=failure.message_id,
                    code=failure.code,
                )
        if messages:
            log.info("clerk.converse_messages_released", count=len(messages))

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
                return
            match outcome:
                case Done():
                    self._deleter.delete(message)
                case Rejected(reason=reason):
                    await self._dead_letter(message, reason)
                case Retry():
                    pass

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
        self._deleter.delete(message)

    async def _drain(self) -> None:
        if self._in_flight:
            log.info("clerk.converse_worker_draining", in_flight=len(self._in_flight))
            _, unfinished = await asyncio.wait(set(self._in_flight), timeout=self._grace_seconds)
            abandoned = [self._in_flight[task] for task in unfinished]
            for task in unfinished:
                task.cancel()
            if unfinished:
                await asyncio.wait(unfinished)
                log.warning("clerk.converse_drain_timed_out", unfinished=len(unfinished))
                await self._release(abandoned)
        await self._deleter.close()
        log.info("clerk.converse_worker_stopped")


def _backoff(failures: int) -> float:
    """Full jitter over an exponential ceiling."""
    ceiling = min(RECEIVE_BACKOFF_CAP, RECEIVE_BACKOFF_BASE * 2 ** (failures - 1))
    return random.uniform(ceiling / 2, ceiling)


async def _sleep_unless(stopping: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stopping.wait()
