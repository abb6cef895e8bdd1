"""A dependency every turn needs failing for everyone, on virtual time: no receives while it
fails, the turns that failed held (leases kept) and run again once a probe succeeds, the
probes backed off, the loops beating throughout; a command's own failure still returned."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter

import pytest

from tests.conftest import captured_logs
from tests.unit.clock import FakeClock
from tests.unit.consumer.test_consumer import Run, highest, messages, policy
from worker.consumer.outages import Outages
from worker.delivery.outcomes import Done, Outcome, Retry
from worker.errors import StoreUnavailable
from worker.ports import ReceivedMessage
from worker.telemetry import metrics as m
from worker.telemetry.hooks import Telemetry
from worker.telemetry.liveness import Liveness
from worker.telemetry.metrics import MetricsBook

THROTTLED = Retry(
    "dynamodb.UpdateItem failed: ProvisionedThroughputExceededException (HTTP 400)",
    service="dynamodb",
    kind="throttled",
)
SEND_FAILED = Retry("sqs.SendMessageBatch failed: 500", service="sqs", kind="server")


@pytest.fixture
def run() -> Run:
    return Run()


class Brownout:
    """The stage's answer: ``failure`` for every turn from ``start`` until ``end``, else Done."""

    def __init__(self, clock: FakeClock, start: float, end: float, failure: Retry) -> None:
        self.clock, self.start, self.end, self.failure = clock, start, end, failure
        self.failed_at: list[float] = []

    def __call__(self, message: ReceivedMessage) -> Outcome:
        if self.start <= self.clock.now < self.end:
            self.failed_at.append(self.clock.now)
            return self.failure
        return Done()


async def test_a_brownout_holds_what_failed_receives_nothing_and_resumes_on_recovery(
    run: Run,
) -> None:
    """GIVEN ten commands and DynamoDB throttling every call for 300 s, THEN the first two
    failures go back with their backoff (the breaker is not open yet), the third opens it
    and it and the seven after are held: their visibility extended, never returned; no
    receive while it is open; probes at 1, 2, 4, 8, 16 s then every 20 s; once a probe
    succeeds every held turn runs again and is deleted, and receiving resumes."""
    brownout = Brownout(run.clock, 0.0, 300.0, THROTTLED)
    run.stage.outcome = brownout
    run.queue.put(*messages(10))
    liveness = Liveness(run.clock, max_silence=25.0)  # above an idle 20 s poll
    run.start(policy(worker_concurrency=16, visibility_timeout=30), liveness=liveness)
    silences = []
    for moment in range(1, 400, 3):
        await run.clock.advance_to(moment)
        if moment < 300:
            silences.append(liveness.silences()["receive_loop"])
    await run.stop_at(400.0)

    returned = {(m, s) for _, m, s in run.queue.visibility if s not in (30, 0)}
    assert returned == {("m0", 2), ("m1", 2)}  # backoff of receive count 1, jitter high
    assert sorted(run.queue.deleted) == [f"m{i}" for i in range(2, 10)]
    # Held: extended every beat (10 s) for the whole brownout, never released.
    extended = Counter(m for _, m, s in run.queue.visibility if s == 30)
    assert all(extended[f"m{i}"] >= 28 for i in range(2, 10))
    assert not [m for _, m, s in run.queue.visibility if s == 0]
    # No receive from the moment it opened until it closed.
    assert not [t for t, _ in run.queue.asked if 0 < t < 300]
    assert [t for t, _ in run.queue.asked if t >= 300]  # receiving resumed
    # The probes: the ten first failures at t=0, then one trial turn at each probe.
    trials = [t for t in brownout.failed_at if t > 0]
    assert trials[:5] == [1.0, 3.0, 7.0, 15.0, 31.0]
    gaps = {round(b - a, 6) for a, b in itertools.pairwise(trials[4:])}
    assert gaps == {20.0}
    assert max(silences) <= 5.0  # the receive loop beat throughout the brownout
    assert not liveness.failing()


async def test_recovery_is_logged_and_counted_and_held_turns_run_at_once(run: Run) -> None:
    brownout = Brownout(run.clock, 0.0, 50.0, SEND_FAILED)
    run.stage.outcome = brownout
    run.queue.put(*messages(5))
    book = MetricsBook()
    run.start(policy(worker_concurrency=16), telemetry=Telemetry(metrics=book, clock=run.clock))
    with captured_logs() as logs:
        await run.stop_at(80.0)
    counts = book.take().counts
    assert (counts[m.DEPENDENCY_FAILING], counts[m.DEPENDENCY_RECOVERED]) == (1, 1)
    failing = [e for e in logs if e["event"] == "clerk.converse_dependency_failing"]
    recovered = [e for e in logs if e["event"] == "clerk.converse_dependency_recovered"]
    assert [(e["dependency"], e["kind"], e["failures"]) for e in failing] == [
        ("model_queue", "server", 3)
    ]
    assert len(recovered) == 1 and recovered[0]["dependency"] == "model_queue"
    assert recovered[0]["held"] == 2  # the trial itself, then the other two at once
    assert sorted(run.queue.deleted) == ["m2", "m3", "m4"]


