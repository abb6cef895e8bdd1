"""The bill, observed: the payload's ``cache`` block as JSON, an answer's ``model_usage`` read
and priced, the conversation's calibration, which entries the bills say are alive, the
newest bill checked with a miss's cause, and what a turn learns (:func:`observe`).

Bills are spelled by hand and kept consistent (the prompt's real tokens are its estimate
unless a case says otherwise), so every expected figure here is worked out in the test.
Times are fixed datetimes: nothing reads a clock.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from tests.stored import USAGE, bill_from
from worker.caching.bills import CacheExpectation, ExpectedPoint, ModelUsage
from worker.caching.calibration import calibrate
from worker.caching.diagnosis import CacheCheck, Cause
from worker.caching.observed import Observation, observe
from worker.memory import HistoryMessage

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
MIN = 1_024
#: The first prompt's history point, and the second's (its history one exchange longer).
FIRST, SECOND = 2_000, 2_400
#: The current question's estimated tokens, sent uncached.
QUESTION = 50


def expecting(read: int, *points: tuple[str, int]) -> CacheExpectation:
    """A payload's ``cache`` block: the points (ttl, prefix) in order; the prompt is the last
    point's prefix and the question."""
    prefixes = [prefix for _, prefix in points]
    return CacheExpectation(
        prompt_tokens=max(prefixes, default=0) + QUESTION,
        expected_read_tokens=read,
        points=tuple(ExpectedPoint(ttl, prefix) for ttl, prefix in points),  # type: ignore[arg-type]
    )


def bill(
    seq: int,
    at: datetime | None,
    expected: CacheExpectation | None,
    *,
    read: int = 0,
    written_5m: int = 0,
    written_1h: int = 0,
) -> ModelUsage:
    """The answer at ``seq``'s bill: its prompt's real tokens are its estimate, the rest of
    it uncached."""
    prompt = expected.prompt_tokens if expected is not None else QUESTION + read
    write = written_5m + written_1h
    return ModelUsage(
        seq=seq,
        input_tokens=prompt - read - write,
        read_tokens=read,
        write_tokens=write,
        written_5m=written_5m,
        written_1h=written_1h,
        answered_at=at,
        command_id=f"c-{seq}",
        expected=expected,
    )


def first_answer(at: datetime = T0, ttl: str = "5m", *, honoured: bool = True) -> ModelUsage:
    """A first turn's bill: it wrote its history point's prefix (at ``1h`` only if the
    service honoured it)."""
    one_hour = ttl == "1h" and honoured
    return bill(
        2,
        at,
        expecting(0, (ttl, FIRST)),
        written_5m=0 if one_hour else FIRST,
        written_1h=FIRST if one_hour else 0,
    )


def with_real(usage: ModelUsage, extra: int) -> ModelUsage:
    """``usage`` with ``extra`` real tokens before the view (the model stage's own prompt),
    billed uncached."""
    return replace(usage, input_tokens=usage.input_tokens + extra)


def second_answer(at: datetime, *, read: int, expects: int = FIRST) -> ModelUsage:
    """The next turn's bill, expecting to read ``expects`` and reading ``read``; what it did
    not read up to its history point it wrote at 5m."""
    return bill(
        4,
        at,
        expecting(expects, ("5m", FIRST), ("5m", SECOND)),
        read=read,
        written_5m=SECOND - read,
    )


# --- the payload's cache block ---------------------------------------------------------------

BLOCK = CacheExpectation(
    prompt_tokens=2_290,
    expected_read_tokens=2_100,
    points=(ExpectedPoint("1h", 1_000), ExpectedPoint("5m", 1_160)),
)


def test_the_cache_block_survives_json_and_reads_back_equal() -> None:
    """GIVEN the stage's expectation, WHEN it goes through JSON (the payload, the writer's
    ``expected``) and is read back, THEN it is the same value, its points in view order."""
    text = json.dumps(BLOCK.as_json())
    assert json.loads(text) == {
        "prompt_tokens": 2_290,
        "expected_read_tokens": 2_100,
        "points": [{"ttl": "1h", "prefix_tokens": 1_000}, {"ttl": "5m", "prefix_tokens": 1_160}],
    }
    stored = bill_from({"inputTokens": 0, "expected": json.loads(text)})
    assert isinstance(stored, ModelUsage) and stored.expected == BLOCK
    assert BLOCK.asks_1h and not expecting(0, ("5m", 1_000)).asks_1h


