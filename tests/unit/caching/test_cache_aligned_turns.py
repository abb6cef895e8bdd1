"""The cache-aligned window's reason to exist, turn after turn: a stable prompt prefix, and a
smaller bill than the sliding window's under the prompt-cache model."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.converse_rules import converse_errors
from tests.unit.caching.windows import HEADROOM, LIMITS, aligned
from worker.caching.anchor import (
    AlignedWindow,
    WindowAnchor,
    cache_aligned_window,
)
from worker.caching.bill_model import CacheRules, PromptCache, price_turn
from worker.memory import (
    FoldLimits,
    FoldState,
    HistoryMessage,
    bound_history,
    fold_gap,
    plan_compaction,
    render_converse,
)
from worker.memory.converse import ConverseView, previous_history_end

FOLD = FoldLimits(fold_min_tokens=2000, window_max_messages=25, retry_after=timedelta(minutes=5))
START = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
SUMMARY = "The matter so far: the parties, the agreement and its clauses in dispute. " * 24


def message(seq: int, tokens: int) -> HistoryMessage:
    role = "user" if seq % 2 else "assistant"
    return HistoryMessage(seq, role, (f"m{seq} clause " * tokens)[: 4 * tokens])  # type: ignore[arg-type]


def aligned_view(
    history: list[HistoryMessage],
    current: str,
    *,
    folded: int,
    anchor: WindowAnchor | None,
    summary: str | None = SUMMARY,
) -> tuple[AlignedWindow, ConverseView]:
    result = aligned(history, folded_through=folded, anchor=anchor, summary=summary)
    view = render_converse(
        result.window,
        current,
        result.shown.summary,
        cache_history=True,
        previous_history_end=previous_history_end(result.window),
    )
    return result, view


def up_to_history_point(view: ConverseView) -> list[tuple[int, str, str]]:
    """The view's text blocks before its history cache point: (message, role, text)."""
    blocks: list[tuple[int, str, str]] = []
    kept = 0
    for i, m in enumerate(view.messages):
        for block in m["content"]:
            if "cachePoint" in block:
                kept = len(blocks)
            else:
                blocks.append((i, m["role"], block["text"]))  # type: ignore[typeddict-item]
    return blocks[:kept]


def text_blocks(view: ConverseView) -> list[tuple[int, str, str]]:
    return [
        (i, m["role"], block["text"])  # type: ignore[typeddict-item]
        for i, m in enumerate(view.messages)
        for block in m["content"]
        if "text" in block
    ]


