"""Part 8 of ``make bench``: the model's input bill under the prompt cache, turn by turn.

The workload's 200 conversations are replayed from their first message, each turn decided
by the stage's own read and plan (:func:`bench.load.replay.replay_plans`) with a scripted
compactor landing each fold request 1-3 turns later, and every view priced with the
prompt-cache model of :mod:`worker.caching.bill_model`: one cache per conversation, the
turns spaced by each case's pause model. Contenders, on the same histories and folds:

- ``sliding``: the default window mode;
- ``cache-aligned``: ``HISTORY_WINDOW_MODE=cache-aligned`` with its default cache lifetimes
  (``HISTORY_CACHE_TTL=adaptive``), and with ``5m`` or ``1h`` on every point;
- ``stepped``: the peer to beat (:func:`bench.parts.cache_bill.stepped_window`), its start
  on a grid of :data:`STEP` tokens, with the history's cache points.

Cases: the pace models, sensitivities of the cache's rules, and the model classes
(:mod:`bench.load.model_classes`: the cache's minimum by the model stage's own prefix, the
stage configured with ``MODEL_ID`` and ``MODEL_PREFIX_TOKENS`` as a deployment would). The
other cases run the stage with ``MODEL_ID`` the stand-in's model, Claude Sonnet 4.5
(:func:`bench.load.model_classes.baseline_settings`: 1,024 tokens, ``1h``).

What is priced, the cost model's sources and the pause models: docs/benchmarks/model_bill.md.
Run::

    .venv/bin/python -m bench.parts.model_bill            # ~4 min on 2 cores: the tables
    .venv/bin/python -m bench.parts.model_bill --quick    # every fifth conversation
    .venv/bin/python -m bench.parts.model_bill --write    # also into docs/BENCHMARKS.md
"""

from __future__ import annotations

import os
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import cache
from typing import Any

from bench.load.model_classes import CLASSES, ModelClass, baseline_settings, settings_for
from bench.load.replay import (
    PAUSE_MODELS,
    ReplayedConversation,
    pace_profile,
    replay_plans,
    replayed_conversations,
    turn_times,
)
from bench.parts.cache_bill import Tally, stepped_window
from worker.caching.bill_model import CacheRules, PromptCache, price_turn
from worker.memory import fold_gap, render_converse
from worker.memory.converse import previous_history_end
from worker.planning import PlanConfig
from worker.settings import Settings

SEED = 11
#: The stepped peer's grid, in estimated tokens of history (``PROMPT-CACHE.md``).
STEP = 2_000
#: The quick run: every fifth conversation of the workload.
QUICK_EVERY = 5
#: The stage's settings of each planned contender (the rest are the defaults).
MODES: dict[str, dict[str, Any]] = {
    "sliding": {"cache_aligned": False},
    "cache-aligned": {"cache_aligned": True, "cache_ttl": "adaptive"},
    "cache-aligned, 5m": {"cache_aligned": True, "cache_ttl": "5m"},
    "cache-aligned, 1h": {"cache_aligned": True, "cache_ttl": "1h"},
}
CONTENDERS = (*MODES, "stepped")
#: Claude Sonnet 4.5's minimum (the baseline's MODEL_ID), the default TTL, the model stage's
#: 300-token system prompt first with a cache point of its own.
BASELINE_RULES = CacheRules(
    min_prefix_tokens=1024, ttl="5m", system_prompt_tokens=300, system_prompt_cache_point=True
)


@dataclass(frozen=True, slots=True)
class Case:
    """One pricing: the pause model and the cache's rules; the stage's settings are the
    baseline's with the rules' minimum, or, for a model class, as a deployment sets them."""

    name: str
    pauses: str
    rules: CacheRules = BASELINE_RULES
    model: ModelClass | None = None

    def settings(self, settings: Settings) -> Settings:
        if self.model is None:
            return settings
        return settings_for(self.model)


def class_case(model: ModelClass) -> Case:
    """The mixed paces under ``model``'s minimum and model stage prefix."""
    rules = replace(BASELINE_RULES, min_prefix_tokens=model.min_tokens,
                    system_prompt_tokens=model.prefix_tokens)  # fmt: skip
    name = f"{model.min_tokens:,} / {model.prefix_tokens:,}, MODEL_ID {model.model}"
    return Case(name, "mixed", rules, model)


CASES = (
    Case("mixed (the baseline)", "mixed"),
    Case("sessions", "sessions"),
    Case("interrupted", "interrupted"),
    Case("cold", "cold"),
    Case("one long session", "brisk-sessions"),
    Case("deliberate", "deliberate"),
    Case("mixed, no system prompt", "mixed",
         replace(BASELINE_RULES, system_prompt_tokens=0, system_prompt_cache_point=False)),
    Case("mixed, lenient refresh", "mixed", replace(BASELINE_RULES, refresh="lenient")),
    *(class_case(model) for model in CLASSES),
)  # fmt: skip


def plan_config(settings: Settings, case: Case, mode: str) -> PlanConfig:
    if case.model is not None:
        return replace(case.settings(settings).plan_config, **MODES[mode])
    return replace(settings.plan_config, min_tokens=case.rules.min_prefix_tokens, **MODES[mode])


