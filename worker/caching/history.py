"""The prompt cache's history as the bills tell it, built once a turn: the entries each answer's
bill says its call read, renewed and wrote, replayed oldest first on the producers' clock.

For each answer (:class:`AnswerReplay`):

- **where its read ended**: at the prefix, of its prompt's points and of the entries that are
  prefixes of its prompt, whose calibrated length is nearest the tokens read (a read ends
  where an entry does). A prefix is identified by its digest; an entry written at a point
  this prompt does not mark is a prefix of it when every point both mark below it agrees;
- **what the read renewed**: that entry, for the life it was written with. A read is
  evidence: an entry the replay did not know of (or believed dead) was alive, and is renewed
  for the shortest life (``5m``) unless its own point asked for more;
- **what it wrote**: its points past the read that reach the working minimum, up to the one
  whose calibrated end is nearest the tokens read and written; each makes an entry living the
  TTL it asked, or ``5m`` when the bill's ``cacheDetails`` show no ``1h`` write (then the
  answer is *downgraded*). A bill without ``cacheDetails`` shows no split: each entry lives
  what it asked, and nothing is called downgraded;
- **the minimum it shows**: a point past the read that reached the minimum by the calibration
  and yet wrote nothing (the writes ended below it) says the model's minimum is higher;
- **what carries past it**: only the entries that are prefixes of its prompt (any other holds
  a prompt the conversation has left).

Pure: bills and times in, the history out; no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from worker.caching.bills import ExpectedPoint, ModelUsage
from worker.caching.calibration import Calibration
from worker.caching.prices import TTL_SECONDS

FIVE_MINUTES = TTL_SECONDS["5m"]
#: An entry counts as alive at a moment only when it outlives it by this much: the model
#: call comes a little after the command is sent.
ALIVE_MARGIN = timedelta(seconds=30)
#: A point shows a higher minimum only when its calibrated prefix passed the minimum by this
#: share: nearer, the calibration's own error could explain the missing write.
MINIMUM_EVIDENCE_MARGIN = 0.05


@dataclass(frozen=True, slots=True)
class Entry:
    """A cache entry the bills say was made or read: the prefix it holds (its identity, its
    estimated tokens, the identities of the points below it in the prompt that made it), the
    life it lives from each write or read, the life its point asked for, and when it dies."""

    key: str
    prefix: int
    below: frozenset[str]
    life: float
    asked: float
    expires: datetime

    def alive(self, at: datetime, margin: timedelta = timedelta(0)) -> bool:
        return self.expires > at + margin


@dataclass(frozen=True, slots=True)
class AnswerReplay:
    """One answer's call as the replay met it: its bill (on the producers' clock), the entries
    the replay held just before it (dead ones too), the entry its read renewed (None: it read
    no prefix of the view), the entries it wrote, the longest life it wrote or renewed,
    whether its ``1h`` writes came back ``5m``, and what it showed of the model's minimum:
    the largest calibrated prefix that reached it and cached nothing (``unwritten``), and
    whether a point past a cached prefix reached it and did not write (``spaced``)."""

    usage: ModelUsage
    before: Mapping[str, Entry]
    read: Entry | None
    written: tuple[Entry, ...]
    lives: float
    downgraded: bool
    unwritten: int | None = None
    spaced: bool = False


@dataclass(frozen=True, slots=True)
class CacheHistory:
    """The answers replayed, oldest first (those with a time), and the entries after them."""

    answers: tuple[AnswerReplay, ...] = ()
    entries: Mapping[str, Entry] = field(default_factory=dict)

    def of(self, seq: int) -> AnswerReplay | None:
        return next((a for a in self.answers if a.usage.seq == seq), None)

    def alive_at(self, at: datetime) -> tuple[Entry, ...]:
        """The entries alive at ``at`` with :data:`ALIVE_MARGIN` to spare, shortest first."""
        alive = [e for e in self.entries.values() if e.alive(at, ALIVE_MARGIN)]
        return tuple(sorted(alive, key=lambda e: e.prefix))


def replay(
    usages_oldest_first: Sequence[ModelUsage],
    calibration: Calibration,
    *,
    min_tokens: int,
) -> CacheHistory:
    """Replay the answers' bills (with their ``answered_at`` on the producers' clock)."""
    entries: dict[str, Entry] = {}
    answers: list[AnswerReplay] = []
    for usage in usages_oldest_first:
        at = usage.answered_at
        if at is None:
            continue
        expected = usage.expected
        if expected is None:
            if usage.read_tokens or usage.write_tokens:
                entries = {}  # it read or wrote prefixes the bill does not name
            answers.append(AnswerReplay(usage, dict(entries), None, (), 0.0, False))
            continue
        before = dict(entries)
        carried = {k: e for k, e in entries.items() if is_prefix(e, expected.points)}
        read = _read_end(usage, calibration, carried)
        renewed = _renewed(read, usage, carried, at)
        if renewed is not None:
            carried[renewed.key] = renewed
        writes = _written(usage, calibration, read, min_tokens=min_tokens)
        downgraded = (
            usage.details_known
            and usage.written_1h == 0
            and any(point.ttl == "1h" for point in writes.points)
        )
        made = tuple(_entry(point, expected.points, at, downgraded) for point in writes.points)
        for entry in made:
            carried[entry.key] = entry
        lives = max([e.life for e in made] + ([renewed.life] if renewed else []), default=0.0)
        answers.append(
            AnswerReplay(
                usage, before, renewed, made, lives, downgraded, writes.first, writes.spaced
            )
        )
        entries = carried
    return CacheHistory(tuple(answers), entries)


def is_prefix(entry: Entry, points: Sequence[ExpectedPoint]) -> bool:
    """Whether ``entry`` holds a prefix of the prompt whose points are ``points``: one of them
    has its identity; or none marks its length with another, the prompt runs past it, and
    every point below it is one the entry's own prompt had below it too."""
    if any(point.key == entry.key for point in points):
        return True
    if any(point.prefix_tokens == entry.prefix for point in points):
        # The same length: another content, unless the entry is known by its length alone
        # (an older payload's, or a prefix its prompt did not mark).
        return entry.key == f"tokens:{entry.prefix}"
    if not any(point.prefix_tokens > entry.prefix for point in points):
        return False
    return all(point.key in entry.below for point in points if point.prefix_tokens < entry.prefix)


