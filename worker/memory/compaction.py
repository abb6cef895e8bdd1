"""The compaction enqueuer: the fold's half of the turn, beside the window it complements.

It plans with the pure trigger (:func:`plan_compaction`), claims the request on the
conversation's ``state`` item so two workers never both send and a pending request is
not repeated, then sends. A send that fails releases the claim, so the next turn asks
again instead of waiting out the retry period.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from worker.commands import ConverseCommand, compaction_request, encode_body
from worker.memory.fold import CompactionPlan, FoldLimits, FoldState, plan_compaction
from worker.memory.window import HistoryMessage
from worker.ports import FoldClaims, MessageSender


async def maybe_enqueue_compaction(
    command: ConverseCommand,
    newest_first: Sequence[HistoryMessage],
    state: FoldState,
    *,
    limits: FoldLimits,
    claims: FoldClaims,
    queue: MessageSender,
    now: datetime,
) -> CompactionPlan | None:
    """Send a compaction request if one is due and this worker wins the claim.

    Returns the plan that was sent, or None. Errors from the send propagate after the
    claim is released.
    """
    plan = plan_compaction(newest_first, state, limits, now=now)
    if plan is None:
        return None
    won = await claims.claim_compaction(
        command.conversation_id, plan, now=now, retry_after=limits.retry_after
    )
    if not won:
        return None
    try:
        await queue.send(
            encode_body(compaction_request(command, plan)),
            group_id=command.conversation_id,
            deduplication_id=f"compact:{command.conversation_id}:{plan.through}",
        )
    except BaseException:
        await claims.release_compaction(command.conversation_id, plan, claimed_at=now)
        raise
    return plan
