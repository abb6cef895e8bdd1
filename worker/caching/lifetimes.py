"""Cache lifetimes chosen per turn: the ``ttl`` of each cache point of the cache-aligned view.

``docs/CONTRACT.md``, "Cache lifetimes". ``HISTORY_CACHE_TTL=5m`` or ``1h`` sets every
point so; ``adaptive`` chooses, per turn and per point, ``5m``, ``1h`` or no point from
the conversation's pace and the turn's shape:

- The pace (:func:`read_pace`): the gaps between the page's questions' ``created_at``,
  and between the newest of them and the command's ``sent_at``, the last
  :data:`PACE_GAPS` of them. ``P(gap < 5 min)`` and ``P(gap < 1 h)`` are the shares of
  gaps that a 5-minute or 1-hour entry would outlive (with :data:`HIT_MARGIN_SECONDS` to
  spare), each with a weak prior (:data:`PRIOR_WEIGHT` gaps' worth). No gap at all: every
  point ``5m``, the lifetime a point without a ``ttl`` has (nothing is known of the pace).
- The shape (:class:`TurnShape`): the estimated tokens before each point, the chance
  the next turn's prompt starts with that prefix (lower when the window is near its
  budget: the next turn then re-anchors), and the prefix this turn shares with the
  previous one (what it may read).
- The choice: each point's segment (the tokens since the point before it that can cache)
  is written at 1.25x with ``5m``, 2x with ``1h``, or sent uncached (1x) without a point,
  and saves ``1.15x`` of itself on the next turn if that turn reuses it before the entry
  holding it dies (the nearest written point at or after it). The TTLs along the prompt are
  chosen together, never increasing (1h > 5m > no point), to minimise the expected cost.
  A point is dropped only when nothing before it can be read this turn (the point is what
  finds the read, or may: the prefix shared with the previous turn), and a point
  whose prefix cannot reach ``min_tokens`` caches nothing: its segment joins the next
  point's, and it takes that point's TTL (legal, and free).
- The model stage's own prefix: when it reaches a stated ``min_tokens`` alone, it is an
  entry of its own, written on a turn that reads nothing of the view, with the view's
  longest TTL, and read again at the next re-anchor; its write and that read are priced too.

A written point makes an entry that holds the whole prefix before it, for its TTL; a
point that writes nothing (its prefix is read) makes none, and its TTL changes nothing
(the strict refresh reading: a read renews an entry for the TTL it was written with).
What this turn reads depends on the previous turn's TTL, which is not stored: it is
taken as the one this policy gives a steady turn of the same shape under the pace
without the newest gap, and the shared prefix counts as read when the newest gap is
within that life. Pure: times in, choices out; the stage's clock is never read here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from itertools import pairwise, product
from typing import Literal

from worker.caching.bills import ExpectedPoint
from worker.caching.expectation import view_points
from worker.caching.observed import NOTHING_OBSERVED, Observation
from worker.caching.prices import PRICE_INPUT, PRICE_READ, PRICE_WRITE, TTL_SECONDS
from worker.memory.converse import CacheTtl, ConverseView, cache_point_prefixes
from worker.memory.history_window import Window, WindowLimits
from worker.memory.tokens import estimate_tokens
from worker.memory.trim import trim_message

HistoryCacheTtl = Literal["adaptive", "5m", "1h"]
#: A point's choice: a TTL, or no point at all.
PointTtl = CacheTtl | None

#: The gaps the pace is read from: about one page's questions.
PACE_GAPS = 12
#: A gap counts as outlived by an entry when it ends this long before the entry's TTL:
#: the entry's clock starts at the request, a little after the question was asked.
HIT_MARGIN_SECONDS = 30.0
#: The prior, worth one gap: even odds of a gap within 5 minutes, and no weight on the band
#: between 5 minutes and 1 hour, so that a 1-hour TTL is bought only on the conversation's
#: own evidence: a prior that leans towards the hour buys 1h on a conversation's early
#: turns for nothing when it turns out brisk, and gains the slower ones less than that
#: costs (the figures: docs/benchmarks/defaults.md, "The cache lifetimes' prior").
PRIOR_WEIGHT = 1.0
PRIOR_FIVE_MINUTES = 0.5
PRIOR_ONE_HOUR = 0.5

_LIFE = TTL_SECONDS
#: Each choice's price per written token (no point: the segment is sent uncached).
_WRITE: dict[PointTtl, float] = {**{ttl: PRICE_WRITE[ttl] for ttl in _LIFE}, None: PRICE_INPUT}
#: What a hit saves per token against writing the prefix again at 5 minutes' price.
_HIT_SAVES = PRICE_WRITE["5m"] - PRICE_READ
_ORDER: tuple[PointTtl, ...] = ("1h", "5m", None)
#: Tried in this order, so that of equal costs the shorter TTL is kept.
_CANDIDATES: tuple[PointTtl, ...] = ("5m", "1h", None)
#: For a conversation whose ``1h`` writes come back as ``5m``.
_CANDIDATES_NO_1H: tuple[PointTtl, ...] = ("5m", None)


@dataclass(frozen=True, slots=True)
class Pace:
    """The conversation's pace as read from its timestamps: the gaps (seconds, oldest first)
    and the estimated chances that the next gap is within a 5-minute or 1-hour life."""

    gaps: tuple[float, ...]
    p5: float
    p60: float

    def within(self, ttl: PointTtl) -> float:
        return 0.0 if ttl is None else (self.p5 if ttl == "5m" else self.p60)


def read_pace(question_times: Sequence[datetime | None], sent_at: datetime | None) -> Pace:
    """The pace from the questions' times (oldest first, None: not stamped) and the current
    command's ``sent_at``. A gap needs both its ends; a negative one (clocks that disagree)
    is left out."""
    times = [*question_times, sent_at]
    gaps = tuple(
        (later - earlier).total_seconds()
        for earlier, later in pairwise(times)
        if earlier is not None and later is not None and later >= earlier
    )[-PACE_GAPS:]
    return Pace(
        gaps=gaps,
        p5=_share(gaps, _LIFE["5m"], PRIOR_FIVE_MINUTES),
        p60=_share(gaps, _LIFE["1h"], PRIOR_ONE_HOUR),
    )


def _share(gaps: Sequence[float], life: float, prior: float) -> float:
    within = sum(gap <= life - HIT_MARGIN_SECONDS for gap in gaps)
    return (within + PRIOR_WEIGHT * prior) / (len(gaps) + PRIOR_WEIGHT)


@dataclass(frozen=True, slots=True)
class PointShape:
    """One cache point of the view: the estimated tokens before it, and the chance that
    the next turn's prompt starts with that same prefix."""

    prefix: int
    reused: float


