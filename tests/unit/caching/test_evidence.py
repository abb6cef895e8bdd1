"""A bill is evidence, and only evidence: the clocks reconciled from the conversation's own
timeline, no inference from what a bill does not carry, cold only when the lives written have
passed, prefixes known by their content, and the minimum the bills show.

Bills here are made by hand on the stage's own estimate (real = estimate unless a case adds
the model stage's prefix); questions are stamped on the producers' clock, answers on the
model stage's, which a case may skew."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from worker.caching.bills import CacheExpectation, ExpectedPoint, ModelUsage
from worker.caching.clocks import IN_STEP_SECONDS, reconcile
from worker.caching.observed import Observation, observe
from worker.memory import HistoryMessage

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
MIN = 1_024
LATENCY = timedelta(seconds=5)
QUESTION = 50


def point(ttl: str, prefix: int, content: str = "") -> ExpectedPoint:
    return ExpectedPoint(ttl, prefix, f"{hash((prefix, content)) & (2**64 - 1):016x}")  # type: ignore[arg-type]


def answer(
    seq: int,
    at: datetime,
    points: tuple[ExpectedPoint, ...],
    *,
    expects: int = 0,
    read: int = 0,
    written: int = 0,
    written_1h: int = 0,
    details: bool = True,
    extra: int = 0,
) -> ModelUsage:
    """The answer at ``seq``'s bill, its prompt the last point's prefix and a question, with
    ``extra`` real tokens of the model stage's own before the view."""
    prompt = points[-1].prefix_tokens + QUESTION
    expected = CacheExpectation(prompt, expects, points)
    write = written + written_1h
    return ModelUsage(
        seq, prompt + extra - read - write, read, write, written, written_1h, at,
        f"c-{seq}", expected, details_known=details,
    )  # fmt: skip


def questions(*times: datetime) -> tuple[HistoryMessage, ...]:
    """Questions at seq 1, 3, 5, … asked at ``times`` (newest first, as a page holds them)."""
    asked = [HistoryMessage(2 * i + 1, "user", f"q{i}", at) for i, at in enumerate(times)]
    return tuple(reversed(asked))


def learn(
    usages: list[ModelUsage],
    messages: tuple[HistoryMessage, ...],
    sent_at: datetime | None,
    **config: int,
) -> Observation:
    answers = tuple(HistoryMessage(u.seq, "assistant", "a") for u in usages)
    return observe(
        usages,
        (*answers, *messages),
        newest_answer_seq=usages[0].seq if usages else None,
        sent_at=sent_at,
        min_tokens=config.get("min_tokens", MIN),
        model_prefix_tokens=config.get("prefix", 0),
    )


# --- the clocks ------------------------------------------------------------------------------


def brisk(skew: timedelta, turns: int = 4) -> tuple[list[ModelUsage], tuple[HistoryMessage, ...]]:
    """``turns`` exchanges two minutes apart, each answered ``LATENCY`` after its question on
    a model stage clock ``skew`` ahead (negative: behind); each prompt read the last's."""
    asked = [T0 + timedelta(minutes=2 * i) for i in range(turns)]
    usages = []
    for i, at in enumerate(asked):
        prefix = 2_000 + 400 * i
        points = (
            (point("5m", prefix),) if i == 0 else (point("5m", prefix - 400), point("5m", prefix))
        )
        read = prefix - 400 if i else 0
        usages.append(
            answer(
                2 * i + 2,
                at + LATENCY + skew,
                points,
                expects=read,
                read=read,
                written=prefix - read,
            )
        )
    return list(reversed(usages)), questions(*asked)


@pytest.mark.parametrize(
    "skew",
    [
        timedelta(0),
        timedelta(hours=2),
        -timedelta(hours=2),
        timedelta(minutes=5),
        -timedelta(minutes=5),
    ],
    ids=["in step", "2 h ahead", "2 h behind", "5 min ahead", "5 min behind"],
)
def test_the_model_stages_clock_is_read_off_the_conversations_own_timeline(
    skew: timedelta,
) -> None:
    """An answer is made after its question: the offset is found within the latency; within a
    minute it is the latency itself, and the clocks are taken to agree."""
    usages, messages = brisk(skew)
    offset = reconcile(usages, messages, T0 + timedelta(minutes=7))
    found = (skew + LATENCY).total_seconds()
    assert offset.seconds == pytest.approx(found if abs(found) > IN_STEP_SECONDS else 0.0)
    assert offset.samples == 4


@pytest.mark.parametrize("skew", [timedelta(hours=2), -timedelta(hours=2), timedelta(minutes=5)])
def test_a_skewed_model_stage_neither_kills_a_warm_cache_nor_revives_a_cold_one(
    skew: timedelta,
) -> None:
    """GIVEN the brisk conversation answered on a skewed clock, THEN two minutes after the
    last answer the cache is warm (as in step) and twenty minutes after it cold."""
    usages, messages = brisk(skew)
    last = T0 + timedelta(minutes=6) + LATENCY
    warm = learn(usages, messages, last + timedelta(minutes=2))
    cold = learn(usages, messages, last + timedelta(minutes=20))
    in_step = learn(*brisk(timedelta(0)), last + timedelta(minutes=2))
    assert (warm.cold, bool(warm.alive)) == (False, True)
    assert [e.prefix for e in warm.alive or ()] == [e.prefix for e in in_step.alive or ()]
    assert cold.cold
    assert warm.check is not None and warm.check.cause is None


