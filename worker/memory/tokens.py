"""The token estimate shared by the window and the fold: a budget signal, not billing."""

from __future__ import annotations


def estimate_tokens(text: str) -> int:
    """Return ``ceil(len(text) / 4)`` over Unicode code points.

    It undercounts real tokenizers on prose rather than overcounts, the safe
    direction for a budget that must leave room for the answer.
    """
    return -(-len(text) // 4)
