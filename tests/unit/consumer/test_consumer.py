"""The consumer against an in-memory queue, on virtual time: exact asks, batch sizes,
delays and beats; failures that never end a loop; a stop that never hides a message."""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Unpack

import pytest

from tests.conftest import captured_logs, settings
from tests.unit.clock import FakeClock
from worker.consumer import loop
from worker.consumer.loop import Consumer
from worker.consumer.pacing import DELETE_LINGER_SECONDS, ConsumerPolicy
from worker.delivery.outcomes import Done, Outcome, Rejected, Retry
from worker.errors import StoreUnavailable
from worker.ports import DeleteFailure, ReceivedMessage, SendOptions
from worker.timing import REQUEST_WRITE_PASSES, yield_passes


def highest(low: float, high: float) -> float:
    """Jitter that always takes the ceiling: delays become exact."""
    return high


def lowest(low: float, high: float) -> float:
    return low


def policy(*, visibility_timeout: int = 30, **overrides: Any) -> ConsumerPolicy:
    """The policy the worker runs with (Settings' defaults), changed only where a test says."""
    return settings(**overrides).consumer_policy(visibility_timeout=visibility_timeout)


@dataclass
class FakeQueue:
    """An in-memory SQS queue as the consumer sees it (MessageSource + MessageSender).

    A receive on an empty queue parks like a long poll: it returns as soon as a message
    is put, or empty after its wait. ``hang`` makes a poll that never returns by itself.
    """

    clock: FakeClock
    pending: deque[ReceivedMessage] = field(default_factory=deque)
    asked: list[tuple[float, int]] = field(default_factory=list)
    delete_batches: list[list[str]] = field(default_factory=list)
    deleted_at: list[float] = field(default_factory=list)  # each delete call's moment
    visibility: list[tuple[float, str, int]] = field(default_factory=list)
    visibility_calls: list[int] = field(default_factory=list)
    sent: list[tuple[str, Mapping[str, str | int] | None]] = field(default_factory=list)
    stale: set[str] = field(default_factory=set)
    refuse_delete: set[str] = field(default_factory=set)
    receive_errors: list[Exception] = field(default_factory=list)  # one per receive, then none
    endpoint_down: bool = False
    delete_error: Exception | None = None
    hang: bool = False
    cancelled_polls: int = 0
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def put(self, *messages: ReceivedMessage) -> None:
        self.pending.extend(messages)
        self._arrived.set()

    async def receive(self, max_messages: int, wait_seconds: int) -> list[ReceivedMessage]:
        self.asked.append((self.clock.now, max_messages))
        if self.endpoint_down:
            raise StoreUnavailable("sqs.ReceiveMessage failed: ConnectionError")
        if self.receive_errors:
            raise self.receive_errors.pop(0)
        try:
            if self.hang:
                await asyncio.Event().wait()
            if not self.pending:
                self._arrived.clear()
                sleep = asyncio.ensure_future(self.clock.sleep(wait_seconds))
                arrived = asyncio.ensure_future(self._arrived.wait())
                await asyncio.wait({sleep, arrived}, return_when=asyncio.FIRST_COMPLETED)
                sleep.cancel()
                arrived.cancel()
        except asyncio.CancelledError:
            self.cancelled_polls += 1
            raise
        count = min(max_messages, len(self.pending))
        return [self.pending.popleft() for _ in range(count)]

    async def delete_batch(self, messages: Sequence[ReceivedMessage]) -> list[DeleteFailure]:
        assert len(messages) <= 10
        if self.delete_error is not None:
            raise self.delete_error
        self.delete_batches.append([m.message_id for m in messages])
        self.deleted_at.append(self.clock.now)
        return [
            DeleteFailure(m.message_id, "ReceiptHandleIsInvalid")
            for m in messages
            if m.message_id in self.refuse_delete
        ]

    @property
    def deleted(self) -> list[str]:
        return [
            message_id
            for batch in self.delete_batches
            for message_id in batch
            if message_id not in self.refuse_delete
        ]

    async def change_visibility_batch(
        self, messages: Sequence[ReceivedMessage], timeout_seconds: int
    ) -> list[DeleteFailure]:
        assert len(messages) <= 10
        self.visibility_calls.append(len(messages))
        failures = []
        for m in messages:
            self.visibility.append((self.clock.now, m.message_id, timeout_seconds))
            if m.message_id in self.stale:
                failures.append(DeleteFailure(m.message_id, "ReceiptHandleIsInvalid"))
        return failures

    async def send(self, body: str, **options: Unpack[SendOptions]) -> str:
        self.sent.append((body, options.get("attributes")))
        return "dlq-id"


