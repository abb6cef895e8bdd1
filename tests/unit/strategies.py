"""Hypothesis strategies shared by the property tests of the memory core and the cache
lifetimes."""

from __future__ import annotations

from hypothesis import strategies as st

from worker.caching.lifetimes import PointShape, TurnShape
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


@st.composite
def turn_shapes(draw: st.DrawFn, *, min_points: int = 0) -> TurnShape:
    """``min_points`` to three points in prefix order, each reused with any likelihood,
    sharing no more of the prefix than the last point covers."""
    prefixes = sorted(draw(st.lists(st.integers(0, 20_000), min_size=min_points, max_size=3)))
    reused = draw(st.lists(st.floats(0, 1), min_size=3, max_size=3))
    shared = draw(st.integers(0, 20_000))
    points = tuple(PointShape(p, r) for p, r in zip(prefixes, reused, strict=False))
    return TurnShape(points, min(shared, prefixes[-1] if prefixes else 0))


#: Any history of gaps between questions, up to about two days each.
gap_lists = st.lists(st.floats(0, 200_000), max_size=20)
#: The model minimums the policy meets (1: a model with none to speak of).
minimums = st.sampled_from([1, 1024, 2048, 4096])
#: Every ``HISTORY_CACHE_TTL`` setting.
ttl_settings = st.sampled_from(["adaptive", "5m", "1h"])
