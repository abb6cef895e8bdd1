"""The window rules, case by case from the story, then as properties over random histories."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.histories import EndlessHistory
from tests.unit.strategies import histories, message_contents, window_limits
from worker.memory import (
    HistoryMessage,
    Window,
    WindowLimits,
    bound_history,
    estimate_tokens,
    omission_marker,
    trim_message,
)
from worker.settings import Settings

DEFAULTS = Settings.at_defaults().window_limits
MARKER = re.compile(r"\n… (\d+) tokens omitted …\n")


def history(*spec: tuple[str, int]) -> list[HistoryMessage]:
    """Oldest first: ("u", tokens) / ("a", tokens) with content of exactly that estimate."""
    roles = {"u": "user", "a": "assistant"}
    return [
        HistoryMessage(seq=i, role=roles[role], content="x" * (4 * tokens))  # type: ignore[arg-type]
        for i, (role, tokens) in enumerate(spec, start=1)
    ]


def exchanges(count: int, tokens: int = 10) -> list[HistoryMessage]:
    return history(*[(r, tokens) for _ in range(count) for r in ("u", "a")])


def window_of(messages: list[HistoryMessage], limits: WindowLimits = DEFAULTS) -> Window:
    return bound_history(reversed(messages), limits)


def seqs(window: Window) -> list[int]:
    return [m.seq for m in window.messages]


# --- the story's cases -------------------------------------------------------------------


def test_a_pasted_contract_is_trimmed_head_and_tail_with_the_count_of_what_was_left_out() -> None:
    contract = "".join(f"Clause {i}. The parties agree to term {i}.\n" for i in range(2000))
    trimmed = trim_message(contract, 1000)
    head, count, tail = MARKER.split(trimmed)
    assert contract.startswith(head) and contract.endswith(tail)
    assert 1440 <= len(head) <= 1600 and 1440 <= len(tail) <= 1600
    left_out = contract[len(head) : len(contract) - len(tail)]
    assert int(count) == estimate_tokens(left_out)
    assert trimmed == head + omission_marker(int(count)) + tail


def test_the_trim_cut_lands_on_whitespace_when_a_gap_is_near() -> None:
    words = " ".join(["indemnification"] * 2000)
    head, _, tail = MARKER.split(trim_message(words, 1000))
    assert head.endswith("indemnification") and tail.startswith("indemnification")


def test_a_message_within_its_budget_is_untouched() -> None:
    text = "y" * 4000  # exactly 1000 tokens
    assert trim_message(text, 1000) is text


def test_a_lowered_message_budget_caps_head_and_tail_at_half_of_it() -> None:
    text = "z" * 10_000
    head, _, tail = MARKER.split(trim_message(text, 100))
    assert len(head) == len(tail) == 4 * 50


def test_the_floor_of_ten_survives_when_the_ten_alone_exceed_the_budget() -> None:
    messages = history(*[(r, 900) for _ in range(10) for r in ("u", "a")])
    window = window_of(messages)
    assert seqs(window) == list(range(11, 21))
    assert window.estimated_tokens == 10 * 900 > DEFAULTS.max_tokens
    assert window.floor_overrode_budget
    assert window.dropped == 10


def test_the_floor_edge_moves_out_to_the_question_when_it_opens_on_an_answer() -> None:
    # u a a a ... : the tenth newest is an answer whose question is two further back.
    messages = history(("u", 5), ("u", 5), ("a", 900), ("a", 900), *[("u", 900), ("a", 900)] * 4)
    window = window_of(messages)
    assert window.messages[0].role == "user"
    assert seqs(window) == list(range(2, 13))


def test_the_budget_extends_in_whole_exchanges_and_never_opens_on_an_answer() -> None:
    window = window_of(exchanges(20, tokens=100))
    assert window.kept == 24  # 25 would split an exchange
    assert window.messages[0].role == "user"
    assert window.estimated_tokens == 2400


def test_the_first_exchange_that_does_not_fit_ends_the_window() -> None:
    # Oldest first: a small exchange, a big one (3,600 tokens), then the floor's ten (500).
    big = [("u", 900), ("a", 900), ("a", 900), ("a", 900)]
    messages = history(("u", 10), ("a", 10), *big, *[("u", 50), ("a", 50)] * 5)
    window = window_of(messages)
    assert seqs(window) == list(range(7, 17))  # the small exchange would fit, but is older
    assert window.dropped == 6


def test_the_window_holds_at_most_twenty_five_messages() -> None:
    window = window_of(history(*[("a", 1)] * 3, *[("u", 1)] * 100))
    assert window.kept == 25
    assert window.dropped == 103 - 25


def test_an_empty_history_gives_an_empty_window() -> None:
    window = window_of([])
    assert window == Window(
        messages=(), dropped=0, trimmed=0, estimated_tokens=0, floor_overrode_budget=False
    )


def test_a_short_history_is_kept_whole() -> None:
    window = window_of(exchanges(3))
    assert seqs(window) == [1, 2, 3, 4, 5, 6]
    assert window.dropped == 0 and not window.floor_overrode_budget


def test_leading_assistant_messages_form_an_exchange_of_their_own() -> None:
    messages = history(("a", 10), ("a", 10), *[("u", 10), ("a", 10)] * 6)
    assert seqs(window_of(messages)) == list(range(1, 15))


def test_leading_assistant_messages_that_do_not_fit_are_dropped_together() -> None:
    messages = history(("a", 3900), ("a", 10), *[("u", 10), ("a", 10)] * 6)
    assert seqs(window_of(messages, replace(DEFAULTS, message_max_tokens=4000))) == list(
        range(3, 15)
    )


def test_trimmed_messages_are_counted_and_costed_after_trimming() -> None:
    messages = history(("u", 10), ("a", 5000), *[("u", 10), ("a", 10)] * 5)
    window = window_of(messages)
    assert window.trimmed == 1
    trimmed = window.messages[1]
    assert MARKER.search(trimmed.content)
    assert window.estimated_tokens == 10 * 11 + estimate_tokens(trimmed.content)


@pytest.mark.parametrize(
    ("limits", "expected_kept"),
    [
        (replace(DEFAULTS, max_tokens=30, max_messages=25, floor_messages=4), 4),
        (replace(DEFAULTS, max_tokens=95, max_messages=25, floor_messages=4), 8),
        (replace(DEFAULTS, max_tokens=100, max_messages=25, floor_messages=4), 10),
        (replace(DEFAULTS, max_tokens=4000, max_messages=5, floor_messages=2), 4),
        (replace(DEFAULTS, max_tokens=4000, max_messages=25, floor_messages=1), 24),
    ],
)
def test_the_limits_come_from_the_settings(limits: WindowLimits, expected_kept: int) -> None:
    assert window_of(exchanges(30, tokens=10), limits).kept == expected_kept


def test_reading_stops_once_the_window_is_closed() -> None:
    history = EndlessHistory(10**9, "user", "c")
    window = bound_history(iter(history), DEFAULTS)
    assert window.kept <= DEFAULTS.max_messages
    assert history.read <= DEFAULTS.max_messages + 1


# --- why the window ends where it does -------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "limits", "closed_by"),
    [
        pytest.param(exchanges(5), DEFAULTS, "history", id="the whole history fits"),
        pytest.param(exchanges(20), DEFAULTS, "messages", id="the 25-message cap"),
        pytest.param(exchanges(12, tokens=300), DEFAULTS, "tokens", id="the token budget"),
        pytest.param(
            history(*[("u", 3000), ("a", 3000)] * 3, *[("u", 10), ("a", 10)] * 5),
            DEFAULTS,
            "tokens",
            id="trimmed pastes close it on tokens far below the message cap",
        ),
        pytest.param(
            history(*[("u", 1000), ("a", 1000)] * 8), DEFAULTS, "floor", id="the floor alone"
        ),
        pytest.param(
            history(("a", 10), *[("a", 10)] * 3, ("u", 10), ("a", 10)),
            replace(DEFAULTS, floor_messages=2),
            "history",
            id="answers before the first question are taken and the history ends",
        ),
    ],
)
def test_the_window_says_why_it_ends_where_it_does(
    messages: list[HistoryMessage], limits: WindowLimits, closed_by: str
) -> None:
    window = window_of(messages, limits)
    assert window.closed_by == closed_by
    assert window.floor_overrode_budget == (closed_by == "floor")


def test_a_page_that_ends_mid_exchange_closes_the_window_on_the_history() -> None:
    """The older part of the page was not read: half an exchange is not taken, and the
    window says the input ran out, not a limit."""
    page = list(reversed(exchanges(20)))[:15]  # newest first, cut after an answer
    window = bound_history(page, DEFAULTS)
    assert window.closed_by == "history"
    assert window.kept == 14


# --- properties over random histories -----------------------------------------------------

limits_strategy = window_limits(max_tokens=3000, message_max_tokens=600)

contents = message_contents(max_filler=12_000)


def first_user_at_or_before(messages: list[HistoryMessage], index: int) -> int | None:
    return next((i for i in range(index, -1, -1) if messages[i].role == "user"), None)


def older_exchange(messages: list[HistoryMessage], start: int) -> list[HistoryMessage]:
    """The exchange just older than ``messages[start]``: answers back to their question."""
    if start == 0:
        return []
    question = first_user_at_or_before(messages, start - 1)
    return messages[(question or 0) : start]


@settings(max_examples=400, deadline=None)
@given(messages=histories(contents), limits=limits_strategy)
def test_window_properties(messages: list[HistoryMessage], limits: WindowLimits) -> None:
    window = window_of(messages, limits)
    kept = len(window.messages)
    start = len(messages) - kept
    originals = messages[start:]

    # A contiguous newest suffix, oldest first, with dropped = everything older.
    assert [m.seq for m in window.messages] == [m.seq for m in originals]
    assert window.dropped == start

    # The floor is held.
    assert kept >= min(limits.floor_messages, len(messages))

    # The oldest kept is a question whenever the question it belongs to exists.
    if kept and window.messages[0].role == "assistant":
        assert first_user_at_or_before(messages, start) is None

    # Costs are what the window holds; each trimmed message is prefix + one marker + suffix.
    assert window.estimated_tokens == sum(estimate_tokens(m.content) for m in window.messages)
    trimmed = 0
    for kept_message, original in zip(window.messages, originals, strict=True):
        if kept_message.content == original.content:
            # Whole: within its budget, or so little over it that the marker would outweigh
            # the cut (rule 1: a trim that would not shorten leaves the message whole).
            within = estimate_tokens(original.content) <= limits.message_max_tokens
            assert within or not_shortened_by_a_trim(original.content, limits.message_max_tokens)
            continue
        trimmed += 1
        assert_is_trim_of(kept_message.content, original.content, limits.message_max_tokens)
    assert window.trimmed == trimmed

    if not messages:
        assert window.kept == 0
        return

    # Floor messages: the newest floor (moved out to a question) whatever they cost.
    floor_start = len(messages) - min(limits.floor_messages, len(messages))
    floor_edge = first_user_at_or_before(messages, floor_start)
    floor_edge = 0 if floor_edge is None else floor_edge
    if kept > len(messages) - floor_edge:
        # Extended past the floor: within both budgets.
        assert kept <= limits.max_messages
        assert window.estimated_tokens <= limits.max_tokens
    else:
        assert start == floor_edge

    # Maximal: the next older exchange would not fit (or there is none).
    nxt = older_exchange(messages, start)
    if nxt and not window.floor_overrode_budget:
        cost = sum(estimate_tokens(trim_message(m.content, limits.message_max_tokens)) for m in nxt)
        assert (
            kept + len(nxt) > limits.max_messages
            or window.estimated_tokens + cost > limits.max_tokens
        )


def not_shortened_by_a_trim(original: str, max_tokens: int) -> bool:
    """A trim keeps at most ``4·H`` characters at each end plus a marker counting at most
    the whole message: if even that is not shorter, no trim of it is."""
    keep = 4 * min(400, max_tokens // 2)
    return len(original) <= 2 * keep + len(omission_marker(estimate_tokens(original)))


def assert_is_trim_of(trimmed: str, original: str, max_tokens: int) -> None:
    pieces = MARKER.split(trimmed)
    marker_count = len(MARKER.findall(trimmed)) - len(MARKER.findall(original))
    assert marker_count >= 1
    keep = 4 * min(400, max_tokens // 2)
    # Find the split whose head is a prefix and tail a suffix of the original.
    for i in range(1, len(pieces), 2):
        head = "".join(
            p if j % 2 == 0 else omission_marker(int(p)) for j, p in enumerate(pieces[:i])
        )
        tail = "".join(
            p if j % 2 == 0 else omission_marker(int(p)) for j, p in enumerate(pieces[i + 1 :])
        )
        n = int(pieces[i])
        if original.startswith(head) and original.endswith(tail):
            left_out = original[len(head) : len(original) - len(tail)]
            if len(head) + len(left_out) + len(tail) == len(original):
                assert n == estimate_tokens(left_out)
                assert keep - keep // 10 <= len(head) <= keep
                assert keep - keep // 10 <= len(tail) <= keep
                return
    pytest.fail("trimmed message is not the original's prefix + one marker + suffix")


def test_the_trim_cut_moves_inward_by_at_most_a_tenth() -> None:
    # The only whitespace near the head cut is 200 characters in: further than 1600 // 10.
    text = "h" * 1400 + " " + "h" * 8000 + " " + "t" * 1400
    head, _, tail = MARKER.split(trim_message(text, 1000))
    assert len(head) == 1600 and len(tail) == 1600


def test_answers_at_the_end_of_a_page_are_not_mistaken_for_the_conversations_start() -> None:
    """A page (malformed items left out) ends on answers whose question was not read:
    they are not an exchange of their own, so the window never opens on them."""
    page = [m for m in exchanges(50, tokens=1) if m.seq >= 76 and m.seq not in (90, 92)]
    window = bound_history(reversed(page), DEFAULTS)
    assert window.messages[0].role == "user"
    assert window.oldest_seq == 77


# --- edges of the rules as first built ------------------------------------------------------


@pytest.mark.parametrize("max_tokens", [1, 2, 10, 100, 600, 804, 805])
def test_a_trim_never_makes_a_message_longer(max_tokens: int) -> None:
    """Just over a small budget, head + marker + tail would outweigh the message: it is
    left whole (rule 1). Further over, the trim shortens it as usual."""
    just_over = "x" * (4 * max_tokens + 1)
    assert trim_message(just_over, max_tokens) is just_over
    far_over = "x" * (8 * max_tokens + 200)
    assert MARKER.search(trim_message(far_over, max_tokens))
    assert len(trim_message(far_over, max_tokens)) < len(far_over)


def test_above_805_tokens_even_a_message_just_over_the_budget_is_trimmed_shorter() -> None:
    text = "x" * (4 * 806 + 1)
    trimmed = trim_message(text, 806)
    assert MARKER.search(trimmed) and len(trimmed) < len(text)


@settings(max_examples=300, deadline=None)
@given(content=contents, max_tokens=st.integers(1, 1200))
def test_no_trim_is_longer_than_its_message(content: str, max_tokens: int) -> None:
    assert len(trim_message(content, max_tokens)) <= len(content)


def test_a_floor_ending_on_answers_beyond_the_input_asks_for_older_messages() -> None:
    """One question and 30 answers, of which a page shows the newest 26: the window
    cannot open on the question it has not seen, and says so; given the whole run, it
    opens on the question, the floor overriding the message cap."""
    run = history(("u", 5), *[("a", 5)] * 30)
    page_only = bound_history(reversed(run[-26:]), DEFAULTS)
    assert page_only.floor_needs_older
    whole = window_of(run)
    assert not whole.floor_needs_older
    assert seqs(whole) == list(range(1, 32)) and whole.floor_overrode_budget


def test_answers_at_the_conversations_start_ask_for_nothing_older() -> None:
    window = window_of(history(*[("a", 5)] * 12))
    assert window.kept == 12 and not window.floor_needs_older