@dataclass(frozen=True, slots=True)
class TurnShape:
    """The view's cache points in order along the prompt, the tokens of prefix this turn's
    prompt shares with the previous turn's (0: none, e.g. a new summary), the view's
    points as the payload names them (their prefixes' identities: what the bills' entries
    are matched against), and how many gaps from now the window is expected to re-anchor
    (:func:`outlook`)."""

    points: tuple[PointShape, ...]
    shared: int = 0
    named: tuple[ExpectedPoint, ...] = ()
    #: The gaps until the window is expected to re-anchor (the next turn's is the first).
    reanchor_in: int = 1


@dataclass(frozen=True, slots=True)
class TtlChoice:
    """A TTL (or None: no point) per cache point, in order, and why.

    ``why`` is ``fixed`` (the setting names the TTL), ``no_pace`` (no gap to read),
    ``below_minimum`` (no point can reach the model's minimum) or ``expected_cost``.
    ``read`` is the prefix this turn is expected to read (tokens).
    """

    ttls: tuple[PointTtl, ...]
    why: str
    pace: Pace | None = None
    read: int = 0

    @property
    def counts(self) -> dict[str, int]:
        """How many points got each choice (``none``: dropped)."""
        out: dict[str, int] = {}
        for ttl in self.ttls:
            key = ttl or "none"
            out[key] = out.get(key, 0) + 1
        return out


#: The answers whose sizes stand for the next one, in :func:`outlook`.
REUSE_SAMPLE = 6


@dataclass(frozen=True, slots=True)
class Outlook:
    """What the budget leaves the window's anchor, from exchanges like this turn's question
    and the window's last few answers: ``reuse``, the chance that the next turn keeps it
    (that one more such exchange fits, tokens and messages); ``reanchor_in``, how many gaps
    from now it is expected to re-anchor (the turns that keep it, plus the one that does
    not)."""

    reuse: float
    reanchor_in: int


