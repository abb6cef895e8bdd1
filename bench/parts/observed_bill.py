"""The bill, observed: the stage's loop on the model's bill, billed by the prompt-cache stand-in.

Part 8 prices the stage's views with the stage's own model of the cache; here the biller is
:mod:`localaws.bedrock_cache`, written from Bedrock's documentation apart from the stage, and
the bill goes back to the stage as the contract lays it out ("The bill, observed"): each
answer stored with ``model_usage``, read on the next turn's page by the stage's own parser.

The mixed paces' conversations of part 8 (same times, same scripted compactor) are replayed
turn by turn, closed-loop (:func:`bench.load.answered.answered_turns`): the stage reads and
plans, the model stage stand-in answers its payload a few seconds after ``sent_at`` (its own
300-token system prompt first, with a cache point of its own; each conversation its own
cache), the answer item is stored, and the next turn reads it. Contenders:

- ``sliding``, the default mode (answers stored with ``model_usage``; its view does not
  depend on it);
- ``cache-aligned, no bill``: ``HISTORY_WINDOW_MODE=cache-aligned``, the answers stored by
  an older writer, without ``model_usage``;
- ``cache-aligned, bill``: the same, the answers stored with ``model_usage``: the loop.

Each is billed by the stand-in as documented, and under one deviation at a time
(:data:`DEVIATIONS`): another tokenizer (over- and undercounting ``chars / 4``; the
overcount also with a short system prompt of the model stage, which lifts every prefix
less), ``1h`` honoured as ``5m``, the model stage's system prompt changed in the middle of each
conversation, a tenth of the entries evicted early. The plans without the loop do not depend
on the bill: they are made once and billed under every deviation; the loop is replayed under
each. What is measured (bill, history seen, the miss causes the stage reports against the
stand-in's ground truth, its minimum-token decisions, its token calibration) and the targets:
docs/benchmarks/observed_bill.md. Through the real worker process, a few of the same
conversations: :mod:`bench.parts.observed_worker`. Run::

    .venv/bin/python -m bench.parts.observed_bill            # ~7 min on 2 cores
    .venv/bin/python -m bench.parts.observed_bill --quick    # every 40th conversation, 2 x 10
    .venv/bin/python -m bench.parts.observed_bill --write    # also observed_bill.md, and
                                                             # into docs/BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from bench.load.answered import (
    CHANGED_SYSTEM_PROMPT,
    SYSTEM_PROMPT,
    AnsweredTurn,
    RequestTokens,
    answered_turns,
    billed_units,
    request_tokens,
)
from bench.load.replay import ReplayedConversation, replayed_conversations, turn_times
from bench.parts import observed_worker
from bench.parts.cache_bill import Tally
from bench.reports import observed_bill as page
from localaws.bedrock_cache import CacheConfig, chars_per_token
from localaws.model_stage import SYSTEM_PROMPT as SHORT_SYSTEM_PROMPT
from localaws.model_stage import ModelAnswer, ModelStage, SystemPromptChange
from worker.caching.bill_model import TurnCost
from worker.caching.expectation import view_tokens
from worker.planning import PlanConfig
from worker.settings import Settings

SEED = 11
PACE = "mixed"
#: The quick run: every 40th conversation of the workload.
QUICK_EVERY = 40
MIN_TOKENS = 1_024
#: The turns at which the token calibration's error is reported.
CALIBRATION_TURNS = (1, 2, 5, 10, 20)
SLIDING, WITHOUT, WITH = "sliding", "cache-aligned, no bill", "cache-aligned, bill"
CONTENDERS = (SLIDING, WITHOUT, WITH)
DOC = Path(__file__).resolve().parents[2] / "docs" / "benchmarks" / "observed_bill.md"


@dataclass(frozen=True, slots=True)
class Deviation:
    """One way the real service departs from what the stage assumes: the stand-in's
    :class:`CacheConfig`, whether the model stage's system prompt changes mid-conversation,
    the miss cause the stage should report on the answers it affects, and which answers its
    target is judged on: ``short`` (a read the stage expected and the deviation denied) or
    ``flagged`` (the stand-in's mark, when the bill itself shows the deviation)."""

    key: str
    name: str
    cache: CacheConfig = field(default_factory=CacheConfig)
    prompt_change: bool = False
    cause: str | None = None
    judged_on: str = "short"
    system_prompt: str = SYSTEM_PROMPT


DEVIATIONS = (
    Deviation("none", "none (the documented rules)"),
    Deviation("overcount", "tokenizer: 4.68 chars a token (chars / 4 overcounts by 17%)",
              CacheConfig(count_tokens=chars_per_token(4.68)), cause="below_minimum"),
    Deviation("overcount-short", "tokenizer: 4.68 chars a token, the model stage's system "
              f"prompt {-(-len(SHORT_SYSTEM_PROMPT) // 4)} tokens",
              CacheConfig(count_tokens=chars_per_token(4.68)), cause="below_minimum",
              system_prompt=SHORT_SYSTEM_PROMPT),
    Deviation("undercount", "tokenizer: 3.4 chars a token (chars / 4 undercounts)",
              CacheConfig(count_tokens=chars_per_token(3.4)), cause="below_minimum"),
    Deviation("downgrade", "`1h` honoured as `5m`", CacheConfig(honour_1h=False),
              cause="ttl_downgraded", judged_on="flagged"),
    Deviation("prompt", "the model stage's system prompt changed mid-conversation",
              prompt_change=True, cause="unexplained"),
    Deviation("evict", "a tenth of the entries evicted early",
              CacheConfig(evict_share=0.1, seed=SEED), cause="unexplained"),
)  # fmt: skip
BASELINE = DEVIATIONS[0]


def model_stage(deviation: Deviation, turns: int) -> ModelStage:
    """The model stage of one conversation of ``turns`` turns under ``deviation``."""
    change = None
    if deviation.prompt_change:
        change = SystemPromptChange(CHANGED_SYSTEM_PROMPT, at_call=change_call(turns))
    return ModelStage(
        system_prompt=deviation.system_prompt,
        cache=deviation.cache,
        own_cache_point=True,
        system_prompt_change=change,
    )


def change_call(turns: int) -> int:
    """The call from which the system prompt is changed: the conversation's middle one."""
    return turns // 2 + 1


def system_prompt_at(deviation: Deviation, turns: int, turn: int) -> str:
    if deviation.prompt_change and turn >= change_call(turns):
        return CHANGED_SYSTEM_PROMPT
    return deviation.system_prompt


def plan_config(settings: Settings, contender: str) -> PlanConfig:
    aligned = contender != SLIDING
    return replace(settings.plan_config, cache_aligned=aligned, cache_ttl="adaptive",
                   min_tokens=MIN_TOKENS)  # fmt: skip


@dataclass
class Attribution:
    """The miss causes the stage reported (the next turn's check of each answer) against what
    the stand-in knows: the causes on the answers the deviation affected, on those the
    stand-in flags, and on the others that expected a read (:func:`attribute`)."""

    affected: Counter[str] = field(default_factory=Counter)
    flagged: Counter[str] = field(default_factory=Counter)
    unaffected: Counter[str] = field(default_factory=Counter)
    flags: Counter[str] = field(default_factory=Counter)
    short: int = 0
    checked: int = 0

    def merge(self, other: Attribution) -> None:
        self.checked += other.checked
        self.affected.update(other.affected)
        self.flagged.update(other.flagged)
        self.unaffected.update(other.unaffected)
        self.flags.update(other.flags)
        self.short += other.short


@dataclass
class Figures:
    """One conversation's figures, or the sum of several."""

    tallies: dict[tuple[str, str], Tally] = field(default_factory=dict)
    attribution: dict[str, Attribution] = field(default_factory=dict)
    #: (contender, deviation) -> counts (:func:`judge`)
    minimum: dict[tuple[str, str], Counter[str]] = field(default_factory=dict)
    #: (deviation, turn) -> [(calibrated error, estimate's error)]
    calibration: dict[tuple[str, int], list[tuple[float, float]]] = field(default_factory=dict)
    turns: int = 0
    conversations: int = 0

    def merge(self, other: Figures) -> None:
        for key, tally in other.tallies.items():
            mine = self.tallies.setdefault(key, Tally())
            for name in ("turns", "billed", "read", "written", "uncached", "history",
                         "fold_gap_turns", "reanchors"):  # fmt: skip
                setattr(mine, name, getattr(mine, name) + getattr(tally, name))
            mine.per_conversation.update(tally.per_conversation)
        for key, attribution in other.attribution.items():
            self.attribution.setdefault(key, Attribution()).merge(attribution)
        for key, counts in other.minimum.items():
            self.minimum.setdefault(key, Counter()).update(counts)
        for key, errors in other.calibration.items():
            self.calibration.setdefault(key, []).extend(errors)
        self.turns += other.turns
        self.conversations += other.conversations


def cost(usage: dict[str, Any]) -> TurnCost:
    read = usage.get("cacheReadInputTokens", 0)
    written = usage.get("cacheWriteInputTokens", 0)
    return TurnCost(read, written, usage["inputTokens"], billed_units(usage))


def tally(
    figures: Figures,
    key: tuple[str, str],
    cid: str,
    turns: Sequence[AnsweredTurn],
    answers: Sequence[ModelAnswer],
) -> None:
    mine = figures.tallies.setdefault(key, Tally())
    for turn, answer in zip(turns, answers, strict=True):
        plan = turn.plan
        reanchored = plan.aligned is not None and plan.aligned.outcome == "reanchored"
        mine.add(cid, cost(answer.usage), plan.window, gap=plan.gap is not None,
                 reanchored=reanchored)  # fmt: skip


def expected_prefixes(
    turns: Sequence[AnsweredTurn], deviation: Deviation
) -> list[tuple[RequestTokens, int]]:
    """Each turn's request tokens as the stand-in counts them under ``deviation``, and the
    real tokens of the prefix its payload expected to read (0: it expected none)."""
    calls, out = len(turns), []
    for turn in turns:
        system = system_prompt_at(deviation, calls, turn.turn)
        tokens = request_tokens(turn.payload["converse"], system, deviation.cache.count_tokens)
        expected = turn.payload.get("cache")
        want = expected["expected_read_tokens"] if expected else 0
        boundary = tokens.boundary_of(want) if want else 0
        assert boundary is not None, "the expected read is a prefix of the view"
        out.append((tokens, tokens.real[boundary] if want else 0))
    return out


def judge(
    figures: Figures,
    key: tuple[str, str],
    turns: Sequence[AnsweredTurn],
    answers: Sequence[ModelAnswer],
    prefixes: Sequence[tuple[RequestTokens, int]],
) -> None:
    """The stage's predictions against the stand-in's count and bill: each cache point of
    the views judged against the minimum as the stage judges it (its estimate of the prefix,
    calibrated by what its page taught it) and as the stand-in counts it; and each expected
    read against the read billed (short: less; unexpected: more)."""
    counts = figures.minimum.setdefault(key, Counter())
    for turn, answer, (tokens, want) in zip(turns, answers, prefixes, strict=True):
        calibration = turn.plan.observed.calibration
        for boundary in tokens.points:
            kept = calibration.tokens(tokens.estimated[boundary]) >= MIN_TOKENS
            reaches = tokens.real[boundary] >= MIN_TOKENS
            counts["points"] += 1
            counts["kept"] += kept
            counts["kept_below"] += kept and not reaches
            counts["judged_below_reaches"] += not kept and reaches
        read = answer.usage.get("cacheReadInputTokens", 0)
        counts["answers"] += 1
        counts["expected_reads"] += want > 0
        counts["short"] += read < want
        counts["unexpected"] += read > want
        counts["read_tokens"] += read
        counts["short_tokens"] += max(0, want - read)
        counts["unexpected_tokens"] += max(0, read - want)


def calibration_errors(
    figures: Figures, deviation: Deviation, turns: Sequence[AnsweredTurn]
) -> None:
    for n in CALIBRATION_TURNS:
        if n > len(turns):
            continue
        turn = turns[n - 1]
        usage = turn.answer.usage
        real = usage["inputTokens"] + usage.get("cacheReadInputTokens", 0)
        real += usage.get("cacheWriteInputTokens", 0)
        estimate = view_tokens(turn.plan.view)
        calibrated = turn.plan.observed.calibration.tokens(estimate)
        errors = figures.calibration.setdefault((deviation.key, n), [])
        errors.append((abs(calibrated - real) / real, abs(estimate - real) / real))


def attribute(
    figures: Figures,
    deviation: Deviation,
    turns: Sequence[AnsweredTurn],
    prefixes: Sequence[tuple[RequestTokens, int]],
    honest_reads: Sequence[int] | None,
) -> None:
    """Each answer the next turn checked, against the stand-in's ground truth: *affected*
    when it read short of its expected prefix because of the deviation, *flagged* when the
    stand-in marks the deviation on it (for the tokenizers: the expected prefix on the
    other side of the minimum from the stage's calibrated count), *unaffected* otherwise."""
    attribution = figures.attribution.setdefault(deviation.key, Attribution())
    for index, turn in enumerate(turns):
        answer = turn.answer
        attribution.flags["evicted"] += answer.evicted
        attribution.flags["downgraded"] += answer.downgraded
        attribution.flags["system_prompt_changed"] += answer.system_prompt_changed
        if index + 1 >= len(turns):
            continue  # no turn after it: never checked
        check = turns[index + 1].plan.observed.check
        if check is None:
            continue
        assert check.seq == 2 * turn.turn
        attribution.checked += 1
        cause = check.cause or "no miss"
        want = prefixes[index][1]
        estimated = turn.payload["cache"]["expected_read_tokens"]
        judged = turn.plan.observed.calibration.tokens(estimated) >= MIN_TOKENS
        other_side = want > 0 and judged != (want >= MIN_TOKENS)
        flagged = {
            "none": False,
            "overcount": other_side,
            "overcount-short": other_side,
            "undercount": other_side,
            "downgrade": answer.downgraded,
            "prompt": answer.system_prompt_changed,
            "evict": answer.evicted,
        }[deviation.key]
        short = answer.usage.get("cacheReadInputTokens", 0) < want
        attribution.short += short
        affected = (
            short
            and {
                "none": False,
                "overcount": want < MIN_TOKENS,
                "undercount": want < MIN_TOKENS,
                "downgrade": honest_reads is not None and honest_reads[index] >= want,
                "prompt": answer.system_prompt_changed,
                "evict": answer.evicted,
            }[deviation.key]
        )
        if flagged:
            attribution.flagged[cause] += 1
        if affected:
            attribution.affected[cause] += 1
        elif not flagged and want > 0:
            attribution.unaffected[cause] += 1


def replay(conversation: ReplayedConversation, settings: Settings) -> Figures:
    """Every contender over one conversation, under every deviation."""
    cid, calls = conversation.conversation_id, conversation.turns
    times = turn_times(cid, calls, PACE, seed=SEED)
    timed = conversation.at(times)
    figures = Figures(turns=calls, conversations=1)

    def closed_loop(contender: str, deviation: Deviation, stage: ModelStage) -> list[AnsweredTurn]:
        return list(answered_turns(timed, plan_config(settings, contender), times,
                                   settings=settings, stage=stage, bill_stored=contender != WITHOUT,
                                   seed=SEED))  # fmt: skip

    for contender in (SLIDING, WITHOUT):
        turns = closed_loop(contender, BASELINE, model_stage(BASELINE, calls))
        for deviation in DEVIATIONS:
            answers = [t.answer for t in turns]
            if deviation is not BASELINE:
                stage = model_stage(deviation, calls)
                answers = [stage.answer(t.payload, at=t.answer.answered_at,
                                        content=t.answer.content) for t in turns]  # fmt: skip
            tally(figures, (contender, deviation.key), cid, turns, answers)
            if contender == WITHOUT:
                prefixes = expected_prefixes(turns, deviation)
                judge(figures, (WITHOUT, deviation.key), turns, answers, prefixes)
    for deviation in DEVIATIONS:
        turns = closed_loop(WITH, deviation, model_stage(deviation, calls))
        answers = [t.answer for t in turns]
        honest = None
        if deviation.key == "downgrade":  # what the same requests read with 1h honoured
            stage = model_stage(BASELINE, calls)
            honest = [
                stage.answer(t.payload, at=t.answer.answered_at).usage["cacheReadInputTokens"]
                for t in turns
            ]
        prefixes = expected_prefixes(turns, deviation)
        tally(figures, (WITH, deviation.key), cid, turns, answers)
        judge(figures, (WITH, deviation.key), turns, answers, prefixes)
        calibration_errors(figures, deviation, turns)
        attribute(figures, deviation, turns, prefixes, honest)
    return figures


def _cpu_seconds() -> float:
    """CPU seconds of this process and of its waited-for children (the replay's pool)."""
    mine = os.times()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return mine.user + mine.system + children.ru_utime + children.ru_stime


@cache
def _conversations() -> list[ReplayedConversation]:
    return replayed_conversations(200, seed=SEED)


def _replay_one(index: int) -> Figures:
    return replay(_conversations()[index], Settings.at_defaults())


def replay_all(indexes: Sequence[int], *, jobs: int) -> Figures:
    """The figures of the conversations at ``indexes``, summed in that order; ``jobs``
    processes share them (longest conversations first)."""
    conversations = _conversations()
    order = sorted(indexes, key=lambda i: -conversations[i].turns)
    if jobs <= 1:
        results = {i: _replay_one(i) for i in order}
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            results = dict(zip(order, pool.map(_replay_one, order), strict=True))
    total = Figures()
    for index in indexes:
        total.merge(results[index])
    return total


def summary(figures: Figures) -> dict[str, Any]:
    """The figures as the report reads them (JSON-ready)."""
    out = []
    for deviation in DEVIATIONS:
        base = figures.tallies[(SLIDING, deviation.key)]
        attribution = figures.attribution[deviation.key]
        row: dict[str, Any] = {
            "key": deviation.key,
            "name": deviation.name,
            "cause": deviation.cause,
            "judged_on": deviation.judged_on,
            "contenders": {
                name: figures.tallies[(name, deviation.key)].figures(base) for name in CONTENDERS
            },
            "attribution": {
                "affected": dict(attribution.affected),
                "flagged": dict(attribution.flagged),
                "unaffected": dict(attribution.unaffected),
                "flags": dict(attribution.flags),
                "short": attribution.short,
                "checked": attribution.checked,
            },
            "minimum": {
                name: dict(figures.minimum[(name, deviation.key)]) for name in (WITHOUT, WITH)
            },
            "calibration": {
                str(n): {
                    "answers": len(errors),
                    "calibrated": sum(e for e, _ in errors) / len(errors),
                    "estimate": sum(e for _, e in errors) / len(errors),
                }
                for n in CALIBRATION_TURNS
                if (errors := figures.calibration.get((deviation.key, n)))
            },
        }
        out.append(row)
    return {"deviations": out}


def tree_state() -> dict[str, Any]:
    """The commit measured, and the stage's or the stand-in's files changed on top of it
    (the figures are the working tree's)."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], capture_output=True, text=True, check=False,
                              cwd=DOC.parents[2])  # fmt: skip
        return done.stdout.strip()

    changed = git("status", "--porcelain", "--", "worker", "localaws").splitlines()
    return {"commit": git("rev-parse", "--short", "HEAD"), "changed": [c[3:] for c in changed]}


def measure(
    *, quick: bool, say: Callable[[str], None] = print, worker: bool = True
) -> dict[str, Any]:
    """The part's figures (JSON-ready): the in-memory replay, then the real worker's run."""
    every = QUICK_EVERY if quick else 1
    indexes = list(range(0, len(_conversations()), every))
    jobs = max(1, min(os.cpu_count() or 1, 4))
    say(f"part 10: the bill, observed: {len(indexes)} conversations, {len(DEVIATIONS)} "
        f"deviations, {jobs} processes")  # fmt: skip
    started, cpu = time.monotonic(), _cpu_seconds()
    figures = replay_all(indexes, jobs=jobs)
    replayed, replay_cpu = time.monotonic() - started, _cpu_seconds() - cpu
    document: dict[str, Any] = {
        "command": ".venv/bin/python -m bench.parts.observed_bill" + (" --quick" if quick else ""),
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "cores": os.cpu_count(),
        "jobs": jobs,
        "every": every,
        "conversations": figures.conversations,
        "turns": figures.turns,
        "tree": tree_state(),
        "min_tokens": MIN_TOKENS,
        "system_prompt_tokens": -(-len(SYSTEM_PROMPT) // 4),
        "replay_seconds": replayed,
        "replay_cpu_seconds": replay_cpu,
        **summary(figures),
    }
    if worker:
        shape = observed_worker.QUICK if quick else observed_worker.FULL
        say(f"part 10: through the real worker, {shape[0]} conversations x {shape[1]} turns")
        document["worker"] = observed_worker.measure(
            _conversations(), shape, settings=Settings.at_defaults(), say=say
        )
    document["seconds"] = time.monotonic() - started
    return document


def write_page(document: dict[str, Any], path: Path = DOC) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page.markdown(document), encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="every 40th conversation, 2 x 10 "
                        "turns through the worker: a smoke run")  # fmt: skip
    parser.add_argument("--write", action="store_true", help=f"write {DOC.name} (docs/benchmarks), "
                        "put the figures into docs/benchmarks/results.json and re-render "
                        "docs/BENCHMARKS.md from it")  # fmt: skip
    parser.add_argument("--no-worker", action="store_true", help="the in-memory replay only")
    args = parser.parse_args(argv)

    def say(line: str) -> None:
        print(line, file=sys.stderr)

    document = measure(quick=args.quick, say=say, worker=not args.no_worker)
    text = page.markdown(document)
    print(text)
    if args.write:
        from bench.reports import report

        write_page(document)
        say(f"wrote {DOC}")
        report.rewrite_with("observed_bill", document)
    return 0


if __name__ == "__main__":
    sys.exit(main())