def test_the_billed_units_price_uncached_1x_read_0_1x_written_1_25x_for_5m_and_2x_for_1h() -> None:
    usage = bill_from(USAGE)
    assert isinstance(usage, ModelUsage)
    # 50 uncached + 1,000 read x 0.1 + 200 written 5m x 1.25 + 500 written 1h x 2
    assert usage.billed_units == pytest.approx(50 + 100 + 250 + 1_000)
    assert bill(2, T0, None).billed_units == QUESTION  # nothing cached: all at 1x


# --- which entries the bills say are alive ---------------------------------------------------


def alive_at(at: datetime, *usages: ModelUsage) -> bool:
    """Whether, by the bills (newest first), an entry is alive at the command's ``sent_at``
    (no question is stamped here: the clocks are taken to agree)."""
    observation = observe(usages, (), newest_answer_seq=usages[0].seq, sent_at=at, min_tokens=MIN)
    assert observation.alive is not None
    return bool(observation.alive)


def test_a_5m_entry_is_dead_at_300_seconds() -> None:
    assert alive_at(T0 + timedelta(seconds=200), first_answer())
    assert not alive_at(T0 + timedelta(seconds=300), first_answer())
    assert not alive_at(T0 + timedelta(minutes=20), first_answer())


def test_an_entry_counts_as_alive_only_with_the_margin_to_spare() -> None:
    """The model call comes a little after ``sent_at``: an entry 30 s from its end is dead."""
    assert alive_at(T0 + timedelta(seconds=269), first_answer())
    assert not alive_at(T0 + timedelta(seconds=271), first_answer())


def test_a_1h_entry_is_alive_at_50_minutes_and_dead_after_the_hour() -> None:
    assert alive_at(T0 + timedelta(minutes=50), first_answer(ttl="1h"))
    assert not alive_at(T0 + timedelta(minutes=59, seconds=31), first_answer(ttl="1h"))
    assert not alive_at(T0 + timedelta(minutes=61), first_answer(ttl="1h"))


def test_a_1h_point_written_as_5m_lives_5_minutes() -> None:
    downgraded = first_answer(ttl="1h", honoured=False)
    assert not alive_at(T0 + timedelta(minutes=10), downgraded)


def test_a_read_renews_the_entry_it_found_for_its_ttl() -> None:
    """GIVEN a 5m entry written at 0 and read at 4 minutes (nothing written then), THEN it
    is alive at 8 minutes, which it would not be unread."""
    read = bill(4, T0 + timedelta(minutes=4), expecting(FIRST, ("5m", FIRST)), read=FIRST)
    eight = T0 + timedelta(minutes=8)
    assert alive_at(eight, read, first_answer())
    assert not alive_at(eight, first_answer())
    assert not alive_at(T0 + timedelta(minutes=9), read, first_answer())


# --- the check and its causes ----------------------------------------------------------------


def checked(
    newest: ModelUsage, *earlier: ModelUsage, prefix: int = 0, min_tokens: int = MIN
) -> CacheCheck | None:
    """The check the turn after ``newest`` makes (the bills newest first, on a page of their
    answers and the questions before them, none stamped: the clocks agree), with the model
    stage's own prefix ``prefix`` known."""
    return observe(
        [newest, *earlier],
        exchanges_of(newest, *earlier),
        newest_answer_seq=newest.seq,
        sent_at=None,
        min_tokens=min_tokens,
        model_prefix_tokens=prefix,
    ).check


def exchanges_of(*usages: ModelUsage) -> tuple[HistoryMessage, ...]:
    """The page of the answers billed ``usages`` (newest first): each with its question just
    before it, unstamped."""
    page = []
    for usage in usages:
        page += [
            HistoryMessage(usage.seq, "assistant", "a"),
            HistoryMessage(usage.seq - 1, "user", "q"),
        ]
    return tuple(page)


def cause_of(newest: ModelUsage, *earlier: ModelUsage, prefix: int = 0) -> Cause | None:
    result = checked(newest, *earlier, prefix=prefix)
    assert result is not None
    return result.cause


def test_a_read_as_expected_is_no_miss_and_the_check_carries_the_bill() -> None:
    newest = second_answer(T0 + timedelta(minutes=2), read=FIRST)
    result = checked(newest, first_answer())
    assert result is not None
    assert result.cause is None
    assert (result.seq, result.command_id) == (4, "c-4")
    assert (result.expected_read, result.expected_read_tokens, result.read_tokens) == (
        FIRST,
        FIRST,
        FIRST,
    )
    assert (result.write_tokens, result.written_5m, result.written_1h) == (400, 400, 0)
    assert result.billed_units == pytest.approx(QUESTION + 0.1 * FIRST + 1.25 * 400)
    assert not result.downgraded