@dataclass
class FakeStage:
    """Handles each message in ``seconds`` of virtual time and answers ``outcome``."""

    clock: FakeClock
    outcome: Outcome | Callable[[ReceivedMessage], Outcome] = field(default_factory=Done)
    seconds: float = 0.0
    error: Exception | None = None
    renew_error: Exception | None = None
    renew_hang: bool = False
    handled: list[tuple[float, str]] = field(default_factory=list)
    renewed: list[tuple[float, list[str]]] = field(default_factory=list)
    running: int = 0
    most_running: int = 0

    async def handle(self, message: ReceivedMessage) -> Outcome:
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await self.clock.sleep(self.seconds)
        finally:
            self.running -= 1
        self.handled.append((self.clock.now, message.message_id))
        if self.error is not None:
            raise self.error
        return self.outcome(message) if callable(self.outcome) else self.outcome

    async def renew(self, message_ids: Iterable[str]) -> list[str]:
        self.renewed.append((self.clock.now, list(message_ids)))
        if self.renew_hang:
            await asyncio.Event().wait()
        if self.renew_error is not None:
            error, self.renew_error = self.renew_error, None
            raise error
        return []


def messages(count: int, receive_count: int = 1) -> list[ReceivedMessage]:
    return [
        ReceivedMessage(f"m{i}", f"r{i}", "{}", receive_count=receive_count) for i in range(count)
    ]


@dataclass
class Run:
    """One consumer on a fake queue, driven by the test's clock."""

    clock: FakeClock = field(default_factory=FakeClock)
    queue: FakeQueue = field(init=False)
    stage: FakeStage = field(init=False)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    stopped_at: float | None = None

    def __post_init__(self) -> None:
        self.queue = FakeQueue(self.clock)
        self.stage = FakeStage(self.clock)

    def start(
        self,
        policy: ConsumerPolicy,
        jitter: Callable[[float, float], float] = highest,
        **extra: Any,
    ) -> None:
        consumer = Consumer(
            source=self.queue,
            stage=self.stage,
            dead_letters=self.queue,
            policy=policy,
            clock=self.clock,
            jitter=jitter,
            **extra,
        )
        self._task = asyncio.create_task(consumer.run(self.stopping))

    async def stop_at(self, moment: float) -> None:
        """Run until ``moment``, set the stop, and run until the consumer has returned."""
        await self.clock.advance_to(moment)
        self.stopping.set()
        await self.clock.run_until_done(self._task)
        self.stopped_at = self.clock.now


@pytest.fixture
def run() -> Run:
    return Run()


async def test_it_asks_for_no_more_messages_than_it_has_free_slots(run: Run) -> None:
    """Three slots, twelve messages of one second each: four receives of three, one per
    second, each as soon as the last slot of the previous three is free."""
    run.queue.put(*messages(12))
    run.stage.seconds = 1.0
    run.start(policy(worker_concurrency=3))
    await run.stop_at(4.5)
    assert run.queue.asked[:4] == [(0.0, 3), (1.0, 3), (2.0, 3), (3.0, 3)]
    assert run.stage.most_running == 3
    assert sorted(run.queue.deleted) == sorted(m.message_id for m in messages(12))


