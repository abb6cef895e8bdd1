"""The compaction enqueuer: the fold's half of the turn, its claim, send and release.

It plans with the pure trigger (:func:`plan_compaction`), claims the request on the
conversation's ``state`` item, then sends it. The claim is conditional on the request
mark being the one the plan was made from (:class:`FoldClaims`), so the rule of when a
request is due lives only in :mod:`worker.memory.fold`, and two workers that planned
from the same state never both send. A send that fails puts the mark back, so the next
turn asks again instead of waiting out the retry period.

:func:`fold_request_sender` is how the stage sends: the contract's compaction request, with a
deduplication id that names the claim.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

from worker.memory.fold import CompactionPlan, FoldLimits, FoldState, plan_compaction
from worker.memory.history_window import HistoryMessage
from worker.ports import FoldClaims, MessageSender
from worker.turn.commands import ConverseCommand, compaction_request, encode_body


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
