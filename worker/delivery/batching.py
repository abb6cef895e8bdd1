"""Micro-batching: calls made one at a time by concurrent turns leave as SQS batch calls.

A :class:`Batcher` collects items while they keep coming: it waits up to ``linger``
seconds for each next item, but never more than ``max_linger`` after the first (by
default four lingers), and stops early at ``max_items`` or when the next item would take
the batch past ``max_bytes``. It hands them to its ``flush`` function as one batch and
resolves each item's future with its own result. A lone item leaves after ``linger``; a
stream of items leaves in full batches, where a fixed linger from the first item would
cut the stream into halves and thirds of batches (the turns of one received batch
reach their sends a few milliseconds apart, not at once). One flush is in flight at a
time: what arrives meanwhile waits and leaves in the next batch.

Given ``coming`` (how many items are known to be on their way), the batch waits for a
next item only while some are, up to ``max_linger`` after the first, and leaves at once
when none are: a lone item does not wait a linger, and the items of a busy worker, whose
turns reach the batcher further apart than any fixed linger, still leave together.
:meth:`Batcher.nudge` tells a waiting batch to look again (an item it waited for will
not come).

Closing queues a marker behind the last item, so everything submitted before it is
flushed; the batcher is never cancelled mid-batch.

The batcher's task lives as long as the process, so it starts in an empty contextvars
context (not the log context of whichever turn submitted first), and nothing ends it
but :meth:`Batcher.close`: a failure of ``flush`` goes to the batch's callers, and any
other exception fails the batch, is logged by type, and the task carries on after a
backoff.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from worker.logs import get_logger
from worker.timing import Backoff, Clock, LoopClock, sleep_unless

T = TypeVar("T")
R = TypeVar("R")

log = get_logger()

#: SendMessageBatch, DeleteMessageBatch and ChangeMessageVisibilityBatch take ten entries.
MAX_BATCH = 10
#: After an unexpected failure of the batcher itself, before the next batch.
FAILURE_BACKOFF = Backoff(base=0.1, cap=5.0)


class _Close:
    """Queued last by :meth:`Batcher.close`."""


class Batcher(Generic[T, R]):
    def __init__(
        self,
        flush: Callable[[Sequence[T]], Awaitable[Sequence[R | BaseException]]],
        *,
        linger: float,
        max_linger: float | None = None,
        max_items: int = MAX_BATCH,
        max_bytes: int | None = None,
        size: Callable[[T], int] = lambda _: 0,
        name: str = "batcher",
        clock: Clock | None = None,
        coming: Callable[[], int] | None = None,
    ) -> None:
        self._flush = flush
        self._linger = linger
        self._max_linger = 4 * linger if max_linger is None else max(linger, max_linger)
        self._max_items = max_items
        self._max_bytes = max_bytes
        self._size = size
        self._name = name
        self._clock = clock or LoopClock()
        self._coming = coming
        self._queue: deque[tuple[T, asyncio.Future[R]] | _Close] = deque()
        self._arrived = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._carry: tuple[T, asyncio.Future[R]] | None = None
        self._outstanding = 0

    def submit(self, item: T) -> asyncio.Future[R]:
        """Queue ``item``; the future resolves with its result once its batch is sent."""
        if self._task is None:
            self._task = asyncio.create_task(
                self._run(), name=self._name, context=contextvars.Context()
            )
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._outstanding += 1
        self._put((item, future))
        return future

    def outstanding(self) -> int:
        """Items submitted whose results are not in yet (queued, or in a batch being sent)."""
        return self._outstanding

    def nudge(self) -> None:
        """Have a batch waiting for items on their way look again whether any still are."""
        self._arrived.set()

    async def close(self) -> None:
        """Flush everything submitted so far, then stop."""
        if self._task is not None:
            self._put(_Close())
            await self._task
            self._task = None

    def _put(self, entry: tuple[T, asyncio.Future[R]] | _Close) -> None:
        self._queue.append(entry)
        self._arrived.set()

    async def _next(self, wait: float | None) -> tuple[T, asyncio.Future[R]] | _Close | None:
        """The next entry, waiting up to ``wait`` seconds (None: for ever) for one; None
        if none came (the wait ran out, or a nudge came first)."""
        if not self._queue:
            self._arrived.clear()
            if wait is None:
                await self._arrived.wait()
            elif wait <= 0 or not await sleep_unless(self._clock, self._arrived, wait):
                return None
        return self._queue.popleft() if self._queue else None

    def _wait_for_next(self, deadline: float) -> float:
        """How long the batch being collected waits for its next item."""
        left = deadline - self._clock.monotonic()
        if self._coming is None:
            return min(self._linger, left)
        return left if self._coming() > 0 else 0.0

    async def _run(self) -> None:
        failures = 0
        closing = False
        while not closing or self._carry is not None:
            batch: list[tuple[T, asyncio.Future[R]]] = []
            try:
                closing = await self._collect(batch, closing)
                if batch:
                    await self._send(batch)
                failures = 0
            except Exception as exc:
                failures += 1
                log.error(
                    "clerk.converse_batcher_failed",
                    batcher=self._name,
                    error_type=type(exc).__name__,
                    count=len(batch),
                )
                self._settle(batch, [exc] * len(batch))
                await self._clock.sleep(FAILURE_BACKOFF.ceiling(failures))

    async def _collect(self, batch: list[tuple[T, asyncio.Future[R]]], closing: bool) -> bool:
        """Fill ``batch``; returns whether the close marker was reached."""
        if self._carry is not None:
            first, self._carry = self._carry, None
        elif closing:
            return True
        else:
            got = None
            while got is None:  # a nudge with nothing queued: wait on
                got = await self._next(None)
            if isinstance(got, _Close):
                return True
            first = got
        batch.append(first)
        used = self._size(first[0])
        deadline = self._clock.monotonic() + self._max_linger
        while len(batch) < self._max_items and not closing:
            wait = self._wait_for_next(deadline)
            got = await self._next(wait)
            if got is None:
                if self._coming is not None and self._wait_for_next(deadline) > 0:
                    continue  # nudged, and items are still on their way
                return False
            if isinstance(got, _Close):
                return True
            batch.append(got)  # before sizing it: a failure of size() fails it with the batch
            used += self._size(got[0])
            if self._max_bytes is not None and used > self._max_bytes:
                self._carry = batch.pop()
                return False
        return closing

    async def _send(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            results = list(await self._flush([item for item, _ in batch]))
        except Exception as exc:  # the callers' to handle, as each entry's own failure is
            results = [exc] * len(batch)
        if len(results) != len(batch):
            raise ValueError(f"{self._name}: {len(results)} results for {len(batch)} items")
        self._settle(batch, results)

    def _settle(
        self,
        batch: Sequence[tuple[object, asyncio.Future[R]]],
        results: Sequence[R | BaseException],
    ) -> None:
        for (_, future), result in zip(batch, results, strict=True):
            self._outstanding -= 1
            if future.done():  # its awaiter was cancelled
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)
