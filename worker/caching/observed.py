"""The bill, observed: what the stage expects the prompt cache to do, what the model's ``usage``
says it did, and what a conversation's stored answers teach the next turn.

``../shared/CONTRACT.md``, "The bill, observed". Three things, all from values the turn
already read (the answers on its page carry ``model_usage`` when the writer stores it):

- :class:`CacheExpectation`, the payload's ``cache`` block: the view's estimated tokens, the
  read the stage expects, and each cache point's TTL and estimated prefix, in view order.
- :func:`check`: the newest answer's expectation against its bill. A read that ended at a
  shorter prefix than the expected one (a read ends where an entry does, so the prefix is the
  one whose calibrated length is nearest the tokens read) is a miss, and it gets a cause,
  tried in this order: ``stage_changed_prefix`` (the previous prompt had no point at the
  prefix it expected to read: the stage moved it), ``below_minimum`` (that prefix
  holds fewer real tokens than the model's minimum), ``ttl_downgraded`` (the entry would
  have lived as the ``1h`` it was asked for, but was written ``5m``), ``expired`` (by the
  written TTLs and the answers' times, no entry was alive), ``unexplained`` (an entry should
  have been alive: something outside the stage changed the prefix, or the entry was evicted).
  An answer with no miss whose ``1h`` writes came back ``5m`` is ``ttl_downgraded`` too.
- :class:`Observation`, what the next turn learns (:func:`observe`): the conversation's
  token calibration (:class:`Calibration`, observed prompt tokens against the stage's
  estimate, with the model stage's fixed system-prompt offset), which entries are alive at
  the command's ``sent_at``, whether the cache is cold, and whether the conversation's
  ``1h`` writes come back as ``5m``.

Entries are replayed from the bills (:func:`alive_prefixes`): an answer that wrote made an
entry at each point of its prompt past its read and long enough to cache, living the TTL the
point asked (``5m`` when no ``1h`` write came back); a read renewed the longest live entry it
covers; only the entries at an answer's own points carry past it (any other holds a prompt
the conversation has left). Prefixes are compared in the stage's estimated tokens, which
the expectation's points carry. Times are the answers' ``answered_at`` and the command's
``sent_at``, never a clock. Pure: no I/O, no logging.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Literal

from worker.memory.converse import CacheTtl, ConverseView, cache_points
from worker.memory.tokens import estimate_tokens

Cause = Literal["expired", "stage_changed_prefix", "below_minimum", "ttl_downgraded", "unexplained"]
CAUSES: tuple[Cause, ...] = (
    "expired",
    "stage_changed_prefix",
    "below_minimum",
    "ttl_downgraded",
    "unexplained",
)

#: Bedrock's cache lifetimes, in seconds; a point without a ``ttl`` lives 5 minutes.
TTL_SECONDS: Mapping[CacheTtl, float] = {"5m": 300.0, "1h": 3600.0}
_FIVE, _HOUR = TTL_SECONDS["5m"], TTL_SECONDS["1h"]
#: The longest lifetime Bedrock offers: a gap longer than this leaves every entry dead.
LONGEST_TTL = timedelta(hours=1)
#: An entry counts as alive at a moment only when it outlives it by this much: the model
#: call comes a little after the command is sent.
ALIVE_MARGIN = timedelta(seconds=30)
#: The answers the calibration is fitted on: about one page's.
CALIBRATION_SAMPLES = 12
#: The answers on a page whose ``1h`` writes came back ``5m`` before ``1h`` is no longer
#: offered: two, so that one point the calibration misjudged near the minimum (not written
#: at all, rather than downgraded) does not end ``1h`` for the conversation.
DOWNGRADES_TO_STOP_1H = 2
#: Input-token units per token: uncached, read, written for 5 minutes, written for 1 hour.
PRICE_INPUT = 1.0
PRICE_READ = 0.1
PRICE_WRITE: Mapping[CacheTtl, float] = {"5m": 1.25, "1h": 2.0}


@dataclass(frozen=True, slots=True)
class ExpectedPoint:
    """One cache point of the view: its TTL and the estimated tokens before it."""

    ttl: CacheTtl
    prefix_tokens: int


@dataclass(frozen=True, slots=True)
class CacheExpectation:
    """The payload's ``cache``: the view's estimated tokens (the model stage's own system
    prompt not counted), the read expected, and each point in view order."""

    prompt_tokens: int
    expected_read_tokens: int
    points: tuple[ExpectedPoint, ...]

    def as_json(self) -> dict[str, object]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "expected_read_tokens": self.expected_read_tokens,
            "points": [{"ttl": p.ttl, "prefix_tokens": p.prefix_tokens} for p in self.points],
        }

    @property
    def asks_1h(self) -> bool:
        return any(point.ttl == "1h" for point in self.points)


def view_points(view: ConverseView) -> tuple[ExpectedPoint, ...]:
    """The view's cache points in order: each one's TTL (``5m`` without one, Bedrock's
    default) and the estimated tokens before it."""
    return tuple(ExpectedPoint(ttl, prefix) for ttl, prefix in cache_points(view))


def view_tokens(view: ConverseView) -> int:
    """The estimated tokens of the view's text blocks."""
    tokens = 0
    for block in (*view.system, *(b for m in view.messages for b in m["content"])):
        if "cachePoint" not in block:
            tokens += estimate_tokens(block["text"])
    return tokens


