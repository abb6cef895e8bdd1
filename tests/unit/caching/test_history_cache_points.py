"""Cache points in the model-ready view (cache-aligned mode), and the converse checks of them."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.converse_rules import converse_errors
from tests.unit.strategies import window_limits
from worker.memory import HistoryMessage, Window, WindowLimits, bound_history, render_converse
from worker.memory.converse import PREVIOUS_END_MIN_DISTANCE, ConverseView, previous_history_end

LIMITS = WindowLimits(max_tokens=4000, max_messages=25, floor_messages=10, message_max_tokens=1000)
QUESTION = "What does clause 14.2 say about termination?"
POINT = {"cachePoint": {"type": "default"}}


def stored(*spec: tuple[str, str]) -> list[HistoryMessage]:
    return [
        HistoryMessage(seq=seq, role=role, content=content)  # type: ignore[arg-type]
        for seq, (role, content) in enumerate(spec, start=1)
    ]


def window_of(messages: list[HistoryMessage], limits: WindowLimits = LIMITS) -> Window:
    return bound_history(reversed(messages), limits)


def wire(view: ConverseView) -> dict[str, Any]:
    return {"system": list(view.system), "messages": list(view.messages)}


def points_in(view: ConverseView) -> int:
    blocks = [*view.system, *(b for m in view.messages for b in m["content"])]
    return sum("cachePoint" in block for block in blocks)


def without_points(view: ConverseView) -> dict[str, Any]:
    converse = wire(view)
    converse["messages"] = [
        {"role": m["role"], "content": [b for b in m["content"] if "cachePoint" not in b]}
        for m in converse["messages"]
    ]
    return converse


def test_history_ending_on_an_answer_gets_a_point_at_the_end_of_that_answer() -> None:
    window = window_of(stored(("user", "q1"), ("assistant", "a1")))
    view = render_converse(window, QUESTION, "The fold.", cache_history=True)
    assert wire(view) == {
        "system": [{"text": "The fold."}, POINT],
        "messages": [
            {"role": "user", "content": [{"text": "q1"}]},
            {"role": "assistant", "content": [{"text": "a1"}, POINT]},
            {"role": "user", "content": [{"text": QUESTION}]},
        ],
    }
    assert converse_errors(wire(view)) == []


def test_history_ending_on_a_question_gets_the_point_inside_that_user_message() -> None:
    window = window_of(stored(("user", "q1"), ("assistant", "a1"), ("user", "never answered")))
    view = render_converse(window, QUESTION, None, cache_history=True)
    assert view.messages[-1]["content"] == [{"text": "never answered"}, POINT, {"text": QUESTION}]
    assert converse_errors(wire(view)) == []


@pytest.mark.parametrize(
    "messages",
    [
        pytest.param([], id="empty"),
        pytest.param(stored(("assistant", "Hello, I am Mira."), ("user", " ")), id="all-left-out"),
    ],
)
def test_a_view_without_history_blocks_gets_no_history_point(
    messages: list[HistoryMessage],
) -> None:
    view = render_converse(window_of(messages), QUESTION, None, cache_history=True)
    assert wire(view) == {
        "system": [],
        "messages": [{"role": "user", "content": [{"text": QUESTION}]}],
    }


def test_the_default_mode_sets_no_history_point() -> None:
    window = window_of(stored(("user", "q1"), ("assistant", "a1")))
    assert render_converse(window, QUESTION, "s") == render_converse(
        window, QUESTION, "s", cache_history=False
    )
    assert points_in(render_converse(window, QUESTION, "s")) == 1


def test_previous_history_end_is_without_cache_history_refused() -> None:
    with pytest.raises(ValueError, match="only used with cache_history"):
        render_converse(window_of([]), QUESTION, None, previous_history_end=3)


def long_history(exchanges: int) -> list[HistoryMessage]:
    return stored(
        *[spec for i in range(exchanges) for spec in (("user", f"q{i}"), ("assistant", f"a{i}"))]
    )


def test_the_previous_turns_end_gets_a_point_when_the_lookback_would_not_reach_it() -> None:
    window = window_of(long_history(12))  # 24 blocks
    far = render_converse(window, QUESTION, "s", cache_history=True, previous_history_end=4)
    # Seq 4 is the second answer: 20 blocks before the history's end.
    assert far.messages[3]["content"] == [{"text": "a1"}, POINT]
    assert points_in(far) == 3
    near_end = 24 - PREVIOUS_END_MIN_DISTANCE + 1
    near = render_converse(window, QUESTION, "s", cache_history=True, previous_history_end=near_end)
    assert points_in(near) == 2
    for view in (far, near):
        assert converse_errors(wire(view)) == []


def test_the_previous_turns_end_is_the_last_block_shown_at_or_before_it() -> None:
    """A blank answer at the previous end has no block (its neighbours join one user
    message): the point follows the block before it, inside that message."""
    messages = long_history(12)
    messages[3] = HistoryMessage(4, "assistant", " ")
    view = render_converse(
        window_of(messages), QUESTION, None, cache_history=True, previous_history_end=4
    )
    assert view.messages[2]["content"] == [{"text": "q1"}, POINT, {"text": "q2"}]
    assert converse_errors(wire(view)) == []


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ([("user", "q1"), ("assistant", "a1"), ("user", "q2"), ("assistant", "a2")], 2),
        ([("user", "q1"), ("assistant", "a1"), ("user", "q2")], 2),
        ([("user", "q1"), ("assistant", "a1"), ("user", "q2"), ("user", "q2 again")], 3),
        ([("user", "q1"), ("assistant", "a1")], None),
        ([("assistant", "hello")], None),
        ([], None),
    ],
)
def test_the_previous_turn_ended_before_the_newest_question(
    spec: list[tuple[str, str]], expected: int | None
) -> None:
    assert previous_history_end(window_of(stored(*spec))) == expected


# --- the converse checks of cache points ---------------------------------------------------


def test_five_cache_points_are_refused_and_four_are_accepted() -> None:
    content: list[dict[str, Any]] = []
    for i in range(4):
        content += [{"text": f"block {i}"}, POINT]
    four = {"system": [], "messages": [{"role": "user", "content": content}]}
    assert converse_errors(four) == []
    five = {"system": [{"text": "s"}, POINT], "messages": four["messages"]}
    assert any("at most 4" in error for error in converse_errors(five))


def test_a_cache_point_first_in_a_message_is_refused() -> None:
    converse = {
        "system": [],
        "messages": [
            {"role": "user", "content": [{"text": "q1"}]},
            {"role": "assistant", "content": [POINT, {"text": "a1"}]},
            {"role": "user", "content": [{"text": QUESTION}]},
        ],
    }
    assert converse_errors(converse) == [
        "The cachePoint at messages.1.content.0 opens its message."
    ]


def test_a_cache_point_of_an_unknown_type_is_refused() -> None:
    converse = {
        "system": [{"text": "s"}, {"cachePoint": {"type": "forever"}}],
        "messages": [{"role": "user", "content": [{"text": QUESTION}]}],
    }
    assert converse_errors(converse) == ["A cachePoint's type must be default."]


# --- properties over adversarial histories -------------------------------------------------

contents = st.one_of(
    st.sampled_from(["", " ", "\u00a0", "\u2028"]),
    st.text(max_size=30),
    st.integers(3000, 6000).map(lambda n: ("lorem ipsum " * (n // 12 + 1))[:n]),
)


@st.composite
def histories(draw: st.DrawFn) -> list[HistoryMessage]:
    roles: list[str] = []
    role = draw(st.sampled_from(["user", "assistant"]))
    for _ in range(draw(st.integers(0, 14))):
        roles += [role] * draw(st.integers(1, 4))
        role = "assistant" if role == "user" else "user"
    return stored(*[(r, draw(contents)) for r in roles])


@settings(max_examples=300, deadline=None)
@given(
    messages=histories(),
    limits=window_limits(max_tokens=4000, message_max_tokens=1000),
    summary=st.one_of(st.none(), st.text(min_size=1, max_size=40)),
    data=st.data(),
)
def test_the_cache_aligned_view_is_the_default_view_plus_valid_cache_points(
    messages: list[HistoryMessage], limits: WindowLimits, summary: str | None, data: st.DataObject
) -> None:
    window = window_of(messages, limits)
    previous_end = data.draw(st.one_of(st.none(), st.integers(0, len(messages) + 1)))
    view = render_converse(
        window, QUESTION, summary, cache_history=True, previous_history_end=previous_end
    )
    default = render_converse(window, QUESTION, summary)

    # Accepted by botocore and the service (at most 4 points, none first in a message).
    assert converse_errors(wire(view)) == []
    # The same blocks as the default view, in the same messages: only cache points added.
    assert without_points(view) == wire(default)
    assert view.left_out == default.left_out
    # At most 3 in the view (one stays free for the model stage).
    assert points_in(view) <= 3
    # A point right before the current message's block, whenever history is shown.
    blocks = [b for m in view.messages for b in m["content"]]
    history_shown = len(blocks) > 1
    assert (blocks[-2:-1] == [POINT]) == history_shown
    # No two points in a row, and none ends the request.
    assert all(not ("cachePoint" in a and "cachePoint" in b) for a, b in pairwise(blocks))
    assert "text" in blocks[-1]
