"""The compaction enqueuer: the fold's half of the turn, beside the window it complements.

It plans with the pure trigger (:func:`plan_compaction`), claims the request on the
conversation's ``state`` item, then sends it. The claim is conditional on the request
mark being the one the plan was made from (:class:`FoldClaims`), so the rule of when a
request is due lives only in :mod:`worker.memory.fold`, and two workers that planned
from the same state never both send. A send that fails puts the mark back, so the next
turn asks again instead of waiting out the retry period.

The body is not built here: ``send`` is given by the caller (the stage knows the wire
format), which keeps this package free of imports from the layers above it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Protocol

from worker.memory.cache_aligned import WindowAnchor
from worker.memory.fold import CompactionPlan, FoldLimits, FoldState, plan_compaction
from worker.memory.window import HistoryMessage


class FoldClaims(Protocol):
    """The request mark on a conversation's ``state`` item, written conditionally."""

    async def claim_compaction(
        self,
        conversation_id: str,
        plan: CompactionPlan,
        *,
        seen: FoldState,
        now: datetime,
        anchor: WindowAnchor | None = None,
    ) -> bool:
        """Record ``plan`` as the newest request, stamped ``now``, if the request mark is
        still the one ``seen`` holds; True if this caller won the claim. With ``anchor``,
        the same write also stores the cache-aligned window's anchor (one write, not two,
        when a turn both claims and re-anchors); a lost claim stores nothing."""
        ...

    async def release_compaction(
        self, conversation_id: str, plan: CompactionPlan, *, seen: FoldState, claimed_at: datetime
    ) -> None:
        """Put back the mark ``seen`` held, if the mark is still this caller's claim of
        ``plan`` at ``claimed_at`` (its request could not be sent)."""
        ...


async def maybe_enqueue_compaction(
    conversation_id: str,
    newest_first: Sequence[HistoryMessage],
    state: FoldState,
    *,
    older_unread: bool,
    limits: FoldLimits,
    claims: FoldClaims,
    send: Callable[[CompactionPlan], Awaitable[object]],
    now: datetime,
) -> CompactionPlan | None:
    """Send a compaction request if one is due and this worker wins the claim.

    Returns the plan that was sent, or None. Errors from the send propagate after the
    claim is released.
    """
    plan = plan_compaction(newest_first, state, limits, older_unread=older_unread, now=now)
    if plan is None:
        return None
    if not await claims.claim_compaction(conversation_id, plan, seen=state, now=now):
        return None
    try:
        await send(plan)
    except BaseException:
        await claims.release_compaction(conversation_id, plan, seen=state, claimed_at=now)
        raise
    return plan