# --- the prefix holds from turn to turn -------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 1500).filter(lambda n: n < 700 or n > 1100), max_size=60),
    appended=st.lists(st.integers(1, 60), min_size=6, max_size=6),
    data=st.data(),
)
def test_the_previous_views_prefix_up_to_its_history_point_is_the_next_views_prefix(
    sizes: list[int], appended: list[int], data: st.DataObject
) -> None:
    """GIVEN any history and fold mark, WHEN three exchanges are appended one a turn with
    no fold landing and no overflow (small ones, within the headroom the re-anchored window
    left), THEN each turn keeps the anchor and its view up to the history cache point is,
    block for block, the start of the next's; the prompt-cache model reads that much."""
    sizes = sizes[: len(sizes) - len(sizes) % 2]
    history = [message(seq, tokens) for seq, tokens in enumerate(sizes, start=1)]
    folded = data.draw(st.integers(max(0, len(history) - 12), len(history)), label="folded")
    result, view = aligned_view(history, "q0 " * 20, folded=folded, anchor=None)
    # Unless the unfolded tail or the floor alone leave less room than the headroom (then
    # the next exchanges may overflow), three small exchanges fit without re-anchoring.
    assume(result.outcome == "reanchored")
    assume(result.window.estimated_tokens <= LIMITS.max_tokens - HEADROOM.tokens)
    assume(result.window.kept <= LIMITS.max_messages - HEADROOM.messages)
    cache = PromptCache()
    cost, cache = price_turn(cache, view.system, view.messages, at=0, rules=CacheRules())
    for turn in range(1, 4):
        question, answer = appended[2 * turn - 2], appended[2 * turn - 1]
        seq = len(history) + 1
        current = f"q{turn} " * question
        history += [HistoryMessage(seq, "user", view_current(view)), message(seq + 1, answer)]
        next_result, next_view = aligned_view(history, current, folded=folded, anchor=result.anchor)
        assert next_result.outcome == "kept"
        assert next_view.system == view.system
        prefix = up_to_history_point(view)
        assert text_blocks(next_view)[: len(prefix)] == prefix
        cost, cache = price_turn(
            cache, next_view.system, next_view.messages, at=60.0 * turn, rules=CacheRules()
        )
        cacheable = sum(-(-len(text) // 4) for _, _, text in prefix) + -(-len(SUMMARY) // 4)
        if cacheable >= CacheRules().min_prefix_tokens:
            assert cost.read >= cacheable
        result, view = next_result, next_view


def view_current(view: ConverseView) -> str:
    return view.messages[-1]["content"][-1]["text"]  # type: ignore[typeddict-item]


def test_a_fold_landing_keeps_a_fitting_anchor_and_the_prefix_with_its_summary() -> None:
    """GIVEN an anchor chosen under fold mark 30, WHEN the fold lands at 36 and the window
    still fits, THEN the anchor is kept, the prompt still shows the summary of mark 30
    (the snapshot) and the prefix up to the last turn's history point is unchanged."""
    history = [message(seq, 120) for seq in range(1, 41)]
    first, view = aligned_view(history, "q", folded=30, anchor=None)
    history += [HistoryMessage(41, "user", "q"), message(42, 120)]
    landed, landed_view = aligned_view(history, "r", folded=36, anchor=first.anchor, summary="new")
    assert landed.outcome == "kept" and landed.anchor == first.anchor
    assert landed.shown.summary == SUMMARY and landed.shown.folded_through == 30
    assert landed.behind == 6 and landed_view.system == view.system
    prefix = up_to_history_point(view)
    assert text_blocks(landed_view)[: len(prefix)] == prefix


def test_a_fold_landing_without_a_snapshot_moves_the_prefix_and_the_next_turn_holds_it() -> None:
    """An anchor stored without a snapshot (a summary too large, or stored before them)
    re-anchors when the fold lands, as before; the new anchor then holds again."""
    history = [message(seq, 120) for seq in range(1, 41)]
    first, view = aligned_view(history, "q", folded=30, anchor=None)
    assert first.anchor is not None
    bare = WindowAnchor(first.anchor.seq, first.anchor.folded_through)
    history += [HistoryMessage(41, "user", "q"), message(42, 120)]
    landed, landed_view = aligned_view(history, "r", folded=36, anchor=bare, summary="new")
    assert landed.reason == "fold_moved"
    assert text_blocks(landed_view)[:1] != up_to_history_point(view)[:1]
    history += [HistoryMessage(43, "user", "r"), message(44, 120)]
    held, held_view = aligned_view(history, "s", folded=36, anchor=landed.anchor, summary="new")
    assert held.outcome == "kept"
    prefix = up_to_history_point(landed_view)
    assert text_blocks(held_view)[: len(prefix)] == prefix


# --- a quick simulation: the bill, turn by turn -----------------------------------------------


@dataclass
class Replay:
    """Per turn: the sliding and cache-aligned bills, what the latter read from the cache,
    its outcomes; and the fold gaps of each."""

    sliding: list[float]
    aligned: list[float]
    aligned_read: list[int]
    outcomes: list[str]
    sliding_gaps: int
    aligned_gaps: int


def conversation(rng: random.Random, turns: int) -> list[HistoryMessage]:
    """Questions of 15-100 tokens (4 % pastes of 1,500-7,500), answers of 30-600."""
    messages = []
    for seq in range(1, 2 * turns + 1):
        if seq % 2:
            tokens = rng.randint(1500, 7500) if rng.random() < 0.04 else rng.randint(15, 100)
        else:
            tokens = rng.randint(30, 600)
        messages.append(message(seq, tokens))
    return messages


def replay(messages: list[HistoryMessage], rng: random.Random) -> Replay:
    """Turn ``t`` sends question ``2t - 1`` over the history before it, a minute after the
    last; a compaction request (the stage's own trigger) lands 1-3 turns after it is sent,
    and the summary changes with it."""
    state, landings = FoldState(), dict[int, list[int]]()
    anchor: WindowAnchor | None = None
    caches = {"sliding": PromptCache(), "aligned": PromptCache()}
    run = Replay([], [], [], [], 0, 0)
    for turn in range(1, len(messages) // 2 + 1):
        now = START + timedelta(minutes=turn)
        folded = max([state.folded_through, *landings.pop(turn, [])])
        if folded != state.folded_through:
            summary = f"Fold through {folded}. " + SUMMARY
            state = FoldState(folded, summary, state.requested_through, state.requested_at)
        history = messages[: 2 * turn - 2]
        current = messages[2 * turn - 2].content
        page = tuple(reversed(history[-(LIMITS.max_messages + 1) :]))
        plan = plan_compaction(page, state, FOLD, older_unread=len(history) > len(page), now=now)
        if plan is not None:
            landings.setdefault(turn + rng.randint(1, 3), []).append(plan.through)
            state = FoldState(state.folded_through, state.summary, plan.through, now)

        sliding = bound_history(page, LIMITS)
        sliding_view = render_converse(sliding, current, state.summary)
        result = cache_aligned_window(
            page, LIMITS, folded_through=state.folded_through, anchor=anchor, headroom=HEADROOM
        )
        anchor = result.anchor_to_store or anchor
        view = render_converse(
            result.window,
            current,
            state.summary,
            cache_history=True,
            previous_history_end=previous_history_end(result.window),
        )
        assert converse_errors(wire(view)) == []
        assert view.messages[-1]["content"][-1] == {"text": current}
        for name, shown, bills in (
            ("sliding", sliding_view, run.sliding),
            ("aligned", view, run.aligned),
        ):
            cost, caches[name] = price_turn(
                caches[name], shown.system, shown.messages, at=60.0 * turn, rules=CacheRules()
            )
            bills.append(cost.billed)
        run.aligned_read.append(cost.read)
        run.outcomes.append(result.outcome)
        run.sliding_gaps += fold_gap(sliding, state.folded_through) is not None
        run.aligned_gaps += fold_gap(result.window, state.folded_through) is not None
    return run


def wire(view: ConverseView) -> dict[str, Any]:
    return {"system": list(view.system), "messages": list(view.messages)}


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_over_a_conversation_the_cache_aligned_window_bills_less_than_the_sliding_one(
    seed: int,
) -> None:
    rng = random.Random(seed)
    run = replay(conversation(rng, turns=60), rng)
    # A turn that keeps its anchor reads the last turn's prompt (once it is past the
    # cache's minimum) and writes only the new exchange: below the sliding window's bill
    # for the same turn, whatever the sizes (a trimmed exchange is far below 3.6x the
    # 1,024 tokens read, where the 1.25x write would outweigh the 0.1x read).
    kept = [i for i, outcome in enumerate(run.outcomes) if outcome == "kept"]
    reading = [i for i in kept if run.aligned_read[i] > 0]
    assert len(reading) > len(run.outcomes) // 3
    assert all(run.aligned[i] < run.sliding[i] for i in reading)
    # Re-anchoring (a fold landing, an overflow) writes the prompt again; over the whole
    # conversation the kept turns more than pay for it.
    assert sum(run.aligned) < sum(run.sliding)
    # And no unfolded message is lost that the sliding window would have kept.
    assert run.aligned_gaps <= run.sliding_gaps
