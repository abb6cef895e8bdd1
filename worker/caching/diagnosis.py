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

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from worker.caching.bills import ModelUsage
from worker.caching.calibration import Calibration
from worker.caching.history import FIVE_MINUTES, read_through, replay

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


def check(
    newest: ModelUsage,
    earlier: Sequence[ModelUsage],
    calibration: Calibration,
    *,
    min_tokens: int,
) -> CacheCheck | None:
    """``newest``'s expectation against its bill, with the cause of a miss; ``earlier`` are
    the older observed answers, newest first. None when ``newest`` carries no expectation
    (its prompt had no cache point, or the writer did not pass ``cache`` on)."""
    expected = newest.expected
    if expected is None:
        return None
    want = expected.expected_read_tokens
    real = calibration.tokens(want) if want > 0 else 0
    cause: Cause | None = None
    if want > 0 and _read_short(newest, earlier, calibration):
        cause = _cause(newest, earlier, calibration, min_tokens=min_tokens)
    was_downgraded = False
    if newest.answered_at is not None:
        timed = [u for u in (newest, *earlier) if u.answered_at is not None]
        replayed = replay(
            list(reversed(timed)), newest.answered_at, calibration, min_tokens=min_tokens
        )
        was_downgraded = newest.seq in replayed.downgraded
    if cause is None and was_downgraded:
        cause = "ttl_downgraded"  # no read fell short, but its 1h writes came back 5m
    return CacheCheck(
        seq=newest.seq,
        command_id=newest.command_id,
        expected_read=want,
        expected_read_tokens=real,
        read_tokens=newest.read_tokens,
        write_tokens=newest.write_tokens,
        written_5m=newest.written_5m,
        written_1h=newest.written_1h,
        billed_units=newest.billed_units,
        cause=cause,
        downgraded=was_downgraded,
    )


def _read_short(
    newest: ModelUsage, earlier: Sequence[ModelUsage], calibration: Calibration
) -> bool:
    """Whether ``newest``'s read ended short of the prefix it expected: at a shorter one of
    the prefixes its own prompt and the previous ones had points at (or at none)."""
    assert newest.expected is not None
    want = newest.expected.expected_read_tokens
    known = {want, *(p.prefix_tokens for u in earlier[:2] if u.expected for p in u.expected.points)}
    return read_through(newest, calibration, known) < want


def _cause(
    newest: ModelUsage,
    earlier: Sequence[ModelUsage],
    calibration: Calibration,
    *,
    min_tokens: int,
) -> Cause:
    """Why ``newest`` read less than it expected (see the module's docstring)."""
    assert newest.expected is not None
    want = newest.expected.expected_read_tokens
    previous = earlier[0].expected if earlier else None
    if previous is not None and want not in {point.prefix_tokens for point in previous.points}:
        return "stage_changed_prefix"
    if calibration.tokens(want) < min_tokens:
        return "below_minimum"
    at = newest.answered_at
    if at is None:
        return "unexplained"
    entry = replay(list(reversed(earlier)), at, calibration, min_tokens=min_tokens).entries.get(
        want
    )
    if entry is None:
        # No answer on the page made it (an older one did, or it was read ever since): alive
        # if the last answer is within the shortest life, else the bills cannot say.
        last = next((u.answered_at for u in earlier if u.answered_at is not None), None)
        if last is not None and at - last <= timedelta(seconds=FIVE_MINUTES):
            return "unexplained"
        return "expired"
    if entry.expires > at:
        return "unexplained"
    as_asked = entry.expires + timedelta(seconds=entry.asked - entry.life)
    if entry.asked > entry.life and as_asked > at:
        return "ttl_downgraded"
    return "expired"
