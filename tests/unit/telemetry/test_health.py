"""Liveness on virtual time: the receive loop and the lease heartbeat beat, the health file
says so, and `worker health` fails within its bound when either loop is wedged, never for a
worker idle on an empty queue."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.clock import FakeClock
from tests.unit.consumer.test_consumer import Run, messages, policy
from worker.delivery.outcomes import Done
from worker.telemetry.liveness import HealthFile, Liveness
from worker.telemetry.probe import LEASE_HEARTBEAT, RECEIVE_LOOP, check, problems

BOUND = 30.0


def record(now: float, *, written: float, receive: float, heartbeat: float) -> dict[str, object]:
    """A health file written ``written`` s ago, each loop's last beat so many seconds ago."""
    return {
        "written_at": now - written,
        "loops": {
            RECEIVE_LOOP: {"beat_at": now - receive, "bound": BOUND},
            LEASE_HEARTBEAT: {"beat_at": now - heartbeat, "bound": 60.0},
        },
    }


@pytest.mark.parametrize(
    ("written", "receive", "heartbeat", "found"),
    [
        (1, 20, 20, []),
        (1, 30, 60, []),  # at the bound is within it
        (1, 31, 20, ["the receive loop has been silent for 31 s (bound 30 s)"]),
        (1, 20, 61, ["the lease heartbeat has been silent for 61 s (bound 60 s)"]),
        (31, 5, 5, ["the health file was last written 31 s ago"]),
    ],
)
def test_a_health_record_is_judged_by_each_loops_bound(
    written: float, receive: float, heartbeat: float, found: list[str]
) -> None:
    now = 10_000.0
    assert (
        problems(record(now, written=written, receive=receive, heartbeat=heartbeat), now) == found
    )


def test_the_check_says_why_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "health"
    assert check(path, 0.0) == (
        False,
        f"unhealthy: no health file at {path}: the worker is not running",
    )
    path.write_text("{not json", encoding="utf-8")
    assert check(path, 0.0) == (False, f"unhealthy: cannot read {path} (JSONDecodeError)")
    path.write_text(json.dumps(record(100.0, written=1, receive=2, heartbeat=7)))
    assert check(path, 100.0) == (True, "healthy: receive loop 2 s ago, lease heartbeat 7 s ago")


def test_the_heartbeats_bound_is_at_least_three_of_its_periods() -> None:
    liveness = Liveness(FakeClock(), max_silence=BOUND)
    liveness.heartbeat_every(20.0)
    assert liveness.bounds == {RECEIVE_LOOP: BOUND, LEASE_HEARTBEAT: 60.0}
    liveness.heartbeat_every(5.0)
    assert liveness.bounds[LEASE_HEARTBEAT] == BOUND


async def test_the_file_is_written_every_period_and_removed_at_stop(tmp_path: Path) -> None:
    clock = FakeClock()
    liveness = Liveness(clock, max_silence=BOUND)
    path = tmp_path / "health"
    writes: list[float] = []
    writer = HealthFile(path, liveness, clock=clock, wall=lambda: writes.append(clock.now) or 0.0)
    done = asyncio.Event()
    task = asyncio.create_task(writer.run(done))
    await clock.advance(12)
    assert path.exists()
    done.set()
    await clock.run_until_done(task)
    assert writes == [0.0, 5.0, 10.0]
    assert not path.exists()  # a stopped worker never reads as healthy


async def test_an_idle_worker_stays_healthy_however_long_it_waits(tmp_path: Path) -> None:
    run = Run()
    liveness = Liveness(run.clock, max_silence=25.0)
    run.start(policy(receive_wait_seconds=20), liveness=liveness)
    seen = []
    for _ in range(60):  # ten minutes of empty long polls, looked at every 10 s
        await run.clock.advance(10)
        seen.append(liveness.failing())
    assert seen == [[]] * 60
    await run.stop_at(run.clock.now)


async def test_a_wedged_receive_fails_the_receive_loop_within_its_bound() -> None:
    run = Run()
    liveness = Liveness(run.clock, max_silence=25.0)
    run.queue.hang = True  # the receive never returns (a black-holed connection)
    run.start(policy(receive_wait_seconds=20), liveness=liveness)
    await run.clock.advance(25)
    assert liveness.failing() == []
    await run.clock.advance(0.5)
    assert liveness.failing() == [RECEIVE_LOOP]


async def test_a_wedged_turn_in_every_slot_fails_the_receive_loop_too() -> None:
    """All slots held by turns that never end: nothing is received any more."""
    run = Run()
    liveness = Liveness(run.clock, max_silence=25.0)
    run.stage.seconds = 10_000
    run.stage.outcome = Done()
    run.queue.put(*messages(2))
    run.start(policy(receive_wait_seconds=20, worker_concurrency=2), liveness=liveness)
    await run.clock.advance(26)
    assert liveness.failing() == [RECEIVE_LOOP]


