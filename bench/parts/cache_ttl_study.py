"""Issue 24's contenders on part 8's workload, through the pure pipeline: the fold-lagged
summary and the cache lifetimes chosen per turn, each alone and together, beside the
sliding window, today's cache-aligned window, fixed TTLs, the stepped peer and an oracle.

The pipeline is part 8's (:func:`bench.parts.model_bill.model_conversation`): the worker's
own memory functions over the workload's histories, fed as the stage feeds them (one page,
the anchor kept between turns as the ``state`` item keeps it, with its snapshot for the
lagged contenders), with the scripted compactor. What the stage adds on top is done the way
the stage does it (:meth:`worker.turn.reading.TurnWindow.cached_view`): the turn's shape
(:func:`worker.caching.lifetimes.turn_shape`), the pace from the page's questions' times and
the command's, the TTL choice, the view's points. The times come from each case's pause
model, so the windows are computed once and the TTLs per case.

Contenders (``window`` family / TTL rule):

- ``sliding``: the sliding window, the summary's point only (no ttl: 5m);
- ``today``: the cache-aligned window that re-anchors at each fold landing, 5m;
- ``lagged``: lever 1 alone, the fold-lagged window, 5m;
- ``adaptive``: lever 2 alone, today's window, TTLs chosen per turn;
- ``both``: lagged and adaptive: the new default;
- ``1h``: the lagged window, 1h on every point;
- ``1h-summary``: the lagged window, 1h on the summary's point, 5m after it;
- ``stepped``: the peer, a start on a 2,000-token grid, 5m;
- ``oracle``: the lagged window, TTLs chosen by the same cost rule knowing the next gap
  and this turn's read exactly: a lower bound for any causal rule on this window.

Run::

    .venv/bin/python -m bench.parts.cache_ttl_study [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.load.replay import (
    PAUSE_MODELS,
    FoldTrack,
    ReplayedConversation,
    ScriptedCompactor,
    pace_profile,
    replayed_conversations,
    turn_times,
)
from bench.parts.cache_bill import aligned_window, sliding_window, stepped_window
from worker.caching.anchor import AnchorHeadroom, WindowAnchor
from worker.caching.bill_model import CacheRules, PromptCache, price_turn
from worker.caching.lifetimes import (
    HIT_MARGIN_SECONDS,
    PointTtl,
    TurnShape,
    choose_ttls,
    known_pace_ttls,
    read_pace,
    turn_shape,
)
from worker.memory import (
    FoldLimits,
    Window,
    WindowLimits,
    fold_gap,
    render_converse,
)
from worker.memory.converse import ConverseView, previous_history_end, with_cache_ttls
from worker.settings import Settings

SEED = 11
STEP = 2_000
START = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
BASELINE_RULES = CacheRules(
    min_prefix_tokens=1024, ttl="5m", system_prompt_tokens=300, system_prompt_cache_point=True
)

CONTENDERS = (
    "sliding", "today", "lagged", "adaptive", "both", "1h", "1h-summary", "stepped", "oracle",
)  # fmt: skip
#: The sensitivity rows price these only (the rest add nothing to what they show).
SENSITIVITY_CONTENDERS = ("sliding", "today", "lagged", "both", "1h", "oracle")


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    pauses: str
    rules: CacheRules = BASELINE_RULES
    contenders: tuple[str, ...] = CONTENDERS


CASES = (
    Case("mixed (the baseline)", "mixed"),
    Case("sessions (part 8's baseline)", "sessions"),
    Case("interrupted", "interrupted"),
    Case("cold", "cold"),
    Case("one long session", "brisk-sessions"),
    Case("deliberate", "deliberate"),
    Case("mixed, minimum 2,048", "mixed", replace(BASELINE_RULES, min_prefix_tokens=2048),
         SENSITIVITY_CONTENDERS),
    Case("mixed, minimum 4,096", "mixed", replace(BASELINE_RULES, min_prefix_tokens=4096),
         SENSITIVITY_CONTENDERS),
    Case("mixed, no system prompt", "mixed",
         replace(BASELINE_RULES, system_prompt_tokens=0, system_prompt_cache_point=False),
         SENSITIVITY_CONTENDERS),
    Case("mixed, system prompt 1,500", "mixed", replace(BASELINE_RULES, system_prompt_tokens=1500),
         SENSITIVITY_CONTENDERS),
    Case("mixed, lenient refresh", "mixed", replace(BASELINE_RULES, refresh="lenient"),
         SENSITIVITY_CONTENDERS),
)  # fmt: skip


def stamp(seconds: float) -> datetime:
    """A turn's time as the play writes it (``created_at``, ``sent_at``): whole seconds."""
    return START + timedelta(seconds=int(seconds))


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn's views (by window family), shapes, window sizes, and the turns whose
    questions the page holds (their times are the pace)."""

    views: dict[str, ConverseView]
    shapes: dict[str, TurnShape]
    tokens: dict[str, int]
    gaps: dict[str, bool]
    outcomes: dict[str, str]
    page_questions: tuple[int, ...]
    #: The lagged window's summary shown: seqs behind the newest fold, and its UTF-8 size.
    behind: int = 0
    summary_bytes: int = 0


def _points_view(window: Window, current: str, summary: str | None) -> ConverseView:
    return render_converse(
        window, current, summary, cache_history=True,
        previous_history_end=previous_history_end(window),
    )  # fmt: skip


def conversation_turns(
    conversation: ReplayedConversation,
    *,
    limits: WindowLimits,
    fold: FoldLimits,
    headroom: AnchorHeadroom,
) -> list[Turn]:
    """Every turn's windows and views, as the stage would build them (TTLs aside)."""
    track = FoldTrack(ScriptedCompactor(conversation.conversation_id, SEED))
    cumulative = conversation.cumulative_tokens(limits.message_max_tokens)
    anchors: dict[str, WindowAnchor | None] = {"today": None, "lagged": None}
    turns = []
    for number in range(1, conversation.turns + 1):
        track.before_turn(number)
        history = conversation.history(number)
        current = conversation.question(number).content
        folded, summary = track.folded_through, track.summary
        page = tuple(reversed(history[-(limits.max_messages + 1) :]))
        sliding = sliding_window(history, page, limits)
        views = {"sliding": render_converse(sliding, current, summary)}
        shapes: dict[str, TurnShape] = {}
        tokens = {"sliding": sliding.estimated_tokens}
        gaps = {"sliding": fold_gap(sliding, folded) is not None}
        outcomes: dict[str, str] = {}
        for family in ("today", "lagged"):
            stored = anchors[family]
            result = aligned_window(history, page, limits, folded=folded, summary=summary,
                              anchor=stored, headroom=headroom)  # fmt: skip
            new = result.anchor_to_store
            if new is not None:
                # Today's window stores no snapshot: it re-anchors at each fold landing.
                anchors[family] = (
                    WindowAnchor(new.seq, new.folded_through) if family == "today" else new
                )
            view = _points_view(result.window, current, result.shown.summary)
            views[family] = view
            shapes[family] = turn_shape(
                view, result.window, limits, current=current, outcome=result.outcome,
                shared_through=previous_history_end(result.window),
                summary_shared=stored is not None
                and stored.folded_through == result.shown.folded_through,
                behind=result.behind,
            )  # fmt: skip
            tokens[family] = result.window.estimated_tokens
            gaps[family] = fold_gap(result.window, folded) is not None
            outcomes[family] = result.outcome
            if family == "lagged":
                lagged_shown = result.shown
        stepped = stepped_window(history, cumulative, limits, STEP)
        views["stepped"] = _points_view(stepped, current, summary)
        tokens["stepped"] = stepped.estimated_tokens
        gaps["stepped"] = fold_gap(stepped, folded) is not None
        plan = track.due(history, limits, fold)
        if plan is not None:
            track.requested(number, plan.through)
        questions = tuple((m.seq + 1) // 2 for m in reversed(page) if m.role == "user")
        shown = lagged_shown
        size = len((shown.summary or "").encode("utf-8"))
        turns.append(
            Turn(
                views,
                shapes,
                tokens,
                gaps,
                outcomes,
                questions,
                folded - shown.folded_through,
                size,
            )
        )
    return turns


#: Contender -> (window family, TTL rule).
FAMILY = {
    "sliding": "sliding", "today": "today", "lagged": "lagged", "adaptive": "today",
    "both": "lagged", "1h": "lagged", "1h-summary": "lagged", "stepped": "stepped",
    "oracle": "lagged",
}  # fmt: skip


@dataclass
class Tally:
    turns: int = 0
    billed: float = 0.0
    read: int = 0
    written: int = 0
    uncached: int = 0
    history: int = 0
    fold_gap_turns: int = 0
    reanchors: int = 0
    ttls: Counter[str] = field(default_factory=Counter)
    per_conversation: dict[str, float] = field(default_factory=dict)

    def figures(self, base: Tally) -> dict[str, Any]:
        ratios = [
            billed / base.per_conversation[cid]
            for cid, billed in self.per_conversation.items()
            if base.per_conversation.get(cid)
        ]
        inputs = self.read + self.written + self.uncached
        return {
            "billed_per_turn": self.billed / self.turns,
            "billed_share": self.billed / base.billed,
            "read_share": self.read / max(1, inputs),
            "history_share": self.history / base.history,
            "reanchors_per_turn": self.reanchors / self.turns,
            "fold_gap_turns": self.fold_gap_turns,
            "above_own_sliding": sum(r > 1.0 for r in ratios) / max(1, len(ratios)),
            "worst_ratio": max(ratios, default=0.0),
            "ttl_points": dict(self.ttls),
        }


def _ttls_for(
    contender: str,
    turn: Turn,
    family: str,
    *,
    times: Sequence[float],
    index: int,
    rules: CacheRules,
    cache: PromptCache,
) -> tuple[PointTtl, ...] | None:
    view = turn.views[family]
    shape = turn.shapes.get(family)
    if shape is None or contender in ("today", "lagged"):
        return None  # as rendered: no ttl, 5 minutes
    count = len(shape.points)
    if contender == "1h":
        return ("1h",) * count
    if contender == "1h-summary":
        return tuple("1h" if i == 0 and view.system else "5m" for i in range(count))
    sent = stamp(times[index])
    if contender == "oracle":
        following = times[index + 1] - times[index] if index + 1 < len(times) else 1e9
        probe, _ = price_turn(cache, view.system, view.messages, at=times[index], rules=rules)
        read = max(0, probe.read - rules.system_prompt_tokens) if probe.read else 0
        return known_pace_ttls(
            shape,
            within_5m=following <= 300 - HIT_MARGIN_SECONDS,
            within_1h=following <= 3600 - HIT_MARGIN_SECONDS,
            read=read,
            min_tokens=rules.min_prefix_tokens,
        )
    asked = [stamp(times[q - 1]) for q in turn.page_questions]
    choice = choose_ttls(
        shape, read_pace(asked, sent), setting="adaptive", min_tokens=rules.min_prefix_tokens
    )
    return choice.ttls


def price_case(
    case: Case,
    conversations: Sequence[ReplayedConversation],
    turns_of: Callable[[ReplayedConversation], list[Turn]],
    profiles: dict[str, Counter[str]] | None = None,
) -> tuple[dict[str, Tally], dict[str, dict[str, Tally]]]:
    tallies = {name: Tally() for name in case.contenders}
    by_profile: dict[str, dict[str, Tally]] = defaultdict(
        lambda: {n: Tally() for n in case.contenders}
    )
    for conversation in conversations:
        cid = conversation.conversation_id
        profile = pace_profile(cid, case.pauses, seed=SEED)
        times = turn_times(cid, conversation.turns, case.pauses, seed=SEED)
        turns = turns_of(conversation)
        for contender in case.contenders:
            family = FAMILY[contender]
            cache = PromptCache()
            billed = 0.0
            tally, mine = tallies[contender], by_profile[profile][contender]
            for index, turn in enumerate(turns):
                ttls = _ttls_for(contender, turn, family, times=times, index=index,
                                 rules=case.rules, cache=cache)  # fmt: skip
                view = (
                    turn.views[family]
                    if ttls is None
                    else with_cache_ttls(turn.views[family], ttls)
                )
                cost, cache = price_turn(cache, view.system, view.messages, at=times[index],
                                         rules=case.rules)  # fmt: skip
                billed += cost.billed
                for t in (tally, mine):
                    t.turns += 1
                    t.billed += cost.billed
                    t.read += cost.read
                    t.written += cost.written
                    t.uncached += cost.uncached
                    t.history += turn.tokens[family]
                    t.fold_gap_turns += turn.gaps[family]
                    t.reanchors += turn.outcomes.get(family) == "reanchored"
                    for ttl in ttls or ():
                        t.ttls[ttl or "none"] += 1
            tally.per_conversation[cid] = billed
            mine.per_conversation[cid] = billed
    return tallies, dict(by_profile)


def run(*, quick: bool, headroom: AnchorHeadroom | None, cases: Sequence[Case]) -> dict[str, Any]:
    settings = Settings.at_defaults()
    limits, fold = settings.window_limits, settings.fold_limits
    headroom = headroom or settings.anchor_headroom
    conversations = replayed_conversations(200, seed=SEED)
    if quick:
        conversations = conversations[::5]
    started = time.monotonic()
    built = {
        c.conversation_id: conversation_turns(c, limits=limits, fold=fold, headroom=headroom)
        for c in conversations
    }
    out: dict[str, Any] = {
        "command": "python -m bench.parts.cache_ttl_study" + (" --quick" if quick else ""),
        "conversations": len(conversations),
        "turns": sum(c.turns for c in conversations),
        "headroom": {"tokens": headroom.tokens, "messages": headroom.messages},
        "pause_models": {name: PAUSE_MODELS[name] for name in sorted({c.pauses for c in cases})},
        "cases": [],
    }
    for case in cases:
        tallies, by_profile = price_case(case, conversations, lambda c: built[c.conversation_id])
        base = tallies["sliding"]
        row: dict[str, Any] = {
            "case": case.name,
            "pauses": case.pauses,
            "contenders": {n: tallies[n].figures(base) for n in case.contenders},
        }
        if case.pauses == "mixed" and case.rules == BASELINE_RULES:
            row["by_profile"] = {
                profile: {n: t[n].figures(t["sliding"]) for n in case.contenders}
                for profile, t in sorted(by_profile.items())
            }
        out["cases"].append(row)
    out["seconds"] = time.monotonic() - started
    return out


def table(result: dict[str, Any]) -> str:
    lines = []
    for row in result["cases"]:
        lines.append(f"### {row['case']}\n")
        lines.append(
            "| contender | billed / turn | % of sliding | read from cache | history seen "
            "| re-anchors / turn | fold-gap turns | conversations above own sliding | worst |"
        )
        lines.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for name, f in row["contenders"].items():
            lines.append(
                f"| {name} | {f['billed_per_turn']:,.0f} | {f['billed_share']:.1%} "
                f"| {f['read_share']:.1%} | {f['history_share']:.1%} "
                f"| {f['reanchors_per_turn']:.3f} | {f['fold_gap_turns']} "
                f"| {f['above_own_sliding']:.1%} | {f['worst_ratio']:.2f} |"
            )
        if "by_profile" in row:
            names = list(row["contenders"])
            lines.append("\nby profile (% of that profile's sliding bill):\n")
            lines.append("| profile | " + " | ".join(names) + " |")
            lines.append("| --- |" + " ---: |" * len(names))
            for profile, figures in row["by_profile"].items():
                cells = " | ".join(f"{figures[n]['billed_share']:.1%}" for n in names)
                lines.append(f"| {profile} | {cells} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="every 5th conversation")
    parser.add_argument("--headroom", help="TOKENS/MESSAGES (default: the settings')")
    parser.add_argument("--cases", default="all", help="'main' (the paces) or 'all'")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    headroom = None
    if args.headroom:
        tokens, messages = (int(x) for x in args.headroom.split("/"))
        headroom = AnchorHeadroom(tokens, messages)
    cases = CASES if args.cases == "all" else CASES[:6]
    result = run(quick=args.quick, headroom=headroom, cases=cases)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    print(f"{result['turns']:,} turns, {result['seconds']:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
