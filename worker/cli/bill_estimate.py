"""The sliding window's ESTIMATED bill for a stored conversation's answered turns, beside the
observed one in ``worker bill`` (:mod:`worker.cli.bill_report`).

Each turn is rebuilt (the sliding window over the history before its question, that question as
the current message, today's fold summary) with :func:`~worker.planning.plan_turn`, and the
sequence is priced by the stage's model of the cache (:mod:`worker.caching.bill_model`) at the
answers' ``answered_at`` times, in ``chars/4`` tokens scaled by the conversation's calibration
(its offset, the model stage's own system prompt, placed first). An answer without
``answered_at`` is priced at the time of the one before it. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from worker.caching.bill_model import CacheRules, PromptCache, price_turn
from worker.caching.bills import ModelUsage
from worker.caching.calibration import Calibration
from worker.memory import HistoryMessage, is_blank
from worker.planning import PlanConfig, plan_turn
from worker.ports import HistoryPage


@dataclass(frozen=True, slots=True)
class SlidingEstimate:
    """The sliding window's estimated bill for the answered turns, in calibrated tokens.
    ``without_question``: billed answers with no question stored before them (not priced)."""

    turns: int
    read: float
    written: float
    uncached: float
    billed: float
    without_question: int

    @property
    def input_tokens(self) -> float:
        return self.read + self.written + self.uncached


def sliding_estimate(
    page: HistoryPage,
    messages: Sequence[HistoryMessage],
    observed: Sequence[ModelUsage],
    calibration: Calibration,
    config: PlanConfig,
) -> SlidingEstimate:
    """Each billed answer's turn as the sliding window would have sent it, priced in order
    by the cache model at the answers' times, in calibrated tokens."""
    ratio = calibration.ratio if calibration.samples else 1.0
    offset = calibration.offset if calibration.samples else 0.0
    # Priced in estimated tokens with the model stage's system prompt first, so that the
    # calibrated count is ``ratio`` times the priced one; the model's minimum likewise.
    rules = CacheRules(
        min_prefix_tokens=math.ceil(config.min_tokens / ratio),
        system_prompt_tokens=round(offset / ratio),
    )
    sliding = replace(config, cache_aligned=False)
    cache = PromptCache()
    start = next((u.answered_at for u in observed if u.answered_at is not None), None)
    at, turns, read, written, uncached, billed, without = 0.0, 0, 0, 0, 0, 0.0, 0
    for usage in observed:
        question = next(
            (m for m in reversed(messages) if m.seq < usage.seq and m.role == "user"), None
        )
        if question is None or is_blank(question.content):
            without += 1
            continue
        before = tuple(m for m in reversed(messages) if m.seq < question.seq)
        plan = plan_turn(
            replace(page, messages=before, usage=()), question.content, sent_at=None, config=sliding
        )
        if usage.answered_at is not None and start is not None:
            at = (usage.answered_at - start).total_seconds()
        cost, cache = price_turn(cache, plan.view.system, plan.view.messages, at=at, rules=rules)
        turns += 1
        read, written, uncached = read + cost.read, written + cost.written, uncached + cost.uncached
        billed += cost.billed
    return SlidingEstimate(
        turns=turns,
        read=read * ratio,
        written=written * ratio,
        uncached=uncached * ratio,
        billed=billed * ratio,
        without_question=without,
    )
