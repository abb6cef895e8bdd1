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
Closing queues a marker behind the last item, so everything submitted before it is
flushed; the batcher is never cancelled mid-batch. (Cancelling a task parked in
``wait_for`` can lose the cancellation on Python 3.11; a marker has no such race.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: SendMessageBatch, DeleteMessageBatch and ChangeMessageVisibilityBatch take ten entries.
MAX_BATCH = 10


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
    ) -> None:
        self._flush = flush
        self._linger = linger
        self._max_linger = 4 * linger if max_linger is None else max(linger, max_linger)
        self._max_items = max_items
        self._max_bytes = max_bytes
        self._size = size
        self._name = name
        self._queue: asyncio.Queue[tuple[T, asyncio.Future[R]] | _Close] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._carry: tuple[T, asyncio.Future[R]] | None = None

    def submit(self, item: T) -> asyncio.Future[R]:
        """Queue ``item``; the future resolves with its result once its batch is sent."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=self._name)
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((item, future))
        return future

    async def close(self) -> None:
        """Flush everything submitted so far, then stop."""
        if self._task is not None:
            self._queue.put_nowait(_Close())
            await self._task
            self._task = None

    async def _run(self) -> None:
        closing = False
        while not closing or self._carry is not None:
            if self._carry is not None:
                first, self._carry = self._carry, None
            else:
                got = await self._queue.get()
                if isinstance(got, _Close):
                    return
                first = got
            batch = [first]
            used = self._size(first[0])
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self._max_linger
            while len(batch) < self._max_items and not closing:
                if not self._queue.empty():
                    got = self._queue.get_nowait()
                else:
                    wait = min(self._linger, deadline - loop.time())
                    if wait <= 0:
                        break
                    try:
                        async with asyncio.timeout(wait):
                            got = await self._queue.get()
                    except TimeoutError:
                        break
                if isinstance(got, _Close):
                    closing = True
                    break
                extra = self._size(got[0])
                if self._max_bytes is not None and used + extra > self._max_bytes:
                    self._carry = got
                    break
                batch.append(got)
                used += extra
            await self._send(batch)

    async def _send(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            results = await self._flush([item for item, _ in batch])
        except Exception as exc:
            results = [exc] * len(batch)
        for (_, future), result in zip(batch, results, strict=True):
            if future.done():  # its awaiter was cancelled
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)
