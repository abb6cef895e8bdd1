"""Cache lifetimes chosen per turn (``HISTORY_CACHE_TTL``): the pace read from timestamps,
the policy's choice as table cases, and the order of TTLs along the view as a property."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given

from tests.unit.caching.paces import BRISK, COLD, DELIBERATE, START, pace
from tests.unit.strategies import gap_lists, minimums, ttl_settings, turn_shapes
from worker.caching.lifetimes import (
    PACE_GAPS,
    PointShape,
    TurnShape,
    choose_ttls,
    outlook,
    read_pace,
    ttl_order_is_legal,
)
from worker.memory import HistoryMessage
from worker.memory.history_window import Window, WindowLimits

#: A summary point (1,200 tokens before it) and the history's (4,000), both likely reused.
STEADY = (PointShape(1200, 1.0), PointShape(4000, 1.0))


def test_gaps_come_from_the_questions_and_sent_at_and_the_last_twelve_count() -> None:
    p = pace(*(60.0 * n for n in range(1, 20)))
    assert p.gaps == tuple(60.0 * n for n in range(8, 20))
    assert len(p.gaps) == PACE_GAPS


def test_a_message_without_created_at_gives_no_gap() -> None:
    """A gap needs both its questions stamped: none spans an unstamped one."""
    times = [START, START + timedelta(minutes=1), None, START + timedelta(minutes=5)]
    p = read_pace(times, START + timedelta(minutes=6))
    assert p.gaps == (60.0, 60.0)
    assert read_pace([None, None], None).gaps == ()


def test_the_chances_carry_a_weak_prior_with_no_weight_between_5_minutes_and_1_hour() -> None:
    p = pace(*BRISK)
    assert p.p5 == p.p60 == (12 + 0.5) / 13  # one gap's worth of even odds
    cold = pace(*COLD)
    assert cold.p5 == cold.p60 == 0.5 / 9
    deliberate = pace(*DELIBERATE)
    assert deliberate.p60 - deliberate.p5 == pytest.approx(7 / 13)  # the band's gaps alone


CASES = [
    # (name, points, shared prefix, pace, setting, min tokens, expected TTLs, why)
    ("a brisk conversation's steady turn: 5m holds", STEADY, 3700, BRISK, "adaptive", 1024,
     ("5m", "5m"), "expected_cost"),
    ("a deliberate conversation's steady turn: 1h for a small write", STEADY, 3700, DELIBERATE,
     "adaptive", 1024, ("1h", "1h"), "expected_cost"),
    ("a deliberate conversation's re-anchoring turn with a new summary writes it all at 5m",
     STEADY, 0, DELIBERATE, "adaptive", 1024, ("5m", "5m"), "expected_cost"),
    ("a deliberate conversation's re-anchoring turn that reads its summary buys 1h",
     STEADY, 1200, DELIBERATE, "adaptive", 1024, ("1h", "1h"), "expected_cost"),
    ("a cold conversation's re-anchoring turn writes no point at all", STEADY, 0, COLD,
     "adaptive", 1024, (None, None), "expected_cost"),
    ("a re-anchoring turn whose history the next turn will not reuse sets no point there",
     (PointShape(1200, 1.0), PointShape(4000, 0.0)), 1200, DELIBERATE, "adaptive", 1024,
     ("5m", None), "expected_cost"),
    ("a first turn: no gap to read, every point 5m", (PointShape(300, 1.0),), 0, (),
     "adaptive", 1024, ("5m",), "no_pace"),
    ("no timestamps at all: every point 5m", STEADY, 3700, (), "adaptive", 1024,
     ("5m", "5m"), "no_pace"),
    ("a summary below the minimum takes the history point's TTL", STEADY, 3700, DELIBERATE,
     "adaptive", 2048, ("1h", "1h"), "expected_cost"),
    ("no point reaches the minimum: 5m, nothing is cached either way", STEADY, 3700,
     DELIBERATE, "adaptive", 4096, ("5m", "5m"), "below_minimum"),
    ("HISTORY_CACHE_TTL=1h sets every point", STEADY, 0, BRISK, "1h", 1024, ("1h", "1h"),
     "fixed"),
    ("HISTORY_CACHE_TTL=5m sets every point", STEADY, 3700, DELIBERATE, "5m", 1024,
     ("5m", "5m"), "fixed"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("points", "shared", "gaps", "setting", "minimum", "expected", "why"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_the_policy_chooses(
    points: tuple[PointShape, ...],
    shared: int,
    gaps: tuple[float, ...],
    setting: str,
    minimum: int,
    expected: tuple[str | None, ...],
    why: str,
) -> None:
    choice = choose_ttls(
        TurnShape(points, shared),
        pace(*gaps),
        setting=setting,  # type: ignore[arg-type]
        min_tokens=minimum,
    )
    assert (choice.ttls, choice.why) == (expected, why)


def test_a_point_that_finds_this_turns_read_is_never_dropped() -> None:
    """Cold pace, but the newest gap was short: the shared prefix is read, so its point
    stays even where the expected cost alone would drop it."""
    choice = choose_ttls(TurnShape(STEADY, 3700), pace(*COLD, 60), setting="adaptive",
                         min_tokens=1024)  # fmt: skip
    assert choice.read == 3700
    assert None not in choice.ttls


@given(shape=turn_shapes(), gaps=gap_lists, minimum=minimums, setting=ttl_settings)
def test_the_ttls_never_increase_along_the_view_and_one_is_given_per_point(
    shape: TurnShape, gaps: list[float], minimum: int, setting: str
) -> None:
    choice = choose_ttls(shape, pace(*gaps), setting=setting, min_tokens=minimum)  # type: ignore[arg-type]
    assert len(choice.ttls) == len(shape.points) <= 3
    assert ttl_order_is_legal(choice.ttls)
    ranks = [("1h", "5m", None).index(ttl) for ttl in choice.ttls]
    assert ranks == sorted(ranks)  # dropped points come last, after every kept one


def test_the_next_reanchor_is_as_many_gaps_away_as_exchanges_still_fit() -> None:
    """A window of 1,000 tokens under a 3,500 budget, exchanges of about 600: four more
    turns keep the anchor, the fifth re-anchors; with the message cap one turn from full,
    the next one does."""
    limits = WindowLimits(max_tokens=3500, max_messages=40, floor_messages=4,
                          message_max_tokens=2000)  # fmt: skip
    messages = tuple(
        HistoryMessage(seq, "user" if seq % 2 else "assistant", "x" * (400 if seq % 2 else 2000))
        for seq in range(1, 3)
    )
    window = Window(messages, dropped=0, trimmed=0, estimated_tokens=1000,
                    floor_overrode_budget=False)  # fmt: skip
    assert outlook(window, limits, "q" * 400).reanchor_in == 5
    full = WindowLimits(max_tokens=4000, max_messages=3, floor_messages=2, message_max_tokens=2000)
    assert outlook(window, full, "q" * 400).reanchor_in == 1
