"""The alternative the stage does not use: the cache-aligned window's anchor replayed from
the history alone, with no state beyond the fold mark.

It lives in the benchmark, which measures it against the stored anchor
(``bench/parts/cache_sim.py``), not in the worker, which never runs it: it needs no write,
but reads up to two pages a turn and, re-anchoring from where the fold was requested rather
than where it landed, sees less history for a larger bill (README, "Cutting the model's
bill"). Pure, like :mod:`worker.caching.anchor`, whose window it replays.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from worker.caching.anchor import (
    AlignedWindow,
    AnchorHeadroom,
    WindowAnchor,
    cache_aligned_window,
)
from worker.memory.history_window import HistoryMessage, WindowLimits


def derive_anchor(
    oldest_first: Sequence[HistoryMessage],
    limits: WindowLimits,
    *,
    folded_through: int,
    headroom: AnchorHeadroom,
) -> WindowAnchor | None:
    """The anchor replayed from the history alone: no state beyond the fold mark.

    Replays the window turn by turn as if the fold had landed on the first turn after
    ``folded_through`` (each turn end at or after it, before the newest, fed the anchor
    of the turn before), and returns the anchor in force after the last of them, to
    pass to :func:`cache_aligned_window` for this turn. Between fold landings it gives
    the same anchor on every turn, so the window keeps its start as a stored anchor
    does; but it re-anchors from where the fold was requested rather than where it
    landed, so the window is older and overflows sooner.

    Cost: the replay reads back up to ``max_messages`` (or the floor's run) before the
    fold mark, so it needs every message from about ``folded_through - max_messages``
    to the newest: up to twice a page, not the one page a stored anchor reads; and it
    runs the window once per turn since the fold mark (a dozen at the defaults). None
    when the unfolded tail alone exceeds the message cap (the turn falls back).
    """
    folded = max(folded_through, 0)
    if sum(1 for m in oldest_first if m.seq > folded) > limits.max_messages:
        return None
    anchor: WindowAnchor | None = None
    for end in _turn_ends(oldest_first, folded):
        anchor = cache_aligned_window(
            reversed(oldest_first[: end + 1]),
            limits,
            folded_through=folded,
            anchor=anchor,
            headroom=headroom,
        ).anchor
    return anchor


def derived_aligned_window(
    oldest_first: Sequence[HistoryMessage],
    limits: WindowLimits,
    *,
    folded_through: int,
    headroom: AnchorHeadroom,
) -> AlignedWindow:
    """:func:`cache_aligned_window` with the anchor from :func:`derive_anchor`."""
    anchor = derive_anchor(oldest_first, limits, folded_through=folded_through, headroom=headroom)
    return cache_aligned_window(
        reversed(oldest_first),
        limits,
        folded_through=folded_through,
        anchor=anchor,
        headroom=headroom,
    )


def _turn_ends(oldest_first: Sequence[HistoryMessage], folded: int) -> Iterator[int]:
    """Indexes of the answers that closed a turn (a question follows), at or after the
    fold mark, before the newest message."""
    for i in range(len(oldest_first) - 1):
        current, following = oldest_first[i], oldest_first[i + 1]
        if current.seq >= folded and current.role == "assistant" and following.role == "user":
            yield i
