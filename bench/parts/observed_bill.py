"""The bill, observed: the stage's loop on the model's bill, billed by the prompt-cache stand-in.

Part 8 prices the stage's views with the stage's own model of the cache; here the biller is
:mod:`localaws.bedrock_cache`, written from Bedrock's documentation apart from the stage, and
the bill goes back to the stage as the contract lays it out ("The bill, observed"): each
answer stored with ``model_usage``, read on the next turn's page by the stage's own parser.

The mixed paces' conversations of part 8 (same times, same scripted compactor) are replayed
turn by turn, closed-loop (:func:`bench.load.answered.answered_turns`): the stage reads and
plans, the model stage stand-in answers its payload a few seconds after ``sent_at`` (its own
prefix first, with a cache point of its own; each conversation its own cache), the answer
item is stored, and the next turn reads it. Under each model class
(:mod:`bench.parts.observed_world`: the cache's minimum, the model stage's own prefix, the
``MODEL_ID`` a deployment sets), the contenders:

- ``sliding``, the default mode (its view depends on neither the bill nor the model: it is
  planned once per conversation and billed under each class);
- ``cache-aligned, no bill``: ``HISTORY_WINDOW_MODE=cache-aligned`` with ``MODEL_ID`` and
  ``MODEL_PREFIX_TOKENS`` set, the answers stored by an older writer, without ``model_usage``;
- ``cache-aligned, bill``: the same, the answers stored with ``model_usage``: the loop;
- for the calibration only, the loop's first turns without ``MODEL_PREFIX_TOKENS`` (no
  prior).

On :data:`DEVIATION_CLASSES`, each deviation on its own. The plans without the loop do not
depend on the bill: they are made once and billed under every deviation; the loop is
replayed under each. What is measured and the targets: docs/benchmarks/observed_bill.md.
Through the real worker process, a few of the same conversations:
:mod:`bench.parts.observed_worker`. Run::

    .venv/bin/python -m bench.parts.observed_bill            # the whole part: ~22 min, 2 cores
    .venv/bin/python -m bench.parts.observed_bill --quick --only 4096/2500
                                # 5 conversations, one class and its deviations: seconds
    .venv/bin/python -m bench.parts.observed_bill --quick --only 4096/2500 --deviations none
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
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from bench.load.answered import AnsweredTurn, answered_turns
from bench.load.model_classes import (
    BY_KEY,
    CLASSES,
    DEVIATION_CLASSES,
    ModelClass,
    baseline_settings,
    settings_for,
)
from bench.load.replay import (
    ReplayedConversation,
    pace_profile,
    replayed_conversations,
    turn_times,
)
from bench.parts import observed_worker
from bench.parts.observed_judging import (
    CALIBRATION_ANSWERS,
    CALIBRATION_REPLAY_TURNS,
    Figures,
    attribute,
    calibration_errors,
    expected_prefixes,
    judge,
    tally,
)
from bench.parts.observed_world import (
    BY_DEVIATION,
    DEVIATIONS,
    NONE,
    SEED,
    Deviation,
    model_stage,
    plan_config,
)
from bench.reports import observed_bill as page
from localaws.model_stage import CONTRACT_WRITER, BillWriter, ModelAnswer, ModelStage
from worker.settings import Settings

PACE = "mixed"
#: The quick run: every 40th conversation of the workload.
QUICK_EVERY = 40
SLIDING, WITHOUT, WITH = "sliding", "cache-aligned, no bill", "cache-aligned, bill"
#: The loop's requests billed as if no entry ever expired: a bound, not a contender.
NEVER_EXPIRED = f"{WITH}, no entry expired"
CONTENDERS = (SLIDING, WITHOUT, WITH)
#: The calibration's variants: the loop as configured, and without MODEL_PREFIX_TOKENS.
PRIOR, NO_PRIOR = "prior", "no prior"
DOC = Path(__file__).resolve().parents[2] / "docs" / "benchmarks" / "observed_bill.md"


@dataclass(frozen=True, slots=True)
class Selection:
    """The model classes replayed, and the deviations measured on the classes ``on`` among
    them (``none`` always)."""

    classes: tuple[str, ...] = tuple(c.key for c in CLASSES)
    deviations: tuple[str, ...] = tuple(d.key for d in DEVIATIONS)
    on: tuple[str, ...] = DEVIATION_CLASSES

    def models(self) -> list[ModelClass]:
        return [BY_KEY[key] for key in self.classes]

    def deviations_of(self, model: ModelClass) -> list[Deviation]:
        chosen = [BY_DEVIATION[k] for k in self.deviations if k != NONE.key]
        return [NONE, *(d for d in chosen if model.key in self.on or model.key in d.also_on)]


def loop(
    conversation: ReplayedConversation,
    times: Sequence[float],
    settings: Settings,
    stage: ModelStage,
    writer: BillWriter | None,
) -> list[AnsweredTurn]:
    """The cache-aligned turns under ``settings``, answered by ``stage``, stored by ``writer``."""
    config = plan_config(settings, aligned=True)
    return list(answered_turns(conversation, config, times, settings=settings, stage=stage,
                               writer=writer, seed=SEED))  # fmt: skip


def rebilled(turns: Sequence[AnsweredTurn], stage: ModelStage) -> list[ModelAnswer]:
    """The same requests at the same moments, billed by ``stage``."""
    return [stage.answer(t.payload, at=t.answer.answered_at, content=t.answer.content)
            for t in turns]  # fmt: skip


def replay(conversation: ReplayedConversation, selection: Selection) -> Figures:
    """Every contender over one conversation, under each selected class and deviation."""
    cid, calls = conversation.conversation_id, conversation.turns
    times = turn_times(cid, calls, PACE, seed=SEED)
    timed = conversation.at(times)
    figures = Figures(turns=calls, conversations=1, pace=pace_profile(cid, PACE, seed=SEED))
    sliding: list[AnsweredTurn] = []
    for model in selection.models():
        configured = settings_for(model)
        if not sliding:  # its view depends on neither the bill nor the class
            config = plan_config(configured, aligned=False)
            stage = model_stage(model, NONE, calls)
            sliding = list(answered_turns(timed, config, times, settings=configured, stage=stage,
                                          writer=None, seed=SEED))  # fmt: skip
        planned = {
            SLIDING: sliding,
            WITHOUT: loop(timed, times, configured, model_stage(model, NONE, calls), None),
        }
        billed = {SLIDING: rebilled(sliding, model_stage(model, NONE, calls)),
                  WITHOUT: [t.answer for t in planned[WITHOUT]]}  # fmt: skip
        for deviation in selection.deviations_of(model):
            for name, turns in planned.items():
                answers = billed[name]
                if deviation.rebills:
                    answers = rebilled(turns, model_stage(model, deviation, calls))
                tally(figures, (model.key, name, deviation.key), cid, [t.plan for t in turns],
                      answers)  # fmt: skip
                if name == WITHOUT:
                    prefixes = expected_prefixes(turns, model, deviation)
                    key = (model.key, WITHOUT, deviation.key)
                    judge(figures, key, model.min_tokens, turns, answers, prefixes)
            replay_loop(figures, model, deviation, timed, times, configured)
        calibrate_without_prior(figures, model, timed, times)
    return figures


def replay_loop(
    figures: Figures,
    model: ModelClass,
    deviation: Deviation,
    timed: ReplayedConversation,
    times: Sequence[float],
    settings: Settings,
) -> None:
    """The loop under ``deviation``: its bill, predictions, calibration and miss causes."""
    calls = timed.turns
    turns = loop(timed, times, settings, model_stage(model, deviation, calls), deviation.writer)
    twin = None
    if deviation.affects == "twin":  # what the same requests read under the documented rules
        twin = [a.usage.get("cacheReadInputTokens", 0)
                for a in rebilled(turns, model_stage(model, NONE, calls))]  # fmt: skip
    prefixes = expected_prefixes(turns, model, deviation)
    answers = [t.answer for t in turns]
    key = (model.key, WITH, deviation.key)
    plans = [t.plan for t in turns]
    tally(figures, key, timed.conversation_id, plans, answers)
    if deviation is NONE:
        kept = rebilled(turns, model_stage(model, NONE, calls, never_expire=True))
        tally(figures, (model.key, NEVER_EXPIRED, NONE.key), timed.conversation_id, plans, kept)
    judge(figures, key, model.min_tokens, turns, answers, prefixes)
    calibration_errors(figures, (model.key, PRIOR, deviation.key), turns)
    attribute(figures, (model.key, deviation.key), deviation, model.min_tokens, turns, prefixes,
              twin)  # fmt: skip


def calibrate_without_prior(
    figures: Figures, model: ModelClass, timed: ReplayedConversation, times: Sequence[float]
) -> None:
    """The loop's first turns with ``MODEL_ID`` set and ``MODEL_PREFIX_TOKENS`` not."""
    cut = ReplayedConversation(timed.conversation_id,
                               timed.messages[: 2 * CALIBRATION_REPLAY_TURNS])  # fmt: skip
    settings = settings_for(model, prior=False)
    stage = model_stage(model, NONE, cut.turns)
    turns = loop(cut, times[: cut.turns], settings, stage, CONTRACT_WRITER)
    calibration_errors(figures, (model.key, NO_PRIOR, NONE.key), turns)


