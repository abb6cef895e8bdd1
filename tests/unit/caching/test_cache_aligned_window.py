"""The cache-aligned window: the contract's cases one by one, then properties over random
histories, anchors and fold marks."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.caching.windows import HEADROOM, LIMITS, aligned
from tests.unit.histories import EndlessHistory
from tests.unit.strategies import histories, message_contents, window_limits
from worker.caching.anchor import (
    AnchorHeadroom,
    WindowAnchor,
    cache_aligned_window,
)
from worker.memory import (
    HistoryMessage,
    Window,
    WindowLimits,
    bound_history,
    estimate_tokens,
    fold_gap,
    trim_message,
)


def history(*spec: tuple[str, int]) -> list[HistoryMessage]:
    """Oldest first: ("u", tokens) / ("a", tokens) with content of exactly that estimate."""
    roles = {"u": "user", "a": "assistant"}
    return [
        HistoryMessage(seq=i, role=roles[role], content=_text(i, tokens))  # type: ignore[arg-type]
        for i, (role, tokens) in enumerate(spec, start=1)
    ]


def _text(seq: int, tokens: int) -> str:
    """Distinct per seq, exactly ``tokens`` estimated tokens."""
    return (f"m{seq} " * (4 * tokens))[: 4 * tokens]


def exchanges(count: int, tokens: int = 100) -> list[HistoryMessage]:
    return history(*[(role, tokens) for _ in range(count) for role in ("u", "a")])


def seqs(window: Window) -> list[int]:
    return [m.seq for m in window.messages]


# --- the contract's cases -----------------------------------------------------------------


def test_the_first_turn_anchors_at_s_must_extended_within_the_budget_less_the_headroom() -> None:
    # 30 exchanges of 100-token messages, folded through 50: S_must = 51 (F + 1 and the
    # floor's start agree). The room is 3,000 tokens and 19 messages: four more exchanges.
    result = aligned(exchanges(30)[:60], folded_through=50)
    assert (result.outcome, result.reason) == ("reanchored", "first_turn")
    assert result.anchor == WindowAnchor(seq=43, folded_through=50)
    assert seqs(result.window) == list(range(43, 61))
    assert result.anchor_to_store == result.anchor
    # The sliding window would have taken everything that fits: 24 messages.
    assert bound_history(reversed(exchanges(30)[:60]), LIMITS).kept == 24


def test_the_anchor_is_kept_while_the_fold_has_not_moved_and_the_window_fits() -> None:
    result = aligned(exchanges(31)[:62], folded_through=50, anchor=WindowAnchor(43, 50))
    assert (result.outcome, result.reason) == ("kept", None)
    assert seqs(result.window) == list(range(43, 63))
    assert result.anchor == WindowAnchor(43, 50)
    assert result.anchor_to_store is None  # nothing to write


def test_a_fold_landing_re_anchors_even_when_the_window_still_fits() -> None:
    result = aligned(exchanges(31)[:62], folded_through=56, anchor=WindowAnchor(43, 50))
    assert (result.outcome, result.reason) == ("reanchored", "fold_moved")
    # S_must = the floor's start, 53 (older than F + 1 = 57); then four exchanges.
    assert result.anchor == WindowAnchor(45, 56)
    assert result.window.oldest_seq == 45


def test_a_window_over_the_message_cap_re_anchors_for_overflow() -> None:
    result = aligned(exchanges(34)[:68], folded_through=50, anchor=WindowAnchor(43, 50))
    assert (result.outcome, result.reason) == ("reanchored", "overflow")
    # [43, 68] would be 26 messages. S_must = 51: 18 messages, and one more exchange
    # would pass the 19 the headroom leaves.
    assert result.anchor == WindowAnchor(51, 50)
    assert result.window.kept == 18


def test_a_window_over_the_token_budget_re_anchors_for_overflow() -> None:
    # [43, 60] holds 2,700 tokens; a long question and answer, trimmed to about 805
    # tokens each, take it past the 4,000.
    messages = [
        *exchanges(30, tokens=150)[:60],
        HistoryMessage(61, "user", _text(61, 1200)),
        HistoryMessage(62, "assistant", _text(62, 1200)),
    ]
    assert aligned(messages[:60], folded_through=50, anchor=WindowAnchor(43, 50)).outcome == "kept"
    result = aligned(messages, folded_through=50, anchor=WindowAnchor(43, 50))
    assert (result.outcome, result.reason) == ("reanchored", "overflow")
    # S_must (51) alone is past the budget less the headroom: the anchor is S_must.
    assert result.anchor == WindowAnchor(51, 50)
    assert LIMITS.max_tokens - HEADROOM.tokens < result.window.estimated_tokens <= 4000


def test_an_unfolded_tail_over_the_budget_falls_back_to_the_sliding_window() -> None:
    messages = exchanges(30)
    result = aligned(messages, folded_through=10, anchor=WindowAnchor(11, 10))
    assert (result.outcome, result.reason, result.anchor) == ("fallback", None, None)
    assert result.window == bound_history(reversed(messages), LIMITS)
    assert result.anchor_to_store is None
    gap = fold_gap(result.window, 10)
    assert gap is not None and gap.first_seq == 11


def test_a_floor_over_the_budget_falls_back_and_the_floor_still_holds() -> None:
    messages = exchanges(10, tokens=900)
    result = aligned(messages, folded_through=20)
    assert result.outcome == "fallback"
    assert result.window.floor_overrode_budget
    assert seqs(result.window) == list(range(11, 21))


def test_the_oldest_unfolded_message_is_an_answer_so_its_question_comes_too() -> None:
    # Folded through 41 (a question): F + 1 = 42 is its answer, so S_must moves out to 41.
    messages = exchanges(30)[:60]
    result = aligned(messages, folded_through=41, headroom=AnchorHeadroom(4000, 25))
    assert result.anchor == WindowAnchor(41, 41)
    assert result.window.messages[0].role == "user"


@pytest.mark.parametrize(
    "anchor",
    [
        pytest.param(WindowAnchor(44, 50), id="an-answer"),
        pytest.param(WindowAnchor(61, 50), id="beyond-the-newest"),
        pytest.param(WindowAnchor(55, 50), id="newer-than-s_must"),
        pytest.param(WindowAnchor(0, 50), id="no-seq"),
        pytest.param(WindowAnchor(-7, 50), id="negative"),
    ],
)
def test_an_anchor_that_cannot_be_this_historys_is_invalid_and_re_anchors(
    anchor: WindowAnchor,
) -> None:
    result = aligned(exchanges(30)[:60], folded_through=50, anchor=anchor)
    assert (result.outcome, result.reason) == ("reanchored", "invalid")
    assert result.anchor == WindowAnchor(43, 50)


def test_an_anchor_whose_message_is_missing_from_the_page_is_invalid() -> None:
    page = [m for m in exchanges(30)[:60] if m.seq != 43]
    result = aligned(page, folded_through=50, anchor=WindowAnchor(43, 50))
    assert (result.outcome, result.reason) == ("reanchored", "invalid")


def test_an_anchor_older_than_the_page_read_counts_as_an_overflow() -> None:
    """The page holds max_messages + 1 messages: an anchor beyond it cannot fit the cap."""
    page = exchanges(40)[-26:]  # seqs 55-80, as one Query returns them
    result = aligned(page, folded_through=70, anchor=WindowAnchor(31, 70))
    assert (result.outcome, result.reason) == ("reanchored", "overflow")
    assert result.window.oldest_seq is not None and result.window.oldest_seq >= 55


def test_an_anchor_on_an_answer_beyond_the_budget_is_an_overflow_found_before_it_is_read() -> None:
    """The walk back to the anchor stops at the budget, so an anchor on an answer (which opens
    no exchange) that far back is an overflow, not an invalid anchor: reading stops there."""
    page = exchanges(40)  # 100 tokens a message: 24 of them fill the budget
    result = aligned(page, folded_through=70, anchor=WindowAnchor(10, 70))  # seq 10: an answer
    assert (result.outcome, result.reason) == ("reanchored", "overflow")


def test_a_fold_mark_that_moved_backwards_is_a_move() -> None:
    result = aligned(exchanges(30)[:60], folded_through=50, anchor=WindowAnchor(43, 52))
    assert result.reason == "fold_moved"


def test_leading_answers_are_an_exchange_of_their_own_and_seq_1_anchors() -> None:
    messages = history(("a", 10), ("a", 10), *[("u", 10), ("a", 10)] * 3)
    first = aligned(messages, folded_through=0)
    assert first.anchor == WindowAnchor(1, 0)
    assert seqs(first.window) == list(range(1, 9))
    grown = [*messages, HistoryMessage(9, "user", "q"), HistoryMessage(10, "assistant", "a")]
    second = aligned(grown, folded_through=0, anchor=first.anchor)
    assert (second.outcome, second.window.oldest_seq) == ("kept", 1)


def test_an_empty_history_anchors_on_seq_1_and_the_next_turn_keeps_it() -> None:
    first = aligned([], folded_through=0)
    assert (first.outcome, first.reason, first.window.kept) == ("reanchored", "first_turn", 0)
    assert first.anchor == WindowAnchor(1, 0)
    assert aligned([], folded_through=0, anchor=first.anchor).outcome == "kept"
    second = aligned(exchanges(1), folded_through=0, anchor=first.anchor)
    assert (second.outcome, seqs(second.window)) == ("kept", [1, 2])


def test_a_floor_that_ends_on_answers_beyond_the_page_falls_back_and_asks_for_more() -> None:
    run = history(("u", 5), *[("a", 5)] * 30)
    result = aligned(run[-26:], folded_through=0)
    assert result.outcome == "fallback"
    assert result.window.floor_needs_older


def test_an_unfolded_tail_running_past_the_page_falls_back() -> None:
    page = exchanges(40, tokens=10)[-26:]
    result = aligned(page, folded_through=10)
    assert result.outcome == "fallback"
    assert result.window == bound_history(reversed(page), LIMITS)


def test_reading_stops_once_the_window_is_chosen() -> None:
    for anchor in (None, WindowAnchor(10**6 - 21, 10**6 - 13), WindowAnchor(7, 10**6 - 13)):
        history = EndlessHistory(10**6, "assistant", "c" * 40)
        cache_aligned_window(
            iter(history), LIMITS, folded_through=10**6 - 13, anchor=anchor, headroom=HEADROOM
        )
        assert history.read <= LIMITS.max_messages + 1


def test_a_negative_headroom_is_refused() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        AnchorHeadroom(tokens=-1, messages=0)


def test_a_headroom_as_large_as_the_budget_anchors_at_s_must() -> None:
    result = aligned(
        exchanges(30)[:60], folded_through=50, headroom=AnchorHeadroom(tokens=4000, messages=25)
    )
    assert result.anchor == WindowAnchor(51, 50)


# --- properties ---------------------------------------------------------------------------

limits_strategy = window_limits(max_tokens=3000, message_max_tokens=600)

contents = message_contents(max_filler=3000)


@st.composite
def anchors(draw: st.DrawFn, messages: list[HistoryMessage], folded: int) -> WindowAnchor | None:
    """None, an anchor on a question of this history (under this fold mark, mostly), or
    any seq at all."""
    questions = [m.seq for m in messages if m.role == "user"] or [1]
    marks = st.sampled_from([folded, folded, folded, max(folded - 2, 0), folded + 4])
    return draw(
        st.one_of(
            st.none(),
            st.builds(WindowAnchor, seq=st.sampled_from(questions), folded_through=marks),
            st.builds(WindowAnchor, seq=st.integers(-2, len(messages) + 2), folded_through=marks),
        )
    )


headrooms = st.builds(AnchorHeadroom, tokens=st.integers(0, 3000), messages=st.integers(0, 25))


def exchange_start_at_or_before(messages: list[HistoryMessage], index: int) -> int:
    """The start of the exchange ``messages[index]`` belongs to (a question, else 0)."""
    return next((i for i in range(index, -1, -1) if messages[i].role == "user"), 0)


def cost(messages: list[HistoryMessage], limits: WindowLimits) -> int:
    return sum(
        estimate_tokens(trim_message(m.content, limits.message_max_tokens)) for m in messages
    )


def fits(messages: list[HistoryMessage], tokens: int, count: int, limits: WindowLimits) -> bool:
    return len(messages) <= count and cost(messages, limits) <= tokens


@settings(max_examples=400, deadline=None)
@given(data=st.data(), messages=histories(contents), limits=limits_strategy, headroom=headrooms)
def test_cache_aligned_window_properties(
    data: st.DataObject,
    messages: list[HistoryMessage],
    limits: WindowLimits,
    headroom: AnchorHeadroom,
) -> None:
    folded = data.draw(st.integers(0, len(messages) + 1), label="folded_through")
    anchor = data.draw(anchors(messages, folded), label="anchor")
    result = aligned(
        messages, folded_through=folded, anchor=anchor, limits=limits, headroom=headroom
    )
    window = result.window

    # The oracle for S_must: the floor's start or F + 1, the older, out to its exchange.
    if messages:
        floor_start = exchange_start_at_or_before(
            messages, len(messages) - min(limits.floor_messages, len(messages))
        )
        must = exchange_start_at_or_before(messages, min(floor_start, folded))
        must_fits = fits(messages[must:], limits.max_tokens, limits.max_messages, limits)
    else:
        must, must_fits = 0, True

    if result.outcome == "fallback":
        assert not must_fits
        assert window == bound_history(reversed(messages), limits)
        assert result.anchor is None and result.reason is None
        return
    assert must_fits

    start = len(messages) - window.kept
    kept = messages[start:]
    # A contiguous suffix, trimmed as the sliding window trims, costed as it holds.
    assert seqs(window) == [m.seq for m in kept]
    assert [m.content for m in window.messages] == [
        trim_message(m.content, limits.message_max_tokens) for m in kept
    ]
    assert window.estimated_tokens == cost(kept, limits)
    assert window.dropped == start
    # The floor, whole exchanges, every unfolded message, and the budget.
    assert start <= must
    assert not kept or kept[0].role == "user" or kept[0].seq == 1
    assert fold_gap(window, folded) is None
    assert window.kept <= limits.max_messages
    assert window.estimated_tokens <= limits.max_tokens
    assert not window.floor_overrode_budget and not window.floor_needs_older

    assert result.anchor is not None
    assert result.anchor.folded_through == folded
    assert result.anchor.seq == (kept[0].seq if kept else 1)
    if result.outcome == "kept":
        assert result.anchor == anchor and result.reason is None
        return
    assert result.reason is not None
    if anchor is None:
        assert result.reason == "first_turn"
    elif anchor.folded_through != folded:
        assert result.reason == "fold_moved"
    else:
        index = anchor.seq - 1  # seqs are dense from 1 here
        opens = 0 <= index <= must and (messages[index].role == "user" or index == 0)
        # Older than the budget reaches: an overflow, found before the anchor's message is
        # read (the walk back to it stops at the budget), whether that message opens or not.
        over = 0 <= index < must and not fits(
            messages[index:], limits.max_tokens, limits.max_messages, limits
        )
        assert result.reason == ("overflow" if opens or over else "invalid")
        if opens:
            assert not fits(messages[index:], limits.max_tokens, limits.max_messages, limits)
    # Re-anchored: as far back as the room under the headroom allows, whole exchanges.
    room_tokens = limits.max_tokens - headroom.tokens
    room_messages = limits.max_messages - headroom.messages
    if start < must:
        assert fits(kept, room_tokens, room_messages, limits)
    if start > 0 and messages:
        older = exchange_start_at_or_before(messages, start - 1)
        assert not fits(messages[older:], room_tokens, room_messages, limits)


@settings(max_examples=200, deadline=None)
@given(messages=histories(contents), limits=limits_strategy, headroom=headrooms, data=st.data())
def test_a_kept_anchor_is_kept_while_the_fold_stands_and_the_window_fits(
    messages: list[HistoryMessage],
    limits: WindowLimits,
    headroom: AnchorHeadroom,
    data: st.DataObject,
) -> None:
    """Turn after turn (the history growing, the fold mark still), the anchor holds until
    ``[A, newest]`` no longer fits the budget, and only then moves."""
    folded = data.draw(st.integers(0, len(messages)), label="folded_through")
    anchor: WindowAnchor | None = None
    for newest in range(len(messages) + 1):
        turn = messages[:newest]
        result = aligned(
            turn, folded_through=folded, anchor=anchor, limits=limits, headroom=headroom
        )
        if anchor is not None and result.outcome != "fallback":
            still_fits = fits(
                turn[anchor.seq - 1 :], limits.max_tokens, limits.max_messages, limits
            )
            assert (result.outcome == "kept") == still_fits
        anchor = result.anchor