def outlook(window: Window, limits: WindowLimits, current: str) -> Outlook:
    """The window's :class:`Outlook` with ``current`` as this turn's question."""
    question = estimate_tokens(trim_message(current, limits.message_max_tokens))
    answers = [estimate_tokens(m.content) for m in window.messages if m.role == "assistant"]
    sample = answers[-REUSE_SAMPLE:] or [question]
    room = limits.max_tokens - window.estimated_tokens - question
    reuse = (
        sum(answer <= room for answer in sample) / len(sample)
        if window.kept + 2 <= limits.max_messages
        else 0.0
    )
    growth = max(1.0, question + sum(sample) / len(sample))
    by_tokens = int(max(0, limits.max_tokens - window.estimated_tokens) // growth)
    by_messages = max(0, limits.max_messages - window.kept) // 2
    return Outlook(reuse, min(by_tokens, by_messages) + 1)


def turn_shape(
    view: ConverseView,
    window: Window,
    limits: WindowLimits,
    *,
    current: str,
    outcome: str,
    shared_through: int | None,
    summary_shared: bool,
    behind: int,
) -> TurnShape:
    """The cache-aligned view's shape for :func:`choose_ttls`.

    ``outcome`` is the window's (``kept``, ``reanchored``, ``fallback``);
    ``shared_through`` the seq the previous turn's history ended on when the anchor was
    kept (its prompt is this one's up to there); ``summary_shared`` whether the previous
    turn showed the same summary; ``behind`` the seqs the newest fold is past the summary
    shown (a re-anchor then changes the summary too).
    """
    prefixes = cache_point_prefixes(view)
    has_summary = bool(view.system)
    summary_tokens = prefixes[0] if has_summary and prefixes else 0
    # A fallback view keeps no anchor: nothing of it is reused, and the next turn re-anchors.
    ahead = Outlook(0.0, 1) if outcome == "fallback" else outlook(window, limits, current)
    history = ahead.reuse
    summary = history + (1.0 - history) * (behind == 0)
    points = tuple(
        PointShape(prefix, summary if has_summary and index == 0 else history)
        for index, prefix in enumerate(prefixes)
    )
    shared = 0
    if outcome == "kept" and shared_through is not None:
        shared = summary_tokens + sum(
            estimate_tokens(m.content) for m in window.messages if m.seq <= shared_through
        )
    elif summary_shared:
        shared = summary_tokens
    return TurnShape(points, shared, view_points(view), ahead.reanchor_in)


def choose_ttls(
    shape: TurnShape,
    pace: Pace | None,
    *,
    setting: HistoryCacheTtl,
    min_tokens: int,
    observed: Observation = NOTHING_OBSERVED,
    min_tokens_stated: bool = False,
) -> TtlChoice:
    """The TTL of each point of ``shape`` under ``setting`` (see the module's docstring).

    ``observed`` is what the page's stored bills say (:func:`worker.caching.observed.observe`):
    the calibrated tokens decide which prefixes reach ``min_tokens``, whether an entry is
    alive replaces the guess of the previous turn's TTL, and a conversation whose ``1h``
    writes came back as ``5m`` is not offered ``1h``. Without bills it changes nothing.

    ``min_tokens_stated``: ``min_tokens`` is the deployment's, not a guess; only then is the
    model stage's own prefix, when it reaches it alone, priced as an entry of its own
    (:func:`_head`): under a guessed minimum below the model's, its premium buys nothing."""
    count = len(shape.points)
    five = _every("5m", count)
    if setting != "adaptive":
        return TtlChoice(_every(setting, count), "fixed", pace)
    if pace is None or not pace.gaps:
        return TtlChoice(five, "no_pace", pace)
    cacheable = cacheable_points(shape, min_tokens, observed)
    if not cacheable:
        return TtlChoice(five, "below_minimum", pace)
    read = observed.readable(shape.shared, shape.named)
    if read is None:
        previous = _previous_life(shape, pace, cacheable)
        lives = previous is not None and pace.gaps[-1] <= _LIFE[previous] - HIT_MARGIN_SECONDS
        read = shape.shared if lives else 0
    candidates = _CANDIDATES_NO_1H if observed.no_1h else _CANDIDATES
    head = (
        _head(shape, pace, read, max(min_tokens, observed.min_tokens), observed)
        if min_tokens_stated
        else None
    )
    best = _optimise(shape, pace, cacheable, read, candidates, head)
    return TtlChoice(_spread(best, cacheable, count), "expected_cost", pace, read)


def expected_read(
    shape: TurnShape,
    choice: TtlChoice,
    *,
    setting: HistoryCacheTtl,
    min_tokens: int,
    observed: Observation = NOTHING_OBSERVED,
) -> int:
    """The estimated tokens this turn expects to read from the cache: with the bills, the
    longest prefix it shares with the previous turn's whose entry is alive; without them, the
    shared prefix when it reaches the model's minimum and the previous turn's TTL (as the
    setting or the policy gave it) outlives the newest gap."""
    if shape.shared <= 0:
        return 0
    readable = observed.readable(shape.shared, shape.named)
    if readable is not None:
        return readable
    if observed.calibration.tokens(shape.shared) < max(min_tokens, observed.min_tokens):
        return 0
    if choice.why == "expected_cost":
        return choice.read
    pace = choice.pace
    if pace is None or not pace.gaps:
        return 0
    life = _LIFE["5m" if setting == "adaptive" else setting]
    return shape.shared if pace.gaps[-1] <= life - HIT_MARGIN_SECONDS else 0


def cacheable_points(shape: TurnShape, min_tokens: int, observed: Observation) -> list[int]:
    """The points whose prefix can cache: its real tokens (the calibration's, which starts
    from the model stage's own prefix) reach the model's minimum, as configured or as the
    bills raised it; where the bills showed each further checkpoint needing the minimum more,
    each point must hold that much more than the last one that can."""
    minimum = max(min_tokens, observed.min_tokens)
    cacheable: list[int] = []
    last = 0
    for index, point in enumerate(shape.points):
        tokens = observed.calibration.tokens(point.prefix)
        needed = last + minimum if observed.spaced and cacheable else minimum
        if tokens >= needed:
            cacheable.append(index)
            last = tokens
    return cacheable


@dataclass(frozen=True, slots=True)
class _Head:
    """The model stage's own prefix (its system prompt and tools, before the view) on a turn
    that writes it: its real tokens, and by the life its entry would get the chance that it
    is still alive when it is next read, at the window's next re-anchor."""

    tokens: float
    chance: dict[CacheTtl, float]


def _head(
    shape: TurnShape, pace: Pace, read: int, minimum: int, observed: Observation
) -> _Head | None:
    """The model stage's own prefix when it is an entry of its own that this turn writes: it
    reaches the minimum alone (the calibration's offset: ``MODEL_PREFIX_TOKENS``, then the
    bills), and nothing of the view is read, so neither is it.

    Its point takes the longest TTL of the view's (the contract), and its entry is renewed
    only when a read ends there: a turn that keeps the anchor reads the view's longer entry
    instead. So it is read again, and renewed for the life it was written with, at the next
    re-anchor, a few gaps away: a ``5m`` entry seldom lives that long, and once written
    ``5m`` it stays so, each re-anchor then writing it again at 1.25x what a read costs 0.1x.
    None when it caches nothing alone or is not written."""
    if read > 0 or observed.calibration.offset < minimum:
        return None
    runs = _runs(pace.gaps, shape.reanchor_in)
    chance: dict[CacheTtl, float] = {
        "5m": _share(runs, _LIFE["5m"], PRIOR_FIVE_MINUTES),
        "1h": _share(runs, _LIFE["1h"], PRIOR_ONE_HOUR),
    }
    return _Head(observed.calibration.offset, chance)


def _runs(gaps: Sequence[float], count: int) -> list[float]:
    """The lengths of the runs of ``count`` consecutive gaps among ``gaps`` (fewer gaps than
    that: their total, scaled to ``count`` of them)."""
    if not gaps:
        return []
    if len(gaps) < count:
        return [sum(gaps) * count / len(gaps)]
    return [sum(gaps[i : i + count]) for i in range(len(gaps) - count + 1)]


def _every(ttl: CacheTtl, count: int) -> tuple[PointTtl, ...]:
    return tuple(ttl for _ in range(count))


def _previous_life(shape: TurnShape, pace: Pace, cacheable: Sequence[int]) -> PointTtl:
    """The life of the previous turn's newest entry (the prefix shared with it), as this
    policy would have chosen it then: a steady turn of this shape under the pace before
    the newest gap. None: nothing is shared."""
    if shape.shared <= 0:
        return None
    earlier = pace.gaps[:-1]
    before = Pace(
        earlier,
        _share(earlier, _LIFE["5m"], PRIOR_FIVE_MINUTES),
        _share(earlier, _LIFE["1h"], PRIOR_ONE_HOUR),
    )
    # The previous turn's next turn is this one, which reuses its prefix: a steady turn.
    steady_shape = TurnShape(tuple(replace(p, reused=1.0) for p in shape.points), shape.shared)
    steady = _optimise(steady_shape, before, cacheable, shape.shared) if earlier else ()
    return steady[-1] if steady and steady[-1] is not None else "5m"


def _optimise(
    shape: TurnShape,
    pace: Pace,
    cacheable: Sequence[int],
    read: int,
    candidates: tuple[PointTtl, ...] = _CANDIDATES,
    head: _Head | None = None,
) -> tuple[PointTtl, ...]:
    """The non-increasing TTLs of the cacheable points with the least expected cost.

    A written point makes an entry of its TTL that holds the whole prefix before it, so a
    segment lives as long as the nearest written point at or after it; a point that writes
    nothing costs nothing whatever its TTL. The entry this turn reads from is renewed for
    the life it was written with, which is not known here: it is given no credit (so the
    policy errs towards protecting what it writes). Of equal costs, the shorter TTL.
    ``head``: the model stage's own prefix, written this turn with the view's longest TTL
    (:func:`_head`).
    """
    segments = []
    start = 0
    for index in cacheable:
        point = shape.points[index]
        written = max(0, point.prefix - max(read, start))
        segments.append((point.prefix - start, written, point.reused, start))
        start = point.prefix
    best: tuple[PointTtl, ...] = ()
    best_cost = float("inf")
    for ttls in product(candidates, repeat=len(segments)):
        ranks = [_ORDER.index(ttl) for ttl in ttls]
        if ranks != sorted(ranks):
            continue  # a longer TTL after a shorter one: refused by Bedrock
        cost = 0.0
        protect: PointTtl = None
        for ttl, (tokens, written, reused, start) in zip(
            reversed(ttls), reversed(segments), strict=True
        ):
            if ttl is None and (written < tokens or start < shape.shared):
                # The point finds this turn's read (or may: the prefix it shares with the
                # previous turn's could be cached, whatever the estimate says): it stays.
                cost = float("inf")
                break
            if written > 0:
                protect = ttl
            cost += _WRITE[ttl] * written - reused * pace.within(protect) * _HIT_SAVES * tokens
        if head is not None:
            # Written with the view's longest TTL; read next turn inside the view's first
            # entry (when that turn reuses it and the entry lives), and at the next re-anchor
            # from its own entry, which only a read ending there renews.
            life: CacheTtl = "1h" if "1h" in ttls else "5m"
            read_next = segments[0][2] * pace.within(protect) if segments else 0.0
            saved = (read_next + head.chance[life]) * _HIT_SAVES
            cost += (_WRITE[life] - saved) * head.tokens
        if cost < best_cost:
            best, best_cost = ttls, cost
    return best


def _spread(
    chosen: Sequence[PointTtl], cacheable: Sequence[int], count: int
) -> tuple[PointTtl, ...]:
    """Every point's TTL: a cacheable point's as chosen; one below the minimum takes the
    next cacheable point's (it caches nothing, and the order stays legal)."""
    out: list[PointTtl] = []
    position = 0
    for index in range(count):
        while position < len(cacheable) and cacheable[position] < index:
            position += 1
        out.append(chosen[position] if position < len(chosen) else chosen[-1])
    return tuple(out)


def ttl_order_is_legal(ttls: Sequence[PointTtl]) -> bool:
    """Whether no point carries a longer TTL than one before it (dropped points aside)."""
    lives = [_LIFE[ttl] for ttl in ttls if ttl is not None]
    return all(later <= earlier for earlier, later in pairwise(lives))
