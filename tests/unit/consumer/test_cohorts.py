"""Cohorts: the turns of each received batch, counted on their way to their sends and done
marks, and batches that wait for exactly those, on virtual time."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Sequence
from typing import Unpack

import pytest

from tests.unit.clock import FakeClock
from tests.unit.delivery.test_done_marks import FakeDynamo
from tests.unit.fakes import NOW, MemoryQueue, memory_stage
from worker.adapters.ledger import DynamoCommandLedger
from worker.consumer.cohorts import Cohorts
from worker.delivery.batching import Batcher
from worker.delivery.done_marks import BatchingLedger
from worker.delivery.outcomes import Done, Outcome
from worker.memory import FoldState
from worker.ports import (
    DeleteFailure,
    DoneMark,
    HistoryPage,
    MessageSender,
    ReceivedMessage,
    SendOptions,
)


def message(i: int) -> ReceivedMessage:
    body = {"type": "converse", "command_id": f"c-{i}", "conversation_id": f"matter-{i}",
            "message": "What does clause 14.2 say?"}  # fmt: skip
    return ReceivedMessage(f"m-{i}", f"r-{i}", json.dumps(body))


class Source:
    """Hands out the batches it is given, one per receive."""

    def __init__(self, *batches: list[ReceivedMessage]) -> None:
        self.batches = list(batches)

    async def receive(self, max_messages: int, wait_seconds: int) -> list[ReceivedMessage]:
        return self.batches.pop(0)

    async def delete_batch(self, messages: Sequence[ReceivedMessage]) -> list[DeleteFailure]:
        return []

    async def change_visibility_batch(
        self, messages: Sequence[ReceivedMessage], timeout_seconds: int
    ) -> list[DeleteFailure]:
        return []


class ScriptedStage:
    """Sends a prompt through ``sender`` when the test opens its gate, or just ends."""

    def __init__(self, sender: MessageSender) -> None:
        self.sender = sender
        self.gates: dict[str, asyncio.Event] = {}
        self.reached: dict[str, asyncio.Event] = {}
        self.silent: set[str] = set()

    async def handle(self, received: ReceivedMessage) -> Outcome:
        self.arrival(received.message_id).set()
        await self.gates.setdefault(received.message_id, asyncio.Event()).wait()
        if received.message_id not in self.silent:
            await self.sender.send("{}", group_id="g", deduplication_id="d")
        return Done()

    async def renew(self, message_ids: Iterable[str]) -> list[str]:
        return []

    def open(self, message_id: str) -> None:
        self.gates.setdefault(message_id, asyncio.Event()).set()

    def arrival(self, message_id: str) -> asyncio.Event:
        """Set once the turn of ``message_id`` is in the stage, waiting at its gate."""
        return self.reached.setdefault(message_id, asyncio.Event())


async def test_only_cohorts_that_have_begun_sending_are_waited_for() -> None:
    """Cohort A (two turns) and cohort B (one turn) in flight: nothing is waited for until
    a member of A sends; then A's other turn is; B's only once B begins sending. A turn
    that ends without sending stops being waited for, and nudges the batcher."""
    cohorts = Cohorts()
    nudges: list[int] = []
    cohorts.on_give_up(sends=lambda: nudges.append(cohorts.sends_coming()))
    source = cohorts.source(Source([message(1), message(2)], [message(3)]))
    stage = ScriptedStage(cohorts.sender(MemoryQueue()))
    counted = cohorts.stage(stage)
    turns = [
        asyncio.ensure_future(counted.handle(m))
        for batch in (await source.receive(10, 0), await source.receive(10, 0))
        for m in batch
    ]
    for message_id in ("m-1", "m-2", "m-3"):
        await stage.arrival(message_id).wait()
    assert cohorts.sends_coming() == 0  # in flight, but no cohort is sending yet
    stage.open("m-1")
    await turns[0]
    assert cohorts.sends_coming() == 1  # the rest of A
    stage.silent.add("m-2")
    stage.open("m-2")
    await turns[1]
    assert (cohorts.sends_coming(), nudges) == (0, [0])  # B has not begun sending
    stage.open("m-3")
    await turns[2]
    assert cohorts.sends_coming() == 0


class SlowHistory:
    """Conversation ``matter-i`` answers its Query ``i × 15 ms`` after it is asked."""

    def __init__(self, clock: FakeClock) -> None:
        self._clock = clock

    async def load_page(self, conversation_id: str, limit: int) -> HistoryPage:
        await self._clock.sleep(0.015 * int(conversation_id.rsplit("-", 1)[1]))
        return HistoryPage(state=FoldState(), messages=())

    async def claim_compaction(self, *args: object, **kwargs: object) -> bool:
        return False

    async def release_compaction(self, *args: object, **kwargs: object) -> None:
        return None


class BatchedQueue:
    """A model queue whose sends leave through a batcher told which turns are coming."""

    def __init__(self, clock: FakeClock, cohorts: Cohorts) -> None:
        self.batches: list[tuple[float, int]] = []
        self._clock = clock
        self.batcher: Batcher[str, str] = Batcher(
            self._flush, linger=0.005, max_linger=0.2, clock=clock, coming=cohorts.sends_coming
        )

    async def _flush(self, bodies: Sequence[str]) -> list[str]:
        self.batches.append((self._clock.now, len(bodies)))
        return [f"id-{i}" for i in range(len(bodies))]

    async def send(self, body: str, **options: Unpack[SendOptions]) -> str:
        return await self.batcher.submit(body)


async def test_a_received_batch_sends_and_marks_done_together_however_far_apart_its_turns_get() -> (
    None
):
    """GIVEN six turns received together whose history reads come back 15 ms apart (three
    times the 5 ms linger), THEN their six prompts leave in one SendMessageBatch and their
    six done marks in one BatchWriteItem, as the last turn gets there; a later lone turn's
    prompt and mark leave at once, with no linger."""
    clock = FakeClock()
    cohorts = Cohorts()
    queue = BatchedQueue(clock, cohorts)
    dynamo = FakeDynamo()
    marks = BatchingLedger(
        DynamoCommandLedger(dynamo, "history"), clock=clock, coming=cohorts.marks_coming
    )
    cohorts.on_give_up(sends=queue.batcher.nudge, marks=marks.nudge)
    stage = cohorts.stage(
        memory_stage(
            history=SlowHistory(clock),
            ledger=cohorts.ledger(marks),
            model_queue=cohorts.sender(queue),
            sleep=clock.sleep,
        )
    )
    source = cohorts.source(Source([message(i) for i in range(6)], [message(7)]))
    turns = asyncio.gather(*(stage.handle(m) for m in await source.receive(10, 0)))
    await clock.run_until_done(turns)
    assert turns.result() == [Done()] * 6
    assert queue.batches == [(pytest.approx(0.075), 6)]
    assert [len(items) for items in dynamo.writes] == [6]
    lone = asyncio.ensure_future(stage.handle((await source.receive(10, 0))[0]))
    await clock.run_until_done(lone)  # its read takes 105 ms
    assert queue.batches[1:] == [(pytest.approx(0.18), 1)]
    assert [len(items) for items in dynamo.writes] == [6, 1]
    assert clock.now == pytest.approx(0.18)
    await queue.batcher.close()
    await marks.close()


async def test_a_turn_that_ends_without_its_done_mark_nudges_the_marks_waiting_for_it() -> None:
    """Two turns of one cohort: the first marks done, the second is a duplicate (no send, no
    mark). The first mark waits for the second only until the second turn ends."""
    clock = FakeClock()
    cohorts = Cohorts()
    dynamo = FakeDynamo()
    marks = BatchingLedger(
        DynamoCommandLedger(dynamo, "history"), clock=clock, coming=cohorts.marks_coming
    )
    cohorts.on_give_up(sends=lambda: None, marks=marks.nudge)
    source = cohorts.source(Source([message(1), message(2)]))
    first, second = await source.receive(10, 0)
    counted_ledger = cohorts.ledger(marks)
    turn_one = cohorts.stage(_MarkingStage(counted_ledger, wait=None))
    ends = asyncio.Event()
    turn_two = cohorts.stage(_MarkingStage(counted_ledger, wait=ends, marks=False))
    done_one = asyncio.ensure_future(turn_one.handle(first))
    done_two = asyncio.ensure_future(turn_two.handle(second))
    await clock.advance(0.05)
    assert dynamo.writes == []  # the first mark waits for the second turn
    ends.set()
    await clock.advance(0)
    assert [len(items) for items in dynamo.writes] == [1]
    assert clock.now == pytest.approx(0.05)
    await done_one
    await done_two
    await marks.close()


class _MarkingStage:
    """Marks its command done through ``ledger`` at once, or waits for ``wait`` and ends
    without a mark."""

    def __init__(self, ledger: object, *, wait: asyncio.Event | None, marks: bool = True) -> None:
        self._ledger = ledger
        self._wait = wait
        self._marks = marks

    async def handle(self, received: ReceivedMessage) -> Outcome:
        if self._wait is not None:
            await self._wait.wait()
        if self._marks:
            await self._ledger.finish(  # type: ignore[attr-defined]
                DoneMark("matter-1", received.message_id, "w", NOW)
            )
        return Done()

    async def renew(self, message_ids: Iterable[str]) -> list[str]:
        return []
