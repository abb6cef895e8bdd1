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


class Stage(Protocol):
    async def handle(self, message: ReceivedMessage) -> Outcome: ...


class BatchDeleter:
    """Collects finished messages and deletes them in batches of up to ten."""

    def __init__(self, source: MessageSource, linger: float = DELETE_LINGER_SECONDS) -> None:
        self._source = source
        self._linger = linger
        self._queue: asyncio.Queue[ReceivedMessage] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="batch-deleter")

    def delete(self, message: ReceivedMessage) -> None:
        self._queue.put_nowait(message)

    async def close(self) -> None:
        """Flush everything queued, then stop."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        while not self._queue.empty():
            batch = [self._queue.get_nowait() for _ in range(min(MAX_BATCH, self._queue.qsize()))]
            await self._flush(batch)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            deadline = loop.time() + self._linger
            while len(batch) < MAX_BATCH:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self._queue.get(), remaining))
                except TimeoutError:
                    break
            await asyncio.shield(self._flush(batch))

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
        self._in_flight: set[asyncio.Task[None]] = set()

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
                except RetryableError as exc:
                    failures += 1
                    delay = _backoff(failures)
                    log.warning("clerk.converse_receive_failed", error=str(exc), retry_in=delay)
                    await _sleep_unless(stopping, delay)
                    continue
                failures = 0
                for message in messages:
                    task = asyncio.create_task(self._process(message))
                    self._in_flight.add(task)
                    task.add_done_callback(self._in_flight.discard)
        finally:
            await self._drain()

    async def _receive(self, max_messages: int, stopping: asyncio.Event) -> list[ReceivedMessage]:
        """One long poll, cancelled if the stop comes while it is parked."""
        receive = asyncio.ensure_future(self._source.receive(max_messages, self._wait_seconds))
        stop = asyncio.ensure_future(stopping.wait())
        try:
            await asyncio.wait({receive, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
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
            _, unfinished = await asyncio.wait(self._in_flight, timeout=self._grace_seconds)
            for task in unfinished:
                task.cancel()
            if unfinished:
                await asyncio.wait(unfinished)
                log.warning("clerk.converse_drain_timed_out", unfinished=len(unfinished))
        await self._deleter.close()
        log.info("clerk.converse_worker_stopped")


def _backoff(failures: int) -> float:
    """Full jitter over an exponential ceiling."""
    ceiling = min(RECEIVE_BACKOFF_CAP, RECEIVE_BACKOFF_BASE * 2 ** (failures - 1))
    return random.uniform(ceiling / 2, ceiling)


async def _sleep_unless(stopping: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), seconds)
