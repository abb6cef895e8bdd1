"""The turn's writes after the prompt is out: the fold request and the window's anchor.

The fold request: the pure trigger (:func:`plan_compaction`) decides whether one is due; the
request is claimed on the conversation's ``state`` item, then sent
(:func:`maybe_enqueue_compaction`). The claim is conditional on the request mark being the
one the plan was made from (:class:`FoldClaims`), so the rule of when a request is due
lives only in :mod:`worker.memory.fold`, and two workers that planned from the same state
never both send. A send that fails puts the mark back, so the next turn asks again instead
of waiting out the retry period. :func:`fold_request_sender` sends the contract's
compaction request, with a deduplication id that names the claim.

The anchor: a turn that re-anchors stores the new anchor on the same ``state`` item. When
the turn also claims a fold request, the anchor rides the claim's write
(:class:`AnchorRidingClaims`); otherwise, or when the claim was lost, it is one UpdateItem of
its own (:func:`store_anchor`). Nothing is written when the stored anchor stays. A failed
anchor write never fails the turn: the prompt has gone, and the worst a missing anchor does
is make the next turn re-anchor (a cache miss, never a broken rule: the window checks any
anchor it is given). It is logged by type and operation, never with content.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

from worker.caching.anchor import WindowAnchor
from worker.logs import get_logger, log_failure
from worker.memory.fold import CompactionPlan, FoldLimits, FoldState, plan_compaction
from worker.memory.history_window import HistoryMessage
from worker.ports import FoldClaim, FoldClaims, MessageSender, WindowAnchors
from worker.turn.commands import ConverseCommand, compaction_request, encode_body

log = get_logger()


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
    claim = FoldClaim(conversation_id, plan, seen=state, claimed_at=now)
    if not await claims.claim_compaction(claim):
        return None
    try:
        await send(plan)
    except BaseException:
        await claims.release_compaction(claim)
        raise
    return plan


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


class AnchorRidingClaims:
    """FoldClaims whose claim also stores ``anchor`` in the same write; ``carried`` says
    whether a claim won (and so wrote the anchor)."""

    __slots__ = ("_claims", "anchor", "carried")

    def __init__(self, claims: FoldClaims, anchor: WindowAnchor) -> None:
        self._claims = claims
        self.anchor = anchor
        self.carried = False

    async def claim_compaction(
        self, claim: FoldClaim, *, anchor: WindowAnchor | None = None
    ) -> bool:
        won = await self._claims.claim_compaction(claim, anchor=anchor or self.anchor)
        self.carried = self.carried or won
        return won

    async def release_compaction(self, claim: FoldClaim) -> None:
        """Puts back the request mark only: the anchor stays (it describes the prompt sent)."""
        await self._claims.release_compaction(claim)


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
