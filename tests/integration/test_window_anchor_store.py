"""The window's anchor on the ``state`` item, through the DynamoDB adapter: read in the turn's
one Query, written in one UpdateItem (or in the fold claim's), nothing else touched."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tests.integration.conftest import Stack, exchanges
from worker.adapters.dynamodb import STATE_KEY, DynamoHistoryStore
from worker.memory import CompactionPlan, FoldState
from worker.memory.cache_aligned import WindowAnchor

pytestmark = pytest.mark.integration

NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
PLAN = CompactionPlan(folded_through=0, through=12, unfolded_tokens=120)


def store_of(stack: Stack) -> DynamoHistoryStore:
    return DynamoHistoryStore(stack.clients.dynamodb, stack.env["HISTORY_TABLE"])


async def test_a_stored_anchor_comes_back_in_the_one_query_and_leaves_the_fold_alone(
    stack: Stack,
) -> None:
    await stack.seed("matter-a1", exchanges(3), folded_through=4, summary="folded")
    store = store_of(stack)
    await store.store_anchor("matter-a1", WindowAnchor(seq=3, folded_through=4))
    page = await store.load_page("matter-a1", 27)
    assert page.anchor == WindowAnchor(3, 4)
    assert (page.state.folded_through, page.state.summary) == (4, "folded")
    assert page.queries == 1 and len(page.messages) == 6
    assert await stack.state_item("matter-a1") == {
        "pk": {"S": "matter-a1"},
        "sk": {"S": STATE_KEY},
        "folded_through": {"N": "4"},
        "fold_summary": {"S": "folded"},
        "window_anchor": {"N": "3"},
        "window_anchor_folded_through": {"N": "4"},
    }


async def test_an_anchor_written_before_any_fold_creates_the_state_item(stack: Stack) -> None:
    await stack.seed("matter-a2", exchanges(2))
    await store_of(stack).store_anchor("matter-a2", WindowAnchor(seq=1, folded_through=0))
    page = await store_of(stack).load_page("matter-a2", 27)
    assert page.anchor == WindowAnchor(1, 0) and page.state == FoldState()


async def test_a_claim_carrying_the_anchor_writes_both_in_one_update(stack: Stack) -> None:
    await stack.seed("matter-a3", exchanges(6))
    store = store_of(stack)
    anchor = WindowAnchor(seq=1, folded_through=0)
    assert await store.claim_compaction("matter-a3", PLAN, seen=FoldState(), now=NOW, anchor=anchor)
    state = await stack.state_item("matter-a3")
    assert state["window_anchor"] == {"N": "1"}
    assert state["compaction_requested_through"] == {"N": "12"}
    # A lost claim writes nothing at all, the anchor included.
    assert not await store.claim_compaction(
        "matter-a3", PLAN, seen=FoldState(), now=NOW, anchor=WindowAnchor(3, 0)
    )
    assert (await store.load_page("matter-a3", 27)).anchor == anchor


async def test_releasing_a_claim_puts_back_the_mark_and_keeps_the_anchor(stack: Stack) -> None:
    await stack.seed("matter-a4", exchanges(6))
    store = store_of(stack)
    anchor = WindowAnchor(seq=1, folded_through=0)
    await store.claim_compaction("matter-a4", PLAN, seen=FoldState(), now=NOW, anchor=anchor)
    await store.release_compaction("matter-a4", PLAN, seen=FoldState(), claimed_at=NOW)
    page = await store.load_page("matter-a4", 27)
    assert page.state == FoldState() and page.anchor == anchor


@pytest.mark.parametrize(
    "attributes",
    [
        {"window_anchor": {"N": "3"}},
        {"window_anchor_folded_through": {"N": "0"}},
        {"window_anchor": {"S": "3"}, "window_anchor_folded_through": {"N": "0"}},
        {"window_anchor": {"N": "2.5"}, "window_anchor_folded_through": {"N": "0"}},
        {"window_anchor": {"N": "0"}, "window_anchor_folded_through": {"N": "0"}},
        {"window_anchor": {"N": "3"}, "window_anchor_folded_through": {"N": "-1"}},
    ],
)
async def test_a_missing_or_malformed_pair_is_no_anchor(
    stack: Stack, attributes: dict[str, Any]
) -> None:
    await stack.seed("matter-a5", exchanges(2))
    await stack.put_items([{"pk": {"S": "matter-a5"}, "sk": {"S": STATE_KEY}, **attributes}])
    page = await store_of(stack).load_page("matter-a5", 27)
    assert page.anchor is None and len(page.messages) == 4
