"""The one history-item writer (demo, tests, benchmark): the contract's layout, calls of 25,
and what DynamoDB leaves unprocessed sent again with a bounded backoff.

Against a fake DynamoDB client; the backoff's sleep is injected and recorded, never slept.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from datetime import UTC, datetime
from typing import Any

import pytest

from localaws.history_writer import (
    UNPROCESSED_ATTEMPTS,
    UNPROCESSED_BACKOFF,
    WRITE_BATCH,
    message_item,
    state_item,
    write_items,
)
from worker.adapters.dynamodb import DynamoHistoryStore
from worker.errors import StoreUnavailable

TABLE = "history"
SECRET = "PRIVILEGED: the client's settlement figure"


class FakeDynamo:
    """Stores what BatchWriteItem puts; leaves each sort key in ``stubborn`` unprocessed
    for its first ``refusals`` puts (None: always). ``query`` returns what is stored."""

    def __init__(self, stubborn: Collection[str] = (), refusals: int | None = 1) -> None:
        self.stubborn = stubborn
        self.refusals = refusals
        self.refused: dict[str, int] = {}
        self.calls: list[list[str]] = []
        self.stored: dict[tuple[str, str], dict[str, Any]] = {}
        self.in_flight = 0
        self.most_in_flight = 0
        self.order: list[str] = []

    async def batch_write_item(self, *, RequestItems: dict[str, Any]) -> dict[str, Any]:
        [(table, requests)] = RequestItems.items()
        assert table == TABLE and 1 <= len(requests) <= 25
        keys = [r["PutRequest"]["Item"]["sk"]["S"] for r in requests]
        self.calls.append(keys)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        self.order.append(f"start {keys[0]}")
        await asyncio.sleep(0)  # let another call start, if the writer allows one
        self.in_flight -= 1
        self.order.append(f"end {keys[0]}")
        left = []
        for request in requests:
            item = request["PutRequest"]["Item"]
            sk = item["sk"]["S"]
            if sk in self.stubborn and (
                self.refusals is None or self.refused.get(sk, 0) < self.refusals
            ):
                self.refused[sk] = self.refused.get(sk, 0) + 1
                left.append(request)
            else:
                self.stored[(item["pk"]["S"], sk)] = item
        return {"UnprocessedItems": {table: left} if left else {}}

    async def query(self, **request: Any) -> dict[str, Any]:
        pk = request["ExpressionAttributeValues"][":pk"]["S"]
        items = sorted(
            (item for (key, _), item in self.stored.items() if key == pk),
            key=lambda item: item["sk"]["S"],
            reverse=True,
        )
        return {"Items": items}


class Sleeps:
    def __init__(self) -> None:
        self.seconds: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.seconds.append(seconds)


def messages(conversation_id: str, count: int) -> list[dict[str, Any]]:
    roles = ("user", "assistant")
    return [
        message_item(conversation_id, seq, roles[(seq - 1) % 2], f"text {seq}")
        for seq in range(1, count + 1)
    ]


def test_items_are_laid_out_as_the_contract_says() -> None:
    asked = datetime(2026, 11, 30, 9, 0, 0, 500_000, tzinfo=UTC)
    assert message_item("matter-1", 42, "user", "q", created_at=asked) == {
        "pk": {"S": "matter-1"},
        "sk": {"S": "msg#000000000042"},
        "seq": {"N": "42"},
        "role": {"S": "user"},
        "content": {"S": "q"},
        "created_at": {"S": "2026-11-30T09:00:00Z"},
    }
    assert "created_at" not in message_item("matter-1", 1, "assistant", "a")
    assert state_item("matter-1", folded_through=34, summary="s") == {
        "pk": {"S": "matter-1"},
        "sk": {"S": "state"},
        "folded_through": {"N": "34"},
        "fold_summary": {"S": "s"},
    }
    assert state_item("matter-1") == {"pk": {"S": "matter-1"}, "sk": {"S": "state"}}


async def test_what_the_writer_writes_the_stage_reads_back() -> None:
    client = FakeDynamo()
    items = [*messages("matter-1", 4), state_item("matter-1", folded_through=2, summary="s")]
    await write_items(client, TABLE, items, sleep=Sleeps())
    page = await DynamoHistoryStore(client, TABLE).load_page("matter-1", 10)
    assert [(m.seq, m.role, m.content) for m in reversed(page.messages)] == [
        (1, "user", "text 1"),
        (2, "assistant", "text 2"),
        (3, "user", "text 3"),
        (4, "assistant", "text 4"),
    ]
    assert (page.state.folded_through, page.state.summary) == (2, "s")
    assert page.malformed == ()


async def test_items_go_in_calls_of_25_the_first_alone_then_up_to_parallel_at_once() -> None:
    client = FakeDynamo()
    items = messages("matter-1", 4 * WRITE_BATCH + 3)
    await write_items(client, TABLE, items, parallel=2, sleep=Sleeps())
    assert [len(call) for call in client.calls] == [25, 25, 25, 25, 3]
    assert len(client.stored) == len(items)
    # The first call ended before any other started; after it, two ran at once, never more.
    assert client.order[:2] == ["start msg#000000000001", "end msg#000000000001"]
    assert client.most_in_flight == 2


async def test_items_left_unprocessed_are_sent_again_alone_after_a_backoff() -> None:
    client = FakeDynamo(stubborn={"msg#000000000003", "msg#000000000007"}, refusals=2)
    sleeps = Sleeps()
    await write_items(client, TABLE, messages("matter-1", 10), sleep=sleeps)
    assert len(client.stored) == 10
    stubborn = ["msg#000000000003", "msg#000000000007"]
    assert client.calls[1:] == [stubborn, stubborn]
    assert len(sleeps.seconds) == 2
    for attempt, slept in enumerate(sleeps.seconds, start=1):
        assert 0 < slept <= UNPROCESSED_BACKOFF.ceiling(attempt)


async def test_items_never_processed_fail_by_count_after_the_last_attempt() -> None:
    client = FakeDynamo(stubborn={"msg#000000000002"}, refusals=None)
    items = [message_item("matter-1", seq, "user", SECRET) for seq in (1, 2, 3)]
    sleeps = Sleeps()
    with pytest.raises(StoreUnavailable) as raised:
        await write_items(client, TABLE, items, sleep=sleeps)
    assert str(raised.value) == (
        "dynamodb.BatchWriteItem left 1 of 3 items unprocessed "
        f"after {UNPROCESSED_ATTEMPTS} attempts"
    )
    assert SECRET not in str(raised.value)
    assert len(client.calls) == UNPROCESSED_ATTEMPTS
    assert len(sleeps.seconds) == UNPROCESSED_ATTEMPTS - 1
    assert sum(sleeps.seconds) <= sum(
        UNPROCESSED_BACKOFF.ceiling(n) for n in range(1, UNPROCESSED_ATTEMPTS)
    )


async def test_no_items_make_no_call() -> None:
    client = FakeDynamo()
    await write_items(client, TABLE, [], sleep=Sleeps())
    assert client.calls == []
