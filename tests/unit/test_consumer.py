"""The consumer's loop against an in-memory queue: back pressure, leases, retries, drain."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import pytest

from tests.conftest import captured_logs
from worker.consumer import Consumer, ConsumerPolicy
from worker.errors import StoreUnavailable
from worker.ports import DeleteFailure, ReceivedMessage
from worker.stage import Done, Outcome, Rejected, Retry


@dataclass
class FakeQueue:
    """An in-memory SQS queue as the consumer sees it (MessageSource + MessageSender)."""

    pending: list[ReceivedMessage] = field(default_factory=list)
    asked: list[int] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    visibility: list[tuple[str, int]] = field(default_factory=list)
    sent: list[tuple[str, Mapping[str, str | int] | None]] = field(default_factory=list)
    stale: set[str] = field(default_factory=set)
    refuse_delete: set[str] = field(default_factory=set)
    receive_error: Exception | None = None

    async def receive(self, max_messages: int, wait_seconds: int) -> list[ReceivedMessage]:
        self.asked.append(max_messages)
        if self.receive_error is not None:
            raise self.receive_error
        taken, self.pending = self.pending[:max_messages], self.pending[max_messages:]
        if not taken:
            await asyncio.sleep(0.05)
        return taken

    async def delete_batch(self, messages: Sequence[ReceivedMessage]) -> list[DeleteFailure]:
        assert len(messages) <= 10
        self.deleted.extend(
            m.message_id for m in messages if m.message_id not in self.refuse_delete
        )
        return [
            DeleteFailure(m.message_id, "ReceiptHandleIsInvalid")
            for m in messages
            if m.message_id in self.refuse_delete
        ]

    async def change_visibility_batch(
        self, messages: Sequence[ReceivedMessage], timeout_seconds: int
    ) -> list[DeleteFailure]:
        assert len(messages) <= 10
        failures = []
        for m in messages:
            if m.message_id in self.stale:
                failures.append(DeleteFailure(m.message_id, "ReceiptHandleIsInvalid"))
            else:
                self.visibility.append((m.message_id, timeout_seconds))
        return failures

    async def send(
        self,
        body: str,
        *,
        group_id: str,
        deduplication_id: str,
        attributes: Mapping[str, str | int] | None = None,
    ) -> str:
        self.sent.append((body, attributes))
        return "dlq-id"


@dataclass
class FakeStage:
    outcome: Outcome = field(default_factory=Done)
    seconds: float = 0.0
    handled: list[str] = field(default_factory=list)
    renewed: list[str] = field(default_factory=list)
    running: int = 0
    most_running: int = 0

    async def handle(self, message: ReceivedMessage) -> Outcome:
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await asyncio.sleep(self.seconds)
        finally:
            self.running -= 1
        self.handled.append(message.message_id)
        return self.outcome

    async def renew(self, message_ids: Iterable[str]) -> list[str]:
        self.renewed.extend(message_ids)
        return []


def messages(count: int, receive_count: int = 1) -> list[ReceivedMessage]:
    return [
        ReceivedMessage(f"m{i}", f"r{i}", "{}", receive_count=receive_count) for i in range(count)
    ]


async def consume(
    queue: FakeQueue, stage: FakeStage, policy: ConsumerPolicy, *, seconds: float
) -> None:
    stopping = asyncio.Event()
    consumer = Consumer(source=queue, stage=stage, dead_letters=queue, policy=policy)
    task = asyncio.create_task(consumer.run(stopping))
    await asyncio.sleep(seconds)
    stopping.set()
    await asyncio.wait_for(task, 30)


async def test_it_asks_for_no_more_messages_than_it_has_free_slots() -> None:
    queue = FakeQueue(pending=messages(12))
    stage = FakeStage(seconds=0.3)
    await consume(queue, stage, ConsumerPolicy(concurrency=3, wait_seconds=1), seconds=1.5)
    assert max(queue.asked) == 3
    assert stage.most_running == 3
    assert sorted(queue.deleted) == sorted(m.message_id for m in messages(12))


async def test_done_deletes_in_batches_and_rejected_goes_to_the_dead_letter_queue() -> None:
    queue = FakeQueue(pending=messages(25))
    await consume(queue, FakeStage(), ConsumerPolicy(concurrency=30), seconds=0.5)
    assert len(queue.deleted) == 25

    queue = FakeQueue(pending=messages(2))
    await consume(
        queue, FakeStage(outcome=Rejected("body is not valid JSON")), ConsumerPolicy(), seconds=0.3
    )
    assert [attributes["RejectionReason"] for _, attributes in queue.sent if attributes] == [
        "body is not valid JSON"
    ] * 2
    assert len(queue.deleted) == 2


@pytest.mark.parametrize(("receive_count", "low", "high"), [(1, 1, 2), (3, 4, 8), (12, 150, 300)])
async def test_a_retry_backs_off_by_receive_count(receive_count: int, low: int, high: int) -> None:
    queue = FakeQueue(pending=messages(1, receive_count=receive_count))
    stage = FakeStage(outcome=Retry("throttled"))
    await consume(queue, stage, ConsumerPolicy(), seconds=0.3)
    [(message_id, seconds)] = queue.visibility
    assert message_id == "m0"
    assert low <= seconds <= high
    assert queue.deleted == []


async def test_a_retry_with_its_own_delay_keeps_it() -> None:
    queue = FakeQueue(pending=messages(1))
    await consume(
        queue,
        FakeStage(outcome=Retry("busy", delay=7, failure=False)),
        ConsumerPolicy(),
        seconds=0.3,
    )
    assert queue.visibility == [("m0", 7)]


async def test_the_heartbeat_extends_slow_messages_and_renews_their_command_leases() -> None:
    queue = FakeQueue(pending=messages(2))
    stage = FakeStage(seconds=2.6)
    policy = ConsumerPolicy(visibility_timeout=3, grace_seconds=2.9)
    await consume(queue, stage, policy, seconds=0.2)
    assert ("m0", 3) in queue.visibility
    assert ("m1", 3) in queue.visibility
    assert {"m0", "m1"} <= set(stage.renewed)
    assert sorted(queue.deleted) == ["m0", "m1"]


async def test_a_stale_receipt_handle_is_dropped_not_retried() -> None:
    queue = FakeQueue(pending=messages(1), stale={"m0"})
    stage = FakeStage(seconds=3.5)
    with captured_logs() as logs:
        await consume(
            queue, stage, ConsumerPolicy(visibility_timeout=3, grace_seconds=2.9), seconds=3.6
        )
    failures = [e for e in logs if e["event"] == "clerk.converse_lease_extend_failed"]
    assert len(failures) == 1
    assert failures[0]["code"] == "ReceiptHandleIsInvalid"


async def test_the_lease_stops_growing_at_its_cap() -> None:
    """Uncapped, a 5 s turn on a 3 s visibility is extended at least three times (one beat
    a second); capped at 5.5 s in all, extensions stop once they would pass the cap."""
    queue = FakeQueue(pending=messages(1))
    stage = FakeStage(seconds=5)
    policy = ConsumerPolicy(visibility_timeout=3, lease_max_seconds=5.5, grace_seconds=2.9)
    with captured_logs() as logs:
        await consume(queue, stage, policy, seconds=5.2)
    assert 1 <= len(queue.visibility) <= 2
    assert [e["event"] for e in logs].count("clerk.converse_lease_cap_reached") == 1

    uncapped = FakeQueue(pending=messages(1))
    await consume(
        uncapped,
        FakeStage(seconds=5),
        ConsumerPolicy(visibility_timeout=3, grace_seconds=2.9),
        seconds=5.2,
    )
    assert len(uncapped.visibility) >= 3


async def test_a_dead_endpoint_is_polled_with_backoff_not_in_a_busy_loop() -> None:
    queue = FakeQueue(receive_error=StoreUnavailable("sqs.ReceiveMessage failed: ConnectionError"))
    await consume(queue, FakeStage(), ConsumerPolicy(), seconds=2.0)
    assert 2 <= len(queue.asked) <= 6


async def test_work_unfinished_at_the_grace_deadline_is_released_at_once() -> None:
    queue = FakeQueue(pending=messages(3))
    stage = FakeStage(seconds=30)
    with captured_logs() as logs:
        await consume(queue, stage, ConsumerPolicy(grace_seconds=0.5), seconds=0.2)
    assert sorted(queue.visibility) == [("m0", 0), ("m1", 0), ("m2", 0)]
    assert queue.deleted == []
    assert "clerk.converse_drain_timed_out" in [e["event"] for e in logs]


async def test_a_refused_delete_entry_is_logged_not_assumed_away() -> None:
    queue = FakeQueue(pending=messages(3), refuse_delete={"m1"})
    with captured_logs() as logs:
        await consume(queue, FakeStage(), ConsumerPolicy(), seconds=0.3)
    assert sorted(queue.deleted) == ["m0", "m2"]
    [refused] = [e for e in logs if e["event"] == "clerk.converse_delete_failed"]
    assert (refused["message_id"], refused["code"]) == ("m1", "ReceiptHandleIsInvalid")
