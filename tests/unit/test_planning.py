"""The turn's decision is one pure function: :func:`plan_turn` over the page read, the current
message, when it was sent, and a frozen configuration. These tests pin what the plan holds in
each mode; the stage's, ``worker window``'s and the benchmark's behaviour rest on it."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from localaws.bedrock_cache import STAND_IN_MODEL_ID
from tests.conftest import settings as make_settings
from tests.converse_rules import contract_digests
from worker.caching.anchor import AnchorHeadroom, WindowAnchor
from worker.caching.bills import ExpectedPoint, ModelUsage
from worker.memory import (
    FoldState,
    HistoryMessage,
    WindowLimits,
    bound_history,
    estimate_tokens,
    fold_gap,
    render_converse,
)
from worker.memory.converse import previous_history_end
from worker.planning import PlanConfig, TurnPlan, plan_turn
from worker.ports import HistoryPage
from worker.turn.commands import ConverseCommand, prompt_payload

SLIDING = make_settings().plan_config
ALIGNED = make_settings(history_window_mode="cache-aligned", model_id=STAND_IN_MODEL_ID).plan_config
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
    settings = make_settings(
        history_window_mode="cache-aligned", model_id=STAND_IN_MODEL_ID, history_cache_ttl="1h"
    )
    assert settings.plan_config == PlanConfig(
        limits=settings.window_limits,
        cache_aligned=True,
        headroom=settings.anchor_headroom,
        cache_ttl="1h",
        min_tokens=settings.cache_min_tokens,
        min_tokens_stated=True,
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


# --- the bill, observed: the payload's cache block and a cold cache -------------------------

#: A summary of 1,200 estimated tokens: its prefix reaches the model's minimum (1,024).
LONG_SUMMARY = "The matter so far. ".ljust(4 * 1_200, "s")
MESSAGE = "And clause 9?"


def payload_of(plan: TurnPlan) -> dict[str, object]:
    """The prompt payload the stage sends for ``plan``, built by the stage's own code."""
    command = ConverseCommand(
        type="converse", command_id="c-1", conversation_id="matter-1", message=MESSAGE
    )
    shown = (plan.summary, plan.folded_through)
    return prompt_payload(
        command, plan.window, plan.page.state, plan.view, shown=shown, cache=plan.cache
    )


def view_cache_points(plan: TurnPlan) -> list[tuple[str, int]]:
    """The view's cache points in order: (ttl, estimated tokens before it), read off the view."""
    points: list[tuple[str, int]] = []
    tokens = 0
    for block in [*plan.view.system, *(b for m in plan.view.messages for b in m["content"])]:
        if "cachePoint" not in block:
            tokens += estimate_tokens(block["text"])
        elif "text" not in block:  # (narrows the union to the cache point)
            points.append((block["cachePoint"].get("ttl", "5m"), tokens))
    return points


def sliding_page(summary: str | None) -> HistoryPage:
    """Six exchanges (the newest question at AT + 5 minutes) under ``summary``."""
    return replace(page_of(6), state=FoldState(folded_through=2, summary=summary))


NEWEST_QUESTION = AT + timedelta(minutes=5)


@pytest.mark.parametrize(
    ("after", "read"),
    [(timedelta(minutes=4), 1_200), (timedelta(minutes=6), 0)],
    ids=["within 5 minutes: the summary read", "after 5 minutes: nothing read"],
)
def test_a_sliding_payload_expects_its_summary_prefix_while_the_previous_question_is_recent(
    after: timedelta, read: int
) -> None:
    """GIVEN a sliding view whose summary (1,200 tokens) sets its one cache point, and no
    bills, WHEN the command comes 4 minutes after the previous question, THEN the payload's
    ``cache`` expects that prefix read; 6 minutes after, nothing."""
    page = sliding_page(LONG_SUMMARY)
    plan = plan_turn(page, MESSAGE, sent_at=NEWEST_QUESTION + after, config=SLIDING)
    prompt = estimate_tokens(LONG_SUMMARY) + estimate_tokens(MESSAGE)
    prompt += sum(estimate_tokens(m.content) for m in plan.window.messages)
    assert view_cache_points(plan) == [("5m", 1_200)]
    payload = payload_of(plan)
    [digest] = contract_digests(payload["converse"])
    assert payload["cache"] == {
        "prompt_tokens": prompt,
        "expected_read_tokens": read,
        "points": [{"ttl": "5m", "prefix_tokens": 1_200, "prefix_digest": digest}],
    }


def test_a_summary_below_the_minimum_is_a_point_expected_to_read_nothing() -> None:
    plan = plan_turn(sliding_page(SUMMARY), MESSAGE, sent_at=NEWEST_QUESTION, config=SLIDING)
    assert plan.cache is not None
    assert plan.cache.expected_read_tokens == 0
    [digest] = contract_digests(payload_of(plan)["converse"])
    assert plan.cache.points == (ExpectedPoint("5m", estimate_tokens(SUMMARY), digest),)


