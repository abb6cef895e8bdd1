"""Hypothesis strategies shared by the property tests of the memory core."""

from __future__ import annotations

from hypothesis import strategies as st

from worker.memory import WindowLimits


def window_limits(*, max_tokens: int, message_max_tokens: int) -> st.SearchStrategy[WindowLimits]:
    """Any valid limits: a floor of 1-12, a cap above it, budgets from 1 up to the bounds."""
    return st.builds(
        lambda floor, extra, tokens, per_message: WindowLimits(
            max_tokens=tokens,
            max_messages=floor + extra,
            floor_messages=floor,
            message_max_tokens=per_message,
        ),
        floor=st.integers(1, 12),
        extra=st.integers(1, 20),
        tokens=st.integers(1, max_tokens),
        per_message=st.integers(1, message_max_tokens),
    )
