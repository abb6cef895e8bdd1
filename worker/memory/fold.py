"""The fold trigger: when the unfolded tail is large, ask for the older part to be folded.

The fold holds everything up to ``folded_through``; the window holds the newest
messages. A request is due when the unfolded tail (``seq > folded_through``)
reaches ``fold_min_tokens`` (estimated, untrimmed) or half of the window's message
cap, or runs past the page that was read. The count rule is the token rule's 2x
reasoning applied to the window's second limit: on a conversation of short
messages the tokens alone would let the tail outgrow the window, and that stretch
would be held by neither. Pure: the enqueuer (:mod:`worker.memory.compaction`) does
the claiming and sending.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from worker.memory.tokens import estimate_tokens
from worker.memory.window import HistoryMessage, Window


@dataclass(frozen=True, slots=True)
class FoldState:
    """The conversation's ``state`` item: the fold's mark and the last request made."""

    folded_through: int = 0
    summary: str | None = None
    requested_through: int | None = None
    requested_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class FoldLimits:
    """The trigger's knobs; :class:`worker.settings.Settings` holds their values."""

    fold_min_tokens: int
    window_max_messages: int
    retry_after: timedelta


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    """A compaction request that is due: fold ``(folded_through, through]``."""

    folded_through: int
    through: int
    unfolded_tokens: int


def plan_compaction(
    newest_first: Sequence[HistoryMessage],
    state: FoldState,
    limits: FoldLimits,
    *,
    now: datetime,
) -> CompactionPlan | None:
    """Return the request to send for this page of history, or None when none is due.

    ``newest_first`` is the page the turn read. ``through`` is the newest message that
    closes a whole exchange: the newest message when it is an answer (the command in
    hand is counsel's next question), else the one before the trailing open question.
    ``unfolded_tokens`` estimates ``(folded_through, through]`` as far as the page shows
    it. A request is not repeated while one is pending, unless it is older than
    ``retry_after``.
    """
    if not newest_first:
        return None
    newest = newest_first[0]
    folded = state.folded_through
    through = newest.seq if newest.role == "assistant" else newest.seq - 1
    if through <= folded:
        return None
    unfolded = [m for m in newest_first if m.seq > folded]
    unfolded_count = newest.seq - folded  # seqs are dense, so this holds beyond the page too
    runs_past_page = newest_first[-1].seq > folded + 1
    unfolded_tokens = sum(estimate_tokens(m.content) for m in unfolded)
    due = (
        unfolded_tokens >= limits.fold_min_tokens
        or 2 * unfolded_count >= limits.window_max_messages
        or runs_past_page
    )
    if not due or _pending(state, now=now, retry_after=limits.retry_after):
        return None
    return CompactionPlan(
        folded_through=folded,
        through=through,
        unfolded_tokens=sum(estimate_tokens(m.content) for m in unfolded if m.seq <= through),
    )


def _pending(state: FoldState, *, now: datetime, retry_after: timedelta) -> bool:
    """Pending: the fold has not reached the last request, made within the retry period."""
    if state.requested_through is None or state.requested_through <= state.folded_through:
        return False
    return state.requested_at is not None and now - state.requested_at < retry_after


@dataclass(frozen=True, slots=True)
class FoldGap:
    """Unfolded messages that fell outside the window: held by neither window nor fold."""

    first_seq: int
    last_seq: int

    @property
    def count(self) -> int:
        return self.last_seq - self.first_seq + 1


def fold_gap(window: Window, folded_through: int) -> FoldGap | None:
    """The stretch ``(folded_through, oldest kept)`` dropped before the fold absorbed it."""
    oldest = window.oldest_seq
    if oldest is None or oldest - 1 <= folded_through:
        return None
    return FoldGap(first_seq=folded_through + 1, last_seq=oldest - 1)