async def test_the_lease_heartbeat_beats_each_period_and_fails_when_a_beat_hangs() -> None:
    run = Run()
    liveness = Liveness(run.clock, max_silence=25.0)
    run.start(policy(receive_wait_seconds=20), liveness=liveness)  # visibility 30: beats every 10
    assert liveness.bounds[LEASE_HEARTBEAT] == 30.0
    await run.clock.advance(100)
    assert liveness.failing() == []
    assert liveness.silences()[LEASE_HEARTBEAT] == 0.0
    run.stage.renew_hang = True
    run.stage.seconds = 10_000
    run.queue.put(*messages(1))  # held, so the next beats extend it and renew its lease
    await run.clock.advance(60)
    assert LEASE_HEARTBEAT in liveness.failing()


def test_the_wall_clock_is_what_the_file_holds(tmp_path: Path) -> None:
    clock = FakeClock()
    liveness = Liveness(clock, max_silence=BOUND)
    liveness.running()
    clock.now = 7.0
    liveness.beat(RECEIVE_LOOP)
    clock.now = 9.0
    path = tmp_path / "health"
    HealthFile(path, liveness, clock=clock, wall=lambda: 1_000.0).write()
    written = json.loads(path.read_text())
    assert written["written_at"] == 1_000.0
    assert written["loops"][RECEIVE_LOOP] == {"beat_at": 998.0, "bound": BOUND}
    assert written["loops"][LEASE_HEARTBEAT]["beat_at"] == 991.0
    assert check(path, 1_000.0)[0] is True


def test_a_starting_worker_fails_the_probe_however_its_loops_beat(tmp_path: Path) -> None:
    """While the start-up checks run, `worker health` fails and says so, even with every
    loop's beat fresh; once the consumer runs it passes, each loop's silence counted from
    then, not from the start."""
    clock = FakeClock()
    liveness = Liveness(clock, max_silence=BOUND)
    path = tmp_path / "health"
    writer = HealthFile(path, liveness, clock=clock, wall=lambda: 1_000.0 + clock.now)
    clock.now = 12.0
    liveness.beat(RECEIVE_LOOP, LEASE_HEARTBEAT)
    writer.write()
    assert check(path, 1_012.0) == (
        False,
        "unhealthy: the worker is starting: it has been checking its resources for 12 s",
    )
    clock.now = 50.0  # a start-up longer than the loops' bound
    assert liveness.failing() == []  # the loops have not begun: no LivenessFailures
    liveness.running()
    writer.write()
    assert check(path, 1_050.0) == (True, "healthy: receive loop 0 s ago, lease heartbeat 0 s ago")


def test_a_starting_worker_whose_file_is_stale_fails_for_both(tmp_path: Path) -> None:
    record = {
        "written_at": 0.0,
        "starting_since": 0.0,
        "loops": {RECEIVE_LOOP: {"beat_at": 0.0, "bound": BOUND}},
    }
    assert problems(record, 40.0) == [
        "the health file was last written 40 s ago",
        "the worker is starting: it has been checking its resources for 40 s",
    ]


async def test_the_first_write_replaces_a_file_a_previous_process_left(tmp_path: Path) -> None:
    """A pod's /tmp outlives its container: the file of a process killed a moment ago reads
    healthy until the new process, still starting, writes its own at once."""
    path = tmp_path / "health"
    path.write_text(json.dumps(record(100.0, written=1, receive=2, heartbeat=7)))
    assert check(path, 100.0)[0] is True
    clock = FakeClock()
    writer = HealthFile(path, Liveness(clock, max_silence=BOUND), clock=clock, wall=lambda: 100.0)
    done = asyncio.Event()
    task = asyncio.create_task(writer.run(done))
    await clock.advance(0)
    assert check(path, 100.0) == (
        False,
        "unhealthy: the worker is starting: it has been checking its resources for 0 s",
    )
    done.set()
    await clock.run_until_done(task)


def test_the_probe_imports_nothing_heavy(tmp_path: Path) -> None:
    """ECS and Kubernetes start `worker health` every 30 s on the worker's own CPU: it reads
    one file, without the settings, asyncio or the AWS SDK (about 0.1 s, not 0.6)."""
    script = (
        "import sys\n"
        "from worker.cli import main\n"
        f"code = main(['health', '--file', {str(tmp_path / 'none')!r}])\n"
        "heavy = {'asyncio', 'pydantic', 'pydantic_settings', 'structlog', 'aioboto3',\n"
        "         'botocore', 'opentelemetry', 'aws_embedded_metrics'}\n"
        "print(code, sorted(heavy & set(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout == "1 []\n"
