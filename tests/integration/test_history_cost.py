"""A turn reads one page of the history table, however long the conversation is."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from tests.conftest import captured_logs
from tests.integration.conftest import Stack, body_of, exchanges, running_worker
from worker.adapters.dynamodb import DynamoHistoryStore
from worker.memory import bound_history
from worker.planning import plan_turn
from worker.turn.reading import read_turn

pytestmark = pytest.mark.integration


class CountingDynamoDB:
    """The real aiobotocore client, with every Query's call and item counts recorded."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.queries = 0
        self.items_returned = 0
        self.items_scanned = 0

    async def query(self, **request: Any) -> Any:
        response = await self._client.query(**request)
        self.queries += 1
        self.items_returned += response["Count"]
        self.items_scanned += response["ScannedCount"]
        return response

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


async def test_items_read_per_turn_do_not_grow_with_the_conversation(stack: Stack) -> None:
    """GIVEN conversations of 30 and 30,000 messages in one table, WHEN a turn loads each,
    THEN both turns make one Query and read the same number of items (27)."""
    await stack.seed("matter-short", exchanges(15), folded_through=0)
    await stack.seed("matter-long", exchanges(15_000, chars=12), folded_through=29_900)
    settings = stack.settings()
    reads = {}
    for conversation_id in ("matter-short", "matter-long"):
        counting = CountingDynamoDB(stack.clients.dynamodb)
        store = DynamoHistoryStore(counting, settings.history_table)
        page = await store.load_page(conversation_id, settings.history_page_size)
        window = bound_history(page.messages, settings.window_limits)
        assert window.kept == 24
        reads[conversation_id] = (counting.queries, counting.items_returned, counting.items_scanned)
    assert reads["matter-short"] == reads["matter-long"] == (1, 27, 27)


async def test_a_run_of_answers_longer_than_the_page_reads_one_page_more(stack: Stack) -> None:
    """GIVEN one question followed by 30 stored answers (a page holds 26 messages),
    WHEN a turn is served, THEN the window opens on the question, which costs exactly one
    more Query, counted in the window's log line; a conversation of whole exchanges of
    the same length still costs one."""
    run = [
        ("user", "Walk me through the schedule."),
        *[("assistant", f"Part {i}.") for i in range(30)],
    ]
    await stack.seed("matter-run", run, folded_through=0)
    await stack.seed("matter-pairs", exchanges(16), folded_through=0)
    settings = stack.settings()
    queries = {}
    for conversation_id in ("matter-run", "matter-pairs"):
        counting = CountingDynamoDB(stack.clients.dynamodb)
        await read_turn(
            DynamoHistoryStore(counting, settings.history_table),
            conversation_id,
            page_size=settings.history_page_size,
            plan=partial(plan_turn, message="next", sent_at=None, config=settings.plan_config),
        )
        queries[conversation_id] = counting.queries
    assert queries == {"matter-run": 2, "matter-pairs": 1}

    await stack.send_command(command_id="c-run", conversation_id="matter-run")
    with captured_logs() as logs:
        async with running_worker(settings):
            [prompt] = await stack.drain("MODEL_QUEUE_URL", expect=1)
    history = body_of(prompt)["history"]
    assert history[0] == {"seq": 1, "role": "user", "content": "Walk me through the schedule."}
    assert len(history) == 31
    [bounded] = [e for e in logs if e["event"] == "clerk.converse_history_window_bounded"]
    assert (bounded["extra_queries"], bounded["kept"], bounded["dropped"]) == (1, 31, 0)