def _cpu_seconds() -> float:
    """CPU seconds of this process and of its waited-for children (the replay's pool)."""
    mine = os.times()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return mine.user + mine.system + children.ru_utime + children.ru_stime


@cache
def _conversations() -> list[ReplayedConversation]:
    return replayed_conversations(200, seed=SEED)


def _replay_one(job: tuple[int, Selection]) -> Figures:
    index, selection = job
    return replay(_conversations()[index], selection)


def replay_all(indexes: Sequence[int], selection: Selection, *, jobs: int) -> Figures:
    """The figures of the conversations at ``indexes``, summed in that order; ``jobs``
    processes share them (longest conversations first)."""
    conversations = _conversations()
    order = sorted(indexes, key=lambda i: -conversations[i].turns)
    work = [(i, selection) for i in order]
    if jobs <= 1:
        results = {i: _replay_one(job) for i, job in zip(order, work, strict=True)}
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            results = dict(zip(order, pool.map(_replay_one, work), strict=True))
    total = Figures()
    for index in indexes:
        total.merge(results[index])
    return total


def _calibration(figures: Figures, model: str, variant: str, deviation: str) -> dict[str, Any]:
    return {
        str(n): {
            "answers": len(errors),
            "calibrated": sum(e for e, _ in errors) / len(errors),
            "estimate": sum(e for _, e in errors) / len(errors),
        }
        for n in CALIBRATION_ANSWERS
        if (errors := figures.calibration.get((model, variant, deviation, n)))
    }


