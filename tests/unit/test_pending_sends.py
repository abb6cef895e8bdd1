"""Turns still on their way to a send: counted from the stage's start to the send (or the
turn's end), and a prompt batch that waits for exactly those, on virtual time."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta

import pytest

from tests.conftest import settings
from tests.unit.clock import FakeClock
from tests.unit.test_stage import MemoryLedger, MemoryQueue, NoObjects
from worker.batching import Batcher
from worker.memory import FoldState
from worker.outcomes import Done, Outcome
from worker.pending_sends import PendingSends
from worker.ports import HistoryPage, ReceivedMessage
from worker.stage import ConverseStage

NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def message(i: int) -> ReceivedMessage:
    body = {"type": "converse", "command_id": f"c-{i}", "conversation_id": f"matter-{i}",
            "message": "What does clause 14.2 say?"}  # fmt: skip
    return ReceivedMessage(f"m-{i}", f"r-{i}", json.dumps(body))


class ScriptedStage:
    """Sends a prompt through ``sender`` or not, when the test opens its gate."""

    def __init__(self, sender: object, sends: bool) -> None:
        self.sender = sender
        self.sends = sends
        self.gate = asyncio.Event()

    async def handle(self, received: ReceivedMessage) -> Outcome:
        await self.gate.wait()
        if self.sends:
            await self.sender.send("{}", group_id="g", deduplication_id="d")  # type: ignore[attr-defined]
        return Done()

    async def renew(self, message_ids: Iterable[str]) -> list[str]:
        return []


async def test_a_turn_counts_until_it_sends_and_one_that_ends_without_sending_nudges() -> None:
    pending = PendingSends()
    nudges: list[int] = []
    pending.on_give_up(lambda: nudges.append(pending()))
    sent = MemoryQueue()
    sending = ScriptedStage(pending.sender(sent), sends=True)
    silent = ScriptedStage(pending.sender(sent), sends=False)
    first = asyncio.ensure_future(pending.stage(sending).handle(message(1)))
    second = asyncio.ensure_future(pending.stage(silent).handle(message(2)))
    await asyncio.sleep(0)
    assert pending() == 2
    sending.gate.set()
    await first
    assert (pending(), nudges) == (1, [])  # sent: no nudge, the prompt itself arrives
    silent.gate.set()
    await second
    assert (pending(), nudges) == (0, [0])
    assert len(sent.sent) == 1


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

    def __init__(self, clock: FakeClock, pending: PendingSends) -> None:
        self.batches: list[tuple[float, int]] = []
        self._clock = clock
        self.batcher: Batcher[str, str] = Batcher(
            self._flush, linger=0.005, max_linger=0.2, clock=clock, coming=pending
        )

    async def _flush(self, bodies: Sequence[str]) -> list[str]:
        self.batches.append((self._clock.now, len(bodies)))
        return [f"id-{i}" for i in range(len(bodies))]

    async def send(
        self,
        body: str,
        *,
        group_id: str,
        deduplication_id: str,
        attributes: Mapping[str, str | int] | None = None,
    ) -> str:
        return await self.batcher.submit(body)


async def test_prompts_of_turns_started_together_leave_in_one_batch_however_far_apart() -> None:
    """GIVEN six turns started together whose history reads come back 15 ms apart (three
    times the 5 ms linger), THEN their six prompts leave in one SendMessageBatch, as the
    last one arrives; a later lone turn's prompt leaves at once, with no linger."""
    clock = FakeClock()
    pending = PendingSends()
    queue = BatchedQueue(clock, pending)
    pending.on_give_up(queue.batcher.nudge)
    stage = pending.stage(
        ConverseStage(
            history=SlowHistory(clock),
            ledger=MemoryLedger(),
            model_queue=pending.sender(queue),
            compaction_queue=MemoryQueue(),
            objects=NoObjects(),
            settings=settings(),
            lease=timedelta(seconds=60),
            clock=lambda: NOW,
            sleep=clock.sleep,
        )
    )
    turns = asyncio.gather(*(stage.handle(message(i)) for i in range(6)))
    await clock.run_until_done(turns)
    assert turns.result() == [Done()] * 6
    assert queue.batches == [(pytest.approx(0.075), 6)]
    lone = asyncio.ensure_future(stage.handle(message(7)))  # its read takes 105 ms
    await clock.run_until_done(lone)
    assert queue.batches[1:] == [(pytest.approx(0.18), 1)]
    await queue.batcher.close()