async def test_finished_messages_are_deleted_in_batches_of_ten(run: Run) -> None:
    run.queue.put(*messages(25))
    run.start(policy(worker_concurrency=30))
    await run.stop_at(1.0)
    assert [len(batch) for batch in run.queue.delete_batches] == [10, 10, 5]
    assert sorted(run.queue.deleted) == sorted(m.message_id for m in messages(25))


async def test_a_rejected_command_goes_to_the_dead_letter_queue_with_its_reason_then_is_deleted(
    run: Run,
) -> None:
    run.queue.put(*messages(2))
    run.stage.outcome = Rejected("body is not valid JSON")
    run.start(policy())
    await run.stop_at(1.0)
    assert run.queue.sent == [
        ("{}", {"RejectionReason": "body is not valid JSON", "RejectedMessageId": "m0"}),
        ("{}", {"RejectionReason": "body is not valid JSON", "RejectedMessageId": "m1"}),
    ]
    assert run.queue.delete_batches == [["m0", "m1"]]


@pytest.mark.parametrize(
    ("receive_count", "jitter", "seconds"),
    [
        (1, highest, 2),
        (1, lowest, 1),
        (2, highest, 4),
        (3, highest, 8),
        (3, lowest, 4),
        (8, highest, 256),
        (9, highest, 300),
        (12, lowest, 150),
        (10_000, highest, 300),
    ],
)
async def test_a_retry_backs_off_by_receive_count(
    run: Run, receive_count: int, jitter: Callable[[float, float], float], seconds: int
) -> None:
    """2 s doubling per receive, capped at 300 s, jittered between half and all of it."""
    run.queue.put(*messages(1, receive_count=receive_count))
    run.stage.outcome = Retry("throttled")
    run.start(policy(), jitter=jitter)
    await run.stop_at(1.0)
    assert run.queue.visibility == [(0.0, "m0", seconds)]
    assert run.queue.deleted == []


async def test_a_retry_with_its_own_delay_keeps_it(run: Run) -> None:
    run.queue.put(*messages(1))
    run.stage.outcome = Retry("busy", delay=7, failure=False)
    run.start(policy())
    await run.stop_at(1.0)
    assert run.queue.visibility == [(0.0, "m0", 7)]


async def test_while_handled_messages_fail_polling_pauses_longer_each_time(run: Run) -> None:
    """Each failed turn doubles the pause before the next receive (0.25 s, then 0.5 s); a
    retry that is not a failure (busy elsewhere) neither adds to the streak nor ends it."""
    run.queue.put(*messages(3))
    outcomes = iter([Retry("throttled"), Retry("throttled"), Retry("busy", failure=False)])
    run.stage.outcome = lambda _: next(outcomes)
    run.start(policy(worker_concurrency=1))
    await run.stop_at(2.0)
    assert [at for at, _ in run.queue.asked[:4]] == [0.0, 0.25, 0.75, 1.25]


async def test_the_heartbeat_extends_a_slow_message_each_beat_and_renews_its_command_lease(
    run: Run,
) -> None:
    """Visibility 30 s, so a beat every 10 s; a 35 s turn is extended at 10, 20 and 30."""
    run.queue.put(*messages(1))
    run.stage.seconds = 35.0
    run.start(policy(visibility_timeout=30))
    await run.stop_at(40.0)
    assert run.queue.visibility == [(10.0, "m0", 30), (20.0, "m0", 30), (30.0, "m0", 30)]
    assert run.stage.renewed == [(10.0, ["m0"]), (20.0, ["m0"]), (30.0, ["m0"])]
    assert run.queue.deleted == ["m0"]


async def test_one_beat_extends_every_due_message_in_calls_of_ten(run: Run) -> None:
    run.queue.put(*messages(12))
    run.stage.seconds = 15.0
    run.start(policy(visibility_timeout=30, worker_concurrency=20))
    await run.stop_at(20.0)
    beat = [(at, message_id) for at, message_id, _ in run.queue.visibility]
    assert beat == [(10.0, f"m{i}") for i in range(12)]
    assert run.queue.visibility_calls == [10, 2]
    assert [ids for _, ids in run.stage.renewed] == [[f"m{i}" for i in range(12)]]


