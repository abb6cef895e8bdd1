"""Time as a dependency: the clock the loops read and sleep on, and their backoff.

The consumer, the lease heartbeat and the batchers take a :class:`Clock`, so the unit
tests advance virtual time instead of waiting for it and assert the exact delays. In
production it is :class:`LoopClock`, the event loop's own monotonic clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
from collections.abc import Callable, Collection
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

#: ``jitter(low, high)`` picks a delay in ``[low, high]``; tests pass a fixed choice.
Jitter = Callable[[float, float], float]

F = TypeVar("F", bound="asyncio.Future[Any]")

#: Exponents above this add nothing: every cap in use is reached long before.
_MAX_DOUBLINGS = 32


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (only differences mean anything)."""
        ...

    async def sleep(self, seconds: float) -> None: ...

    def timeout(self, seconds: float) -> AbstractAsyncContextManager[object]:
        """Like ``asyncio.timeout``: the block is cancelled, and ``TimeoutError`` raised
        from it, once ``seconds`` have passed on this clock."""
        ...


class LoopClock:
    """The running event loop's clock."""

    def monotonic(self) -> float:
        return asyncio.get_running_loop().time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def timeout(self, seconds: float) -> asyncio.Timeout:
        return asyncio.timeout(seconds)


def equal_jitter(low: float, high: float) -> float:
    """A uniform draw from ``[low, high]``. :meth:`Backoff.delay` passes ``[ceiling/2,
    ceiling]``: what the AWS Architecture Blog's "Exponential Backoff And Jitter" names
    *equal jitter* (``ceiling/2 + uniform(0, ceiling/2)``), not *full jitter*
    (``uniform(0, ceiling)``). Half the ceiling is always waited, so retries never bunch
    near zero."""
    return random.uniform(low, high)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff: ``base``, doubling with each attempt, up to ``cap``."""

    base: float
    cap: float

    def ceiling(self, attempt: int) -> float:
        """The longest wait before ``attempt`` (1 = the first retry)."""
        doublings = min(max(attempt - 1, 0), _MAX_DOUBLINGS)
        return min(self.cap, math.ldexp(self.base, doublings))  # base * 2**doublings

    def delay(self, attempt: int, jitter: Jitter = equal_jitter) -> float:
        """A wait between half the ceiling and the ceiling, chosen by ``jitter`` (equal jitter)."""
        ceiling = self.ceiling(attempt)
        return jitter(ceiling / 2, ceiling)


async def first_done(*futures: asyncio.Future[Any], event: asyncio.Event) -> None:
    """Return as soon as one of ``futures`` is done or ``event`` is set. The futures are
    left as they are (never cancelled here)."""
    if event.is_set():
        return
    setting = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({*futures, setting}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        setting.cancel()


async def sleep_unless(clock: Clock, event: asyncio.Event, seconds: float) -> bool:
    """Sleep ``seconds`` on ``clock``, or less if ``event`` is set first; True if it was."""
    if not event.is_set():
        with contextlib.suppress(TimeoutError):  # the clock's own timeout, never a cancel
            async with clock.timeout(seconds):
                await event.wait()
    return event.is_set()


async def wait_all_within(clock: Clock, futures: Collection[F], seconds: float) -> set[F]:
    """Wait until every future is done or ``seconds`` pass; returns those still pending.
    The futures themselves are never cancelled here."""
    if futures:
        with contextlib.suppress(TimeoutError):
            async with clock.timeout(seconds):
                await asyncio.wait(futures)
    return {future for future in futures if not future.done()}


async def discard(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` if it is still running and wait for it to end, whatever it ends
    with: its failure, if any, is retrieved and dropped."""
    task.cancel()
    await asyncio.wait({task})
    if not task.cancelled():
        task.exception()


#: Loop passes from making a request to its bytes on the socket: aiohttp writes a request's
#: body from a task of its own, a pass after the request is made (Python 3.11).
REQUEST_WRITE_PASSES = 2


async def yield_passes(passes: int) -> None:
    """Let the tasks ready now take ``passes`` steps before this one goes on."""
    for _ in range(passes):
        await asyncio.sleep(0)
