"""The model-ready view: the shapes real histories take, then properties over adversarial ones.

Every view is checked against botocore's own validation of the Converse input and the
rules only the service enforces (``tests/converse_rules.py``).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.converse_rules import converse_errors
from tests.unit.strategies import window_limits
from worker.memory import (
    ConverseView,
    FoldState,
    HistoryMessage,
    LeftOut,
    Window,
    WindowLimits,
    bound_history,
    render_converse,
)
from worker.turn.commands import ConverseCommand, prompt_payload

LIMITS = WindowLimits(max_tokens=4000, max_messages=25, floor_messages=10, message_max_tokens=1000)
QUESTION = "What does clause 14.2 say about termination?"


def stored(*spec: tuple[str, str]) -> list[HistoryMessage]:
    """Oldest first: ("user" | "assistant", content), seqs from 1."""
    return [
        HistoryMessage(seq=seq, role=role, content=content)  # type: ignore[arg-type]
        for seq, (role, content) in enumerate(spec, start=1)
    ]


def view_of(
    messages: list[HistoryMessage],
    *,
    current: str = QUESTION,
    summary: str | None = None,
    limits: WindowLimits = LIMITS,
) -> tuple[Window, ConverseView]:
    window = bound_history(reversed(messages), limits)
    return window, render_converse(window, current, summary)


def wire(view: ConverseView) -> dict[str, Any]:
    return {"system": list(view.system), "messages": list(view.messages)}


def turns(view: ConverseView) -> list[tuple[str, list[str]]]:
    return [(m["role"], [block["text"] for block in m["content"]]) for m in view.messages]


# --- the shapes the issue found refused, each now accepted ------------------------------


def test_clean_question_answer_pairs_map_one_message_to_one_turn() -> None:
    _, view = view_of(
        stored(("user", "q1"), ("assistant", "a1"), ("user", "q2"), ("assistant", "a2"))
    )
    assert turns(view) == [
        ("user", ["q1"]),
        ("assistant", ["a1"]),
        ("user", ["q2"]),
        ("assistant", ["a2"]),
        ("user", [QUESTION]),
    ]
    assert view.left_out == ()
    assert converse_errors(wire(view)) == []


def test_a_greeting_stored_before_the_first_question_is_left_out_not_answered_for() -> None:
    _, view = view_of(
        stored(("assistant", "Hello, I am Mira."), ("user", "q1"), ("assistant", "a1"))
    )
    assert turns(view) == [("user", ["q1"]), ("assistant", ["a1"]), ("user", [QUESTION])]
    assert view.left_out == (LeftOut(1, "leading_answer"),)
    assert converse_errors(wire(view)) == []


def test_a_question_asked_again_becomes_two_blocks_of_one_user_turn() -> None:
    _, view = view_of(stored(("user", "q1"), ("user", "q1, again"), ("assistant", "a1")))
    assert turns(view) == [
        ("user", ["q1", "q1, again"]),
        ("assistant", ["a1"]),
        ("user", [QUESTION]),
    ]
    assert view.left_out == ()
    assert converse_errors(wire(view)) == []


def test_an_unanswered_last_question_shares_its_turn_with_the_current_message() -> None:
    _, view = view_of(stored(("user", "q1"), ("assistant", "a1"), ("user", "never answered")))
    assert turns(view) == [
        ("user", ["q1"]),
        ("assistant", ["a1"]),
        ("user", ["never answered", QUESTION]),
    ]
    assert converse_errors(wire(view)) == []


def test_an_answer_stored_in_two_parts_stays_two_blocks_in_order() -> None:
    _, view = view_of(stored(("user", "q1"), ("assistant", "part 1"), ("assistant", "part 2")))
    assert turns(view) == [
        ("user", ["q1"]),
        ("assistant", ["part 1", "part 2"]),
        ("user", [QUESTION]),
    ]
    assert converse_errors(wire(view)) == []


def test_an_empty_stored_answer_becomes_no_block_and_its_neighbours_join() -> None:
    _, view = view_of(
        stored(("user", "q1"), ("assistant", ""), ("user", "q2"), ("assistant", "a2"))
    )
    assert turns(view) == [("user", ["q1", "q2"]), ("assistant", ["a2"]), ("user", [QUESTION])]
    assert view.left_out == (LeftOut(2, "blank"),)
    assert converse_errors(wire(view)) == []


@pytest.mark.parametrize("blank", ["", " ", "\n\t", "\u00a0", "\u2028", "\u3000 \u2029"])
def test_whitespace_of_any_kind_is_blank(blank: str) -> None:
    _, view = view_of(stored(("user", "q1"), ("assistant", blank)))
    assert turns(view) == [("user", ["q1", QUESTION])]
    assert view.left_out == (LeftOut(2, "blank"),)


def test_an_answer_after_a_blank_first_question_has_no_question_in_view() -> None:
    _, view = view_of(
        stored(("user", " "), ("assistant", "a1"), ("user", "q2"), ("assistant", "a2"))
    )
    assert turns(view) == [("user", ["q2"]), ("assistant", ["a2"]), ("user", [QUESTION])]
    assert view.left_out == (LeftOut(1, "blank"), LeftOut(2, "leading_answer"))


def test_an_empty_window_gives_the_current_message_alone() -> None:
    window, view = view_of([])
    assert window.kept == 0
    assert turns(view) == [("user", [QUESTION])]
    assert view.system == ()


def test_trimmed_history_is_rendered_as_trimmed_and_the_current_message_never_is() -> None:
    paste = "The Supplier shall indemnify the Buyer. " * 2000
    window, view = view_of(stored(("user", paste), ("assistant", "Noted.")), current=paste)
    assert window.trimmed == 1
    assert turns(view)[0] == ("user", [window.messages[0].content])
    assert "tokens omitted" in view.messages[0]["content"][0]["text"]
    assert view.messages[-1]["content"][-1]["text"] == paste


# --- system and cache point ---------------------------------------------------------------


def test_the_summary_is_the_system_prompt_followed_by_one_cache_point() -> None:
    _, view = view_of(stored(("user", "q1"), ("assistant", "a1")), summary="The fold so far.")
    assert wire(view)["system"] == [
        {"text": "The fold so far."},
        {"cachePoint": {"type": "default"}},
    ]
    assert all(set(block) == {"text"} for m in view.messages for block in m["content"])
    assert converse_errors(wire(view)) == []


@pytest.mark.parametrize("summary", [None, "", "  \n", "\u00a0"])
def test_no_summary_or_a_blank_one_gives_an_empty_system(summary: str | None) -> None:
    _, view = view_of(stored(("user", "q1"), ("assistant", "a1")), summary=summary)
    assert view.system == ()


@pytest.mark.parametrize("blank", ["", "   ", "\u2028"])
def test_a_blank_current_message_is_refused_by_the_renderer(blank: str) -> None:
    with pytest.raises(ValueError, match="current message is blank"):
        view_of([], current=blank)


def test_the_payload_carries_the_view_and_counts_what_it_left_out() -> None:
    command = ConverseCommand(
        type="converse", command_id="c-1", conversation_id="m-1", message=QUESTION
    )
    window, view = view_of(stored(("assistant", "Hello."), ("user", "q1"), ("assistant", "")))
    payload = prompt_payload(command, window, FoldState(), view)
    assert payload["window"]["left_out"] == 2
    assert payload["window"]["kept"] == 3  # history is as it was: the window, whole
    assert [m["seq"] for m in payload["history"]] == [1, 2, 3]
    assert payload["converse"] == {
        "system": [],
        "messages": [{"role": "user", "content": [{"text": "q1"}, {"text": QUESTION}]}],
    }


# --- properties over adversarial histories and limits -------------------------------------

BLANKS = ["", " ", "\n", "\t \n", "\u00a0", "\u2028", "\u3000", " \u00a0\u2028 "]

contents = st.one_of(
    st.sampled_from(BLANKS),
    st.text(max_size=40),
    st.text(alphabet="ab \n\u00a0", min_size=1, max_size=12),
    st.integers(3000, 9000).map(lambda n: ("lorem ipsum dolor " * (n // 18 + 1))[:n]),
)


@st.composite
def runs_of_roles(draw: st.DrawFn) -> list[str]:
    """Roles in runs of any length, starting with either, so leading answers, repeated
    questions, multi-part answers and a trailing question all come up."""
    roles: list[str] = []
    role = draw(st.sampled_from(["user", "assistant"]))
    for _ in range(draw(st.integers(0, 12))):
        roles += [role] * draw(st.integers(1, 6))
        role = "assistant" if role == "user" else "user"
    return roles


@st.composite
def histories(draw: st.DrawFn) -> list[HistoryMessage]:
    return stored(*[(role, draw(contents)) for role in draw(runs_of_roles())])


limits_strategy = window_limits(max_tokens=4000, message_max_tokens=1000)

currents = st.one_of(
    st.text(min_size=1).filter(lambda t: not t.isspace()),
    st.sampled_from([" padded question \n", "\u00a0why?\u2028", "x" * 50_000]),
)
summaries = st.one_of(st.none(), st.sampled_from(BLANKS), st.text(min_size=1, max_size=80))


def blank(text: str) -> bool:
    return text.strip() == ""


@settings(max_examples=400, deadline=None)
@given(messages=histories(), limits=limits_strategy, current=currents, summary=summaries)
def test_the_view_follows_the_contract_for_any_history(
    messages: list[HistoryMessage], limits: WindowLimits, current: str, summary: str | None
) -> None:
    window, view = view_of(messages, current=current, summary=summary, limits=limits)
    kept = list(window.messages)

    # Accepted by botocore's model and by every rule the service adds.
    assert converse_errors(wire(view)) == []

    # Exactly the non-blank window messages after the first non-blank question, in order,
    # each once, then the current message; nothing else.
    first_question = next(
        (i for i, m in enumerate(kept) if m.role == "user" and not blank(m.content)), len(kept)
    )
    shown = [m for m in kept[first_question:] if not blank(m.content)]
    blocks = [(m["role"], block["text"]) for m in view.messages for block in m["content"]]
    assert blocks == [(m.role, m.content) for m in shown] + [("user", current)]

    # left_out names exactly the others, with the reason for each.
    expected_left_out = [
        LeftOut(m.seq, "blank" if blank(m.content) else "leading_answer")
        for m in kept
        if m not in shown
    ]
    assert list(view.left_out) == expected_left_out
    assert len(view.left_out) + len(shown) == window.kept

    # The last block is the current message, character for character.
    assert view.messages[-1]["content"][-1] == {"text": current}

    # The summary (if any) is the system prompt with one cache point, and nothing else has one.
    if summary is None or blank(summary):
        assert view.system == ()
    else:
        assert list(view.system) == [{"text": summary}, {"cachePoint": {"type": "default"}}]
    assert all(set(block) == {"text"} for m in view.messages for block in m["content"])
