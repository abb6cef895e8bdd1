"""The virtual clock's idle check, on each Python the unit suite runs on (noxfile.py)."""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.clock import FakeClock, _ready_queue, settle


async def test_settle_returns_only_once_a_chain_of_callbacks_and_tasks_has_run_out() -> None:
    """Each step schedules the next through the ready queue: a settle that looked only once,
    or at the wrong queue, would return with steps still to run."""
    steps: list[int] = []

    async def chain(depth: int) -> None:
        steps.append(depth)
        if depth < 50:
            await asyncio.create_task(chain(depth + 1))

    loop = asyncio.get_running_loop()
    loop.call_soon(lambda: loop.create_task(chain(1)))
    await settle()
    assert steps == list(range(1, 51))


async def test_settle_leaves_a_sleeper_on_the_clock_asleep() -> None:
    clock = FakeClock()
    woke: list[float] = []

    async def sleeper() -> None:
        await clock.sleep(5)
        woke.append(clock.monotonic())

    task = asyncio.create_task(sleeper())
    await settle()
    assert woke == [] and not task.done()
    await clock.advance(5)
    assert woke == [5.0]


def test_a_loop_without_cpythons_ready_queue_is_refused_not_guessed() -> None:
    class Elsewhere(asyncio.AbstractEventLoop):
        pass

    with pytest.raises(AssertionError, match="keeps no deque `_ready`"):
        _ready_queue(Elsewhere())
