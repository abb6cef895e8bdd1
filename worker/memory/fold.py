"""The fold trigger: when the unfolded tail is large, ask for the older part to be folded.

The fold holds everything up to ``folded_through``; the window holds the newest
messages. A request is due when the unfolded tail (``seq > folded_through``) reaches
``fold_min_tokens`` (estimated, untrimmed) or ``window_max_messages // 2`` messages, or
runs past the page that was read. The count rule is the token rule's 2x reasoning
applied to the window's second limit: twice the trigger still fits in the window.

Requests are pipelined. While one is pending (:func:`is_pending`), the next is sent
as soon as the messages after the pending ``through`` reach the trigger themselves, so
a slow compactor does not hold the tail back: the unfolded tail stays near one
compactor lag instead of two. Every request's ``through`` is above every earlier one's,
so no two requests cover the same stretch; a pending request older than the retry
period is sent again. Pure: the enqueuer (:mod:`worker.turn.writing`) claims and
sends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from worker.memory.history_window import HistoryMessage, Window
from worker.memory.tokens import estimate_tokens


@dataclass(frozen=True, slots=True)
class FoldState:
    """The conversation's ``state`` item: the fold's mark and the newest request made.

    ``request_version`` counts the writes of the request mark (``requested_through``,
    ``requested_at``); a claim is conditional on it, so two workers that planned from
    the same state never both send. ``unreadable_version``: the stored version was not a
    count (an operator's hand), so the claim is conditional on it as it stands instead: its
    DynamoDB type and, for a string or a number, its value; opaque here.
    """

    folded_through: int = 0
    summary: str | None = None
    requested_through: int | None = None
    requested_at: datetime | None = None
    request_version: int = 0
    unreadable_version: tuple[str, str | None] | None = None


@dataclass(frozen=True, slots=True)
class FoldLimits:
    """The trigger's knobs; :class:`worker.settings.Settings` holds their values."""

    fold_min_tokens: int
    window_max_messages: int
    retry_after: timedelta

    @property
    def fold_min_messages(self) -> int:
        """The count trigger: half the window's message cap, so twice it still fits."""
        return self.window_max_messages // 2


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    """A compaction request that is due: fold ``(folded_through, through]``.

    ``unfolded_tokens`` is the estimate of that stretch as far as the page read shows it:
    a lower bound when the unfolded tail runs past the page.
    """

    folded_through: int
    through: int
    unfolded_tokens: int


def is_pending(state: FoldState, *, now: datetime, retry_after: timedelta) -> bool:
    """The one pending rule: a request the fold has not reached yet, younger than
    ``retry_after``. A mark with no readable time is never pending (it is sent again)."""
    if state.requested_through is None or state.requested_through <= state.folded_through:
        return False
    return state.requested_at is not None and now - state.requested_at < retry_after


def plan_compaction(
    newest_first: Sequence[HistoryMessage],
    state: FoldState,
    limits: FoldLimits,
    *,
    older_unread: bool,
    now: datetime,
) -> CompactionPlan | None:
    """Return the request to send for this page of history, or None when none is due.

    ``newest_first`` is what the turn read; ``older_unread`` says whether older items exist
    that it did not read (the Query filled its page). ``through`` is the newest answer: it
    closes a whole exchange (what follows it is questions, and the command in hand is
    counsel's next one).

    - Nothing pending: due when the tail after ``folded_through`` reaches the trigger.
    - A request pending: due only when the stretch after the pending ``through`` reaches
      the trigger itself; the new ``through`` is above the pending one.
    - A request overdue (the fold has not reached it within ``retry_after``): sent again.
    """
    through = _newest_answer(newest_first)
    folded = state.folded_through
    if through is None or through <= folded:
        return None
    requested = state.requested_through
    if requested is None or requested <= folded:
        if not _reaches_trigger(newest_first, folded, limits, older_unread=older_unread):
            return None
    elif is_pending(state, now=now, retry_after=limits.retry_after):
        if through <= requested or not _reaches_trigger(
            newest_first, requested, limits, older_unread=older_unread
        ):
            return None
    elif through < requested:  # overdue, but this page ends below its stretch
        return None
    return CompactionPlan(
        folded_through=folded,
        through=through,
        unfolded_tokens=sum(
            estimate_tokens(m.content) for m in newest_first if folded < m.seq <= through
        ),
    )


def _newest_answer(newest_first: Sequence[HistoryMessage]) -> int | None:
    return next((m.seq for m in newest_first if m.role == "assistant"), None)


def _reaches_trigger(
    newest_first: Sequence[HistoryMessage],
    after: int,
    limits: FoldLimits,
    *,
    older_unread: bool,
) -> bool:
    """Whether the messages after ``after`` reach the trigger, judged from the items read.

    The stretch runs past the page when the page is full and its oldest message is still
    in the stretch (beyond its first seq); a short page never does, whatever its seqs say,
    so a malformed item left out of it cannot make a short conversation look long.
    """
    stretch = [m for m in newest_first if m.seq > after]
    if older_unread and newest_first and newest_first[-1].seq > after + 1:
        return True
    return (
        len(stretch) >= limits.fold_min_messages
        or sum(estimate_tokens(m.content) for m in stretch) >= limits.fold_min_tokens
    )


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
