"""Storing the cache-aligned window's anchor: after the prompt is out, in as few writes as
the turn allows.

A turn that re-anchors stores the new anchor on the conversation's ``state`` item. When the
same turn also claims a fold request (a conditional UpdateItem on that item), the anchor
rides the claim's write (:class:`AnchorRidingClaims`); otherwise, or when the claim was lost,
it is one UpdateItem of its own. Nothing is written when the stored anchor stays.

A failed write never fails the turn: the prompt has gone, and the worst a missing anchor
does is make the next turn re-anchor (a cache miss, never a broken rule: the window checks
any anchor it is given). It is logged by type and operation, never with content.
"""

from __future__ import annotations

from datetime import datetime

from worker.caching.anchor import WindowAnchor
from worker.logs import get_logger, log_failure
from worker.memory import CompactionPlan, FoldState
from worker.ports import FoldClaims, WindowAnchors

log = get_logger()


class AnchorRidingClaims:
    """FoldClaims whose claim also stores ``anchor`` in the same write; ``carried`` says
    whether a claim won (and so wrote the anchor)."""

    __slots__ = ("_claims", "anchor", "carried")

    def __init__(self, claims: FoldClaims, anchor: WindowAnchor) -> None:
        self._claims = claims
        self.anchor = anchor
        self.carried = False

    async def claim_compaction(
        self,
        conversation_id: str,
        plan: CompactionPlan,
        *,
        seen: FoldState,
        now: datetime,
        anchor: WindowAnchor | None = None,
    ) -> bool:
        won = await self._claims.claim_compaction(
            conversation_id, plan, seen=seen, now=now, anchor=anchor or self.anchor
        )
        self.carried = self.carried or won
        return won

    async def release_compaction(
        self, conversation_id: str, plan: CompactionPlan, *, seen: FoldState, claimed_at: datetime
    ) -> None:
        """Puts back the request mark only: the anchor stays (it describes the prompt sent)."""
        await self._claims.release_compaction(
            conversation_id, plan, seen=seen, claimed_at=claimed_at
        )


async def store_anchor(anchors: WindowAnchors, conversation_id: str, anchor: WindowAnchor) -> bool:
    """Write ``anchor`` in one UpdateItem; False (and a warning) if it could not be."""
    try:
        await anchors.store_anchor(conversation_id, anchor)
    except Exception as exc:  # never the turn's failure: the prompt is already out
        log_failure(
            "clerk.converse_window_anchor_write_failed",
            exc,
            anchor_seq=anchor.seq,
            anchor_folded_through=anchor.folded_through,
        )
        return False
    return True