def summary(figures: Figures, selection: Selection) -> dict[str, Any]:
    """The figures as the report reads them (JSON-ready): one entry per model class."""
    out = []
    for model in selection.models():
        k = model.key
        base = figures.tallies[(k, SLIDING, NONE.key)]
        names = [n for n in (*CONTENDERS, NEVER_EXPIRED) if (k, n, NONE.key) in figures.tallies]
        rows = []
        for deviation in selection.deviations_of(model):
            d = deviation.key
            sliding = figures.tallies[(k, SLIDING, d)]
            a = figures.attribution[(k, d)]
            rows.append({
                "key": d, "name": deviation.name, "cause": deviation.cause,
                "judged_on": deviation.judged_on,
                "contenders": {n: figures.tallies[(k, n, d)].figures(sliding) for n in CONTENDERS},
                "attribution": {
                    "affected": dict(a.affected), "flagged": dict(a.flagged),
                    "unaffected": dict(a.unaffected), "flags": dict(a.flags), "short": a.short,
                    "checked": a.checked,
                    "downgraded_without_details": a.downgraded_without_details,
                },
                "minimum": {n: dict(figures.minimum[(k, n, d)]) for n in (WITHOUT, WITH)},
                "calibration": _calibration(figures, k, PRIOR, d),
            })  # fmt: skip
        out.append({
            "key": k, "min_tokens": model.min_tokens, "prefix_tokens": model.prefix_tokens,
            "tool_tokens": model.tool_tokens, "model": model.model, "model_id": model.model_id,
            "contenders": {n: figures.tallies[(k, n, NONE.key)].figures(base) for n in names},
            "by_pace": {
                p: {n: figures.paces[(k, n, p)].figures(figures.paces[(k, SLIDING, p)])
                    for n in names}
                for p in sorted({p for (c, _, p) in figures.paces if c == k})
            },
            "calibration": {v: c for v in (PRIOR, NO_PRIOR)
                            if (c := _calibration(figures, k, v, NONE.key))},
            "deviations": rows if len(rows) > 1 or k in selection.on else [],
            "deviation_class": k in selection.on,
        })  # fmt: skip
    return {"classes": out}


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
    *,
    quick: bool,
    say: Callable[[str], None] = print,
    worker: bool = True,
    selection: Selection | None = None,
    every: int | None = None,
    jobs: int | None = None,
    command: str = ".venv/bin/python -m bench.parts.observed_bill",
) -> dict[str, Any]:
    """The part's figures (JSON-ready): the in-memory replay, then the real worker's run."""
    selection = selection or Selection()
    every = every or (QUICK_EVERY if quick else 1)
    indexes = list(range(0, len(_conversations()), every))
    jobs = jobs or max(1, min(os.cpu_count() or 1, 4))
    say(f"part 10: the bill, observed: {len(indexes)} conversations, classes "
        f"{', '.join(selection.classes)}, {len(selection.deviations)} deviations, "
        f"{jobs} processes")  # fmt: skip
    started, cpu = time.monotonic(), _cpu_seconds()
    figures = replay_all(indexes, selection, jobs=jobs)
    replayed, replay_cpu = time.monotonic() - started, _cpu_seconds() - cpu
    document: dict[str, Any] = {
        "command": command,
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "cores": os.cpu_count(),
        "jobs": jobs,
        "every": every,
        "conversations": figures.conversations,
        "turns": figures.turns,
        "tree": tree_state(),
        "replay_seconds": replayed,
        "replay_cpu_seconds": replay_cpu,
        **summary(figures, selection),
    }
    if worker:
        shape = observed_worker.QUICK if quick else observed_worker.FULL
        say(f"part 10: through the real worker, {shape[0]} conversations x {shape[1]} turns")
        document["worker"] = observed_worker.measure(
            _conversations(), shape, settings=baseline_settings(), say=say
        )
    document["seconds"] = time.monotonic() - started
    return document


