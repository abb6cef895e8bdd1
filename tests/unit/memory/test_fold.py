"""The fold trigger: when a compaction request is due, and over which seqs."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from worker.memory import (
    FoldLimits,
    FoldState,
    HistoryMessage,
    bound_history,
    fold_gap,
    is_pending,
    plan_compaction,
)
from worker.memory.fold import CompactionPlan
from worker.settings import Settings

NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
LIMITS = FoldLimits(fold_min_tokens=2000, window_max_messages=25, retry_after=timedelta(minutes=5))


def page(first_seq: int, last_seq: int, tokens: int = 10) -> list[HistoryMessage]:
    """Newest first, alternating user (odd seq) and assistant (even seq)."""
    return [
        HistoryMessage(seq=s, role="user" if s % 2 else "assistant", content="w" * (4 * tokens))
        for s in range(last_seq, first_seq - 1, -1)
    ]


def plan(
    history: list[HistoryMessage],
    state: FoldState | None = None,
    *,
    older_unread: bool = False,
    now: datetime = NOW,
    limits: FoldLimits = LIMITS,
) -> CompactionPlan | None:
    return plan_compaction(
        history, state or FoldState(), limits, older_unread=older_unread, now=now
    )


def pending(through: int, *, folded_through: int = 0, at: datetime = NOW) -> FoldState:
    return FoldState(folded_through=folded_through, requested_through=through, requested_at=at)


def test_no_request_while_the_unfolded_tail_is_small() -> None:
    assert plan(page(1, 10)) is None


def test_a_request_is_due_when_the_unfolded_tokens_reach_the_trigger() -> None:
    due = plan(page(1, 10, tokens=200))
    assert due is not None
    assert (due.folded_through, due.through, due.unfolded_tokens) == (0, 10, 2000)


@pytest.mark.parametrize(("max_messages", "trigger"), [(25, 12), (24, 12), (26, 13), (41, 20)])
def test_the_count_trigger_is_half_the_window_message_cap_rounded_down(
    max_messages: int, trigger: int
) -> None:
    """Twice the trigger still fits in the window, as twice the token trigger does."""
    limits = replace(LIMITS, window_max_messages=max_messages)
    folded = FoldState(folded_through=2)

    def unfolded(count: int) -> list[HistoryMessage]:
        return [m for m in page(1, 2 + count) if m.seq > 2]

    assert plan(unfolded(trigger - 1), folded, limits=limits) is None
    assert plan(unfolded(trigger), folded, limits=limits) is not None
    assert 2 * trigger <= max_messages


def test_twelve_unfolded_messages_are_due_with_the_default_window() -> None:
    assert plan(page(1, 11)) is None
    due = plan(page(1, 12))
    assert due is not None and due.through == 12


def test_only_messages_after_the_fold_count() -> None:
    state = FoldState(folded_through=20)
    assert plan(page(1, 30, tokens=100), state) is None
    due = plan(page(1, 40, tokens=100), state)
    assert due is not None
    assert (due.folded_through, due.through, due.unfolded_tokens) == (20, 40, 2000)


def test_the_request_stops_before_an_open_question() -> None:
    due = plan(page(1, 15, tokens=200))
    assert due is not None
    assert due.through == 14  # seq 15 is a question with no answer yet
    assert due.unfolded_tokens == 14 * 200


def test_the_request_ends_on_the_newest_answer_when_questions_were_asked_twice() -> None:
    history = [HistoryMessage(16, "user", "again?"), *page(1, 15, tokens=200)]
    due = plan(history)
    assert due is not None and due.through == 14


def test_a_tail_that_runs_past_a_full_page_is_due() -> None:
    state = FoldState(folded_through=10)
    assert plan(page(12, 13), state, older_unread=True) is not None
    assert plan(page(11, 13), state, older_unread=True) is None


def test_a_malformed_item_at_seq_1_does_not_make_a_short_conversation_look_past_the_page() -> None:
    """Three stored messages, the first malformed and left out: the page read is the
    whole conversation (nothing older unread), so seq 2 being its oldest says nothing."""
    history = [HistoryMessage(3, "user", "q"), HistoryMessage(2, "assistant", "a")]
    assert plan(history, older_unread=False) is None


def test_unfolded_tokens_is_a_lower_bound_when_the_tail_runs_past_the_page() -> None:
    """Seqs 1-40 unfolded, the page shows 15-40: the request counts what the page shows."""
    due = plan(page(15, 40, tokens=10), older_unread=True)
    assert due is not None
    assert (due.folded_through, due.through) == (0, 40)
    assert due.unfolded_tokens == 26 * 10 < 40 * 10


# --- pipelined requests ---------------------------------------------------------------------


def test_a_pending_request_is_not_repeated() -> None:
    assert plan(page(1, 16), pending(14), now=NOW + timedelta(minutes=4)) is None


def test_a_further_request_leaves_while_one_is_pending_once_the_stretch_after_it_is_due() -> None:
    """GIVEN a request through 14 pending, WHEN the messages after 14 reach the count
    trigger themselves, THEN a request through the newest answer leaves, folding from the
    fold's current mark."""
    assert plan(page(1, 24), pending(14)) is None  # 10 messages after 14
    due = plan(page(1, 26), pending(14))  # 12 after 14
    assert due is not None
    assert (due.folded_through, due.through, due.unfolded_tokens) == (0, 26, 26 * 10)


