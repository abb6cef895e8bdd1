"""The check of an answer's bill against what its prompt expected, and the cause of a miss.

A read that ended at a shorter prefix than the expected one (a read ends where an entry does,
so the prefix is the one whose calibrated length is nearest the tokens read) is a miss, and it
gets a cause, tried in this order: ``stage_changed_prefix`` (the previous prompt had no point
at the prefix it expected to read: the stage moved it), ``below_minimum`` (that prefix holds
fewer real tokens than the model's minimum), ``ttl_downgraded`` (the entry would have lived as
the ``1h`` it was asked for, but was written ``5m``), ``expired`` (by the written TTLs and the
answers' times, no entry was alive), ``unexplained`` (an entry should have been alive:
something outside the stage changed the prefix, or the entry was evicted). An answer with no
miss whose ``1h`` writes came back ``5m`` is ``ttl_downgraded`` too.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from worker.caching.calibration import Calibration
from worker.caching.history import FIVE_MINUTES, AnswerReplay, Entry

Cause = Literal["expired", "stage_changed_prefix", "below_minimum", "ttl_downgraded", "unexplained"]
CAUSES: tuple[Cause, ...] = (
    "expired",
    "stage_changed_prefix",
    "below_minimum",
    "ttl_downgraded",
    "unexplained",
)


@dataclass(frozen=True, slots=True)
class CacheCheck:
    """The newest observed answer's expectation against its bill. ``expected_read`` is the
    stage's estimate; ``expected_read_tokens`` the same, calibrated; ``cause`` None: no miss."""

    seq: int
    command_id: str | None
    expected_read: int
    expected_read_tokens: int
    read_tokens: int
    write_tokens: int
    written_5m: int
    written_1h: int
    billed_units: float
    cause: Cause | None
    downgraded: bool
    details_known: bool = True


def check(
    answer: AnswerReplay,
    previous: AnswerReplay | None,
    calibration: Calibration,
    *,
    min_tokens: int,
) -> CacheCheck | None:
    """``answer``'s bill against what its own prompt expected (its ``expected``), with the cause
    of a miss; ``previous`` is the answer just before it, when that one's bill is on the page
    (its prompt is the one this one's could share a prefix with). None when ``answer`` carries
    no expectation (its prompt had no cache point, or the writer did not pass ``cache`` on)."""
    usage = answer.usage
    expected = usage.expected
    if expected is None:
        return None
    want = expected.expected_read_tokens
    real = calibration.tokens(want) if want > 0 else 0
    cause: Cause | None = None
    if want > 0 and (answer.read is None or answer.read.prefix < want):
        cause = _cause(answer, previous, calibration, min_tokens=min_tokens)
    if cause is None and answer.downgraded:
        cause = "ttl_downgraded"  # no read fell short, but its 1h writes came back 5m
    return CacheCheck(
        seq=usage.seq,
        command_id=usage.command_id,
        expected_read=want,
        expected_read_tokens=real,
        read_tokens=usage.read_tokens,
        write_tokens=usage.write_tokens,
        written_5m=usage.written_5m,
        written_1h=usage.written_1h,
        billed_units=usage.billed_units,
        cause=cause,
        downgraded=answer.downgraded,
        details_known=usage.details_known,
    )


def _cause(
    answer: AnswerReplay,
    previous: AnswerReplay | None,
    calibration: Calibration,
    *,
    min_tokens: int,
) -> Cause:
    """Why ``answer`` read less than it expected (see the module's docstring)."""
    usage = answer.usage
    assert usage.expected is not None and usage.answered_at is not None
    want = usage.expected.expected_read_tokens
    at = usage.answered_at
    if previous is not None and _moved(answer, previous, want):
        return "stage_changed_prefix"
    if calibration.tokens(want) < min_tokens:
        return "below_minimum"
    wanted = _wanted(answer, want)
    if wanted is None:
        # No answer on the page made it (an older one did, or it was read ever since): alive
        # if the previous answer is within the shortest life, else the bills cannot say.
        last = previous.usage.answered_at if previous is not None else None
        if last is not None and at - last <= timedelta(seconds=FIVE_MINUTES):
            return "unexplained"
        return "expired"
    if wanted.alive(at):
        return "unexplained"
    as_asked = wanted.expires + timedelta(seconds=wanted.asked - wanted.life)
    if wanted.asked > wanted.life and as_asked > at:
        return "ttl_downgraded"
    return "expired"


def _moved(answer: AnswerReplay, previous: AnswerReplay, want: int) -> bool:
    """Whether the previous prompt held no prefix this one expected to read: by identity where
    this prompt marks a point there, else by length (an older payload, or a prefix found by
    Bedrock's lookback)."""
    prior = previous.usage.expected
    assert answer.usage.expected is not None
    if prior is None:
        return False
    point = answer.usage.expected.point_at(want)
    if point is None:
        return want not in {p.prefix_tokens for p in prior.points}
    read = previous.read
    return not any(point.same_prefix(p) for p in prior.points) and not (
        read is not None and read.key == point.key
    )


def _wanted(answer: AnswerReplay, want: int) -> Entry | None:
    """The entry the expected read would have read: the replay's entry at the prompt's point
    of that length, or, where the prompt marks none there, one of that length the replay held
    (an earlier prompt's point, which Bedrock finds by its lookback)."""
    assert answer.usage.expected is not None
    point = answer.usage.expected.point_at(want)
    if point is not None and point.key in answer.before:
        return answer.before[point.key]
    same = [e for e in answer.before.values() if e.prefix == want]
    return same[0] if point is None and len(same) == 1 else None