def test_a_read_that_ends_nearest_the_expected_prefix_is_no_miss() -> None:
    """A read ends where an entry does: a read of 1,800 tokens ended at the 2,000-token point
    (the estimate's error), not at the start of the prompt; 1,001 is still nearer 2,000 than
    nothing, 999 is not."""
    at = T0 + timedelta(minutes=2)
    assert cause_of(second_answer(at, read=1_800), first_answer()) is None
    assert cause_of(second_answer(at, read=1_001), first_answer()) is None
    assert cause_of(second_answer(at, read=999), first_answer()) is not None


def test_the_nearest_prefix_is_judged_on_the_calibrated_lengths() -> None:
    """With 100 tokens of the model stage's own before every prefix, the view's start is at
    100 real tokens and the 2,000-token point at 2,100: a read of 1,101 ended at the point,
    1,099 at the model stage's own prompt."""
    at = T0 + timedelta(minutes=2)
    offset = [with_real(second_answer(at, read=r), 100) for r in (1_101, 1_099)]
    first = with_real(first_answer(), 100)
    assert cause_of(offset[0], first, prefix=100) is None
    assert cause_of(offset[1], first, prefix=100) is not None


def test_a_miss_after_the_entry_outlived_its_ttl_is_expired() -> None:
    newest = second_answer(T0 + timedelta(minutes=10), read=0)
    assert cause_of(newest, first_answer()) == "expired"


def test_a_miss_at_a_prefix_no_earlier_prompt_had_a_point_at_is_the_stages() -> None:
    newest = second_answer(T0 + timedelta(minutes=2), read=0, expects=2_100)
    assert cause_of(newest, first_answer()) == "stage_changed_prefix"


def test_a_miss_of_a_prefix_below_the_models_minimum_is_below_minimum() -> None:
    small = bill(2, T0, expecting(0, ("5m", 800)), written_5m=800)
    newest = bill(4, T0 + timedelta(minutes=2), expecting(800, ("5m", 800), ("5m", 1_200)))
    assert cause_of(newest, small) == "below_minimum"


def test_a_miss_a_1h_entry_would_have_covered_when_it_was_written_5m_is_ttl_downgraded() -> None:
    """GIVEN a point that asked 1h but came back written at 5m, WHEN the next prompt comes
    20 minutes later and reads nothing, THEN the downgrade is the cause; past the hour the
    1h entry would have been dead too: expired."""
    downgraded = first_answer(ttl="1h", honoured=False)
    later = second_answer(T0 + timedelta(minutes=20), read=0)
    assert cause_of(later, downgraded) == "ttl_downgraded"
    much_later = second_answer(T0 + timedelta(minutes=70), read=0)
    assert cause_of(much_later, downgraded) == "expired"


def test_a_miss_while_the_entry_should_have_been_alive_is_unexplained() -> None:
    """Two minutes after a 5m write nothing the stage knows kills the entry: the model
    stage's own prompt changed, or Bedrock evicted it."""
    newest = second_answer(T0 + timedelta(minutes=2), read=0)
    assert cause_of(newest, first_answer()) == "unexplained"


def test_an_answer_whose_payload_had_no_cache_block_is_not_checked() -> None:
    assert checked(bill(4, T0, None), first_answer()) is None


def test_an_answer_that_expected_no_read_is_no_miss() -> None:
    assert cause_of(first_answer()) is None


# --- what a turn learns ----------------------------------------------------------------------


def learn(
    *usages: ModelUsage,
    newest_answer_seq: int | None = 4,
    question_at: datetime | None = T0,
    sent_at: datetime | None,
) -> Observation:
    """What the turn learns from the bills (newest first); the newest question is stamped
    ``question_at`` (it is after every answer here, so it tells nothing of the clocks)."""
    asked = (HistoryMessage(99, "user", "q", question_at),) if question_at is not None else ()
    return observe(
        usages, asked, newest_answer_seq=newest_answer_seq, sent_at=sent_at, min_tokens=MIN
    )


BRISK = (second_answer(T0 + timedelta(minutes=1), read=FIRST), first_answer())


def test_the_bills_say_the_cache_is_cold_when_every_entry_is_dead_at_sent_at() -> None:
    """GIVEN the newest answer billed a minute in, WHEN the command comes 10 minutes after
    it (well within the hour since the question), THEN the bills say cold."""
    cold = learn(*BRISK, sent_at=T0 + timedelta(minutes=11))
    assert cold.alive is not None and not cold.alive
    assert cold.cold
    warm = learn(*BRISK, sent_at=T0 + timedelta(minutes=3))
    assert warm.alive and not warm.cold