def test_a_view_without_a_cache_point_carries_no_cache_block() -> None:
    """The sliding view without a summary has no cache point: no ``cache`` in the payload."""
    plan = plan_turn(sliding_page(None), MESSAGE, sent_at=NEWEST_QUESTION, config=SLIDING)
    assert view_cache_points(plan) == []
    assert plan.cache is None
    assert "cache" not in payload_of(plan)


def test_a_cache_aligned_payload_names_its_points_in_view_order_with_their_ttls() -> None:
    """GIVEN a first cache-aligned turn (nothing shared yet) and the next one, which keeps
    its anchor a minute later, THEN each payload's points are the view's, TTL and prefix, in
    order; the first expects no read, the second its prefix up to where the first ended."""
    first = plan_turn(page_of(30, folded_through=48), MESSAGE, sent_at=AT, config=ALIGNED)
    assert first.cache is not None and first.ttls is not None
    assert len(view_cache_points(first)) == 2  # the summary's and the history's
    assert [(p.ttl, p.prefix_tokens) for p in first.cache.points] == view_cache_points(first)
    assert [p.ttl for p in first.cache.points] == [t for t in first.ttls.ttls if t is not None]
    assert first.cache.expected_read_tokens == 0

    page = page_of(31, folded_through=48, anchor=first.anchor_to_write)
    sent = AT + timedelta(minutes=31)  # the questions come a minute apart
    plan = plan_turn(page, MESSAGE, sent_at=sent, config=ALIGNED)
    assert plan.aligned is not None and plan.aligned.outcome == "kept"
    assert plan.cache is not None and plan.ttls is not None
    assert [(p.ttl, p.prefix_tokens) for p in plan.cache.points] == view_cache_points(plan)
    ended = previous_history_end(plan.window)
    shared = estimate_tokens(SUMMARY) + sum(
        estimate_tokens(m.content) for m in plan.window.messages if ended and m.seq <= ended
    )
    assert plan.cache.expected_read_tokens == shared == plan.ttls.read
    assert payload_of(plan)["cache"] == plan.cache.as_json()


def answered(plan: TurnPlan, seq: int, at: datetime) -> ModelUsage:
    """The bill of ``plan``'s prompt answered at ``at`` (stored as the answer at ``seq``): its
    real tokens are its estimate, nothing was read, its last point's prefix written at 5m."""
    assert plan.cache is not None
    written = plan.cache.points[-1].prefix_tokens
    return ModelUsage(
        seq=seq,
        input_tokens=plan.cache.prompt_tokens - written,
        read_tokens=0,
        write_tokens=written,
        written_5m=written,
        written_1h=0,
        answered_at=at,
        command_id="c-1",
        expected=plan.cache,
    )


def next_turn(sent_after: timedelta, *, billed: bool) -> TurnPlan:
    """The turn after a first cache-aligned one: its question asked at AT + 30 minutes and
    answered 10 seconds later (with its bill when ``billed``), the command ``sent_after``
    the answer."""
    first = plan_turn(page_of(30, folded_through=48), MESSAGE, sent_at=AT, config=ALIGNED)
    page = page_of(31, folded_through=48, anchor=first.anchor_to_write)
    answer_at = AT + timedelta(minutes=30, seconds=10)
    if billed:
        page = replace(page, usage=(answered(first, page.messages[0].seq, answer_at),))
    return plan_turn(page, MESSAGE, sent_at=answer_at + sent_after, config=ALIGNED)


def test_a_kept_window_re_anchors_when_the_bills_say_every_entry_is_dead() -> None:
    """GIVEN an anchor that fits and the newest answer's bill (5m entries), WHEN the command
    comes 10 minutes after the answer (within the hour: the gap alone says nothing), THEN the
    window re-anchors, reason ``cold``; 2 minutes after, it keeps its anchor."""
    cold = next_turn(timedelta(minutes=10), billed=True)
    assert cold.observed.cold
    assert cold.aligned is not None
    assert (cold.aligned.outcome, cold.aligned.reason) == ("reanchored", "cold")
    assert cold.cache is not None and cold.cache.expected_read_tokens == 0
    warm = next_turn(timedelta(minutes=2), billed=True)
    assert not warm.observed.cold
    assert warm.aligned is not None and warm.aligned.outcome == "kept"
    unbilled = next_turn(timedelta(minutes=10), billed=False)
    assert unbilled.aligned is not None and unbilled.aligned.outcome == "kept"


