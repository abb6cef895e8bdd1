"""The turn's decision is one pure function: :func:`plan_turn` over the page read, the current
message, when it was sent, and a frozen configuration. These tests pin what the plan holds in
each mode; the stage's, ``worker window``'s and the benchmark's behaviour rest on it."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from tests.conftest import settings as make_settings
from worker.caching.anchor import AnchorHeadroom, WindowAnchor
from worker.memory import (
    FoldState,
    HistoryMessage,
    WindowLimits,
    bound_history,
    fold_gap,
    render_converse,
)
from worker.planning import PlanConfig, TurnPlan, plan_turn
from worker.ports import HistoryPage

SLIDING = make_settings().plan_config
ALIGNED = make_settings(history_window_mode="cache-aligned").plan_config
SUMMARY = "The matter so far."
AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def page_of(
    exchanges: int,
    *,
    chars: int = 400,
    folded_through: int = 0,
    anchor: WindowAnchor | None = None,
    older: str | None = None,
) -> HistoryPage:
    """A page of whole exchanges, newest first, questions a minute apart."""
    messages = []
    for i in range(exchanges):
        at = AT + timedelta(minutes=i)
        messages += [
            HistoryMessage(2 * i + 1, "user", f"q{i} ".ljust(chars, "q"), created_at=at),
            HistoryMessage(2 * i + 2, "assistant", f"a{i} ".ljust(chars, "a")),
        ]
    summary = SUMMARY if folded_through else None
    return HistoryPage(
        state=FoldState(folded_through=folded_through, summary=summary),
        messages=tuple(reversed(messages)),
        older=older,
        anchor=anchor,
    )


def test_the_settings_give_the_plan_its_configuration_and_nothing_else() -> None:
    settings = make_settings(history_window_mode="cache-aligned", history_cache_ttl="1h")
    assert settings.plan_config == PlanConfig(
        limits=settings.window_limits,
        cache_aligned=True,
        headroom=settings.anchor_headroom,
        cache_ttl="1h",
        min_tokens=settings.prompt_cache_min_tokens,
    )


def test_a_sliding_plan_is_the_bounded_window_its_view_and_the_newest_summary() -> None:
    page = page_of(40, folded_through=10)
    plan = plan_turn(page, "And clause 9?", sent_at=AT, config=SLIDING)
    window = bound_history(page.messages, SLIDING.limits)
    assert plan.window == window
    assert plan.view == render_converse(window, "And clause 9?", SUMMARY)
    assert (plan.summary, plan.folded_through) == (SUMMARY, 10)
    assert plan.gap == fold_gap(window, 10)
    assert (plan.aligned, plan.ttls, plan.anchor_to_write) == (None, None, None)


def test_the_same_inputs_give_the_same_plan() -> None:
    page = page_of(30, folded_through=48)
    first = plan_turn(page, "Next?", sent_at=AT, config=ALIGNED)
    assert plan_turn(page, "Next?", sent_at=AT, config=ALIGNED) == first


def test_a_first_cache_aligned_turn_anchors_and_plans_to_store_the_anchor() -> None:
    plan = plan_turn(page_of(30, folded_through=48), "Next?", sent_at=AT, config=ALIGNED)
    assert plan.aligned is not None and plan.aligned.outcome == "reanchored"
    assert plan.anchor_to_write == plan.aligned.anchor
    assert plan.ttls is not None
    blocks = [*plan.view.system, *(b for m in plan.view.messages for b in m["content"])]
    points = [block for block in blocks if "cachePoint" in block]
    assert [p["cachePoint"].get("ttl") for p in points] == list(plan.ttls.ttls)


def test_an_anchor_the_state_item_already_holds_is_not_written_again() -> None:
    first = plan_turn(page_of(30, folded_through=48), "Next?", sent_at=AT, config=ALIGNED)
    assert first.anchor_to_write is not None
    again = page_of(30, folded_through=48, anchor=first.anchor_to_write)
    plan = plan_turn(again, "Next?", sent_at=AT, config=ALIGNED)
    assert plan.aligned is not None and plan.aligned.outcome == "kept"
    assert plan.anchor_to_write is None


def test_a_cache_aligned_plan_shows_the_snapshot_in_force_not_the_newest_fold() -> None:
    first = plan_turn(page_of(30, folded_through=48), "Next?", sent_at=AT, config=ALIGNED)
    anchor = first.anchor_to_write
    assert anchor is not None
    page = page_of(31, folded_through=48, anchor=anchor)
    folded = replace(page, state=FoldState(folded_through=52, summary="A newer summary."))
    plan = plan_turn(folded, "Next?", sent_at=AT, config=ALIGNED)
    assert plan.aligned is not None and plan.aligned.outcome == "kept"
    assert (plan.summary, plan.folded_through) == (SUMMARY, 48)
    assert plan.gap == fold_gap(plan.window, 52)


@pytest.mark.parametrize("config", [SLIDING, ALIGNED], ids=["sliding", "cache-aligned"])
def test_an_older_page_is_needed_only_when_the_floor_opens_on_an_answer_and_one_exists(
    config: PlanConfig,
) -> None:
    """A run of answers longer than the page: the floor's question is beyond it."""
    run = tuple(HistoryMessage(seq, "assistant", f"part {seq}") for seq in range(40, 1, -1))
    page = HistoryPage(state=FoldState(), messages=run, older="cursor")
    assert plan_turn(page, "Next?", sent_at=AT, config=config).needs_older
    last = replace(page, older=None)
    assert not plan_turn(last, "Next?", sent_at=AT, config=config).needs_older
    whole = page_of(20, older="cursor")
    assert not plan_turn(whole, "Next?", sent_at=AT, config=config).needs_older


def test_a_fixed_cache_lifetime_sets_every_point_whatever_the_pace() -> None:
    config = replace(ALIGNED, cache_ttl="1h")
    plan: TurnPlan = plan_turn(page_of(30, folded_through=48), "Next?", sent_at=AT, config=config)
    assert plan.ttls is not None and plan.ttls.why == "fixed"
    assert set(plan.ttls.ttls) == {"1h"}


def test_the_limits_and_headroom_come_from_the_configuration_alone() -> None:
    small = PlanConfig(
        limits=WindowLimits(
            max_tokens=2_000, max_messages=10, floor_messages=4, message_max_tokens=1_000
        ),
        cache_aligned=True,
        headroom=AnchorHeadroom(tokens=0, messages=0),
        cache_ttl="5m",
        min_tokens=1024,
    )
    plan = plan_turn(page_of(30), "Next?", sent_at=AT, config=small)
    assert plan.window.kept <= 10
    assert plan.window.estimated_tokens <= 2_000 or plan.window.floor_overrode_budget
