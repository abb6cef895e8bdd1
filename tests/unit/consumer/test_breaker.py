"""The per-dependency breaker as a table: each step, the state it leads to, on given times."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from worker.consumer.breaker import (
    FAILURE_THRESHOLD,
    PROBE_BACKOFF,
    TRIAL_MAX_SECONDS,
    Breaker,
)


def highest(low: float, high: float) -> float:
    return high


def lowest(low: float, high: float) -> float:
    return low


Step = Callable[[Breaker], Breaker]


def fail(at: float, kind: str = "throttled") -> Step:
    return lambda b: b.failed(at, kind, highest)


def succeed() -> Step:
    return lambda b: b.succeeded()


def trial(at: float) -> Step:
    return lambda b: b.trying(at)


def run(*steps: Step) -> Breaker:
    breaker = Breaker()
    for step in steps:
        breaker = step(breaker)
    return breaker


@pytest.mark.parametrize(
    ("steps", "state", "failures", "probes", "probe_at"),
    [
        # Below the threshold: still closed, failures counted.
        ([fail(0)], "closed", 1, 0, 0.0),
        ([fail(0), fail(1)], "closed", 2, 0, 0.0),
        # A success between resets the count: a command's own failure never adds up.
        ([fail(0), fail(1), succeed(), fail(2), fail(3)], "closed", 2, 0, 0.0),
        # The third in a row opens it; the first probe 1 s later (the ceiling, jitter high).
        ([fail(0), fail(1), fail(2)], "open", 3, 0, 3.0),
        # A late failure of a turn begun before it opened changes nothing but the kind.
        ([fail(0), fail(1), fail(2), fail(2.5)], "open", 3, 0, 3.0),
        # A failed trial opens it again with the next delay: 2 s, then 4 s.
        ([fail(0), fail(1), fail(2), trial(3), fail(3.5)], "open", 3, 1, 5.5),
        ([fail(0), fail(1), fail(2), trial(3), fail(3), trial(5), fail(5)], "open", 3, 2, 9.0),
        # A successful trial closes it, every count cleared.
        ([fail(0), fail(1), fail(2), trial(3), succeed()], "closed", 0, 0, 0.0),
        # A success while open (a turn begun before, finishing late) closes it too.
        ([fail(0), fail(1), fail(2), succeed()], "closed", 0, 0, 0.0),
    ],
)
def test_each_step_leads_to_its_state(
    steps: list[Step], state: str, failures: int, probes: int, probe_at: float
) -> None:
    breaker = run(*steps)
    assert (breaker.state, breaker.failures, breaker.probes) == (state, failures, probes)
    assert breaker.probe_at == probe_at
    assert breaker.failing == (state != "closed")


def test_the_probe_delay_climbs_to_its_cap_and_stays_within_its_upper_half() -> None:
    """Twelve failed trials: 1, 2, 4, 8, 16 s, then 20 s each (highest jitter); the lowest
    jitter gives half of each, so a fleet's probes spread over the upper half."""
    for jitter, share in ((highest, 1.0), (lowest, 0.5)):
        breaker = Breaker().failed(0, "throttled", jitter)
        breaker = breaker.failed(0, "throttled", jitter).failed(0, "throttled", jitter)
        delays = []
        for _ in range(12):
            delays.append(breaker.probe_at - (breaker.trial_at if breaker.probes else 0.0))
            now = breaker.probe_at
            breaker = breaker.trying(now).failed(now, "throttled", jitter)
        expected = [min(PROBE_BACKOFF.cap, 2.0**n) * share for n in range(12)]
        assert delays == expected


def test_a_probe_is_due_only_when_open_and_its_time_has_come() -> None:
    breaker = run(*(fail(0) for _ in range(FAILURE_THRESHOLD)))
    assert not breaker.due(0.99)
    assert breaker.due(1.0)
    assert breaker.wait(0.25) == 0.75
    assert not breaker.trying(1.0).due(5.0)  # one trial at a time
    assert not Breaker().due(100.0)
    assert Breaker().wait(0.0) == float("inf")


def test_a_trial_that_never_reports_back_is_overdue_after_its_bound() -> None:
    breaker = run(*(fail(0) for _ in range(FAILURE_THRESHOLD)), trial(1.0))
    assert breaker.state == "trial" and breaker.failing
    assert not breaker.overdue(1.0 + TRIAL_MAX_SECONDS - 0.01)
    assert breaker.overdue(1.0 + TRIAL_MAX_SECONDS)
    assert breaker.wait(1.0) == TRIAL_MAX_SECONDS