def price_case(
    case: Case, conversations: Sequence[ReplayedConversation], settings: Settings
) -> tuple[dict[str, Tally], dict[str, dict[str, Tally]]]:
    """Every contender's tally over ``conversations`` under ``case``, in all and by the pace
    profile each conversation drew."""
    limits = settings.window_limits
    tallies = {name: Tally() for name in CONTENDERS}
    by_profile: dict[str, dict[str, Tally]] = defaultdict(
        lambda: {name: Tally() for name in CONTENDERS}
    )
    for conversation in conversations:
        cid = conversation.conversation_id
        times = turn_times(cid, conversation.turns, case.pauses, seed=SEED)
        timed = conversation.at(times)
        cumulative = conversation.cumulative_tokens(limits.message_max_tokens)
        streams = [
            replay_plans(timed, plan_config(settings, case, mode), times, settings=settings,
                         seed=SEED)
            for mode in MODES
        ]  # fmt: skip
        caches = dict.fromkeys(CONTENDERS, PromptCache())
        mine = by_profile[pace_profile(cid, case.pauses, seed=SEED)]
        for index, plans in enumerate(zip(*streams, strict=True)):
            decided = dict(zip(MODES, plans, strict=True))
            sliding = decided["sliding"]
            question = timed.question(index + 1).content
            stepped = stepped_window(
                timed.history(index + 1), cumulative, sliding.window, limits, STEP
            )
            turns = {
                name: (plan.view, plan.window, plan.gap is not None,
                       plan.aligned is not None and plan.aligned.outcome == "reanchored")
                for name, plan in decided.items()
            }  # fmt: skip
            turns["stepped"] = (
                render_converse(stepped, question, sliding.summary, cache_history=True,
                                previous_history_end=previous_history_end(stepped)),
                stepped, fold_gap(stepped, sliding.folded_through) is not None, False,
            )  # fmt: skip
            for name, (view, window, gap, reanchored) in turns.items():
                cost, caches[name] = price_turn(
                    caches[name], view.system, view.messages, at=times[index], rules=case.rules
                )
                for tally in (tallies[name], mine[name]):
                    tally.add(cid, cost, window, gap=gap, reanchored=reanchored)
    return tallies, dict(by_profile)


@cache
def _conversations(quick: bool) -> list[ReplayedConversation]:
    conversations = replayed_conversations(200, seed=SEED)
    return conversations[::QUICK_EVERY] if quick else conversations


def case_row(job: tuple[int, bool]) -> dict[str, Any]:
    """Case ``CASES[index]`` priced (over the quick run's conversations when ``quick``)."""
    index, quick = job
    case = CASES[index]
    tallies, by_profile = price_case(case, _conversations(quick), baseline_settings())
    base = tallies["sliding"]
    model = case.model
    row: dict[str, Any] = {
        "case": case.name,
        "pauses": case.pauses,
        "sensitivity": case.rules != BASELINE_RULES or model is not None,
        "model": None if model is None else {
            "key": model.key, "min_tokens": model.min_tokens,
            "prefix_tokens": model.prefix_tokens, "model": model.model,
            "model_id": model.model_id,
        },
        "contenders": {name: tallies[name].figures(base) for name in CONTENDERS},
    }  # fmt: skip
    if index == 0:
        row["by_profile"] = {
            profile: {name: t[name].figures(t["sliding"]) for name in CONTENDERS}
            for profile, t in sorted(by_profile.items())
        }
    return row


def measure(*, quick: bool, say: Any = print, jobs: int | None = None) -> dict[str, Any]:
    """Every case priced, ``jobs`` processes sharing them: the part's figures (JSON-ready)."""
    settings = baseline_settings()
    conversations = _conversations(quick)
    jobs = jobs or max(1, min(os.cpu_count() or 1, 4))
    say(f"part 8: the model's bill, {len(CASES)} cases in {jobs} processes")
    started = time.monotonic()
    work = [(index, quick) for index in range(len(CASES))]
    if jobs <= 1:
        cases = [case_row(job) for job in work]
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            cases = list(pool.map(case_row, work))
    headroom = settings.anchor_headroom
    return {
        "command": ".venv/bin/python -m bench.parts.model_bill" + (" --quick" if quick else ""),
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "seconds": time.monotonic() - started,
        "conversations": len(conversations),
        "turns": sum(c.turns for c in conversations),
        "headroom": {"tokens": headroom.tokens, "messages": headroom.messages},
        "step": STEP,
        "pause_models": {name: PAUSE_MODELS[name] for name in sorted({c.pauses for c in CASES})},
        "cases": cases,
    }


def main(argv: Sequence[str] | None = None) -> int:
    from bench.reports import model_bill, report

    def say(line: str) -> None:
        print(line, file=sys.stderr)

    def measured(quick: bool) -> dict[str, Any]:
        return measure(quick=quick, say=say)

    return report.part_main(argv, __doc__, "model_bill", measured, model_bill.section)


if __name__ == "__main__":
    sys.exit(main())
