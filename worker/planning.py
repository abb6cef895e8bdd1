"""A turn's decision as one value: what the turn read in, one frozen :class:`TurnPlan` out.

:func:`plan_turn` takes the page the turn read (the messages, the fold ``state`` and the
anchor it holds), the current counsel message, when it was sent, and a small frozen
:class:`PlanConfig`, and decides everything the turn will do with them:

- the window: the sliding one (:func:`bound_history`) or, in the cache-aligned mode, the
  one :func:`cache_aligned_window` keeps, re-anchors or falls back to;
- the model-ready view, and in the cache-aligned mode the ``ttl`` of each of its cache
  points (:func:`choose_ttls`, from the page's questions' ``created_at`` and ``sent_at``);
- the summary the prompt shows (the snapshot in force, or the newest) and its fold mark;
- the anchor to write (none when the stored one stays, or equals the new one);
- any fold gap, and whether the turn must read an older page before it can decide
  (:attr:`TurnPlan.needs_older`: the window's floor opens on an answer whose question lies
  beyond the page);
- what the page's stored bills teach (:func:`observe`: the newest bill checked against its
  expectation, the conversation's token calibration, whether any cache entry is alive at
  ``sent_at``), and the payload's ``cache`` block, what this prompt expects of the cache.
  In the cache-aligned mode a cold cache (every entry dead) re-anchors the window.

The stage, ``worker window``, the tests and the benchmark all call this function; none of
them decides a turn another way. The fold request is decided at its claim by
:func:`worker.memory.plan_compaction`, whose pending rule reads the claim's own clock.

Pure: no I/O, no logging, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from worker.caching.anchor import (
    AlignedWindow,
    AnchorHeadroom,
    WindowAnchor,
    cache_aligned_window,
)
from worker.caching.bills import CacheExpectation
from worker.caching.expectation import expectation, view_points
from worker.caching.lifetimes import (
    HIT_MARGIN_SECONDS,
    HistoryCacheTtl,
    TtlChoice,
    choose_ttls,
    expected_read,
    read_pace,
    turn_shape,
)
from worker.caching.observed import NOTHING_OBSERVED, Observation, observe
from worker.caching.prices import TTL_SECONDS
from worker.memory import (
    ConverseView,
    FoldGap,
    Window,
    WindowLimits,
    bound_history,
    fold_gap,
    render_converse,
)
from worker.memory.converse import previous_history_end, with_cache_ttls
from worker.ports import HistoryPage


@dataclass(frozen=True, slots=True)
class PlanConfig:
    """What a turn's decision depends on beyond what it read: the window's limits, the
    mode, in the cache-aligned mode the headroom and the cache lifetimes' setting, and what
    the stage knows of its model: the cache's minimum prefix, whether it takes ``1h``, and
    the model stage's own prefix (its system prompt and tools), the calibration's prior.
    ``min_tokens_stated``: the minimum is the deployment's (``MODEL_ID`` or
    ``PROMPT_CACHE_MIN_TOKENS``), not the default guessed without either."""

    limits: WindowLimits
    cache_aligned: bool
    headroom: AnchorHeadroom
    cache_ttl: HistoryCacheTtl
    min_tokens: int
    offers_1h: bool = True
    model_prefix_tokens: int = 0
    min_tokens_stated: bool = False


@dataclass(frozen=True, slots=True)
class TurnPlan:
    """One turn's decision. ``aligned`` and ``ttls`` are set in the cache-aligned mode only;
    ``summary`` and ``folded_through`` are what the prompt shows."""

    page: HistoryPage
    window: Window
    view: ConverseView
    summary: str | None
    folded_through: int
    gap: FoldGap | None
    anchor_to_write: WindowAnchor | None = None
    aligned: AlignedWindow | None = None
    ttls: TtlChoice | None = None
    cache: CacheExpectation | None = None
    observed: Observation = NOTHING_OBSERVED

    @property
    def needs_older(self) -> bool:
        """The window's floor opens on an answer whose question is on an older page, and
        there is one: read it and plan again."""
        return self.page.older is not None and self.window.floor_needs_older


def plan_turn(
    page: HistoryPage, message: str, *, sent_at: datetime | None, config: PlanConfig
) -> TurnPlan:
    """Decide the turn for ``message`` (sent at ``sent_at``) over what ``page`` holds."""
    state = page.state
    observed = _observe(page, sent_at, config)
    if not config.cache_aligned:
        window = bound_history(page.messages, config.limits)
        view = render_converse(window, message, state.summary)
        return TurnPlan(
            page,
            window,
            view,
            state.summary,
            state.folded_through,
            fold_gap(window, state.folded_through),
            cache=expectation(view, read=_summary_read(view, page, sent_at, observed, config)),
            observed=observed,
        )
    stored = page.anchor
    aligned = cache_aligned_window(
        page.messages,
        config.limits,
        folded_through=state.folded_through,
        anchor=stored,
        headroom=config.headroom,
        summary=state.summary,
        cold=observed.cold,
    )
    window, shown = aligned.window, aligned.shown
    shared_through = previous_history_end(window)
    view = render_converse(
        window,
        message,
        shown.summary,
        cache_history=True,
        previous_history_end=shared_through,
    )
    shape = turn_shape(
        view,
        window,
        config.limits,
        current=message,
        outcome=aligned.outcome,
        shared_through=shared_through,
        summary_shared=stored is not None and stored.folded_through == shown.folded_through,
        behind=aligned.behind,
    )
    questions = [m.created_at for m in reversed(page.messages) if m.role == "user"]
    pace = read_pace(questions, sent_at)
    setting, minimum = config.cache_ttl, config.min_tokens
    ttls = choose_ttls(
        shape,
        pace,
        setting=setting,
        min_tokens=minimum,
        observed=observed,
        min_tokens_stated=config.min_tokens_stated,
    )
    read = expected_read(shape, ttls, setting=setting, min_tokens=minimum, observed=observed)
    view = with_cache_ttls(view, ttls.ttls)
    return TurnPlan(
        page,
        window,
        view,
        shown.summary,
        shown.folded_through,
        fold_gap(window, state.folded_through),
        _anchor_to_write(aligned, stored),
        aligned,
        ttls,
        expectation(view, read=read),
        observed,
    )


def _observe(page: HistoryPage, sent_at: datetime | None, config: PlanConfig) -> Observation:
    """What the page's stored bills say, for this command's ``sent_at``."""
    return observe(
        page.usage,
        page.messages,
        newest_answer_seq=_newest_answer(page),
        sent_at=sent_at,
        min_tokens=config.min_tokens,
        offers_1h=config.offers_1h,
        model_prefix_tokens=config.model_prefix_tokens,
    )


def _newest_answer(page: HistoryPage) -> int | None:
    """The seq of the newest answer's first part (the one that carries its bill): the
    oldest of the newest run of answers on the page."""
    first: int | None = None
    for message in page.messages:  # newest first
        if message.role == "assistant":
            first = message.seq
        elif first is not None:
            break
    return first


def _summary_read(
    view: ConverseView,
    page: HistoryPage,
    sent_at: datetime | None,
    observed: Observation,
    config: PlanConfig,
) -> int:
    """The sliding view's expected read: the prefix up to the summary's point, when the
    previous prompt had the same one (as far as its bill says), an entry is alive (by the
    bills, else the newest question is within 5 minutes of ``sent_at``) and it reaches
    the model's minimum (calibrated)."""
    points = view_points(view)
    if not points:
        return 0
    prefix = points[0].prefix_tokens
    if observed.calibration.tokens(prefix) < max(config.min_tokens, observed.min_tokens):
        return 0
    previous = page.usage[0].expected if page.usage else None
    if previous is not None and not any(points[0].same_prefix(p) for p in previous.points):
        return 0
    readable = observed.readable(prefix, points)
    if readable is not None:
        return prefix if readable == prefix else 0
    asked = next((m.created_at for m in page.messages if m.role == "user"), None)
    if asked is None or sent_at is None:
        return 0
    life = TTL_SECONDS["5m"] - HIT_MARGIN_SECONDS
    return prefix if 0 <= (sent_at - asked).total_seconds() <= life else 0


def _anchor_to_write(aligned: AlignedWindow, stored: WindowAnchor | None) -> WindowAnchor | None:
    """The new anchor, unless the ``state`` item already holds it with the same snapshot."""
    new = aligned.anchor_to_store
    if new is None or (new == stored and stored is not None and stored.snapshot == new.snapshot):
        return None
    return new