async def test_a_stale_receipt_handle_is_dropped_not_retried(run: Run) -> None:
    run.queue.put(*messages(1))
    run.queue.stale = {"m0"}
    run.stage.seconds = 25.0
    with captured_logs() as logs:
        run.start(policy(visibility_timeout=30))
        await run.stop_at(30.0)
    assert run.queue.visibility == [(10.0, "m0", 30)]  # not tried again at 20
    failures = [e for e in logs if e["event"] == "clerk.converse_lease_extend_failed"]
    assert [(e["message_id"], e["code"]) for e in failures] == [("m0", "ReceiptHandleIsInvalid")]
    assert run.stage.renewed == []


async def test_the_lease_stops_growing_at_its_cap(run: Run) -> None:
    """A 65 s turn under a 75 s cap: extended at 10, 20, 30 and 40 s (each to 30 s past the
    beat); at 50 s the next would reach 80 s, so it is not made, and the cap is logged once."""
    run.queue.put(*messages(1))
    run.stage.seconds = 65.0
    with captured_logs() as logs:
        run.start(policy(visibility_timeout=30, lease_max_seconds=75))
        await run.stop_at(70.0)
    assert [at for at, _, _ in run.queue.visibility] == [10.0, 20.0, 30.0, 40.0]
    assert [e["event"] for e in logs].count("clerk.converse_lease_cap_reached") == 1


async def test_a_heartbeat_that_fails_unexpectedly_is_logged_by_type_and_beats_on(
    run: Run,
) -> None:
    run.queue.put(*messages(1))
    run.stage.seconds = 25.0
    run.stage.renew_error = RuntimeError("PRIVILEGED text in an exception")
    with captured_logs() as logs:
        run.start(policy(visibility_timeout=30))
        await run.stop_at(30.0)
    assert [at for at, _ in run.stage.renewed] == [10.0, 20.0]
    [failed] = [e for e in logs if e["event"] == "clerk.converse_heartbeat_failed"]
    assert failed["error_type"] == "RuntimeError"
    assert "PRIVILEGED" not in repr(logs)


async def test_a_dead_endpoint_is_polled_with_backoff_not_in_a_busy_loop(run: Run) -> None:
    """0.5 s doubling per failed receive, capped at 20 s."""
    run.queue.endpoint_down = True
    run.start(policy())
    await run.stop_at(60.0)
    assert [at for at, _ in run.queue.asked] == [0.0, 0.5, 1.5, 3.5, 7.5, 15.5, 31.5, 51.5]


async def test_an_unexpected_receive_failure_is_logged_by_type_and_the_loop_carries_on(
    run: Run,
) -> None:
    run.queue.receive_errors = [KeyError("PRIVILEGED"), KeyError("PRIVILEGED")]
    run.queue.put(*messages(1))
    with captured_logs() as logs:
        run.start(policy())
        await run.stop_at(5.0)
    assert [at for at, _ in run.queue.asked[:3]] == [0.0, 0.5, 1.5]
    assert run.queue.deleted == ["m0"]
    failures = [e for e in logs if e["event"] == "clerk.converse_receive_failed"]
    assert [(e["error_type"], e["log_level"]) for e in failures] == [("KeyError", "error")] * 2
    assert "PRIVILEGED" not in repr(logs)


async def test_a_turn_that_raises_is_logged_by_type_and_place_and_comes_back_after_the_backoff(
    run: Run,
) -> None:
    """A defect is the command's own: logged by its type and where it was raised (never its
    text), returned with the usual backoff by receive count, and no failure streak slows the
    next receive."""
    run.queue.put(*messages(1))
    run.stage.error = ValueError("PRIVILEGED")
    with captured_logs() as logs:
        run.start(policy())
        await run.stop_at(1.0)
    [failed] = [e for e in logs if e["event"] == "clerk.converse_command_failed"]
    assert (failed["error_type"], failed["message_id"], failed["receive_count"]) == (
        "ValueError",
        "m0",
        1,
    )
    # Raised outside the package (by the test's stage), it names the package's innermost frame.
    assert re.fullmatch(r"worker/consumer/loop\.py:\d+ in _handle", failed["where"])
    assert run.queue.deleted == []
    assert run.queue.visibility == [(0.0, "m0", 2)]  # receive 1: 2 s, at the highest jitter
    assert "PRIVILEGED" not in repr(logs)


