"""Hypothesis strategies shared by the property tests of the memory core."""

from __future__ import annotations

from hypothesis import strategies as st

from worker.memory import HistoryMessage, WindowLimits


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


def message_contents(*, max_filler: int) -> st.SearchStrategy[str]:
    """A message's content: short text of any characters, filler words up to ``max_filler``
    characters, or a long paste of few distinct characters (trimmed, whitespace cuts)."""
    return st.one_of(
        st.text(max_size=60),
        st.integers(0, max_filler).map(lambda n: ("lorem ipsum dolor " * (n // 18 + 1))[:n]),
        st.text(alphabet="ab \n", min_size=3000, max_size=9000),
    )


@st.composite
def histories(draw: st.DrawFn, contents: st.SearchStrategy[str]) -> list[HistoryMessage]:
    """Up to 70 messages, dense seqs from 1, roles in any order (runs, leading answers)."""
    roles = draw(st.lists(st.sampled_from(["user", "assistant"]), max_size=70))
    return [
        HistoryMessage(seq=i, role=role, content=draw(contents))  # type: ignore[arg-type]
        for i, role in enumerate(roles, start=1)
    ]
