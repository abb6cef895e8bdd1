"""Cache lifetimes with the bills observed: the calibrated count decides the model's minimum,
the entries the bills say are alive replace the guess of the previous turn's TTL, a
conversation whose ``1h`` writes come back ``5m`` is not offered ``1h``, and without bills
every choice is the one the pace alone gives."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.caching.paces import BRISK, COLD, DELIBERATE, START, pace
from tests.unit.strategies import gap_lists, minimums, ttl_settings, turn_shapes
from worker.caching.calibration import Calibration
from worker.caching.history import Entry
from worker.caching.lifetimes import (
    PointShape,
    TurnShape,
    choose_ttls,
    expected_read,
)
from worker.caching.observed import Observation, observe
from worker.memory import HistoryMessage

MIN = 1_024
#: A summary point (1,200 tokens before it) and the history's (4,000), both likely reused;
#: the turn shares 3,700 tokens of prefix with the previous one.
STEADY = TurnShape((PointShape(1200, 1.0), PointShape(4000, 1.0)), 3700)


def entries(*prefixes: int) -> tuple[Entry, ...]:
    """Entries alive at the prefixes given (an older payload's: known by their lengths)."""
    later = START + timedelta(hours=1)
    return tuple(Entry(f"tokens:{p}", p, frozenset(), 300.0, 300.0, later) for p in prefixes)


def calibrated(ratio: float) -> Observation:
    """Bills that say the conversation's real tokens are ``ratio`` x the estimate; nothing
    about live entries (the newest answer carried none)."""
    return Observation(calibration=Calibration(ratio=ratio, offset=0.0, samples=3))


@pytest.mark.parametrize(
    ("ratio", "why"), [(1.2, "expected_cost"), (1.0, "below_minimum")], ids=["x1.2", "x1.0"]
)
def test_the_calibrated_count_decides_whether_a_prefix_reaches_the_minimum(
    ratio: float, why: str
) -> None:
    """GIVEN a point after 900 estimated tokens and a model minimum of 1,024, WHEN the bills
    say the real tokens are 1.2x the estimate (1,080), THEN the point can cache and the
    policy chooses; at 1.0x (900) nothing reaches the minimum."""
    shape = TurnShape((PointShape(900, 1.0),), 0)
    choice = choose_ttls(shape, pace(*BRISK), setting="adaptive", min_tokens=MIN,
                         observed=calibrated(ratio))  # fmt: skip
    assert choice.why == why
    assert choose_ttls(shape, pace(*BRISK), setting="adaptive", min_tokens=MIN).why == (
        "below_minimum"
    )


def test_a_shared_prefix_the_calibration_lifts_over_the_minimum_is_expected_to_be_read() -> None:
    shape = TurnShape((PointShape(900, 1.0), PointShape(1300, 1.0)), 900)
    lifted = calibrated(1.2)
    choice = choose_ttls(shape, pace(*BRISK), setting="adaptive", min_tokens=MIN, observed=lifted)
    assert expected_read(shape, choice, setting="adaptive", min_tokens=MIN, observed=lifted) == 900
    plain = choose_ttls(shape, pace(*BRISK), setting="adaptive", min_tokens=MIN)
    assert expected_read(shape, plain, setting="adaptive", min_tokens=MIN) == 0


@pytest.mark.parametrize(
    ("gaps", "alive", "read"),
    [
        (BRISK, (), 0),
        (BRISK, (1200, 3700), 3700),
        (COLD, (1200, 3700), 3700),
        (DELIBERATE, (1200, 3700), 3700),
        (BRISK, (1200,), 1200),
        (COLD, (1200,), 1200),
    ],
    ids=[
        "brisk, but the bills say dead: nothing read",
        "brisk and alive: the shared prefix",
        "cold pace, but the bills say alive: the shared prefix",
        "deliberate, alive: the shared prefix",
        "only the summary's entry alive: its prefix",
        "cold pace, the summary's entry alive: its prefix",
    ],
)
def test_the_entries_the_bills_say_are_alive_replace_the_guess(
    gaps: tuple[float, ...], alive: tuple[int, ...], read: int
) -> None:
    """Whatever the pace says of the previous turn's TTL, the read is the longest shared
    prefix whose entry the bills say is alive at ``sent_at``, and the payload expects it."""
    observed = Observation(alive=entries(*alive), cold=not alive)
    choice = choose_ttls(STEADY, pace(*gaps), setting="adaptive", min_tokens=MIN,
                         observed=observed)  # fmt: skip
    assert (choice.why, choice.read) == ("expected_cost", read)
    assert expected_read(STEADY, choice, setting="adaptive", min_tokens=MIN,
                         observed=observed) == read  # fmt: skip


def test_the_guess_and_the_bills_disagree_where_the_bills_matter() -> None:
    """The cases above are not the guess's own answers: brisk guesses the prefix alive,
    a cold pace guesses it dead."""
    brisk = choose_ttls(STEADY, pace(*BRISK), setting="adaptive", min_tokens=MIN)
    cold = choose_ttls(STEADY, pace(*COLD), setting="adaptive", min_tokens=MIN)
    assert (brisk.read, cold.read) == (3700, 0)


def test_with_a_fixed_ttl_the_expected_read_is_the_bills_too() -> None:
    choice = choose_ttls(STEADY, pace(*BRISK), setting="5m", min_tokens=MIN)
    dead = Observation(alive=entries(), cold=True)
    assert expected_read(STEADY, choice, setting="5m", min_tokens=MIN, observed=dead) == 0
    assert expected_read(STEADY, choice, setting="5m", min_tokens=MIN) == 3700


def test_a_conversation_whose_1h_writes_come_back_5m_is_not_offered_1h() -> None:
    """GIVEN a deliberate conversation's steady turn, which buys 1h, WHEN its 1h writes have
    come back as 5m, THEN no point is given 1h."""
    assert choose_ttls(STEADY, pace(*DELIBERATE), setting="adaptive", min_tokens=MIN).ttls == (
        "1h",
        "1h",
    )
    no_1h = Observation(no_1h=True)
    choice = choose_ttls(STEADY, pace(*DELIBERATE), setting="adaptive", min_tokens=MIN,
                         observed=no_1h)  # fmt: skip
    assert choice.why == "expected_cost"
    assert "1h" not in choice.ttls


@given(
    shape=turn_shapes(min_points=1),
    gaps=gap_lists,
    alive=st.lists(st.integers(0, 20_000), max_size=3).map(lambda ps: tuple(sorted(set(ps)))),
)
def test_no_1h_is_never_offered_whatever_the_shape_pace_and_entries(
    shape: TurnShape, gaps: list[float], alive: tuple[int, ...]
) -> None:
    observed = Observation(alive=entries(*alive), no_1h=True)
    choice = choose_ttls(shape, pace(*gaps), setting="adaptive", min_tokens=MIN,
                         observed=observed)  # fmt: skip
    assert "1h" not in choice.ttls


# --- without bills, the choices are the pace's alone -----------------------------------------

#: Choices the pace alone gives (test_cache_ttl.py's table): (shape, gaps, setting, ttls, why).
WITHOUT_BILLS = [
    (STEADY, BRISK, "adaptive", ("5m", "5m"), "expected_cost"),
    (STEADY, DELIBERATE, "adaptive", ("1h", "1h"), "expected_cost"),
    (TurnShape(STEADY.points, 0), COLD, "adaptive", (None, None), "expected_cost"),
    (TurnShape((PointShape(300, 1.0),), 0), (), "adaptive", ("5m",), "no_pace"),
    (STEADY, DELIBERATE, "5m", ("5m", "5m"), "fixed"),
]


def unbilled(gaps: tuple[float, ...], minimum: int = MIN) -> Observation:
    """What :func:`observe` learns from a page whose answers carry no bill, its newest
    question ``gaps[-1]`` seconds before ``sent_at``."""
    sent_at = START + timedelta(seconds=sum(gaps))
    asked = sent_at - timedelta(seconds=gaps[-1]) if gaps else None
    questions = (HistoryMessage(1, "user", "q", asked),) if asked is not None else ()
    return observe((), questions, newest_answer_seq=2, sent_at=sent_at, min_tokens=minimum)


@pytest.mark.parametrize(("shape", "gaps", "setting", "ttls", "why"), WITHOUT_BILLS)
def test_without_bills_the_policy_chooses_as_the_pace_alone_says(
    shape: TurnShape, gaps: tuple[float, ...], setting: str, ttls: tuple[str | None, ...], why: str
) -> None:
    observed = unbilled(gaps)
    choice = choose_ttls(shape, pace(*gaps), setting=setting, min_tokens=MIN,  # type: ignore[arg-type]
                         observed=observed)  # fmt: skip
    assert (choice.ttls, choice.why) == (ttls, why)
    assert choice == choose_ttls(shape, pace(*gaps), setting=setting, min_tokens=MIN)  # type: ignore[arg-type]


@given(shape=turn_shapes(), gaps=gap_lists, minimum=minimums, setting=ttl_settings)
def test_without_bills_every_choice_and_expected_read_is_the_one_without_the_argument(
    shape: TurnShape, gaps: list[float], minimum: int, setting: str
) -> None:
    """A page without ``model_usage`` (an older writer) observes nothing that changes a
    choice, even when the gap makes it cold (that re-anchors the window, no more)."""
    observed = unbilled(tuple(gaps), minimum)
    p = pace(*gaps)
    args = {"setting": setting, "min_tokens": minimum}
    plain = choose_ttls(shape, p, **args)  # type: ignore[arg-type]
    seen = choose_ttls(shape, p, observed=observed, **args)  # type: ignore[arg-type]
    assert seen == plain
    assert expected_read(shape, seen, observed=observed, **args) == expected_read(  # type: ignore[arg-type]
        shape,
        plain,
        **args,  # type: ignore[arg-type]
    )


# --- the model stage's own prefix, an entry of its own ---------------------------------------

#: A re-anchoring turn: a new summary's point (500 estimated tokens before it) and the
#: history's (2,500), nothing shared with the previous prompt, the next re-anchor 4 gaps away.
REANCHOR = TurnShape((PointShape(500, 1.0), PointShape(2500, 1.0)), 0, reanchor_in=4)


def prefix_of(tokens: float) -> Observation:
    """Bills that put ``tokens`` of the model stage's own before the view, and say no entry
    is alive (the turn writes its whole prompt, the model stage's prefix included)."""
    return Observation(calibration=Calibration(offset=tokens, samples=5), alive=())


@pytest.mark.parametrize("gaps", [DELIBERATE, BRISK], ids=["deliberate", "brisk"])
def test_a_turn_that_writes_the_model_stages_own_prefix_gives_it_the_hour(
    gaps: tuple[float, ...],
) -> None:
    """GIVEN a model stage prefix of 2,500 tokens, over the 1,024 minimum on its own, WHEN a
    turn that reads nothing writes it, THEN the view's first point takes ``1h``, and so does
    the model stage's own point (the contract): only a read ending there renews that entry,
    and the next is at the next re-anchor, several gaps on, which a ``5m`` entry seldom
    outlives (part 10, 1,024 / 2,500: each re-anchor then wrote the prefix again)."""
    choice = choose_ttls(REANCHOR, pace(*gaps), setting="adaptive", min_tokens=MIN,
                         observed=prefix_of(2500), min_tokens_stated=True)  # fmt: skip
    assert choice.ttls == ("1h", "5m")


@pytest.mark.parametrize(
    ("offset", "stated"), [(300, True), (2500, False)], ids=["below-minimum", "minimum-guessed"]
)
def test_the_model_stages_prefix_counts_only_when_it_caches_alone_by_a_stated_minimum(
    offset: float, stated: bool
) -> None:
    """A prefix below the minimum is no entry of its own; nor is one judged against the
    minimum guessed without MODEL_ID (the model's may be higher): the choice is the view's."""
    choice = choose_ttls(REANCHOR, pace(*DELIBERATE), setting="adaptive", min_tokens=MIN,
                         observed=prefix_of(offset), min_tokens_stated=stated)  # fmt: skip
    assert choice.ttls == ("5m", "5m")
