"""Virtual time for the unit tests: nothing here waits on the wall clock.

:class:`FakeClock` implements :class:`worker.timing.Clock`. A sleeper wakes only when
the test advances the clock; :meth:`FakeClock.advance` jumps from one sleeper's deadline
to the next and, at each, lets every task run until all of them wait again (on the
clock, or on something only the test will do). With in-memory fakes and no I/O, every
run of a test is the same run, so tests can assert exact times, delays and batch sizes.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import heapq
import itertools
from collections.abc import AsyncIterator
from typing import Any

#: Passes of the event loop ``settle`` allows before it calls the system livelocked.
MAX_PASSES = 100_000


async def one_pass() -> None:
    """Let every callback that is ready now run once, then resume."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()
    loop.call_soon(future.set_result, None)
    await future


async def settle() -> None:
    """Run the loop until nothing is ready: every task now waits on the clock or the test."""
    ready = _ready_queue(asyncio.get_running_loop())
    for _ in range(MAX_PASSES):
        await one_pass()
        if not ready:
            return
    raise AssertionError("the tasks never settled: something spins without waiting")


def _ready_queue(loop: asyncio.AbstractEventLoop) -> collections.deque[Any]:
    """The loop's queue of callbacks ready to run: a private attribute, read because asyncio has
    no public way to ask whether anything is runnable (a test helper only).

    CPython's ``BaseEventLoop`` keeps it as the deque ``_ready`` on 3.11, 3.12 and 3.13 alike
    (the unit suite runs on each: noxfile.py); 3.12's eager tasks do not change it, as they run
    their first step at creation, without the queue, and only when a test installs
    ``asyncio.eager_task_factory``. A loop without it (uvloop, a future CPython) is refused
    here, loudly, rather than settled by guess.
    """
    ready = getattr(loop, "_ready", None)
    if not isinstance(ready, collections.deque):
        raise AssertionError(
            f"{type(loop).__name__} keeps no deque `_ready`: settle() cannot tell when "
            "nothing is runnable (it reads CPython's BaseEventLoop._ready)"
        )
    return ready


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await one_pass()
            return
        await self._wake_after(seconds)

    @contextlib.asynccontextmanager
    async def timeout(self, seconds: float) -> AsyncIterator[None]:
        """``asyncio.timeout`` on virtual time: at the deadline the real timeout is moved
        to "now" (``Timeout.reschedule``), and asyncio cancels the block as it always does."""
        loop = asyncio.get_running_loop()
        inside = True

        def expire(waker: asyncio.Future[None]) -> None:
            if inside and not waker.cancelled():
                deadline.reschedule(loop.time())

        async with asyncio.timeout(None) as deadline:
            waker = self._wake_after(max(0.0, seconds))
            waker.add_done_callback(expire)
            try:
                yield
            finally:
                inside = False
                waker.cancel()

    def _wake_after(self, seconds: float) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + seconds, next(self._order), future))
        return future

    async def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, waking each sleeper at its own deadline."""
        await self.advance_to(self.now + seconds)

    async def advance_to(self, moment: float) -> None:
        await settle()
        while self._sleepers and self._sleepers[0][0] <= moment:
            deadline, _, future = heapq.heappop(self._sleepers)
            if future.done():  # its sleeper was cancelled
                continue
            self.now = max(self.now, deadline)
            future.set_result(None)
            await settle()
        self.now = max(self.now, moment)

    async def run_until_done(self, task: asyncio.Future[Any], *, within: float = 3600.0) -> None:
        """Advance from deadline to deadline until ``task`` is done (at most ``within``)."""
        limit = self.now + within
        await settle()
        while not task.done():
            deadlines = [deadline for deadline, _, future in self._sleepers if not future.done()]
            if not deadlines or min(deadlines) > limit:
                raise AssertionError(f"still running at t={self.now}, with nothing to wake")
            await self.advance_to(min(deadlines))
        await task
