"""The fold trigger: when a compaction request is due, and over which seqs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from worker.memory import (
    FoldLimits,
    FoldState,
    HistoryMessage,
    bound_history,
    fold_gap,
    plan_compaction,
)
from worker.settings import Settings

NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
LIMITS = FoldLimits(fold_min_tokens=2000, window_max_messages=25, retry_after=timedelta(minutes=5))


def page(first_seq: int, last_seq: int, tokens: int = 10) -> list[HistoryMessage]:
    """Newest first, alternating user (odd seq) and assistant (even seq)."""
    return [
        HistoryMessage(seq=s, role="user" if s % 2 else "assistant", content="w" * (4 * tokens))
        for s in range(last_seq, first_seq - 1, -1)
    ]


def test_no_request_while_the_unfolded_tail_is_small() -> None:
    assert plan_compaction(page(1, 10), FoldState(), LIMITS, now=NOW) is None


def test_a_request_is_due_when_the_unfolded_tokens_reach_the_trigger() -> None:
    plan = plan_compaction(page(1, 10, tokens=200), FoldState(), LIMITS, now=NOW)
    assert plan is not None
    assert (plan.folded_through, plan.through, plan.unfolded_tokens) == (0, 10, 2000)


def test_a_request_is_due_when_the_unfolded_count_reaches_half_the_window() -> None:
    assert plan_compaction(page(1, 12), FoldState(), LIMITS, now=NOW) is None
    plan = plan_compaction(page(1, 14), FoldState(), LIMITS, now=NOW)
    assert plan is not None and plan.through == 14


def test_only_messages_after_the_fold_count() -> None:
    state = FoldState(folded_through=20)
    assert plan_compaction(page(1, 30, tokens=100), state, LIMITS, now=NOW) is None
    plan = plan_compaction(page(1, 40, tokens=100), state, LIMITS, now=NOW)
    assert plan is not None
    assert (plan.folded_through, plan.through, plan.unfolded_tokens) == (20, 40, 2000)


def test_the_request_stops_before_an_open_question() -> None:
    plan = plan_compaction(page(1, 15, tokens=200), FoldState(), LIMITS, now=NOW)
    assert plan is not None
    assert plan.through == 14  # seq 15 is a question with no answer yet
    assert plan.unfolded_tokens == 14 * 200


def test_a_tail_that_runs_past_the_page_is_due() -> None:
    state = FoldState(folded_through=10)
    assert plan_compaction(page(12, 13), state, LIMITS, now=NOW) is not None
    assert plan_compaction(page(11, 13), state, LIMITS, now=NOW) is None


def test_a_pending_request_is_not_repeated() -> None:
    state = FoldState(folded_through=0, requested_through=14, requested_at=NOW)
    assert plan_compaction(page(1, 16), state, LIMITS, now=NOW + timedelta(minutes=4)) is None


def test_a_pending_request_is_repeated_after_the_retry_period() -> None:
    state = FoldState(folded_through=0, requested_through=14, requested_at=NOW)
    plan = plan_compaction(page(1, 16), state, LIMITS, now=NOW + timedelta(minutes=5))
    assert plan is not None and plan.through == 16


def test_a_new_request_once_the_fold_has_reached_the_last_one() -> None:
    state = FoldState(folded_through=14, requested_through=14, requested_at=NOW)
    plan = plan_compaction(page(1, 28), state, LIMITS, now=NOW)
    assert plan is not None and (plan.folded_through, plan.through) == (14, 28)


@pytest.mark.parametrize("history", [[], page(1, 1)])
def test_nothing_to_fold_in_an_empty_or_unanswered_history(history: list[HistoryMessage]) -> None:
    assert plan_compaction(history, FoldState(), LIMITS, now=NOW) is None


def test_the_fold_gap_names_unfolded_messages_the_window_dropped() -> None:
    window = bound_history(page(1, 40, tokens=100), Settings.at_defaults().window_limits)
    assert window.oldest_seq == 17
    gap = fold_gap(window, folded_through=5)
    assert gap is not None and (gap.first_seq, gap.last_seq, gap.count) == (6, 16, 11)
    assert fold_gap(window, folded_through=16) is None


def test_the_limits_are_the_settings_defaults() -> None:
    assert Settings.at_defaults().fold_limits == LIMITS