def test_one_answer_given_late_does_not_move_the_offset() -> None:
    usages, messages = brisk(timedelta(hours=2), turns=5)
    usages[2] = replace(usages[2], answered_at=usages[2].answered_at + timedelta(minutes=61))  # type: ignore[operator]
    offset = reconcile(usages, messages, None).seconds
    assert offset == pytest.approx((timedelta(hours=2) + LATENCY).total_seconds())


def test_without_a_stamped_question_nothing_is_assumed_of_the_clocks() -> None:
    usages, _ = brisk(timedelta(hours=2))
    assert reconcile(usages, (), None).seconds == 0.0


# --- absence is not evidence -----------------------------------------------------------------


def test_a_bill_without_cache_details_is_not_called_downgraded_and_lives_what_it_asked() -> None:
    """GIVEN a 1h write whose bill carries no ``cacheDetails`` (a writer on an old botocore),
    THEN nothing is inferred: no downgrade, no 1h stopped, and 30 minutes later the entry is
    alive, as the 1h it asked."""
    points = (point("1h", 2_000),)
    unsplit = answer(2, T0 + LATENCY, points, written=2_000, details=False)
    seen = learn([unsplit], questions(T0), T0 + timedelta(minutes=30))
    assert seen.check is not None and (seen.check.cause, seen.check.downgraded) == (None, False)
    assert not seen.no_1h and not seen.cold
    assert [e.prefix for e in seen.alive or ()] == [2_000]
    split = answer(2, T0 + LATENCY, points, written=2_000)  # cacheDetails: every write 5m
    shown = learn([split], questions(T0), T0 + timedelta(minutes=30))
    assert shown.check is not None and shown.check.cause == "ttl_downgraded"
    assert shown.cold


# --- cold only by evidence -------------------------------------------------------------------


def test_cold_is_the_longest_life_written_or_renewed_passed_not_an_empty_replay() -> None:
    """GIVEN the newest answer wrote its history at 1h, THEN 50 minutes later the cache is
    not cold, and 61 minutes later it is; a prompt whose read renewed a 5m entry and wrote
    nothing is cold 6 minutes on."""
    wrote_1h = answer(2, T0 + LATENCY, (point("1h", 2_000),), written_1h=2_000)
    assert not learn([wrote_1h], questions(T0), T0 + timedelta(minutes=50)).cold
    assert learn([wrote_1h], questions(T0), T0 + timedelta(minutes=61)).cold
    first = answer(2, T0 + LATENCY, (point("5m", 2_000),), written=2_000)
    read = answer(4, T0 + timedelta(minutes=2), (point("5m", 2_000),), expects=2_000, read=2_000)
    seen = learn([read, first], questions(T0, T0 + timedelta(minutes=2)), T0 + timedelta(minutes=8))
    assert seen.cold


def test_a_read_the_replay_did_not_foresee_is_evidence_the_entry_was_alive() -> None:
    """GIVEN a read of a prefix no bill on the page wrote (an older answer did), THEN the entry
    is alive after it, for the shortest life."""
    read = answer(
        4,
        T0 + LATENCY,
        (point("5m", 2_000), point("5m", 2_300)),
        expects=2_000,
        read=2_000,
        written=300,
    )
    seen = learn([read], questions(T0), T0 + timedelta(minutes=3))
    assert [e.prefix for e in seen.alive or ()] == [2_000, 2_300]


# --- prefixes by content ---------------------------------------------------------------------


def test_a_moved_summary_of_the_same_length_is_a_changed_prefix() -> None:
    """GIVEN the next prompt's summary point has the same length as the previous one's and
    another content (the fold moved), WHEN it reads nothing, THEN the stage changed its prefix
    (not unexplained), and the old summary's entry is no prefix of it to read."""
    before = (point("5m", 1_500, "summary 1"), point("5m", 2_500, "summary 1 history"))
    after = (point("5m", 1_500, "summary 2"), point("5m", 2_600, "summary 2 history"))
    first = answer(2, T0 + LATENCY, before, written=2_500)
    second = answer(4, T0 + timedelta(minutes=2), after, expects=1_500, written=2_600)
    seen = learn([second, first], questions(T0, T0 + timedelta(minutes=2)), None)
    assert seen.check is not None and seen.check.cause == "stage_changed_prefix"
    warm = learn([first], questions(T0), T0 + timedelta(minutes=2))
    assert warm.readable(1_500, before) == 1_500
    assert warm.readable(1_500, after) == 0


# --- the minimum the bills show --------------------------------------------------------------


def test_a_point_that_reached_the_minimum_and_wrote_nothing_raises_it_for_the_conversation() -> (
    None
):
    """GIVEN a 1,024 minimum and a 1,500-token point (the model stage's prefix known) that
    wrote nothing, THEN the bills say the model's minimum is above 1,500."""
    silent = answer(2, T0 + LATENCY, (point("5m", 1_500),))
    seen = learn([silent], questions(T0), None)
    assert seen.min_tokens == 1_501 and seen.raised
    wrote = answer(2, T0 + LATENCY, (point("5m", 1_500),), written=1_500)
    assert learn([wrote], questions(T0), None).min_tokens == MIN


def test_a_second_point_that_did_not_write_after_the_first_did_shows_the_spaced_rule() -> None:
    """Bedrock's per-checkpoint wording: the first point wrote at 1,100, the second at 1,600
    (less than the minimum past the first) did not: each further point needs more."""
    points = (point("5m", 1_100), point("5m", 1_600))
    seen = learn([answer(2, T0 + LATENCY, points, written=1_100)], questions(T0), None)
    assert seen.spaced and seen.min_tokens == MIN