def test_the_turn_learns_the_calibration_and_checks_the_newest_bill() -> None:
    observation = learn(*BRISK, sent_at=T0 + timedelta(minutes=3))
    assert observation.calibration == calibrate(BRISK)
    assert observation.calibration.samples == 2
    assert observation.check == checked(*BRISK)


def test_without_bills_the_cache_is_cold_over_an_hour_after_the_newest_question() -> None:
    assert learn(sent_at=T0 + timedelta(minutes=61)).cold
    assert not learn(sent_at=T0 + timedelta(minutes=59)).cold
    assert learn(sent_at=T0 + timedelta(minutes=59)).alive is None
    assert not learn(question_at=None, sent_at=T0 + timedelta(hours=5)).cold
    assert not learn(sent_at=None).cold


def test_alive_is_unknown_when_the_newest_answer_carries_no_bill() -> None:
    """GIVEN bills on older answers only (the newest came from an older writer), THEN
    whether an entry is alive is not known, cold falls back to the hour's rule, and no bill
    is checked: the newest billed one was checked by the turn after it, not again."""
    older = learn(*BRISK, newest_answer_seq=6, sent_at=T0 + timedelta(minutes=3))
    assert older.alive is None and not older.cold
    assert older.check is None
    gap = learn(*BRISK, newest_answer_seq=6, sent_at=T0 + timedelta(minutes=61))
    assert gap.alive is None and gap.cold
    assert learn(*BRISK, sent_at=None).alive is None


def test_1h_is_no_longer_bought_once_the_conversations_1h_writes_come_back_5m() -> None:
    downgraded = [
        bill(2 * n, T0 + timedelta(minutes=10 * n), expecting(0, ("1h", FIRST)), written_5m=FIRST)
        for n in (3, 2, 1)
    ]
    assert learn(*downgraded, newest_answer_seq=6, sent_at=T0 + timedelta(minutes=31)).no_1h
    honoured = [
        bill(2 * n, T0 + timedelta(minutes=10 * n), expecting(0, ("1h", FIRST)), written_1h=FIRST)
        for n in (3, 2, 1)
    ]
    assert not learn(*honoured, newest_answer_seq=6, sent_at=T0 + timedelta(minutes=31)).no_1h
    assert not learn(*BRISK, sent_at=T0 + timedelta(minutes=3)).no_1h


def test_a_newest_prompt_that_cached_nothing_does_not_make_the_cache_cold() -> None:
    """Its one point below the model's minimum made no entry: nothing is alive, and nothing
    was lost either, so within the hour the bills do not call the cache cold."""
    small = bill(2, T0, expecting(0, ("5m", 800)))
    observation = learn(small, newest_answer_seq=2, sent_at=T0 + timedelta(minutes=10))
    assert observation.alive == ()
    assert not observation.cold


def test_bills_that_show_nothing_alive_keep_the_hours_rule_of_a_page_without_them() -> None:
    """GIVEN the newest prompt cached nothing (its one point below the minimum), WHEN the
    command comes just over an hour after the newest question, THEN the cache is cold, as it
    would be with no bill at all: nothing the bills show is alive, and a window kept for it
    would be billed whole at the write price, where the same turn without bills re-anchors."""
    small = bill(2, T0, expecting(0, ("5m", 800)))
    late = learn(small, newest_answer_seq=2, sent_at=T0 + timedelta(minutes=60, seconds=15))
    assert late.alive == ()
    assert late.cold
    assert learn(sent_at=T0 + timedelta(minutes=60, seconds=15)).cold


def test_a_write_of_a_few_tokens_past_the_read_makes_an_entry() -> None:
    """GIVEN a turn that read the previous turn's 2,000-token entry and wrote the 51 tokens
    of its new exchange, WHEN the next command comes two minutes later, THEN both entries
    are alive: the write past the read is seen however small it is."""
    second = bill(
        4,
        T0 + timedelta(minutes=2),
        expecting(FIRST, ("5m", FIRST), ("5m", FIRST + 51)),
        read=FIRST,
        written_5m=51,
    )
    observation = learn(second, first_answer(), sent_at=T0 + timedelta(minutes=4))
    assert observation.alive is not None
    assert [entry.prefix for entry in observation.alive] == [FIRST, FIRST + 51]


def test_an_answer_whose_1h_writes_came_back_5m_is_ttl_downgraded_without_a_miss() -> None:
    """The first turn asked 1h for its point and the bill shows its write at 5m: no read fell
    short, but the write did, and the check says so."""
    result = checked(first_answer(ttl="1h", honoured=False))
    assert result is not None
    assert (result.cause, result.downgraded) == ("ttl_downgraded", True)
    honoured = checked(first_answer(ttl="1h"))
    assert honoured is not None and (honoured.cause, honoured.downgraded) == (None, False)
