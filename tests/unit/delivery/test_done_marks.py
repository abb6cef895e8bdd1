"""Done marks: the ledger's ``done`` records, written together for concurrent turns.

The adapter against a fake DynamoDB client (the exact BatchWriteItem it sends, unprocessed
items, a key named twice, a failed call) and the batching ledger on virtual time (exact
batches and lingers), then the stage over it: ten concurrent turns cost one write for
their done marks, and a mark DynamoDB leaves unprocessed is tried again until written.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.unit.clock import FakeClock
from tests.unit.fakes import NOW, MemoryQueue, memory_stage
from tests.unit.turn.test_stage import MemoryHistory
from worker.adapters.ledger import DynamoCommandLedger
from worker.delivery.done_marks import MAX_WRITE_BATCH, BatchingLedger
from worker.delivery.outcomes import Done
from worker.errors import StoreUnavailable
from worker.ports import DoneMark, ReceivedMessage

TABLE = "history"


class FakeDynamo:
    """Records each BatchWriteItem; leaves the commands in ``unprocessed`` unprocessed once
    each; a claim (UpdateItem) always succeeds."""

    def __init__(self, *, unprocessed: set[str] | None = None) -> None:
        self.writes: list[list[dict[str, Any]]] = []
        self.unprocessed = set(unprocessed or ())
        self.error: Exception | None = None
        self.written: dict[str, dict[str, Any]] = {}

    async def update_item(self, **_: Any) -> dict[str, Any]:
        return {}

    async def batch_write_item(self, *, RequestItems: dict[str, Any]) -> dict[str, Any]:
        if self.error is not None:
            raise self.error
        [(table, requests)] = RequestItems.items()
        items = [request["PutRequest"]["Item"] for request in requests]
        self.writes.append(items)
        left = []
        for request, item in zip(requests, items, strict=True):
            command_id = item["sk"]["S"].removeprefix("cmd#")
            if command_id in self.unprocessed:
                self.unprocessed.discard(command_id)
                left.append(request)
            else:
                self.written[command_id] = item
        return {"UnprocessedItems": {table: left} if left else {}}


def mark(command_id: str, owner: str = "w/m/1") -> DoneMark:
    return DoneMark("matter-1", command_id, owner, NOW)


async def test_done_marks_leave_as_one_put_each_of_the_whole_done_record() -> None:
    client = FakeDynamo()
    results = await DynamoCommandLedger(client, TABLE).finish_batch([mark("c-1"), mark("c-2")])
    assert results == [None, None]
    [items] = client.writes
    assert items[0] == {
        "pk": {"S": "matter-1"},
        "sk": {"S": "cmd#c-1"},
        "status": {"S": "done"},
        "owner": {"S": "w/m/1"},
        "done_at": {"S": "2026-11-30T09:00:00Z"},
        # The record replaces the in-progress one, so it carries its own expiry (TTL).
        "expires_at": {"N": str(int((NOW + timedelta(days=15)).timestamp()))},
    }
    assert items[1]["sk"] == {"S": "cmd#c-2"}


async def test_a_mark_left_unprocessed_fails_alone() -> None:
    client = FakeDynamo(unprocessed={"c-2"})
    results = await DynamoCommandLedger(client, TABLE).finish_batch(
        [mark("c-1"), mark("c-2"), mark("c-3")]
    )
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], StoreUnavailable)
    assert set(client.written) == {"c-1", "c-3"}


async def test_two_marks_of_one_command_are_one_put() -> None:
    """A turn that took a command over can finish beside the one it took over from;
    DynamoDB refuses a batch that names a key twice, so they share one put."""
    client = FakeDynamo()
    ledger = DynamoCommandLedger(client, TABLE)
    results = await ledger.finish_batch([mark("c-1", "old"), mark("c-2"), mark("c-1", "new")])
    assert results == [None, None, None]
    [items] = client.writes
    assert [i["sk"]["S"] for i in items] == ["cmd#c-1", "cmd#c-2"]
    assert items[0]["owner"] == {"S": "new"}


async def test_a_failed_call_is_a_retryable_error_naming_the_operation() -> None:
    client = FakeDynamo()
    client.error = ClientError(
        {"Error": {"Code": "ThrottlingException"}, "ResponseMetadata": {"HTTPStatusCode": 400}},
        "BatchWriteItem",
    )
    with pytest.raises(StoreUnavailable, match=r"dynamodb.BatchWriteItem failed: Throttling"):
        await DynamoCommandLedger(client, TABLE).finish_batch([mark("c-1")])


async def test_a_single_done_mark_raises_when_left_unprocessed() -> None:
    client = FakeDynamo(unprocessed={"c-1"})
    ledger = DynamoCommandLedger(client, TABLE)
    with pytest.raises(StoreUnavailable, match="unprocessed"):
        await ledger.finish(mark("c-1", "w"))
    await ledger.finish(mark("c-1", "w"))
    assert client.written["c-1"]["status"] == {"S": "done"}


async def test_more_marks_than_one_batch_write_takes_are_refused() -> None:
    marks = [mark(f"c-{i}") for i in range(MAX_WRITE_BATCH + 1)]
    with pytest.raises(ValueError, match="25"):
        await DynamoCommandLedger(FakeDynamo(), TABLE).finish_batch(marks)


async def finish_all(ledger: BatchingLedger, count: int) -> None:
    await asyncio.gather(*(ledger.finish(mark(f"c-{i}", "w")) for i in range(count)))


async def test_concurrent_done_marks_leave_together_up_to_25_a_call() -> None:
    clock = FakeClock()
    client = FakeDynamo()
    ledger = BatchingLedger(DynamoCommandLedger(client, TABLE), clock=clock)
    done = asyncio.ensure_future(finish_all(ledger, 30))
    await clock.run_until_done(done)
    assert [len(items) for items in client.writes] == [25, 5]
    assert clock.now == 0.005  # the full batch at once, the rest after one linger
    lone = asyncio.ensure_future(ledger.finish(mark("c-lone", "w")))
    await clock.run_until_done(lone)
    assert [len(items) for items in client.writes] == [25, 5, 1]
    assert clock.now == 0.010
    await ledger.close()


async def test_a_mark_queued_at_close_is_written_before_the_ledger_stops() -> None:
    clock = FakeClock()
    client = FakeDynamo()
    ledger = BatchingLedger(DynamoCommandLedger(client, TABLE), clock=clock)
    queued = asyncio.ensure_future(ledger.finish(mark("c-1", "w")))
    await clock.advance(0)
    closing = asyncio.ensure_future(ledger.close())
    await clock.run_until_done(closing)
    await queued
    assert set(client.written) == {"c-1"}


def delivery(i: int) -> ReceivedMessage:
    body = {"type": "converse", "command_id": f"c-{i}", "conversation_id": "matter-1",
            "message": "What does clause 14.2 say?"}  # fmt: skip
    return ReceivedMessage(f"m-{i}", f"r-{i}", json.dumps(body))


async def test_ten_concurrent_turns_mark_done_in_one_write_and_a_mark_left_over_is_retried() -> (
    None
):
    """GIVEN ten turns whose prompts are sent together, and DynamoDB leaving one done mark
    unprocessed, THEN the ten marks leave in one BatchWriteItem, the one left over is
    written by the stage's first retry (0.25 s later), and every turn ends Done."""
    clock = FakeClock()
    client = FakeDynamo(unprocessed={"c-3"})
    model_queue = MemoryQueue(gate=asyncio.Event())  # the ten sends return together
    stage = memory_stage(
        history=MemoryHistory(),
        ledger=BatchingLedger(DynamoCommandLedger(client, TABLE), clock=clock),
        model_queue=model_queue,
        sleep=clock.sleep,
    )
    turns = asyncio.gather(*(stage.handle(delivery(i)) for i in range(10)))
    await clock.advance(0)
    assert client.writes == []  # no mark before its prompt is out
    model_queue.gate.set()
    await clock.run_until_done(turns)
    assert turns.result() == [Done()] * 10
    assert [len(items) for items in client.writes] == [10, 1]
    assert client.writes[1][0]["sk"] == {"S": "cmd#c-3"}
    assert set(client.written) == {f"c-{i}" for i in range(10)}
    assert clock.now == pytest.approx(0.005 + 0.25 + 0.005)
    assert len(model_queue.sent) == 10


async def test_marks_wait_for_those_of_prompts_still_out_and_leave_as_one_write() -> None:
    """Seven marks, and three prompts of the same received batch still on their way (a
    second SendMessageBatch): the seven wait for the other three, then all ten leave in
    one write as the last arrives; with nothing on its way, a mark leaves at once."""
    clock = FakeClock()
    client = FakeDynamo()
    out = [3]
    ledger = BatchingLedger(DynamoCommandLedger(client, TABLE), clock=clock, coming=lambda: out[0])
    first = asyncio.gather(*(ledger.finish(mark(f"c-{i}", "w")) for i in range(7)))
    await clock.advance(0.02)
    assert client.writes == []
    out[0] = 0
    rest = asyncio.gather(*(ledger.finish(mark(f"c-{i}", "w")) for i in range(7, 10)))
    await clock.advance(0)
    assert [len(items) for items in client.writes] == [10]
    await first
    await rest
    lone = asyncio.ensure_future(ledger.finish(mark("c-lone", "w")))
    await clock.advance(0)
    assert [len(items) for items in client.writes] == [10, 1]
    await lone
    await ledger.close()
