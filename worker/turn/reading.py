"""The turn's read: the newest page of the history table, and older pages only while the plan
needs them.

A turn reads one page (one Query; the ``state`` item with the fold mark, the anchor and its
summary snapshot come in it). Only when the window's floor would open on an answer whose
question lies beyond that page (a run of answers longer than a page) does it read older
pages, one Query each, planning again after each, until the question is in or nothing
older is left.
"""

from __future__ import annotations

from collections.abc import Callable

from worker.planning import TurnPlan
from worker.ports import HistoryPage, HistoryStore


async def read_turn(
    store: HistoryStore,
    conversation_id: str,
    *,
    page_size: int,
    plan: Callable[[HistoryPage], TurnPlan],
) -> TurnPlan:
    """``plan`` over the newest page, extended by older pages while the plan needs them."""
    page = await store.load_page(conversation_id, page_size)
    turn = plan(page)
    while turn.needs_older:
        older = await store.load_page(conversation_id, page_size, older_than=page.older)
        page = page.extended_by(older)
        turn = plan(page)
    return turn
