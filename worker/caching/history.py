"""The prompt cache's history as the bills tell it: the entries each answer's bill says were
made, read and renewed, replayed in order up to a moment (:func:`alive_prefixes`, and the
replay the diagnosis reads).

Entries are replayed from the bills: an answer that wrote made an entry at each point of its
prompt past its read and long enough to cache, living the TTL the point asked (``5m`` when no
``1h`` write came back); a read renewed the longest live entry it covers; only the entries at
an answer's own points carry past it (any other holds a prompt the conversation has left).
Prefixes are compared in the stage's estimated tokens, which the expectation's points carry.
Times are the answers' ``answered_at`` and the command's ``sent_at``, never a clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from worker.caching.bills import ExpectedPoint, ModelUsage
from worker.caching.calibration import Calibration
from worker.caching.prices import TTL_SECONDS

FIVE_MINUTES = TTL_SECONDS["5m"]
#: An entry counts as alive at a moment only when it outlives it by this much: the model
#: call comes a little after the command is sent.
ALIVE_MARGIN = timedelta(seconds=30)


@dataclass(frozen=True, slots=True)
class _Entry:
    """A cache entry the bills say was made: it holds the prompt up to a point of the view
    (``prefix``, estimated tokens), lives ``life`` seconds from its last write or read, and
    was asked to live ``asked``."""

    life: float
    asked: float
    expires: datetime


def read_through(usage: ModelUsage, calibration: Calibration, known: Iterable[int] = ()) -> int:
    """The prefix (estimated tokens) the read of ``usage`` ended at: -1 when it read none of
    the view (nothing, or only the model stage's own system prompt), else the one of its
    prompt's points, or of the ``known`` live entries' prefixes, whose calibrated length is
    nearest the tokens read (a read ends where an entry ends, so the calibration need only be
    right to within half the distance between two of them)."""
    expected = usage.expected
    if expected is None or usage.read_tokens == 0:
        return -1
    prefixes = {*known, *(point.prefix_tokens for point in expected.points)}
    candidates = [(-1, calibration.tokens(0)), *((p, calibration.tokens(p)) for p in prefixes)]
    return min(candidates, key=lambda c: (abs(c[1] - usage.read_tokens), c[0]))[0]


def written_points(
    usage: ModelUsage, calibration: Calibration, *, read: int, min_tokens: int
) -> tuple[ExpectedPoint, ...]:
    """The points of ``usage``'s prompt that wrote an entry: past its read (``read``, from
    :func:`read_through`) and long enough to cache; none when the bill shows no write."""
    if usage.expected is None or usage.write_tokens == 0:
        return ()
    return tuple(
        point
        for point in usage.expected.points
        if point.prefix_tokens > read and calibration.tokens(point.prefix_tokens) >= min_tokens
    )


@dataclass(frozen=True, slots=True)
class Replay:
    """The entries the bills made, by prefix, as they stood at the replay's moment (dead ones
    included), and the answers (by seq) that asked ``1h`` of a point they wrote but whose
    writes came back ``5m`` only."""

    entries: Mapping[int, _Entry]
    downgraded: frozenset[int]


def replay(
    usages_oldest_first: Sequence[ModelUsage],
    until: datetime,
    calibration: Calibration,
    *,
    min_tokens: int,
) -> Replay:
    """Replay the answers' bills up to ``until``.

    For each answer: its read ended at a live entry or one of its points
    (:func:`read_through`), and renewed that entry for the entry's own life; the entries
    that are prefixes of its prompt (its points, and any no longer than its read) are carried
    on, any other holds a prompt the conversation has left (the window re-anchored, the
    summary moved), however many tokens it counts; each point past the read and long enough
    to cache made an entry (:func:`written_points`) for the TTL it asked, or ``5m`` when no
    ``1h`` write came back."""
    entries: dict[int, _Entry] = {}
    downgraded: set[int] = set()
    for usage in usages_oldest_first:
        at, expected = usage.answered_at, usage.expected
        if at is None or at > until:
            continue
        points = {point.prefix_tokens for point in expected.points} if expected else set()
        live = [prefix for prefix, entry in entries.items() if entry.expires > at]
        read = read_through(usage, calibration, live)
        entries = {p: e for p, e in entries.items() if p in points or p <= read}
        if read in entries and entries[read].expires > at:
            entry = entries[read]
            entries[read] = replace(entry, expires=at + timedelta(seconds=entry.life))
        written = written_points(usage, calibration, read=read, min_tokens=min_tokens)
        if usage.written_1h == 0 and any(point.ttl == "1h" for point in written):
            downgraded.add(usage.seq)
        for point in written:
            asked = TTL_SECONDS[point.ttl]
            life = asked if point.ttl == "5m" or usage.written_1h > 0 else FIVE_MINUTES
            entries[point.prefix_tokens] = _Entry(life, asked, at + timedelta(seconds=life))
    return Replay(entries, frozenset(downgraded))


def alive_prefixes(
    usages_newest_first: Sequence[ModelUsage],
    at: datetime,
    calibration: Calibration,
    *,
    min_tokens: int,
) -> tuple[tuple[int, ...], bool]:
    """The prefixes (estimated tokens) whose entries are alive at ``at``, with
    :data:`ALIVE_MARGIN` to spare, in increasing order; and whether the newest answer's
    prompt had any entry at all (none when its points were all below the minimum)."""
    replayed = replay(list(reversed(usages_newest_first)), at, calibration, min_tokens=min_tokens)
    entries = replayed.entries
    alive = tuple(sorted(p for p, e in entries.items() if e.expires > at + ALIVE_MARGIN))
    return alive, bool(entries)
