"""``make bench``: the stage's speed and cost, side by side with what users would pick instead.

One run, on this machine, every comparison reported as a ratio::

    .venv/bin/python -m bench.run_all            # ~45 min; writes docs/BENCHMARKS.md,
                                                 # docs/SCALING.md, docs/benchmarks/*.png
                                                 # and results.json
    .venv/bin/python -m bench.run_all --quick    # a smoke run into .bench/quick/
    .venv/bin/python -m bench.run_all --only throughput,latency   # those server parts, into
                                                 # .bench/partial/results.json, no report
    .venv/bin/python -m bench.parts.latency --write   # part 4 alone, into the docs (~25 min)

The parts, each module's docstring saying how it measures:

1. the window vs LangChain's ``trim_messages`` (:mod:`bench.parts.compare_trim_messages`),
   and the model-ready view beside the window (:mod:`bench.parts.converse_view_bench`);
2. cost per turn vs conversation length, 10 to 100,000 messages
   (:mod:`bench.parts.cost_per_turn`);
3. throughput and AWS calls per command: the worker, the naive sequential consumer and the
   pure API replay, against the servers as they are and with a network round trip injected
   per request (:mod:`localaws.proxy`), there also two worker processes on one stack
   (:mod:`bench.parts.throughput`);
4. send-to-arrival latency at a fixed offered load, in both regimes, with the latency also
   at a firm's light loads (2/s, 8/s) and the critical path's floor
   (:mod:`bench.parts.latency`; the light-load path call by call: :mod:`bench.parts.timeline`);
5. a py-spy profile of the worker under load, in both regimes (:mod:`bench.parts.profiling`);
6. the fold gap: unfolded messages outside the window (:mod:`bench.parts.fold_gap`; the
   worker's own rules as a model, no servers);
7. what metrics and tracing cost (:mod:`bench.parts.telemetry_overhead`);
8. the model's bill under the prompt cache, both window modes and the stepped peer
   (:mod:`bench.parts.model_bill`; the stage's own plans, no servers);
9. brownouts of DynamoDB and of the model queue's sends (:mod:`bench.parts.brownout`,
   reported in docs/RELIABILITY.md);
10. the bill, observed: the stage's loop on the model's bill, billed by the prompt-cache
    stand-in, under the deviations from the documented rules, and a few conversations
    through the real worker (:mod:`bench.parts.observed_bill`, reported in
    docs/benchmarks/observed_bill.md).

Then docs/SCALING.md, the capacity model, from the same figures (:mod:`bench.reports.scaling`).

The server parts start their own servers on 127.0.0.1: a moto server (SQS, S3) in its own
process, dynalite for DynamoDB (installed with npm on first use), and the latency proxy in
front of both. The benchmark's own feed and drain always talk to the servers directly; only
the contenders of the "with latency" rows go through the proxy.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.parts import (
    brownout,
    compare_trim_messages,
    converse_view_bench,
    cost_per_turn,
    fold_gap,
    latency,
    model_bill,
    observed_bill,
    profiling,
    telemetry_overhead,
    throughput,
)
from bench.parts.runs import WORK_DIR, Progress, seeded, write_json
from bench.reports import report
from bench.servers.procstats import machine
from bench.servers.servers import DELAYED, DIRECT, Servers, both_regimes
from worker.app.runtime import aws_clients

REPO_ROOT = Path(__file__).resolve().parent.parent
#: The server parts, as ``--only`` names them.
PARTS = ("cost", "throughput", "latency", "profile", "telemetry")


@dataclass(frozen=True)
class Plan:
    quick: bool
    conversations: int
    lengths: tuple[int, ...]
    worker_turns: int
    ours_samples: int
    rounds: int
    commands: int  # per contender and round (worker, replay)
    naive_commands: int
    naive_delayed_commands: int  # the naive consumer with the latency: a few per second
    latency_seconds: float
    latency_rounds: int
    profile_seconds: float

    @staticmethod
    def make(quick: bool) -> Plan:
        if quick:
            return Plan(True, 40, (10, 100, 1_000, 10_000), 3, 5, 1, 400, 120, 80, 5, 1, 0)
        return Plan(False, 200, cost_per_turn.LENGTHS, 15, 20, 3, 1000, 300, 200, 20, 3, 10)

    def load_all_samples(self, length: int) -> int:
        if length >= 100_000:
            return 2
        return 3 if self.quick else 5


def this_machine() -> dict[str, Any]:
    node = subprocess.run(["node", "--version"], capture_output=True, text=True, check=False)
    names = ("aioboto3", "aiobotocore", "botocore", "boto3", "moto", "langchain-core", "uvloop",
             "py-spy")  # fmt: skip
    return {**machine(*names), "node": node.stdout.strip()}


async def run_parts(
    fleets: dict[str, Servers], plan: Plan, say: Progress, parts: Sequence[str] = PARTS
) -> dict[str, Any]:
    """The server parts, in both regimes where they have two."""
    servers = fleets[DIRECT]
    async with aws_clients(pool_size=64) as clients:
        started = time.perf_counter()
        history = await seeded(clients, plan.conversations)
        items, text = history.items, history.text
        say(f"seeded {plan.conversations} conversations ({items:,} items) in "
            f"{time.perf_counter() - started:.1f} s")  # fmt: skip
        conversations, pool = history.conversations, history.pool
        results: dict[str, Any] = {
            "workload": {
                "conversations": plan.conversations,
                "items": items,
                "lengths": sorted(c.length for c in pool),
                "fold_due": sum(1 for c in pool if c.fold_due),
            }
        }
        if "cost" in parts:
            results["cost"] = await cost_per_turn.run(
                clients, servers, text, lengths=plan.lengths, turns=plan.worker_turns,
                ours_samples=plan.ours_samples, all_samples=plan.load_all_samples, say=say,
            )  # fmt: skip
        regimes: dict[str, Any] = {}
        if "throughput" in parts:
            counts = {"commands": plan.commands, "naive": plan.naive_commands,
                      "naive-delayed": plan.naive_delayed_commands}  # fmt: skip
            regimes = await throughput.run(clients, fleets, conversations, text,
                                           rounds=plan.rounds, counts=counts, say=say)  # fmt: skip
            results["throughput"], results["throughput_delayed"] = regimes[DIRECT], regimes[DELAYED]
        for regime, suffix in ((DIRECT, ""), (DELAYED, "_delayed")):
            if "latency" in parts:
                loads = latency.rates(regimes.get(regime, {}).get("summary"), regime)
                results[f"latency{suffix}"] = await latency.run(
                    clients, fleets[regime], conversations, text, loads=loads,
                    seconds=plan.latency_seconds, rounds=plan.latency_rounds, say=say,
                )  # fmt: skip
            if "profile" in parts:
                results[f"profile{suffix}"] = await profiling.run(
                    clients, fleets[regime], pool, text, seconds=plan.profile_seconds, say=say
                )
        if "telemetry" in parts:
            results["telemetry"] = await telemetry_overhead.measure(
                clients, servers, pool, text, quick=plan.quick, say=say
            )
    return results


def run_only(parts: Sequence[str], plan: Plan, say: Progress) -> int:
    """Just these server parts, their figures to .bench/partial/results.json."""
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise SystemExit(f"--only: unknown part(s) {sorted(unknown)}; choose from {PARTS}")
    with both_regimes(say) as fleets:
        results = asyncio.run(run_parts(fleets, plan, say, parts))
    out = REPO_ROOT / ".bench" / "partial" / "results.json"
    write_json(out, results)
    say(f"wrote {out.relative_to(REPO_ROOT)}")
    for key, regime in (("throughput", "without latency"), ("throughput_delayed", "with latency")):
        for kind, summary in results.get(key, {}).get("summary", {}).items():
            calls = summary["calls_per_command"]
            print(f"{regime:>15} {kind:>10}: {summary['commands_per_second']:6.1f} commands/s, "
                  f"{sum(calls.values()):.2f} AWS calls/command, "
                  f"{summary['cpu_ms_per_command']:.2f} CPU ms/command")  # fmt: skip
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run into .bench/quick")
    parser.add_argument("--only", help=f"comma-separated server parts of {PARTS}, no report")
    args = parser.parse_args(argv)
    plan = Plan.make(args.quick)
    say = Progress()
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    if args.only:
        return run_only(args.only.split(","), plan, say)
    out_doc = (
        REPO_ROOT / ".bench" / "quick" if plan.quick else REPO_ROOT / "docs"
    ) / "BENCHMARKS.md"
    out_dir = out_doc.parent / "benchmarks"
    load_at_start = list(os.getloadavg())
    say(f"make bench{' --quick' if plan.quick else ''}: {os.cpu_count()} cores, "
        f"Python {sys.version.split()[0]}")  # fmt: skip
    say("part 1: the window vs LangChain's trim_messages, and the Converse view beside it")
    trim = compare_trim_messages.measure(quick=plan.quick)
    converse_view = converse_view_bench.run(quick=plan.quick)
    say("part 6: the fold gap (a model, no servers)")
    fold = fold_gap.measure()
    bill = model_bill.measure(quick=plan.quick, say=say)
    observed = observed_bill.measure(quick=plan.quick, say=say)
    with both_regimes(say) as fleets:
        results = asyncio.run(run_parts(fleets, plan, say))
    say("part 9: brownouts of DynamoDB and of the model queue's sends (docs/RELIABILITY.md)")
    results["brownouts"] = brownout.measure(quick=plan.quick, say=say)
    document = {
        "load_average": {"start": load_at_start, "end": list(os.getloadavg())},
        "command": ".venv/bin/python -m bench.run_all" + (" --quick" if plan.quick else ""),
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "wall_seconds": time.monotonic() - say.started,
        "quick": plan.quick,
        "machine": this_machine(),
        "plan": asdict(plan),
        "trim_messages": trim,
        "converse_view": converse_view,
        **results,
        "fold_gap": fold,
        "model_bill": bill,
        "observed_bill": observed,
    }
    write_json(out_dir / "results.json", document)
    observed_bill.write_page(observed, out_dir / observed_bill.DOC.name)
    report.write(document, out_doc)
    say(f"wrote {out_doc.relative_to(REPO_ROOT)}, the SCALING.md beside it and "
        f"{out_dir.relative_to(REPO_ROOT)}/")  # fmt: skip
    for line in report.verdicts(document):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
