"""What the stage expects of the prompt cache for a view: its cache points (each one's TTL and
the estimated tokens before it), its estimated tokens, and the payload's ``cache`` block."""

from __future__ import annotations

from worker.caching.bills import CacheExpectation, ExpectedPoint
from worker.memory.converse import ConverseView, cache_points
from worker.memory.tokens import estimate_tokens


def view_points(view: ConverseView) -> tuple[ExpectedPoint, ...]:
    """The view's cache points in order: each one's TTL (``5m`` without one, Bedrock's
    default) and the estimated tokens before it."""
    return tuple(
        ExpectedPoint(point.ttl, point.prefix_tokens, point.prefix_digest)
        for point in cache_points(view)
    )


def view_tokens(view: ConverseView) -> int:
    """The estimated tokens of the view's text blocks."""
    tokens = 0
    for block in (*view.system, *(b for m in view.messages for b in m["content"])):
        if "cachePoint" not in block:
            tokens += estimate_tokens(block["text"])
    return tokens


def expectation(view: ConverseView, *, read: int) -> CacheExpectation | None:
    """The ``cache`` block of a payload whose view is ``view`` and which expects to read
    ``read`` estimated tokens; None when the view has no cache point."""
    points = view_points(view)
    if not points:
        return None
    return CacheExpectation(view_tokens(view), read, points)
