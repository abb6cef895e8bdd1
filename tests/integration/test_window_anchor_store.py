"""The window's anchor on the ``state`` item, through the DynamoDB adapter: read in the turn's
one Query, written in one UpdateItem (or in the fold claim's), nothing else touched."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tests.integration.conftest import Stack, exchanges
from worker.adapters.dynamodb import STATE_KEY, DynamoHistoryStore
from worker.caching.anchor import SummarySnapshot, WindowAnchor
from worker.memory import CompactionPlan, FoldState
from worker.ports import FoldClaim

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
    claim = FoldClaim("matter-a3", PLAN, seen=FoldState(), claimed_at=NOW)
    assert await store.claim_compaction(claim, anchor=anchor)
    state = await stack.state_item("matter-a3")
    assert state["window_anchor"] == {"N": "1"}
    assert state["compaction_requested_through"] == {"N": "12"}
    # A lost claim writes nothing at all, the anchor included.
    assert not await store.claim_compaction(claim, anchor=WindowAnchor(3, 0))
    assert (await store.load_page("matter-a3", 27)).anchor == anchor


async def test_releasing_a_claim_puts_back_the_mark_and_keeps_the_anchor(stack: Stack) -> None:
    await stack.seed("matter-a4", exchanges(6))
    store = store_of(stack)
    anchor = WindowAnchor(seq=1, folded_through=0)
    claim = FoldClaim("matter-a4", PLAN, seen=FoldState(), claimed_at=NOW)
    await store.claim_compaction(claim, anchor=anchor)
    await store.release_compaction(claim)
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


async def test_the_summary_in_force_is_stored_with_the_anchor_and_read_back_with_it(
    stack: Stack,
) -> None:
    """The snapshot rides the anchor's write (window_summary, window_summary_folded_through)
    and comes back in the one Query; a new anchor without one removes the old, so no stale
    summary outlives the anchor it was taken for."""
    await stack.seed("matter-a6", exchanges(3), folded_through=4, summary="folded at 4")
    store = store_of(stack)
    snapshot = SummarySnapshot("folded at 4", 4)
    await store.store_anchor("matter-a6", WindowAnchor(3, 4, snapshot))
    page = await store.load_page("matter-a6", 27)
    assert page.anchor is not None and page.anchor.snapshot == snapshot
    state = await stack.state_item("matter-a6")
    assert state["window_summary"] == {"S": "folded at 4"}
    assert state["window_summary_folded_through"] == {"N": "4"}
    assert state["fold_summary"] == {"S": "folded at 4"}  # the compactor's, untouched
    await store.store_anchor("matter-a6", WindowAnchor(5, 4))  # too large to snapshot, say
    state = await stack.state_item("matter-a6")
    assert "window_summary" not in state and "window_summary_folded_through" not in state
    assert (await store.load_page("matter-a6", 27)).anchor == WindowAnchor(5, 4)
    # No summary yet (mark 0): the mark alone is the snapshot.
    await store.claim_compaction(
        FoldClaim("matter-a6", PLAN, seen=page.state, claimed_at=NOW),
        anchor=WindowAnchor(1, 0, SummarySnapshot(None, 0)),
    )
    back = (await store.load_page("matter-a6", 27)).anchor
    assert back is not None and back.snapshot == SummarySnapshot(None, 0)


async def test_created_at_is_read_with_each_message_and_a_bad_one_is_no_time(
    stack: Stack,
) -> None:
    await stack.put_items(
        [
            {"pk": {"S": "matter-a7"}, "sk": {"S": f"msg#{seq:012d}"}, "seq": {"N": str(seq)},
             "role": {"S": role}, "content": {"S": "text"}, **extra}
            for seq, role, extra in (
                (1, "user", {"created_at": {"S": "2026-11-30T09:00:00Z"}}),
                (2, "assistant", {"created_at": {"S": "yesterday"}}),
                (3, "user", {}),
            )
        ]
    )  # fmt: skip
    page = await store_of(stack).load_page("matter-a7", 27)
    by_seq = {m.seq: m.created_at for m in page.messages}
    assert by_seq == {1: NOW, 2: None, 3: None}