def expectation(view: ConverseView, *, read: int) -> CacheExpectation | None:
    """The ``cache`` block of a payload whose view is ``view`` and which expects to read
    ``read`` estimated tokens; None when the view has no cache point."""
    points = view_points(view)
    if not points:
        return None
    return CacheExpectation(view_tokens(view), read, points)


@dataclass(frozen=True, slots=True)
class ModelUsage:
    """An answer's ``model_usage`` as the writer stored it: Converse's ``usage`` (the
    uncached input, the cache's read and written tokens, the writes split by TTL), when
    the call was made, the command it answered, and that payload's ``cache``."""

    seq: int
    input_tokens: int
    read_tokens: int
    write_tokens: int
    written_5m: int
    written_1h: int
    answered_at: datetime | None = None
    command_id: str | None = None
    expected: CacheExpectation | None = None

    @property
    def prompt_tokens(self) -> int:
        """The whole prompt's real tokens (the model stage's system prompt included)."""
        return self.input_tokens + self.read_tokens + self.write_tokens

    @property
    def billed_units(self) -> float:
        """The input as billed, in uncached-token units."""
        return (
            PRICE_INPUT * self.input_tokens
            + PRICE_READ * self.read_tokens
            + PRICE_WRITE["5m"] * self.written_5m
            + PRICE_WRITE["1h"] * self.written_1h
        )


@dataclass(frozen=True, slots=True)
class Calibration:
    """Real tokens from the stage's estimate: ``offset + ratio * estimate`` (the offset is the
    model stage's own system prompt, before every prefix). ``samples`` 0: none observed,
    the estimate stands."""

    ratio: float = 1.0
    offset: float = 0.0
    samples: int = 0

    def tokens(self, estimate: int) -> int:
        if self.samples == 0:
            return estimate
        return round(self.offset + self.ratio * estimate)


#: The estimates' spread, relative to their mean, from which an offset is fitted beside the
#: ratio: closer together, the two cannot be told apart and the ratio alone is used.
_FIT_SPREAD = 0.2


def calibrate(usages: Sequence[ModelUsage]) -> Calibration:
    """The calibration from the answers (newest first) whose payload said what it expected:
    a least-squares line through (estimate, observed prompt tokens) when the estimates
    spread enough to tell an offset from a ratio, else the ratio of their sums."""
    pairs = [
        (float(u.expected.prompt_tokens), float(u.prompt_tokens))
        for u in usages[:CALIBRATION_SAMPLES]
        if u.expected is not None and u.expected.prompt_tokens > 0 and u.prompt_tokens > 0
    ]
    if not pairs:
        return Calibration()
    estimates = [e for e, _ in pairs]
    mean_e = sum(estimates) / len(pairs)
    mean_o = sum(o for _, o in pairs) / len(pairs)
    spread = max(estimates) - min(estimates)
    if len(pairs) >= 2 and spread >= _FIT_SPREAD * mean_e:
        var = sum((e - mean_e) ** 2 for e in estimates)
        ratio = sum((e - mean_e) * (o - mean_o) for e, o in pairs) / var
        offset = mean_o - ratio * mean_e
        if ratio > 0 and offset >= 0:
            return Calibration(ratio, offset, len(pairs))
    return Calibration(mean_o / mean_e, 0.0, len(pairs))


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
class _Replay:
    """The entries the bills made, by prefix, as they stood at the replay's moment (dead ones
    included), and the answers (by seq) that asked ``1h`` of a point they wrote but whose
    writes came back ``5m`` only."""

    entries: Mapping[int, _Entry]
    downgraded: frozenset[int]


