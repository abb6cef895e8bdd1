"""The derived anchor (bench/parts/derived_anchor.py), the alternative the benchmark measures
against the stored one: replayed from the history alone, it holds from turn to turn and
re-anchors from where the fold was requested."""

from __future__ import annotations

from dataclasses import replace

from bench.parts.derived_anchor import derive_anchor, derived_aligned_window
from worker.caching.anchor import AnchorHeadroom, cache_aligned_window
from worker.memory import HistoryMessage, WindowLimits, fold_gap

LIMITS = WindowLimits(max_tokens=4000, max_messages=25, floor_messages=10, message_max_tokens=1000)
HEADROOM = AnchorHeadroom(tokens=1000, messages=6)


def exchanges(count: int, tokens: int = 100) -> list[HistoryMessage]:
    """``count`` question/answer pairs from seq 1, each message ``tokens`` estimated tokens."""
    return [
        HistoryMessage(
            seq, "user" if seq % 2 else "assistant", (f"m{seq} " * (4 * tokens))[: 4 * tokens]
        )
        for seq in range(1, 2 * count + 1)
    ]


def test_the_derived_anchor_holds_from_turn_to_turn_until_the_window_overflows() -> None:
    """With the history alone, consecutive turns find the same anchor (each replays the
    ones before), and it moves only when ``[A, newest]`` outgrows the 25 messages."""
    messages = exchanges(40, tokens=50)
    windows = [
        derived_aligned_window(messages[:newest], LIMITS, folded_through=50, headroom=HEADROOM)
        for newest in range(50, 66, 2)
    ]
    assert [(w.outcome, w.reason) for w in windows] == [
        ("reanchored", "first_turn"),
        *[("kept", None)] * 3,
        ("reanchored", "overflow"),
        *[("kept", None)] * 3,
    ]
    assert [w.window.oldest_seq for w in windows] == [33] * 4 + [41] * 4


def test_the_derived_anchor_replays_from_the_turn_that_requested_the_fold() -> None:
    """Replayed from the turn whose history ended at the fold mark, the window was
    smaller then, so the derived anchor reaches further back than a stored one chosen
    when the fold landed."""
    messages = exchanges(30, tokens=100)[:58]
    derived = derive_anchor(messages, LIMITS, folded_through=50, headroom=HEADROOM)
    stored = cache_aligned_window(
        reversed(messages), LIMITS, folded_through=50, anchor=None, headroom=HEADROOM
    ).anchor
    assert derived is not None and stored is not None
    assert derived.seq < stored.seq


def test_no_anchor_is_derived_when_the_unfolded_tail_alone_exceeds_the_cap() -> None:
    assert derive_anchor(exchanges(30), LIMITS, folded_through=0, headroom=HEADROOM) is None


def test_the_derived_window_keeps_the_properties_on_a_long_replay() -> None:
    messages = exchanges(60, tokens=60)
    limits = replace(LIMITS, max_tokens=3000)
    for newest in range(2, 121, 2):
        folded = max(0, newest - 14) // 8 * 8  # the fold lands every four turns
        result = derived_aligned_window(
            messages[:newest], limits, folded_through=folded, headroom=HEADROOM
        )
        assert result.outcome != "fallback"
        assert fold_gap(result.window, folded) is None
        assert result.window.kept <= limits.max_messages
        assert result.window.estimated_tokens <= limits.max_tokens
