"""When a process's event loop was busy: the start and length of every callback it ran.

:mod:`bench.parts.timeline` tells from the call log (:mod:`bench.contenders.calllog`) when
each call's answer was parsed; this tells whether the turn waited for that answer or for its
own loop. With ``BENCH_LOOP_TRACE`` naming a file, the benchmark's worker process
(:mod:`bench.contenders.worker_process`) wraps asyncio's ``Handle._run`` (every callback and
task step of the event loop passes through it) and writes one ``[began, ended]`` line per
callback there at exit: the wall clock (``time.time()``, the call log's axis) at its start,
plus its length as ``time.perf_counter()`` timed it.

:func:`idle_seconds` then says how much of a stretch the loop spent waiting: between a
Query's answer and the claim's, zero idle means the claim's answer was already in when the
turn's own work on the page ended, so the wait was the worker's CPU, not the ledger's.

asyncio's own loop only: uvloop runs its callbacks in C, past this hook (the worker runs
asyncio's loop unless uvloop is installed, and the benchmark's environment has none).
"""

from __future__ import annotations

import asyncio.events
import bisect
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: Where a child process writes its loop trace at exit (unset: it keeps none).
LOOP_TRACE_ENV = "BENCH_LOOP_TRACE"


@dataclass(frozen=True, slots=True)
class Busy:
    """One callback: when it began and ended (epoch seconds; its length timed by
    ``time.perf_counter()``)."""

    began: float
    ended: float


def install() -> tuple[list[Busy], Callable[[], None]]:
    """Record every callback the event loops of this process run from now on; returns the
    growing list and the function that puts asyncio back as it was."""
    records: list[Busy] = []
    original = asyncio.events.Handle._run

    def traced(self: asyncio.events.Handle) -> None:
        began, start = time.time(), time.perf_counter()
        try:
            original(self)
        finally:
            records.append(Busy(began, began + time.perf_counter() - start))

    asyncio.events.Handle._run = traced  # type: ignore[method-assign]

    def uninstall() -> None:
        asyncio.events.Handle._run = original  # type: ignore[method-assign]

    return records, uninstall


def loop_trace_from_environment() -> list[Busy] | None:
    """The trace of this process when ``BENCH_LOOP_TRACE`` is set (kept until exit)."""
    if not os.environ.get(LOOP_TRACE_ENV):
        return None
    records, _ = install()
    return records


def write_loop_trace(records: Sequence[Busy] | None) -> None:
    if records is None:
        return
    path = os.environ[LOOP_TRACE_ENV]
    with open(f"{path}.tmp", "w", encoding="utf-8") as out:
        out.writelines(f"[{b.began!r}, {b.ended!r}]\n" for b in records)
    os.replace(f"{path}.tmp", path)


def read_loop_trace(path: str) -> list[Busy]:
    """The callbacks, in the order they began."""
    with open(path, encoding="utf-8") as lines:
        busy = [Busy(*json.loads(line)) for line in lines if line.strip()]
    return sorted(busy, key=lambda b: b.began)


def _first_at(busy: Sequence[Busy], moment: float) -> int:
    """The index of the last step begun at or before ``moment`` (0 if none): the steps of one
    loop follow one another, so no earlier step runs past it."""
    return max(0, bisect.bisect_right(busy, moment, key=lambda b: b.began) - 1)


def step_at(busy: Sequence[Busy], moment: float) -> Busy | None:
    """The callback running at ``moment`` (``busy`` in order), or None: the loop was idle."""
    if not busy:
        return None
    step = busy[_first_at(busy, moment)]
    return step if step.began <= moment <= step.ended else None


def idle_seconds(busy: Sequence[Busy], start: float, end: float) -> float:
    """How long the loop ran nothing between ``start`` and ``end`` (``busy`` in order)."""
    covered, reached = 0.0, start
    for step in busy[_first_at(busy, start) :]:
        if step.began >= end:
            break
        began, ended = max(step.began, reached), min(step.ended, end)
        if ended > began:
            covered += ended - began
            reached = ended
    return max(0.0, end - start - covered)