def _replay(
    usages_oldest_first: Sequence[ModelUsage],
    until: datetime,
    calibration: Calibration,
    *,
    min_tokens: int,
) -> _Replay:
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
            life = asked if point.ttl == "5m" or usage.written_1h > 0 else _FIVE
            entries[point.prefix_tokens] = _Entry(life, asked, at + timedelta(seconds=life))
    return _Replay(entries, frozenset(downgraded))


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
    replay = _replay(list(reversed(usages_newest_first)), at, calibration, min_tokens=min_tokens)
    entries = replay.entries
    alive = tuple(sorted(p for p, e in entries.items() if e.expires > at + ALIVE_MARGIN))
    return alive, bool(entries)


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
        replay = _replay(
            list(reversed(timed)), newest.answered_at, calibration, min_tokens=min_tokens
        )
        was_downgraded = newest.seq in replay.downgraded
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
    entry = _replay(list(reversed(earlier)), at, calibration, min_tokens=min_tokens).entries.get(
        want
    )
    if entry is None:
        # No answer on the page made it (an older one did, or it was read ever since): alive
        # if the last answer is within the shortest life, else the bills cannot say.
        last = next((u.answered_at for u in earlier if u.answered_at is not None), None)
        if last is not None and at - last <= timedelta(seconds=_FIVE):
            return "unexplained"
        return "expired"
    if entry.expires > at:
        return "unexplained"
    as_asked = entry.expires + timedelta(seconds=entry.asked - entry.life)
    if entry.asked > entry.life and as_asked > at:
        return "ttl_downgraded"
    return "expired"


@dataclass(frozen=True, slots=True)
class Observation:
    """What a turn learns from the answers on its page.

    ``alive``: the prefixes (estimated tokens) whose entries are alive at the command's
    ``sent_at`` (None: not known, the newest answer carries no bill or there is no
    ``sent_at``). ``cold``: every entry is dead (none is alive by the bills, and the newest
    answer's prompt made some, or the newest question is over an hour older than
    ``sent_at``; without bills, the latter alone). ``no_1h``: the conversation's
    ``1h`` writes came back as ``5m`` (:data:`DOWNGRADES_TO_STOP_1H` times on the page).
    """

    calibration: Calibration = Calibration()
    alive: tuple[int, ...] | None = None
    cold: bool = False
    no_1h: bool = False
    check: CacheCheck | None = None

    def readable(self, shared: int) -> int | None:
        """The longest prefix of at most ``shared`` estimated tokens alive in the cache, 0
        for none; None when the bills do not say."""
        if self.alive is None:
            return None
        return max((prefix for prefix in self.alive if prefix <= shared), default=0)


NOTHING_OBSERVED = Observation()


def observe(
    usages: Sequence[ModelUsage],
    *,
    newest_answer_seq: int | None,
    newest_question_at: datetime | None,
    sent_at: datetime | None,
    min_tokens: int,
) -> Observation:
    """The page's answers' bills (``usages``, newest first), the seq of its newest answer
    (observed or not), when its newest question was asked, and the command's ``sent_at``."""
    unbilled_cold = (
        sent_at is not None
        and newest_question_at is not None
        and sent_at - newest_question_at > LONGEST_TTL
    )
    if not usages:
        return Observation(cold=unbilled_cold)
    calibration = calibrate(usages)
    alive: tuple[int, ...] | None = None
    cold = unbilled_cold
    if usages[0].seq == newest_answer_seq and sent_at is not None:
        alive, made = alive_prefixes(usages, sent_at, calibration, min_tokens=min_tokens)
        cold = not alive and (made or unbilled_cold)
    downgrades: frozenset[int] = frozenset()
    times = [usage.answered_at for usage in usages if usage.answered_at is not None]
    if times:
        timed = [usage for usage in usages if usage.answered_at is not None]
        downgrades = _replay(
            list(reversed(timed)), max(times), calibration, min_tokens=min_tokens
        ).downgraded
    return Observation(
        calibration=calibration,
        alive=alive,
        cold=cold,
        no_1h=len(downgrades) >= DOWNGRADES_TO_STOP_1H,
        check=check(usages[0], usages[1:], calibration, min_tokens=min_tokens),
    )