#: Where a defect of the test's stage (outside the package) is said to be raised: the
#: package's innermost frame, the consumer's call of the stage.
HANDLED_AT = next(
    f"worker/consumer/loop.py:{number} in _handle"
    for number, line in enumerate(Path(loop.__file__).read_text(encoding="utf-8").splitlines(), 1)
    if line.strip() == "return await self._stage.handle(message)"
)


async def test_a_defect_does_not_slow_the_receives_of_other_commands(run: Run) -> None:
    """Unlike a dependency's failure, a turn that raises adds nothing to the failure streak:
    the receives go on at once."""
    run.queue.put(*messages(3))
    run.stage.error = ValueError("PRIVILEGED")
    run.start(policy(worker_concurrency=1))
    await run.stop_at(2.0)
    assert [at for at, _ in run.queue.asked[:4]] == [0.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize(
    ("outcome", "reason"),
    [
        (None, f"ValueError at {HANDLED_AT}"),
        (Retry("dynamodb.Query failed: AccessDeniedException (HTTP 400)"),
         "dynamodb.Query failed: AccessDeniedException (HTTP 400)"),
    ],
    ids=["a defect", "a dependency's failure"],
)  # fmt: skip
async def test_a_failure_on_the_last_receive_is_dead_lettered_with_what_failed(
    run: Run, outcome: Retry | None, reason: str
) -> None:
    """GIVEN the redrive policy's maxReceiveCount is 5, WHEN a command fails on its fifth
    receive, THEN the stage sends it to the dead-letter queue itself, with ``LastFailure``
    saying what failed, and deletes it: SQS would have moved it without a word."""
    run.queue.put(*messages(1, receive_count=5))
    if outcome is None:
        run.stage.error = ValueError("PRIVILEGED")
    else:
        run.stage.outcome = outcome
    with captured_logs() as logs:
        run.start(replace(policy(), max_receive_count=5))
        await run.stop_at(1.0)
    assert run.queue.sent == [("{}", {"LastFailure": reason, "RejectedMessageId": "m0"})]
    assert run.queue.deleted == ["m0"]
    assert run.queue.visibility == []
    [exhausted] = [e for e in logs if e["event"] == "clerk.converse_command_retries_exhausted"]
    assert exhausted["error"] == reason


async def test_before_the_last_receive_and_when_busy_elsewhere_nothing_is_dead_lettered(
    run: Run,
) -> None:
    run.queue.put(*messages(1, receive_count=4))
    run.stage.error = ValueError("PRIVILEGED")
    run.start(replace(policy(), max_receive_count=5))
    await run.stop_at(1.0)
    later = Run()
    later.queue.put(*messages(1, receive_count=5))
    later.stage.outcome = Retry("in progress elsewhere", delay=7, failure=False)
    later.start(replace(policy(), max_receive_count=5))
    await later.stop_at(1.0)
    assert (run.queue.sent, later.queue.sent) == ([], [])
    assert (run.queue.visibility, later.queue.visibility) == ([(0.0, "m0", 16)], [(0.0, "m0", 7)])


async def test_a_refused_delete_entry_is_logged_not_assumed_away(run: Run) -> None:
    run.queue.put(*messages(3))
    run.queue.refuse_delete = {"m1"}
    with captured_logs() as logs:
        run.start(policy())
        await run.stop_at(1.0)
    assert run.queue.deleted == ["m0", "m2"]
    [refused] = [e for e in logs if e["event"] == "clerk.converse_delete_failed"]
    assert (refused["message_id"], refused["code"]) == ("m1", "ReceiptHandleIsInvalid")


async def test_a_delete_call_that_fails_unexpectedly_is_logged_and_the_worker_carries_on(
    run: Run,
) -> None:
    run.queue.put(*messages(2))
    run.queue.delete_error = RuntimeError("PRIVILEGED")
    with captured_logs() as logs:
        run.start(policy())
        await run.clock.advance(1.0)
        run.queue.delete_error = None
        run.queue.put(ReceivedMessage("m9", "r9", "{}"))
        await run.stop_at(2.0)
    [failed] = [e for e in logs if e["event"] == "clerk.converse_delete_failed"]
    assert (failed["error_type"], failed["count"]) == ("RuntimeError", 2)
    assert run.queue.deleted == ["m9"]
    assert "PRIVILEGED" not in repr(logs)


async def test_work_unfinished_at_the_grace_deadline_is_released_at_once(run: Run) -> None:
    """Stop at 1 s with a 5 s grace: the three turns are abandoned at 6 s and released
    then; the worker returns when its long poll does (20 s)."""
    run.queue.put(*messages(3))
    run.stage.seconds = 100.0
    with captured_logs() as logs:
        run.start(policy(shutdown_grace_seconds=5.0))
        await run.stop_at(1.0)
    assert run.queue.visibility == [(6.0, "m0", 0), (6.0, "m1", 0), (6.0, "m2", 0)]
    assert run.queue.deleted == []
    assert "clerk.converse_drain_timed_out" in [e["event"] for e in logs]
    assert run.stopped_at == 20.0


async def test_work_that_finishes_within_the_grace_period_is_deleted(run: Run) -> None:
    run.queue.put(*messages(2))
    run.stage.seconds = 4.0
    run.start(policy(shutdown_grace_seconds=5.0, receive_wait_seconds=1))
    await run.stop_at(1.0)
    assert run.queue.deleted == ["m0", "m1"]
    assert run.queue.visibility == []
    assert run.stopped_at == 4.0


async def test_a_stop_lets_the_parked_poll_return_and_releases_what_it_brings(run: Run) -> None:
    """GIVEN an idle worker on its long poll, WHEN it is stopped and a command arrives
    before the poll's wait is over, THEN the poll is not cancelled (a cancelled poll stays
    parked on SQS and takes that command out of sight for a visibility timeout): it
    returns the command, which is released at once, unhandled, and the worker stops."""
    run.start(policy())
    await run.clock.advance(3.0)
    run.stopping.set()
    await run.clock.advance(2.0)
    run.queue.put(ReceivedMessage("m0", "r0", "{}"))
    await run.stop_at(run.clock.now)
    assert run.queue.cancelled_polls == 0
    assert run.queue.visibility == [(5.0, "m0", 0)]
    assert run.stage.handled == []
    assert run.stopped_at == 5.0


async def test_an_idle_worker_stops_when_its_poll_ends_empty(run: Run) -> None:
    run.start(policy(receive_wait_seconds=20))
    await run.stop_at(3.0)
    assert run.queue.asked == [(0.0, 10)]
    assert run.queue.cancelled_polls == 0
    assert run.stopped_at == 20.0


async def test_a_poll_that_never_returns_is_given_up_after_its_wait_and_margin(run: Run) -> None:
    run.queue.hang = True
    with captured_logs() as logs:
        run.start(policy(receive_wait_seconds=20))
        await run.stop_at(3.0)
    assert run.stopped_at == 22.0
    assert run.queue.cancelled_polls == 1
    assert "clerk.converse_receive_abandoned" in [e["event"] for e in logs]


async def test_a_stop_between_polls_returns_at_once(run: Run) -> None:
    run.queue.endpoint_down = True
    run.start(policy())
    await run.stop_at(0.25)  # inside the 0.5 s backoff, no poll under way
    assert run.stopped_at == 0.25


async def test_the_turns_just_received_make_their_first_requests_before_the_next_poll(
    run: Run,
) -> None:
    """GIVEN two messages received together, and turns that make their first request (the
    Query) at once and their second (the claim) only once the first is written
    (``REQUEST_WRITE_PASSES`` later), THEN both turns have made both requests before the
    consumer asks for the next batch: the next poll's request is not built ahead of them."""
    order: list[str] = []

    async def handle(message: ReceivedMessage) -> Outcome:
        order.append(f"{message.message_id} query")
        await yield_passes(REQUEST_WRITE_PASSES)
        order.append(f"{message.message_id} claim")
        await run.clock.sleep(1.0)
        return Done()

    async def receive(max_messages: int, wait_seconds: int) -> list[ReceivedMessage]:
        order.append("poll")
        return await unrecorded(max_messages, wait_seconds)

    unrecorded = run.queue.receive
    run.queue.receive = receive  # type: ignore[method-assign]
    run.stage.handle = handle  # type: ignore[method-assign]
    run.queue.put(*messages(2))
    run.start(policy())
    await run.stop_at(0.5)
    assert order[:6] == ["poll", "m0 query", "m1 query", "m0 claim", "m1 claim", "poll"]


def lasting(run: Run, seconds: dict[str, float]) -> None:
    """The stage handles each message in its own ``seconds`` of virtual time."""

    async def handle(message: ReceivedMessage) -> Outcome:
        await run.clock.sleep(seconds[message.message_id])
        return Done()

    run.stage.handle = handle  # type: ignore[method-assign]


async def test_a_lone_messages_delete_leaves_at_once(run: Run) -> None:
    """Nothing else in hand: the delete waits for no company (it would land on the next
    command's path), it leaves the moment the turn ends."""
    lasting(run, {"m0": 1.0})
    run.queue.put(*messages(1))
    run.start(policy())
    await run.stop_at(3.0)
    assert (run.queue.delete_batches, run.queue.deleted_at) == ([["m0"]], [1.0])


async def test_a_delete_waits_for_the_messages_still_in_hand_then_leaves_with_them(
    run: Run,
) -> None:
    """Three in hand, ending at 1.0, 1.1 and 1.15 s: one delete call at 1.15 for all three."""
    lasting(run, {"m0": 1.0, "m1": 1.1, "m2": 1.15})
    run.queue.put(*messages(3))
    run.start(policy())
    await run.stop_at(3.0)
    assert [sorted(b) for b in run.queue.delete_batches] == [["m0", "m1", "m2"]]
    assert run.queue.deleted_at == [1.15]


async def test_a_delete_waits_for_one_still_in_hand_no_longer_than_its_linger(run: Run) -> None:
    """The other message takes 5 s: the first delete leaves at its linger (0.2 s after the
    turn ended), the second when its own turn ends, alone."""
    lasting(run, {"m0": 1.0, "m1": 5.0})
    run.queue.put(*messages(2))
    run.start(policy())
    await run.stop_at(6.0)
    assert run.queue.delete_batches == [["m0"], ["m1"]]
    assert run.queue.deleted_at == [1.0 + DELETE_LINGER_SECONDS, 5.0]


async def test_a_message_that_ends_without_a_delete_frees_the_delete_waiting_for_it(
    run: Run,
) -> None:
    """The other message is retried (no delete): once its turn ends, the waiting delete
    leaves at once rather than at its linger."""
    outcomes = {"m0": Done(), "m1": Retry("later", delay=30.0)}

    async def handle(message: ReceivedMessage) -> Outcome:
        await run.clock.sleep({"m0": 1.0, "m1": 1.05}[message.message_id])
        return outcomes[message.message_id]

    run.stage.handle = handle  # type: ignore[method-assign]
    run.queue.put(*messages(2))
    run.start(policy())
    await run.stop_at(3.0)
    assert (run.queue.delete_batches, run.queue.deleted_at) == ([["m0"]], [1.05])
