"""The turn's read: the newest page of the history table, and older pages only while the plan
needs them.

A turn reads one page (one Query; the ``state`` item with the fold mark, the anchor and its
summary snapshot come in it). Only when the window's floor would open on an answer whose
question lies beyond that page (a run of answers longer than a page) does it read older
pages, one Query each, planning again after each, until the question is in or nothing
older is left. What the page holds was parsed by the one reader of stored items
(:mod:`worker.adapters.stored_items`); a ``state`` attribute it could not read safely
refuses the command here, before any plan.
"""

from __future__ import annotations

from collections.abc import Callable

from worker.errors import RejectedCommand
from worker.planning import TurnPlan
from worker.ports import HistoryPage, HistoryStore

#: How a rejection for a malformed ``state`` attribute begins; the attribute and why follow.
STATE_REFUSED = "the conversation's stored state is malformed"


async def read_turn(
    store: HistoryStore,
    conversation_id: str,
    *,
    page_size: int,
    plan: Callable[[HistoryPage], TurnPlan],
) -> TurnPlan:
    """``plan`` over the newest page, extended by older pages while the plan needs them.
    Raises :class:`RejectedCommand` naming the attribute when the ``state`` item holds one no
    reading makes safe (the command goes to the dead-letter queue at once: retrying it
    would read the same item)."""
    page = await store.load_page(conversation_id, page_size)
    if page.refusal is not None:
        raise RejectedCommand(f"{STATE_REFUSED}: {page.refusal.describe()}")
    turn = plan(page)
    while turn.needs_older:
        older = await store.load_page(conversation_id, page_size, older_than=page.older)
        page = page.extended_by(older)
        turn = plan(page)
    return turn
