"""The turn's I/O around the memory core: how far back it reads, and the fold request's send.

A turn reads one page of the history table. Only when the window's floor would open on
an answer whose question lies beyond that page (a run of answers longer than a page)
does it read older pages, one Query each, until the question is in or nothing older is
left.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime

from worker.commands import ConverseCommand, compaction_request, encode_body
from worker.memory import CompactionPlan, Window, bound_history
from worker.ports import HistoryPage, HistoryStore, MessageSender
from worker.settings import Settings


async def read_window(
    store: HistoryStore, conversation_id: str, settings: Settings
) -> tuple[HistoryPage, Window]:
    """The newest page, extended by older pages while the window's floor needs them, and
    the window over what was read."""
    size, limits = settings.history_page_size, settings.window_limits
    page = await store.load_page(conversation_id, size)
    window = bound_history(page.messages, limits)
    while page.older is not None and window.floor_needs_older:
        page = page.extended_by(await store.load_page(conversation_id, size, older_than=page.older))
        window = bound_history(page.messages, limits)
    return page, window


def fold_request_sender(
    queue: MessageSender, command: ConverseCommand, *, claimed_at: datetime
) -> Callable[[CompactionPlan], Awaitable[object]]:
    """How the enqueuer sends a plan: the contract's compaction request on ``queue``.

    The deduplication id names the claim (stretch and time), so a request sent again after
    the retry period is a new message while a retried send of one claim is not.
    """

    async def send(plan: CompactionPlan) -> str:
        return await queue.send(
            encode_body(compaction_request(command, plan)),
            group_id=command.conversation_id,
            deduplication_id=f"compact:{command.conversation_id}:{plan.through}:"
            f"{int(claimed_at.timestamp())}",
        )

    return send