async def test_each_hold_is_counted_and_the_open_breakers_are_sampled_at_each_interval(
    run: Run,
) -> None:
    """GIVEN the model queue's sends failing from 0 to 50 s and five commands, THEN the third
    failure opens the breaker and it and the two after are held (``TurnsHeld`` 3), each trial
    that fails is held again (once more per failed probe); a sample taken while it is open
    says one breaker open, one taken after the recovery none."""
    brownout = Brownout(run.clock, 0.0, 50.0, SEND_FAILED)
    run.stage.outcome = brownout
    run.queue.put(*messages(5))
    book = MetricsBook()
    telemetry = Telemetry(metrics=book, clock=run.clock)
    run.start(policy(worker_concurrency=16), telemetry=telemetry)
    await run.clock.advance_to(10.0)
    telemetry.sample(book)
    during = book.take().counts
    await run.stop_at(80.0)
    telemetry.sample(book)
    after = book.take().counts

    failed_probes = len([t for t in brownout.failed_at if t > 0])
    assert failed_probes >= 3  # probes at 1, 3, 7 s … all inside the brownout
    assert during[m.BREAKERS_OPEN] == 1
    assert after[m.BREAKERS_OPEN] == 0
    assert m.BREAKERS_OPEN in after  # written as 0, not left out
    assert during[m.TURNS_HELD] + after[m.TURNS_HELD] == 3 + failed_probes
    assert during[m.DEPENDENCY_FAILING] == 1 and after[m.DEPENDENCY_RECOVERED] == 1


async def test_a_command_whose_own_turn_keeps_failing_is_returned_each_time(run: Run) -> None:
    """One bad command among good ones: its failures never add up to an outage (a success
    comes between), so it goes back with its backoff each time, as before."""
    run.stage.outcome = lambda m: THROTTLED if m.message_id == "m0" else Done()
    run.start(policy(worker_concurrency=1))
    for receive_count in range(1, 6):  # as SQS brings it back, each time after two others
        run.queue.put(ReceivedMessage("m0", f"r0-{receive_count}", "{}", receive_count))
        run.queue.put(*messages(3)[1:])
        await run.clock.advance(40.0)
    await run.stop_at(run.clock.now + 1.0)
    returned = [s for _, m, s in run.queue.visibility if m == "m0"]
    assert returned == [2, 4, 8, 16, 32]  # receive counts 1-5, jitter high
    assert "m0" not in run.queue.deleted


async def test_a_stop_during_a_brownout_releases_what_is_held_at_once(run: Run) -> None:
    run.stage.outcome = Brownout(run.clock, 0.0, 1e9, THROTTLED)
    run.queue.put(*messages(6))
    run.start(policy(worker_concurrency=16, shutdown_grace_seconds=20.0))
    await run.stop_at(100.0)
    released = sorted(m for _, m, s in run.queue.visibility if s == 0)
    assert released == ["m2", "m3", "m4", "m5"]
    assert run.stopped_at is not None and run.stopped_at - 100.0 < 1.0  # not the grace


async def test_with_nothing_held_the_probe_is_a_call_of_its_own() -> None:
    clock = FakeClock()
    calls: list[float] = []
    answers = [StoreUnavailable("dynamodb.GetItem failed", service="dynamodb", kind="server")]

    async def probe() -> None:
        calls.append(clock.now)
        if answers:
            raise answers.pop()

    outages = Outages(clock=clock, jitter=highest, probes={"dynamodb": probe})
    stopping = asyncio.Event()
    for _ in range(3):
        assert outages.judge(THROTTLED) in (None, "dynamodb")
    assert outages.failing() == ["dynamodb"]

    async def loop() -> None:
        while outages.failing():
            await outages.probe(stopping)

    task = asyncio.create_task(loop())
    await clock.run_until_done(task)
    assert calls == [1.0, 3.0]  # failed ("server"), then 2 s later succeeded
    assert outages.failing() == []
    assert outages.breaker("dynamodb").failures == 0


async def test_a_failure_on_the_send_means_dynamodb_answered() -> None:
    outages = Outages(clock=FakeClock(), jitter=highest)
    for _ in range(3):
        outages.judge(THROTTLED)
    assert outages.failing() == ["dynamodb"]
    assert outages.judge(SEND_FAILED) is None  # one send failure: below the threshold
    assert outages.failing() == []
    assert outages.judge(Retry("in progress elsewhere", delay=5, failure=False)) is None
    assert outages.judge(Retry("payload too large")) is None  # no service: as before
    assert outages.failing() == []


async def test_a_late_success_of_a_turn_begun_before_it_opened_does_not_close_it() -> None:
    """A turn whose claim was answered before the outage ends Done even if its done mark
    then fails: that says nothing of DynamoDB now. A turn begun after it opened does."""
    clock = FakeClock()
    outages = Outages(clock=clock, jitter=highest)
    await clock.advance(10.0)
    for _ in range(3):
        outages.judge(THROTTLED, 10.0)
    assert outages.failing() == ["dynamodb"]
    outages.judge(Done(), started_at=9.0)
    assert outages.failing() == ["dynamodb"]
    outages.judge(Done(), started_at=10.0)
    assert outages.failing() == []