def test_a_further_request_leaves_when_the_stretch_after_the_pending_one_reaches_the_tokens() -> (
    None
):
    history = [
        HistoryMessage(16, "assistant", "w" * 4 * 1000),
        HistoryMessage(15, "user", "w" * 4 * 1000),
        *page(1, 14),
    ]
    due = plan(history, pending(14))
    assert due is not None and due.through == 16


def test_a_request_never_covers_a_stretch_an_earlier_request_covered() -> None:
    """The stretch after the pending request is large, but its newest answer is the
    pending ``through`` itself: nothing new to ask for."""
    history = [HistoryMessage(17, "user", "w" * 4 * 5000), *page(1, 16)]
    assert plan(history, pending(16)) is None


def test_a_pending_request_is_sent_again_after_the_retry_period() -> None:
    due = plan(page(1, 16), pending(14), now=NOW + timedelta(minutes=5))
    assert due is not None and (due.folded_through, due.through) == (0, 16)


def test_an_overdue_request_is_sent_again_even_with_nothing_new() -> None:
    due = plan(page(1, 14), pending(14), now=NOW + timedelta(minutes=6))
    assert due is not None and (due.folded_through, due.through) == (0, 14)


def test_a_mark_without_a_readable_time_is_sent_again() -> None:
    state = FoldState(folded_through=0, requested_through=14, requested_at=None)
    due = plan(page(1, 14), state)
    assert due is not None and due.through == 14


def test_a_new_request_once_the_fold_has_reached_the_last_one() -> None:
    state = pending(14, folded_through=14)
    due = plan(page(1, 28), state)
    assert due is not None and (due.folded_through, due.through) == (14, 28)


def test_a_fold_partly_caught_up_counts_from_its_own_mark() -> None:
    """The compactor served an earlier request (fold at 14) while a later one (26) is
    pending: the next request still waits for the stretch after 26."""
    state = pending(26, folded_through=14)
    assert plan(page(1, 36), state) is None
    due = plan(page(1, 38), state)
    assert due is not None and (due.folded_through, due.through) == (14, 38)


@pytest.mark.parametrize(
    ("state", "now", "expected"),
    [
        (FoldState(), NOW, False),
        (pending(14), NOW + timedelta(minutes=4, seconds=59), True),
        (pending(14), NOW + timedelta(minutes=5), False),
        (pending(14, folded_through=14), NOW, False),
        (pending(14, folded_through=20), NOW, False),
        (FoldState(requested_through=14, requested_at=None), NOW, False),
    ],
)
def test_the_pending_rule(state: FoldState, now: datetime, expected: bool) -> None:
    assert is_pending(state, now=now, retry_after=timedelta(minutes=5)) is expected


def test_times_in_any_offset_are_compared_as_times() -> None:
    """09:00Z written as 10:00+01:00 is six minutes old at 09:06Z: overdue."""
    stamped = datetime.fromisoformat("2026-11-30T10:00:00+01:00")
    state = pending(14, at=stamped)
    assert not is_pending(state, now=NOW + timedelta(minutes=6), retry_after=timedelta(minutes=5))


@pytest.mark.parametrize("history", [[], page(1, 1)])
def test_nothing_to_fold_in_an_empty_or_unanswered_history(history: list[HistoryMessage]) -> None:
    assert plan(history) is None


def test_the_fold_gap_names_unfolded_messages_the_window_dropped() -> None:
    window = bound_history(page(1, 40, tokens=100), Settings.at_defaults().window_limits)
    assert window.oldest_seq == 17
    gap = fold_gap(window, folded_through=5)
    assert gap is not None and (gap.first_seq, gap.last_seq, gap.count) == (6, 16, 11)
    assert fold_gap(window, folded_through=16) is None


def test_the_limits_are_the_settings_defaults() -> None:
    limits = Settings.at_defaults().fold_limits
    assert limits == LIMITS
    assert limits.fold_min_messages == 12
