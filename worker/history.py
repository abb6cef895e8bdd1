"""The turn's I/O around the memory core: how far back it reads.

A turn reads one page of the history table. Only when the window's floor would open on
an answer whose question lies beyond that page (a run of answers longer than a page)
does it read older pages, one Query each, until the question is in or nothing older is
left.
"""

from __future__ import annotations

from worker.memory import bound_history
from worker.ports import HistoryPage, HistoryStore
from worker.settings import Settings


async def read_history(
    store: HistoryStore, conversation_id: str, settings: Settings
) -> HistoryPage:
    """The newest page, extended by older pages while the window's floor needs them."""
    size, limits = settings.history_page_size, settings.window_limits
    page = await store.load_page(conversation_id, size)
    while page.older is not None and bound_history(page.messages, limits).floor_needs_older:
        page = page.extended_by(await store.load_page(conversation_id, size, older_than=page.older))
    return page