@dataclass(frozen=True, slots=True)
class _Prefix:
    """A prefix a read could end at: a point of the prompt, or an entry carried to it."""

    key: str
    tokens: int
    point: ExpectedPoint | None


def _read_end(
    usage: ModelUsage, calibration: Calibration, carried: Mapping[str, Entry]
) -> _Prefix | None:
    """The prefix the read ended at; None when it read nothing of the view (nothing, or only
    the model stage's own prefix)."""
    assert usage.expected is not None
    if usage.read_tokens == 0:
        return None
    candidates: dict[str, _Prefix] = {
        e.key: _Prefix(e.key, e.prefix, None) for e in carried.values()
    }
    for point in usage.expected.points:
        candidates[point.key] = _Prefix(point.key, point.prefix_tokens, point)
    want = usage.expected.expected_read_tokens
    if want > 0 and all(c.tokens != want for c in candidates.values()):
        # The prefix the stage expected to read is one of this prompt's, marked or not.
        candidates[f"tokens:{want}"] = _Prefix(f"tokens:{want}", want, None)
    nearest = min(
        candidates.values(),
        key=lambda c: (abs(calibration.tokens(c.tokens) - usage.read_tokens), c.tokens),
        default=None,
    )
    if nearest is None or abs(calibration.offset - usage.read_tokens) < abs(
        calibration.tokens(nearest.tokens) - usage.read_tokens
    ):
        return None  # nearer the model stage's own prefix than any of the view's
    return nearest


def _renewed(
    read: _Prefix | None, usage: ModelUsage, carried: Mapping[str, Entry], at: datetime
) -> Entry | None:
    """The entry the read renewed: the one it ended at, for its own life; one the replay did
    not know of (made before the page, or believed dead) for the life its point asks, at most
    ``5m`` (the read shows it was alive, not how long it was made to live)."""
    if read is None:
        return None
    known = carried.get(read.key)
    if known is not None:
        return replace(known, expires=at + timedelta(seconds=known.life))
    assert usage.expected is not None
    life = FIVE_MINUTES
    below = frozenset(p.key for p in usage.expected.points if p.prefix_tokens < read.tokens)
    return Entry(read.key, read.tokens, below, life, life, at + timedelta(seconds=life))


@dataclass(frozen=True, slots=True)
class _Writes:
    """The points that wrote, and what the points that did not say of the model's minimum:
    ``first`` the largest calibrated prefix that reached it though nothing cached at all
    (the minimum is higher), ``spaced`` whether one past a cached prefix reached it and did
    not write (each further point needs more, Bedrock's per-checkpoint reading)."""

    points: tuple[ExpectedPoint, ...] = ()
    first: int | None = None
    spaced: bool = False


def _written(
    usage: ModelUsage, calibration: Calibration, read: _Prefix | None, *, min_tokens: int
) -> _Writes:
    """The points past the read up to the one whose calibrated end is nearest the write's
    end, of them those that reach the minimum (and that one: the bill shows it wrote); and
    what the points past those, reaching the minimum by :data:`MINIMUM_EVIDENCE_MARGIN`,
    say by writing nothing."""
    assert usage.expected is not None
    start = read.tokens if read is not None else -1
    past = [p for p in usage.expected.points if p.prefix_tokens > start]
    written: list[ExpectedPoint] = []
    if usage.write_tokens > 0 and past:
        end = usage.read_tokens + usage.write_tokens
        last = min(
            past, key=lambda p: (abs(calibration.tokens(p.prefix_tokens) - end), p.prefix_tokens)
        )
        written = [
            p
            for p in past
            if p.prefix_tokens < last.prefix_tokens
            and calibration.tokens(p.prefix_tokens) >= min_tokens
        ] + [last]
    beyond = written[-1].prefix_tokens if written else start
    silent = [
        calibration.tokens(p.prefix_tokens)
        for p in past
        if p.prefix_tokens > beyond
        and calibration.tokens(p.prefix_tokens) >= min_tokens * (1 + MINIMUM_EVIDENCE_MARGIN)
    ]
    if not silent:
        return _Writes(tuple(written))
    if written or read is not None:
        return _Writes(tuple(written), spaced=True)
    return _Writes((), first=max(silent))


def _entry(
    point: ExpectedPoint, points: Sequence[ExpectedPoint], at: datetime, downgraded: bool
) -> Entry:
    asked = TTL_SECONDS[point.ttl]
    life = FIVE_MINUTES if downgraded else asked
    below = frozenset(p.key for p in points if p.prefix_tokens < point.prefix_tokens)
    return Entry(point.key, point.prefix_tokens, below, life, asked, at + timedelta(seconds=life))