@pytest.mark.parametrize(
    ("after", "outcome"),
    [(timedelta(minutes=61), "reanchored"), (timedelta(minutes=59), "kept")],
    ids=["over an hour: cold", "59 minutes: kept"],
)
def test_without_bills_a_kept_window_re_anchors_over_an_hour_after_the_newest_question(
    after: timedelta, outcome: str
) -> None:
    plan = next_turn(after - timedelta(seconds=10), billed=False)  # measured from the question
    assert plan.aligned is not None
    assert (plan.aligned.outcome, plan.aligned.reason) == (
        outcome,
        "cold" if outcome == "reanchored" else None,
    )
    assert plan.observed.cold == (outcome == "reanchored")


@pytest.mark.parametrize("known_by", ["bills", "gap"])
def test_a_cold_re_anchor_takes_the_newest_summary_and_drops_the_lagged_snapshot(
    known_by: str,
) -> None:
    """GIVEN an anchor whose snapshot (the summary through 48) is in force while the fold has
    moved on to 52, WHEN the cache is cold, THEN the window re-anchors with the newest summary
    and its mark, and holds everything after it (``A <= F + 1``); warm, it keeps the snapshot."""
    first = plan_turn(page_of(30, folded_through=48), MESSAGE, sent_at=AT, config=ALIGNED)
    newer = FoldState(folded_through=52, summary="A newer summary.")
    page = replace(page_of(31, folded_through=48, anchor=first.anchor_to_write), state=newer)
    answer_at = AT + timedelta(minutes=30, seconds=10)
    billed = replace(page, usage=(answered(first, page.messages[0].seq, answer_at),))
    warm = plan_turn(billed, MESSAGE, sent_at=answer_at + timedelta(minutes=1), config=ALIGNED)
    assert warm.aligned is not None and warm.aligned.outcome == "kept"
    assert (warm.summary, warm.folded_through) == (SUMMARY, 48)

    if known_by == "bills":
        plan = plan_turn(billed, MESSAGE, sent_at=answer_at + timedelta(minutes=10),
                         config=ALIGNED)  # fmt: skip
    else:
        plan = plan_turn(page, MESSAGE, sent_at=answer_at + timedelta(minutes=61), config=ALIGNED)
    assert plan.aligned is not None
    assert (plan.aligned.outcome, plan.aligned.reason) == ("reanchored", "cold")
    assert (plan.summary, plan.folded_through) == ("A newer summary.", 52)
    assert plan.window.messages[0].seq <= 52 + 1
    assert plan.anchor_to_write is not None and plan.anchor_to_write.folded_through == 52
    snapshot = plan.anchor_to_write.snapshot
    assert snapshot is not None and snapshot.summary == "A newer summary."


def test_an_answer_stored_in_parts_carries_its_bill_on_the_first_part() -> None:
    """The writer stores the bill on the first part of an answer in parts (the contract):
    that bill says what is alive as well as one on a whole answer."""
    first = plan_turn(page_of(30, folded_through=48), MESSAGE, sent_at=AT, config=ALIGNED)
    page = page_of(31, folded_through=48, anchor=first.anchor_to_write)
    answer_at = AT + timedelta(minutes=30, seconds=10)
    bill = answered(first, page.messages[0].seq, answer_at)
    second_part = HistoryMessage(page.messages[0].seq + 1, "assistant", "The rest of the answer.")
    parts = replace(page, messages=(second_part, *page.messages), usage=(bill,))
    plan = plan_turn(parts, MESSAGE, sent_at=answer_at + timedelta(minutes=10), config=ALIGNED)
    assert plan.observed.alive == ()
    assert plan.aligned is not None and plan.aligned.reason == "cold"


def test_a_sliding_payload_expects_no_read_of_a_summary_the_fold_has_replaced() -> None:
    """GIVEN the previous prompt's summary point (1,200 tokens) alive by its bill, WHEN the
    fold has moved and the new summary happens to count as many tokens, THEN nothing of it
    can be read: the payload expects no read."""
    page = sliding_page(LONG_SUMMARY)
    asked = NEWEST_QUESTION + timedelta(minutes=1)
    previous = plan_turn(page, MESSAGE, sent_at=asked, config=SLIDING)
    assert previous.cache is not None
    bill = ModelUsage(
        seq=page.messages[0].seq,
        input_tokens=previous.cache.prompt_tokens - 1_200,
        read_tokens=0,
        write_tokens=1_200,
        written_5m=1_200,
        written_1h=0,
        answered_at=asked + timedelta(seconds=5),
        command_id="c-1",
        expected=previous.cache,
    )
    moved = FoldState(folded_through=4, summary="A newer summary. ".ljust(len(LONG_SUMMARY), "n"))
    later = replace(page, state=moved, usage=(bill,))
    plan = plan_turn(later, MESSAGE, sent_at=asked + timedelta(minutes=1), config=SLIDING)
    assert plan.cache is not None and plan.cache.expected_read_tokens == 0
