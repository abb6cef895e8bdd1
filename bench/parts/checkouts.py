"""Full-load throughput with the injected latency: this checkout's worker against the workers of
other checkouts (an earlier commit, main), and the naive consumer, in interleaved rounds.

Each other checkout runs its own code from its own ``.venv`` (``git worktree add DIR COMMIT``,
then ``make install`` there); the servers, the proxy, the workload, the feed and the drain are
this checkout's, as in part 3 (:func:`bench.parts.throughput.one_run`). The contenders run
A B C … in every round, so a slower stretch of a shared machine falls on all of them::

    .venv/bin/python -m bench.parts.checkouts --checkout base=/tmp/base43 \\
        --checkout main=/tmp/main43 --rounds 5 --json .bench/checkouts.json

It prints, per contender, the median commands a second with the spread over the rounds, the
ratio to the naive consumer's, and the AWS calls per command (each checkout counts its own:
a checkout whose benchmark missed a client counts fewer).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.parts.runs import WORK_DIR, seeded, write_json
from bench.parts.throughput import one_run
from bench.servers.servers import DELAYED, both_regimes
from worker.app.runtime import aws_clients


def checkout(text: str) -> tuple[str, Path]:
    label, _, path = text.partition("=")
    if not label.isidentifier() or not (Path(path) / ".venv" / "bin" / "python").exists():
        raise argparse.ArgumentTypeError(f"expected LABEL=DIR with DIR/.venv, got {text!r}")
    return label, Path(path).resolve()


async def measure(
    far: Any,
    checkouts: dict[str, Path],
    *,
    rounds: int,
    commands: int,
    naive_commands: int,
    conversations: int,
) -> dict[str, list[dict[str, Any]]]:
    kinds = ["naive", *(f"worker@{label}" for label in checkouts), "worker"]
    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in kinds}
    async with aws_clients(pool_size=64) as clients:
        history = await seeded(clients, conversations)
        pool, text = history.conversations, history.text
        for round_number in range(1, rounds + 1):
            for kind in kinds:
                count = naive_commands if kind == "naive" else commands
                result = await one_run(
                    clients,
                    far,
                    pool,
                    text,
                    kind=kind,
                    round_number=round_number,
                    count=count,
                    say=print,
                    checkouts=checkouts,
                )
                runs[kind].append(result)
    return runs


def summary(runs: dict[str, list[dict[str, Any]]]) -> list[str]:
    naive = statistics.median(r["commands_per_second"] for r in runs["naive"])
    lines = ["| contender | commands/s, median (min–max) | × naive | calls / command |",
             "| --- | ---: | ---: | ---: |"]  # fmt: skip
    for kind, results in runs.items():
        rates = [r["commands_per_second"] for r in results]
        calls = sum(sum(r["calls"].values()) for r in results) / sum(r["commands"] for r in results)
        median = statistics.median(rates)
        lines.append(
            f"| {kind} | {median:.1f} ({min(rates):.1f}–{max(rates):.1f}) "
            f"| {median / naive:.2f}× | {calls:.2f} |"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--checkout", type=checkout, action="append", default=[],
                        help="LABEL=DIR: another checkout's worker (DIR/.venv)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--commands", type=int, default=1000, help="per worker run (1000)")
    parser.add_argument("--naive-commands", type=int, default=200, help="per naive run (200)")
    parser.add_argument("--conversations", type=int, default=200, help="seeded (200)")
    parser.add_argument("--json", type=Path, help="write every run's figures here too")
    args = parser.parse_args(argv)
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    with both_regimes(print) as fleets:
        runs = asyncio.run(
            measure(fleets[DELAYED], dict(args.checkout), rounds=args.rounds,
                    commands=args.commands, naive_commands=args.naive_commands,
                    conversations=args.conversations)
        )  # fmt: skip
    print(*summary(runs), sep="\n")
    if args.json:
        write_json(args.json, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
