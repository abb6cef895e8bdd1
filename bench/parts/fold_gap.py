"""The fold gap: unfolded messages the window left out, turn by turn, while the fold lags.

Conversations grow one exchange a turn: the stage reads the history and sends the prompt
(and, if due, a compaction request); a writer then appends counsel's question and the
answer; a compactor serves each request ``lag`` turns later (lag 0: before the next
turn), folding from the state's current mark up to the request's ``through`` and only
forward. At every turn the gap is the set of messages after ``folded_through`` that are
older than the window: held by neither window nor fold.

Four profiles of message sizes, each generated from a fixed seed:

- ``tiny``: questions of 10-80 characters, answers of 20-240 (the count trigger acts);
- ``medium``: questions of 100-600, answers of 300-2,000 (the token trigger acts);
- ``mixed``: each message tiny (45 %), medium (45 %) or long (10 %, 3,000-12,000);
- ``paste-heavy``: 30 % of messages 4,000-20,000 characters (pasted clauses, long
  quotes, which the window trims to about 805 tokens), the rest medium.

The request rule is the worker's own (:func:`worker.memory.plan_compaction`); ``--seeds``
also runs the proposals of docs/FOLD.md (:data:`localaws.fold_model.PLANNERS`). The model
(:mod:`localaws.fold_model`) is the worker's own pure functions (the window, the trigger,
the gap) fed as the stage feeds them: one page of
``HISTORY_WINDOW_MAX_MESSAGES + 2`` items, the state item first.
``tests/integration/test_fold_gap.py`` runs the same conversations through the real
``worker run`` process at lags 0-3 and checks it agrees with the model turn for turn. Run::

    .venv/bin/python -m bench.parts.fold_gap                # the table, lags 0-5
    .venv/bin/python -m bench.parts.fold_gap --write        # also into docs/BENCHMARKS.md
    .venv/bin/python -m bench.parts.fold_gap --seeds 20     # means over seeds, with the
                                                            # proposals of docs/FOLD.md
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from bench.reports.fold_gap import REPORTED_LAGS, table
from localaws.fold_model import (
    PLANNERS,
    PROFILES,
    RULES,
    SEED,
    TURNS,
    Summary,
    conversation,
    simulate,
)


def measure(
    lags: Sequence[int] = tuple(range(6)), turns: int = TURNS, seed: int = SEED
) -> dict[str, Any]:
    """Every profile x lag x rule: the summary of its run."""
    results: dict[str, Any] = {}
    for profile in PROFILES:
        messages = conversation(profile, turns, seed)
        results[profile] = {
            str(lag): {rule: asdict(Summary.of(simulate(messages, lag, rule))) for rule in RULES}
            for lag in lags
        }
    return {
        "command": ".venv/bin/python -m bench.parts.fold_gap --write",
        "turns": turns,
        "seed": seed,
        "lags": list(lags),
        "profiles": results,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--turns", type=int, default=TURNS)
    parser.add_argument(
        "--write",
        action="store_true",
        help="put the figures into docs/benchmarks/results.json and re-render "
        "docs/BENCHMARKS.md from it",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        default=0,
        help="instead: the mean gap and requests over this many seeds, every rule and proposal",
    )
    args = parser.parse_args(argv)
    if args.seeds:
        for line in over_seeds(args.seeds, args.turns):
            print(line)
        return 0
    doc = measure(turns=args.turns)
    print(f"gap message-turns over {doc['turns']} turns (seed {doc['seed']})")
    for line in table(doc, doc["lags"]):
        print(line)
    if args.write:
        from bench.reports import report

        report.rewrite_with("fold_gap", doc)
    return 0


def over_seeds(seeds: int, turns: int = TURNS, lags: Sequence[int] = REPORTED_LAGS) -> list[str]:
    """Mean gap message-turns and requests per conversation over seeds 0..seeds-1."""
    lines = [
        f"mean over {seeds} seeds of {turns} turns: gap message-turns / requests",
        "| profile | rule | " + " | ".join(f"lag {lag}" for lag in lags) + " |",
        "| --- | --- |" + " ---: |" * len(lags),
    ]
    for profile in PROFILES:
        runs = [conversation(profile, turns, seed) for seed in range(seeds)]
        for rule in PLANNERS:
            cells = []
            for lag in lags:
                summaries = [Summary.of(simulate(messages, lag, rule)) for messages in runs]
                gap = sum(s.gap_message_turns for s in summaries) / seeds
                requests = sum(s.requests for s in summaries) / seeds
                cells.append(f"{gap:.1f} / {requests:.1f}")
            lines.append(f"| {profile} | {rule} | " + " | ".join(cells) + " |")
    return lines


if __name__ == "__main__":
    sys.exit(main())