def write_page(document: dict[str, Any], path: Path = DOC) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page.markdown(document), encoding="utf-8")


def _keys(known: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    def parse(value: str) -> tuple[str, ...]:
        keys = tuple(k.strip() for k in value.split(",") if k.strip())
        unknown = [k for k in keys if k not in known]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown: {', '.join(unknown)}; known: "
                                             f"{', '.join(known)}")  # fmt: skip
        return keys

    return parse


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help=f"every {QUICK_EVERY}th "
                        "conversation, 2 x 10 turns through the worker: a smoke run")  # fmt: skip
    parser.add_argument("--every", type=int, help="every Nth conversation of the workload")
    parser.add_argument("--only", type=_keys([c.key for c in CLASSES]), help="model classes, "
                        "comma-separated (e.g. 4096/2500); default: all")  # fmt: skip
    parser.add_argument("--deviations", type=_keys([d.key for d in DEVIATIONS]),
                        help="deviations measured on " + " and ".join(DEVIATION_CLASSES)
                        + ", comma-separated (`none`: none); default: all")  # fmt: skip
    parser.add_argument("--deviations-on", type=_keys([c.key for c in CLASSES]),
                        help="the classes the deviations are measured on; default: "
                        + ",".join(DEVIATION_CLASSES))  # fmt: skip
    parser.add_argument("--jobs", type=int, help="processes (default: the cores, at most 4)")
    parser.add_argument("--no-worker", action="store_true", help="the in-memory replay only")
    parser.add_argument("--write", action="store_true", help=f"write {DOC.name} (docs/benchmarks), "
                        "put the figures into docs/benchmarks/results.json and re-render "
                        "docs/BENCHMARKS.md from it")  # fmt: skip
    args = parser.parse_args(argv)
    default = Selection()
    selection = Selection(args.only or default.classes, args.deviations or default.deviations,
                          args.deviations_on or default.on)  # fmt: skip

    def say(line: str) -> None:
        print(line, file=sys.stderr)

    command = " ".join([".venv/bin/python -m bench.parts.observed_bill",
                        *(a for a in (argv or sys.argv[1:]) if a != "--write")])  # fmt: skip
    document = measure(quick=args.quick, say=say, worker=not args.no_worker, selection=selection,
                       every=args.every, jobs=args.jobs, command=command)  # fmt: skip
    print("\n".join(page.headline(document)))
    if args.write:
        from bench.reports import report

        write_page(document)
        say(f"wrote {DOC}")
        report.rewrite_with("observed_bill", document)
    return 0


if __name__ == "__main__":
    sys.exit(main())
