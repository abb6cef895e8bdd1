"""The summary in force (fold-lagged): turn after turn over random conversations and fold
landings, the window holds everything after the mark of the summary it shows, shows the
snapshot while it keeps its anchor, keeps a fitting anchor when a fold lands, and takes the
newest summary when it must move. Also the view's TTLs (``with_cache_ttls``)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.caching.windows import aligned
from worker.caching.anchor import SummarySnapshot, WindowAnchor
from worker.memory import HistoryMessage, render_converse
from worker.memory.converse import cache_point_prefixes, previous_history_end, with_cache_ttls


def summary_of(mark: int) -> str:
    return f"the fold through {mark}"


@settings(max_examples=120, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 900), min_size=8, max_size=160),
    landings=st.lists(st.integers(0, 6), min_size=80, max_size=80),
)
def test_the_lagged_window_holds_everything_after_the_shown_mark(
    sizes: list[int], landings: list[int]
) -> None:
    history: list[HistoryMessage] = []
    folded, anchor = 0, None
    for turn, size in enumerate(sizes):
        seq = len(history) + 1
        role = "user" if seq % 2 else "assistant"
        history.append(HistoryMessage(seq, role, "w " * (2 * size)))  # type: ignore[arg-type]
        if turn % 2:
            continue  # a turn is served after each answer
        # The compactor lands a fold now and then, never past the newest message.
        if landings[turn // 2 % len(landings)] == 0:
            folded = max(folded, len(history) - 12)
        previous = anchor
        result = aligned(history, folded_through=folded, anchor=anchor, summary=summary_of(folded))
        shown = result.shown
        assert shown.folded_through <= folded
        assert shown.summary == summary_of(shown.folded_through)
        assert result.behind == folded - shown.folded_through
        seqs = {m.seq for m in result.window.messages}
        if result.outcome != "fallback":
            # Everything after the shown summary's mark is in the window, verbatim.
            assert set(range(shown.folded_through + 1, len(history) + 1)) <= seqs
            assert result.window.messages[0].seq <= shown.folded_through + 1
        if result.outcome == "kept":
            assert previous is not None and result.anchor == previous
            if previous.snapshot is not None:
                assert shown == previous.snapshot  # the summary shown is the snapshot
        else:
            assert shown == SummarySnapshot(summary_of(folded), folded)  # the newest
        if result.outcome == "reanchored":
            assert result.anchor is not None
            assert result.anchor.snapshot == SummarySnapshot(summary_of(folded), folded)
        anchor = result.anchor


def test_a_landing_fold_does_not_move_a_fitting_anchor() -> None:
    history = [
        HistoryMessage(seq, "user" if seq % 2 else "assistant", "w " * 200)  # type: ignore[arg-type]
        for seq in range(1, 41)
    ]
    anchor = WindowAnchor(27, 30, SummarySnapshot("old", 30))
    result = aligned(history, folded_through=36, anchor=anchor, summary="new")
    assert (result.outcome, result.anchor, result.shown) == ("kept", anchor, anchor.snapshot)
    grown = [*history, *(HistoryMessage(s, "user", "w " * 500) for s in range(41, 53))]
    moved = aligned(grown, folded_through=36, anchor=anchor, summary="new")
    assert (moved.outcome, moved.reason) == ("reanchored", "overflow")
    assert moved.shown == SummarySnapshot("new", 36)


def test_a_snapshot_past_the_newest_mark_is_not_in_force() -> None:
    history = [HistoryMessage(s, "user" if s % 2 else "assistant", "w") for s in range(1, 9)]
    anchor = WindowAnchor(1, 5, SummarySnapshot("ahead", 5))  # a fold mark moved back to 3
    result = aligned(history, folded_through=3, anchor=anchor, summary="s")
    assert result.outcome == "reanchored" and result.shown == SummarySnapshot("s", 3)


def test_the_views_points_carry_the_ttls_given_in_order_and_a_none_leaves_one_out() -> None:
    history = [
        HistoryMessage(s, "user" if s % 2 else "assistant", f"m{s} " * 50) for s in range(1, 7)
    ]
    window = aligned(history, folded_through=0).window
    view = render_converse(
        window, "now?", "summary " * 10, cache_history=True,
        previous_history_end=previous_history_end(window),
    )  # fmt: skip
    assert len(cache_point_prefixes(view)) == 2
    timed = with_cache_ttls(view, ("1h", "5m"))
    assert timed.system[1] == {"cachePoint": {"type": "default", "ttl": "1h"}}
    assert {"cachePoint": {"type": "default", "ttl": "5m"}} in timed.messages[-2]["content"]
    dropped = with_cache_ttls(view, ("5m", None))
    assert len(cache_point_prefixes(dropped)) == 1
    assert view.system[1] == {"cachePoint": {"type": "default"}}  # the input is unchanged
    with pytest.raises(ValueError, match="longer TTL"):
        with_cache_ttls(view, ("5m", "1h"))
    with pytest.raises(ValueError, match="3 TTLs for 2"):
        with_cache_ttls(view, ("5m", "5m", "5m"))
