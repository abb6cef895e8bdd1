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
  beyond the page).

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
from worker.caching.lifetimes import (
    HistoryCacheTtl,
    TtlChoice,
    choose_ttls,
    read_pace,
    turn_shape,
)
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
    mode, and in the cache-aligned mode the headroom and the cache lifetimes' setting."""

    limits: WindowLimits
    cache_aligned: bool
    headroom: AnchorHeadroom
    cache_ttl: HistoryCacheTtl
    min_tokens: int


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
    if not config.cache_aligned:
        window = bound_history(page.messages, config.limits)
        return TurnPlan(
            page,
            window,
            render_converse(window, message, state.summary),
            state.summary,
            state.folded_through,
            fold_gap(window, state.folded_through),
        )
    stored = page.anchor
    aligned = cache_aligned_window(
        page.messages,
        config.limits,
        folded_through=state.folded_through,
        anchor=stored,
        headroom=config.headroom,
        summary=state.summary,
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
    ttls = choose_ttls(
        shape,
        read_pace(questions, sent_at),
        setting=config.cache_ttl,
        min_tokens=config.min_tokens,
    )
    return TurnPlan(
        page,
        window,
        with_cache_ttls(view, ttls.ttls),
        shown.summary,
        shown.folded_through,
        fold_gap(window, state.folded_through),
        _anchor_to_write(aligned, stored),
        aligned,
        ttls,
    )


def _anchor_to_write(aligned: AlignedWindow, stored: WindowAnchor | None) -> WindowAnchor | None:
    """The new anchor, unless the ``state`` item already holds it with the same snapshot."""
    new = aligned.anchor_to_store
    if new is None or (new == stored and stored is not None and stored.snapshot == new.snapshot):
        return None
    return new
