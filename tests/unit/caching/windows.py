"""The cache-aligned window as its tests take it: at the contract's default limits, with one
headroom, over a history given oldest first."""

from __future__ import annotations

from collections.abc import Sequence

from worker.caching.anchor import AlignedWindow, AnchorHeadroom, WindowAnchor, cache_aligned_window
from worker.memory import HistoryMessage, WindowLimits

LIMITS = WindowLimits(max_tokens=4000, max_messages=25, floor_messages=10, message_max_tokens=1000)
HEADROOM = AnchorHeadroom(tokens=1000, messages=6)


def aligned(
    messages: Sequence[HistoryMessage],
    *,
    folded_through: int,
    anchor: WindowAnchor | None = None,
    summary: str | None = None,
    limits: WindowLimits = LIMITS,
    headroom: AnchorHeadroom = HEADROOM,
) -> AlignedWindow:
    """The window :func:`cache_aligned_window` chooses from ``messages`` (oldest first)."""
    return cache_aligned_window(
        reversed(messages),
        limits,
        folded_through=folded_through,
        anchor=anchor,
        headroom=headroom,
        summary=summary,
    )
