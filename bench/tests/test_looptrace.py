"""The loop trace: what it records, and what the timeline reads from it (idle time, the step
a call's answer was parsed in, a turn's wait for its claim after the Query)."""

from __future__ import annotations

import asyncio
import asyncio.events
from pathlib import Path

import pytest

from bench.contenders import looptrace
from bench.contenders.calllog import Call
from bench.contenders.looptrace import Busy, idle_seconds, read_loop_trace, step_at
from bench.load.workload import Command
from bench.parts.timeline import claim_wait

BASE = 1_000.0  # epoch seconds; every moment below is BASE + ms / 1000


def at(ms: float) -> float:
    return BASE + ms / 1000


def busy(*steps: tuple[float, float]) -> list[Busy]:
    """Steps as (began ms, length ms), in order."""
    return [Busy(at(began), at(began + length)) for began, length in steps]


def test_idle_time_counts_only_what_no_step_covers() -> None:
    steps = busy((0, 2), (3, 1), (3.5, 1))  # the last two overlap: covered once
    # [1, 6]: covered 1 → 2 and 3 → 4.5, so 2.5 ms of the 5 are busy.
    assert idle_seconds(steps, at(1), at(6)) * 1000 == pytest.approx(2.5)
    assert idle_seconds(steps, at(0), at(2)) == pytest.approx(0)
    assert idle_seconds(steps, at(10), at(12)) * 1000 == pytest.approx(2)
    assert idle_seconds([], at(0), at(1)) * 1000 == pytest.approx(1)


def test_the_step_at_a_moment_is_the_one_running_then() -> None:
    steps = busy((0, 2), (3, 1))
    assert step_at(steps, at(1)) == steps[0]
    assert step_at(steps, at(3.5)) == steps[1]
    assert step_at(steps, at(2.5)) is None  # between steps: the loop was idle
    assert step_at(steps, at(9)) is None


def test_the_trace_records_every_callback_and_is_put_back() -> None:
    original = asyncio.events.Handle._run
    records, uninstall = looptrace.install()
    try:
        ran: list[int] = []

        async def three() -> None:
            loop = asyncio.get_running_loop()
            for i in range(3):
                loop.call_soon(ran.append, i)
            await asyncio.sleep(0)
            await asyncio.sleep(0)

        before = len(records)
        asyncio.run(three())
    finally:
        uninstall()
    assert ran == [0, 1, 2]
    assert len(records) - before >= 3 + 1  # the three callbacks and the task's steps
    assert all(r.ended >= r.began for r in records)
    assert asyncio.events.Handle._run is original
    count = len(records)
    asyncio.run(asyncio.sleep(0))
    assert len(records) == count  # uninstalled: nothing more is recorded


def test_a_trace_written_at_exit_reads_back_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "loop.jsonl"
    monkeypatch.setenv(looptrace.LOOP_TRACE_ENV, str(path))
    steps = busy((5, 1), (0, 2))
    looptrace.write_loop_trace(steps)
    assert read_loop_trace(str(path)) == [steps[1], steps[0]]
    looptrace.write_loop_trace(None)  # no trace kept: nothing written, nothing raised


def test_no_trace_without_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(looptrace.LOOP_TRACE_ENV, raising=False)
    assert looptrace.loop_trace_from_environment() is None


COMMAND = Command("cmd-1", "conv-1", "{}")


def calls(*, claim_ended: float = 13) -> list[Call]:
    return [
        Call("sqs.ReceiveMessage", at(-400), ended=at(0), commands=["cmd-1"]),
        Call("dynamodb.Query", at(-300), ended=at(-290), conversations=["conv-1"]),  # earlier
        Call("dynamodb.Query", at(1), ended=at(10), conversations=["conv-1"]),
        Call("dynamodb.UpdateItem", at(2), ended=at(claim_ended), commands=["cmd-1"]),
    ]


def test_a_turns_wait_for_its_claim_after_the_query() -> None:
    # The Query's answer is parsed in a step that runs 1 ms past it (9 → 11); the claim's
    # answer is handled in a step of its own (11.5 → 13): the loop idle 0.5 ms in between.
    steps = busy((9, 2), (11.5, 1.5))
    wait = claim_wait(COMMAND, calls(), steps)
    assert wait == pytest.approx(
        {"page_work_ms": 1, "claim_after_work_ms": 2, "idle_ms": 0.5, "claim_after_query_ms": 3}
    )


def test_no_wait_is_read_without_a_claim_or_with_one_answered_first() -> None:
    steps = busy((9, 2))
    no_claim = [c for c in calls() if c.operation != "dynamodb.UpdateItem"]
    assert claim_wait(COMMAND, no_claim, steps) == {}
    assert claim_wait(COMMAND, calls(claim_ended=5), steps) == {}  # before the Query's answer
