"""``make bench``: the stage's speed and cost, side by side with what users would pick instead.

One run, on this machine, every comparison reported as a ratio::

    .venv/bin/python -m bench.run_all            # ~45 min; writes docs/BENCHMARKS.md,
                                                 # docs/SCALING.md, docs/benchmarks/*.png
                                                 # and results.json
    .venv/bin/python -m bench.run_all --quick    # ~5 min smoke run; writes .bench/quick/

1. the window vs LangChain's ``trim_messages`` (:mod:`bench.parts.compare_trim_messages`);
2. cost per turn vs conversation length, 10 to 100,000 messages (:mod:`bench.parts.cost_per_turn`);
3. throughput and AWS calls per command: the worker vs a naive sequential consumer vs a
   pure API replay, plus the worker before this round of optimisation and the worker on
   uvloop (:mod:`bench.parts.throughput`), each against the servers as they are and again with
   a network round trip injected per request (:mod:`localaws.proxy`); with the latency,
   also two worker processes on one stack (scale-out);
4. send-to-arrival latency at a fixed offered load, without and with the latency
   (:mod:`bench.parts.latency`);
5. a py-spy profile of the worker under load, without and with the latency
   (:mod:`bench.parts.profiling`);
6. the fold gap: unfolded messages outside the window, pipelined fold requests against
   one at a time, with a lagging compactor (:mod:`bench.parts.fold_gap`; the worker's own rules
   as a model, no servers);
7. what operating it costs: the worker's CPU per command with metrics and tracing on and
   off, end to end and the telemetry path alone (:mod:`bench.parts.telemetry_overhead`);
8. the model's bill: the workload's conversations played turn by turn through the worker
   in both window modes, every prompt priced under the prompt cache, beside the stepped
   peer, with a sensitivity to the cache's rules and counsel's pauses
   (:mod:`bench.parts.model_bill`; about 12 min, 3 with ``--quick``); then issue 24's
   contenders (the fold-lagged summary, cache lifetimes per turn, the mixed paces) through
   the pure pipeline (:mod:`bench.parts.cache_ttl_study`, about 6 min) and its default
   played through the worker, checked view for view (:mod:`bench.parts.cache_ttl_play`,
   about 14 min);

Then docs/SCALING.md, the capacity model, from the same figures (:mod:`bench.reports.scaling`).

It starts its own servers on 127.0.0.1: a moto server (SQS, S3) in its own process, and
dynalite for DynamoDB (installed with npm on first use), pointed at by
``AWS_ENDPOINT_URL_DYNAMODB``, and the latency proxy in front of both. The benchmark's own
feed and drain always talk to the servers directly; only the contenders of the "with
latency" rows go through the proxy.

``--only throughput,latency,profile,cost,telemetry,bill,ttl`` runs just those server parts (for
development) and writes their figures to ``.bench/partial/results.json`` instead of the report; with
``--before`` part 3 also runs the worker as of :data:`BEFORE_REF` (a full run always does).
The calls per command before and after issue 14, in a few minutes::

    .venv/bin/python -m bench.run_all --quick --only throughput --before
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import io
import json
import os
import platform
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

from bench.contenders import contenders
from bench.load.traffic import Drain
from bench.load.workload import (
    Command,
    Conversation,
    make_commands,
    mixed_conversations,
    put_items,
    seed,
    state_item,
)
from bench.parts import (
    cache_ttl_play,
    cache_ttl_study,
    cost_per_turn,
    latency,
    model_bill,
    profiling,
    telemetry_overhead,
    throughput,
)
from bench.parts.compare_trim_messages import cpu_model
from bench.servers.servers import (
    RoundTrips,
    Servers,
    create_bench_resources,
    delayed,
    local_servers,
)
from worker.app.runtime import aws_clients
from worker.settings import Settings

REPO_ROOT = Path(__file__).resolve().parent.parent
WORK_DIR = REPO_ROOT / ".bench" / "run"
#: The worker before the optimisations measured here (issue 14: done marks in batches): the
#: last commit of main without them. (If other worker changes are committed before them,
#: move this to the commit they land on top of.)
BEFORE_REF = "5f56e34"
TABLE = "bench-history"
#: Commands one worker handles at once in parts 3 and 4: two full SQS batches.
CONCURRENCY = 20
#: The two regimes of parts 3-5: the local servers as they are, and a network away.
DIRECT, DELAYED = "direct", "delayed"
#: Worker processes in the scale-out row ("worker-x2").
SCALE_OUT = 2


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
    profile_seconds: float
    extra_workers: bool  # the "before" tree and uvloop
    before: bool = False  # the "before" tree alone (``--before``), e.g. in a quick run

    @staticmethod
    def make(quick: bool) -> Plan:
        if quick:
            return Plan(True, 40, (10, 100, 1_000, 10_000), 3, 5, 1, 400, 120, 80, 5, 0, False)
        return Plan(False, 200, cost_per_turn.LENGTHS, 15, 20, 3, 1000, 300, 200, 20, 10, True)

    def load_all_samples(self, length: int) -> int:
        if length >= 100_000:
            return 2
        return 3 if self.quick else 5


class Progress:
    def __init__(self) -> None:
        self.started = time.monotonic()

    def __call__(self, message: str) -> None:
        elapsed = time.monotonic() - self.started
        print(f"[{int(elapsed) // 60:02d}:{int(elapsed) % 60:02d}] {message}", flush=True)


def machine() -> dict[str, Any]:
    def package(name: str) -> str:
        try:
            return version(name)
        except Exception:
            return "not installed"

    node = subprocess.run(["node", "--version"], capture_output=True, text=True, check=False)
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "node": node.stdout.strip(),
        "packages": {
            name: package(name)
            for name in (
                "aioboto3",
                "aiobotocore",
                "botocore",
                "boto3",
                "moto",
                "langchain-core",
                "uvloop",
                "py-spy",
            )
        },
    }


def before_tree(say: Progress) -> Path | None:
    """The ``worker`` package at :data:`BEFORE_REF`, unpacked under .bench (read-only git)."""
    target = REPO_ROOT / ".bench" / "before" / BEFORE_REF
    if (target / "worker" / "consumer.py").exists():
        return target
    result = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "archive", "--format=tar", BEFORE_REF, "worker"],
        capture_output=True,
        check=False,
    )
    if result.returncode != 0:
        say(f"  no 'before' worker: git archive {BEFORE_REF} failed; that row is skipped")
        return None
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(result.stdout)) as archive:
        archive.extractall(target, filter="data")
    return target


# -- the parts ---------------------------------------------------------------------------


async def part_cost(
    clients: Any, servers: Servers, plan: Plan, say: Progress, text: Any
) -> dict[str, Any]:
    say("part 2: cost per turn vs conversation length")
    conversations = await cost_per_turn.seed_lengths(clients.dynamodb, TABLE, plan.lengths, say=say)
    steps = await cost_per_turn.time_history_steps(
        clients.dynamodb,
        TABLE,
        conversations,
        ours_samples=plan.ours_samples,
        all_samples=plan.load_all_samples,
        say=say,
    )
    env = await create_bench_resources(clients, "cost", TABLE)
    worker = contenders.worker(
        servers.child_environ(**env, BENCH_CONSUMED_CAPACITY="1", RECEIVE_WAIT_SECONDS="20"),
        WORK_DIR,
        name="cost-worker",
    )
    drain = Drain(clients.sqs, env["MODEL_QUEUE_URL"], tasks=1)
    drain.start()
    worker.start()
    warm: dict[str, Any] = {}

    async def warmed_up() -> None:
        warm.update(await worker.snapshot())

    try:
        latencies = await cost_per_turn.worker_turns(
            clients.sqs,
            env["CONVERSE_QUEUE_URL"],
            drain,
            conversations,
            turns=plan.worker_turns,
            text=text,
            say=say,
            warmed_up=warmed_up,
        )
        stats = await worker.snapshot()
    finally:
        await worker.stop()
        await drain.stop()
    rows = []
    for conversation in conversations:
        pk = conversation.conversation_id
        queries = stats["queries_by_pk"].get(pk, [])[len(warm["queries_by_pk"].get(pk, [])) :]
        ordered = sorted(latencies[conversation.length])
        rows.append(
            {
                "messages": conversation.length,
                "worker": {
                    "turns": len(ordered),
                    "queries_per_turn": len(queries) / max(1, len(ordered)),
                    "items_per_turn": sum(q[0] for q in queries) / max(1, len(queries)),
                    "scanned_per_turn": sum(q[1] for q in queries) / max(1, len(queries)),
                    "capacity_per_turn": sum(q[2] for q in queries) / max(1, len(queries)),
                    "latency_p50_ms": latency.percentile(ordered, 50),
                    "latency_p95_ms": latency.percentile(ordered, 95),
                },
                **steps[conversation.length],
            }
        )
    return {"rows": rows, "worker_exit_code": worker.process.returncode if worker.process else None}


def throughput_kinds(regime: str, plan: Plan, tree: Path | None) -> list[str]:
    """The contenders of part 3 in one regime, in the order they run each round."""
    kinds = ["naive", "worker", "replay"]
    before = ["worker-before"] if tree else []
    if regime == DIRECT:
        kinds[2:2] = before + (["worker-uvloop"] if plan.extra_workers else [])
    if regime == DELAYED:
        kinds[2:2] = [*before, "worker-x2"]
    return kinds


async def part_throughput(
    clients: Any,
    fleets: dict[str, Servers],
    plan: Plan,
    say: Progress,
    conversations: dict[str, Conversation],
    text: Any,
) -> dict[str, dict[str, Any]]:
    """Part 3 in both regimes, rounds interleaved: {regime: {concurrency, runs, ...}}."""
    say(f"part 3: throughput, {plan.rounds} round(s) per contender, interleaved, without and "
        "with the injected latency")  # fmt: skip
    tree = before_tree(say) if plan.extra_workers or plan.before else None
    runs = {
        regime: {kind: [] for kind in throughput_kinds(regime, plan, tree)} for regime in fleets
    }
    for round_number in range(1, plan.rounds + 1):
        for regime, servers in fleets.items():
            for kind in runs[regime]:
                result = await throughput_run(
                    clients, servers, plan, say, conversations, text,
                    kind=kind, regime=regime, round_number=round_number, tree=tree,
                )  # fmt: skip
                runs[regime][kind].append(result)
    return {
        regime: {
            "concurrency": CONCURRENCY,
            "runs": regime_runs,
            "before_ref": BEFORE_REF if tree else None,
            "round_trips": _round_trips(fleets[regime]),
        }
        for regime, regime_runs in runs.items()
    }


def _round_trips(servers: Servers) -> dict[str, float] | None:
    trips = servers.round_trips
    return None if trips is None else {"sqs_ms": trips.sqs_ms, "dynamodb_ms": trips.dynamodb_ms}


async def contender_queues(
    clients: Any, servers: Servers, tag: str
) -> tuple[dict[str, str], dict[str, str]]:
    """Fresh queues named after ``tag`` on ``servers``, and the environment a contender
    runs with against them (the benchmark's concurrency, 20 s long polls)."""
    env = await create_bench_resources(clients, tag, TABLE)
    child = servers.child_environ(
        **env, WORKER_CONCURRENCY=str(CONCURRENCY), RECEIVE_WAIT_SECONDS="20"
    )
    return env, child


def make_contender(
    kind: str,
    child: dict[str, str],
    tag: str,
    conversations: dict[str, Conversation],
    every_command: Sequence[Command],
    tree: Path | None = None,
) -> Any:
    """The contender of ``kind`` for one run, with the environment ``child``. The replay
    gets the payloads of ``every_command`` (warm-up and measured) precomputed; the worker
    before issue 14 runs from ``tree``."""
    if kind == "naive":
        return contenders.naive(child, WORK_DIR, name=tag)
    if kind == "replay":
        payloads = WORK_DIR / f"{tag}.payloads.json"
        throughput.write_payloads(
            payloads, every_command, conversations, Settings.at_defaults().window_limits
        )
        return contenders.replay(
            child, WORK_DIR, payloads, lanes=CONCURRENCY // 10, batch=10, name=tag
        )
    if kind == "worker-x2":
        return contenders.Group(
            tag, [contenders.worker(child, WORK_DIR, name=f"{tag}-{i}") for i in range(SCALE_OUT)]
        )
    extra = {}
    if kind == "worker-before" and tree is not None:
        extra["BENCH_WORKER_PATH"] = str(tree)
    if kind == "worker-uvloop":
        extra["BENCH_EVENT_LOOP"] = "uvloop"
    return contenders.worker(child, WORK_DIR, name=tag, **extra)


async def throughput_run(
    clients: Any,
    servers: Servers,
    plan: Plan,
    say: Progress,
    conversations: dict[str, Conversation],
    text: Any,
    *,
    kind: str,
    regime: str,
    round_number: int,
    tree: Path | None,
) -> dict[str, Any]:
    """One contender, one round, one regime: fresh queues, warm-up, measured commands."""
    suffix = "-lat" if regime == DELAYED else ""
    tag = f"{kind}{suffix}-r{round_number}"
    pool = list(conversations.values())
    # Every contender finds the fold state as seeded: nothing pending.
    await put_items(clients.dynamodb, TABLE, [state_item(c) for c in pool])
    env, child = await contender_queues(clients, servers, f"tp-{tag}")
    if kind == "naive":
        count = plan.naive_delayed_commands if regime == DELAYED else plan.naive_commands
    else:
        count = plan.commands
    warmup = make_commands(f"{tag}-w", pool, 40, text, seed=round_number)
    commands = make_commands(tag, pool, count, text, seed=100 + round_number)
    processes = SCALE_OUT if kind == "worker-x2" else 1
    window = 20 if kind == "naive" else processes * (CONCURRENCY + 10)
    contender = make_contender(kind, child, tag, conversations, [*warmup, *commands], tree)
    drain = Drain(clients.sqs, env["MODEL_QUEUE_URL"])
    drain.start()
    try:
        result = await throughput.measure(
            contender,
            sqs=clients.sqs,
            converse_url=env["CONVERSE_QUEUE_URL"],
            drain=drain,
            warmup=warmup,
            commands=commands,
            window=window,
            servers=throughput.ServerPids(
                servers.moto_pid, servers.dynalite_pid, servers.proxy_pid
            ),
            say=say,
        )
    finally:
        await drain.stop()
    result.update(kind=kind, round=round_number, window=window, processes=processes)
    say(
        f"  {tag}: {result['commands_per_second']:.1f} commands/s, "
        f"{sum(result['calls'].values()) / result['commands']:.2f} AWS calls/command, "
        f"{result['cpu_ms_per_command']:.2f} CPU ms/command"
    )
    return result


async def part_latency(
    clients: Any,
    servers: Servers,
    plan: Plan,
    say: Progress,
    conversations: dict[str, Conversation],
    text: Any,
    rates: dict[str, float],
) -> dict[str, Any]:
    delayed_regime = servers.round_trips is not None
    say(f"part 4: latency at a fixed offered load{' with the latency' if delayed_regime else ''}")
    pool = list(conversations.values())
    results = []
    rows = (("naive", "low"), ("worker", "low"), ("worker", "high"), ("replay", "high"))
    for kind, rate_name in rows:
        rate = rates[rate_name]
        tag = f"lat-{kind}-{rate_name}{'-lat' if delayed_regime else ''}"
        env, child = await contender_queues(clients, servers, tag)
        count = max(50, round(rate * plan.latency_seconds))
        warmup = make_commands(f"{tag}-w", pool, 20, text, seed=7)
        commands = make_commands(tag, pool, count, text, seed=8)
        contender = make_contender(kind, child, tag, conversations, [*warmup, *commands])
        drain = Drain(clients.sqs, env["MODEL_QUEUE_URL"], tasks=1, pause=0.1)
        drain.start()
        try:
            result = await latency.measure(
                contender,
                sqs=clients.sqs,
                converse_url=env["CONVERSE_QUEUE_URL"],
                drain=drain,
                warmup=warmup,
                commands=commands,
                rate=rate,
                say=say,
            )
        finally:
            await drain.stop()
        result["kind"] = kind
        result["load"] = rate_name
        results.append(result)
        say(
            f"  {tag}: p50 {result['p50_ms']:.0f} ms, p95 {result['p95_ms']:.0f} ms, "
            f"p99 {result['p99_ms']:.0f} ms"
        )
    return {"rates": rates, "results": results, "round_trips": _round_trips(servers)}


async def part_profile(
    clients: Any,
    servers: Servers,
    seconds: float,
    say: Progress,
    pool: Sequence[Conversation],
    text: Any,
) -> dict[str, Any] | None:
    if not seconds:
        return None
    if profiling.py_spy() is None:
        say("profile: py-spy is not installed; skipped")
        return None
    far = servers.round_trips is not None
    name = "profile-lat" if far else "profile"
    say(f"profile: py-spy on the worker for {seconds:g} s at full load"
        + (" with the latency" if far else ""))  # fmt: skip
    env, child = await contender_queues(clients, servers, name)
    worker = contenders.worker(child, WORK_DIR, name=f"{name}-worker")
    drain = Drain(clients.sqs, env["MODEL_QUEUE_URL"])
    drain.start()
    worker.start()
    commands = make_commands(name, pool, 5_000, text, seed=9)
    feeding = asyncio.create_task(
        _feed_until_cancelled(clients.sqs, env["CONVERSE_QUEUE_URL"], commands, drain)
    )
    try:
        await asyncio.sleep(2)  # past start-up
        summary = await profiling.record(worker.pid, seconds, WORK_DIR / f"{name}.raw")
    finally:
        feeding.cancel()
        await asyncio.gather(feeding, return_exceptions=True)
        await worker.stop()
        await drain.stop()
    if summary is not None:
        summary["round_trips"] = _round_trips(servers)
    return summary


async def _feed_until_cancelled(
    sqs: Any, url: str, commands: Sequence[Command], drain: Drain
) -> None:
    from bench.load.traffic import feed_closed_loop

    await feed_closed_loop(sqs, url, commands, drain, window=CONCURRENCY + 10)


# -- the run -------------------------------------------------------------------------------


def summarise_runs(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean over rounds (throughput as commands / seconds in all), with the spread."""
    commands = sum(r["commands"] for r in runs)
    seconds = sum(r["seconds"] for r in runs)
    calls: dict[str, float] = {}
    for run in runs:
        for label, n in run["calls"].items():
            calls[label] = calls.get(label, 0) + n
    return {
        "commands": commands,
        "seconds": seconds,
        "commands_per_second": commands / seconds,
        "per_round": [r["commands_per_second"] for r in runs],
        "calls_per_command": {k: v / commands for k, v in sorted(calls.items())},
        "requests_per_command": sum(sum(r["requests"].values()) for r in runs) / commands,
        "failed": {k: v for r in runs for k, v in r["failed"].items()},
        "cpu_ms_per_command": sum(r["cpu_ms_per_command"] * r["commands"] for r in runs) / commands,
        "moto_cpu_ms_per_command": sum(r["moto_cpu_ms_per_command"] * r["commands"] for r in runs)
        / commands,
        "dynalite_cpu_ms_per_command": sum(
            r["dynalite_cpu_ms_per_command"] * r["commands"] for r in runs
        )
        / commands,
        "driver_cpu_ms_per_command": sum(
            r["driver_cpu_ms_per_command"] * r["commands"] for r in runs
        )
        / commands,
        "proxy_cpu_ms_per_command": sum(
            r.get("proxy_cpu_ms_per_command", 0.0) * r["commands"] for r in runs
        )
        / commands,
        "processes": runs[0].get("processes", 1),
        "peak_rss_bytes": max(r["peak_rss_bytes"] for r in runs),
        "duplicates": sum(r["duplicates"] for r in runs),
        "redelivered_to_drain": sum(r.get("redelivered_to_drain", 0) for r in runs),
        "event_loop": runs[0].get("event_loop"),
        "window": runs[0]["window"],
        "exit_codes": [r["exit_code"] for r in runs],
    }


PARTS = ("cost", "throughput", "latency", "profile", "telemetry", "bill", "ttl")


async def run_parts(
    fleets: dict[str, Servers],
    plan: Plan,
    say: Progress,
    parts: Sequence[str] = PARTS,
    profile_seconds: float | None = None,
) -> dict[str, Any]:
    servers = fleets[DIRECT]
    os.environ.update(servers.environ())
    async with aws_clients(pool_size=64) as clients:
        await create_bench_resources(clients, "bench", TABLE)
        built, text = mixed_conversations(plan.conversations)
        started = time.perf_counter()
        items = await seed(clients.dynamodb, TABLE, built)
        say(
            f"seeded {plan.conversations} conversations ({items:,} items) in "
            f"{time.perf_counter() - started:.1f} s"
        )
        conversations = {c.conversation_id: c for c, _ in built}
        pool = list(conversations.values())
        results: dict[str, Any] = {
            "workload": {
                "conversations": plan.conversations,
                "items": items,
                "lengths": sorted(c.length for c in pool),
                "fold_due": sum(1 for c in pool if c.fold_due),
            }
        }
        if "cost" in parts:
            results["cost"] = await part_cost(clients, servers, plan, say, text)
        rates: dict[str, dict[str, float]] = {}
        if "throughput" in parts:
            regimes = await part_throughput(clients, fleets, plan, say, conversations, text)
            for regime, part in regimes.items():
                part["summary"] = {kind: summarise_runs(r) for kind, r in part["runs"].items()}
                summary = part["summary"]
                rates[regime] = {
                    "low": max(5.0, round(0.5 * summary["naive"]["commands_per_second"])),
                    "high": max(10.0, round(0.4 * summary["worker"]["commands_per_second"], -1)),
                }
            results["throughput"] = regimes[DIRECT]
            results["throughput_delayed"] = regimes[DELAYED]
        if "latency" in parts:
            for regime, key in ((DIRECT, "latency"), (DELAYED, "latency_delayed")):
                regime_rates = rates.get(regime, {"low": 10.0, "high": 40.0})
                results[key] = await part_latency(
                    clients, fleets[regime], plan, say, conversations, text, regime_rates
                )
        if "profile" in parts:
            seconds = plan.profile_seconds if profile_seconds is None else profile_seconds
            for regime, key in ((DIRECT, "profile"), (DELAYED, "profile_delayed")):
                results[key] = await part_profile(clients, fleets[regime], seconds, say, pool, text)
        if "telemetry" in parts:
            say("part 7: metrics and tracing on vs off, end to end and the telemetry path alone")
            results["telemetry"] = await telemetry_overhead.measure(
                clients,
                servers,
                pool,
                text,
                table=TABLE,
                workdir=WORK_DIR,
                quick=plan.quick,
                say=say,
            )
        if "bill" in parts:
            results["model_bill"] = await model_bill.measure(
                clients, servers, quick=plan.quick, say=say, workdir=WORK_DIR
            )
        if "ttl" in parts:
            say("part 8, issue 24: the cache lifetimes' contenders, then the default's play")
            results["cache_ttl"] = {
                "study": cache_ttl_study.run(
                    quick=plan.quick, headroom=None, cases=cache_ttl_study.CASES
                ),
                "play": await cache_ttl_play.measure(clients, servers, quick=plan.quick, say=say),
            }
    return results


@contextlib.contextmanager
def servers_and_proxy(say: Progress) -> Iterator[dict[str, Servers]]:
    """moto and dynalite, and the latency proxy in front of them: {regime: servers}."""
    trips = RoundTrips()
    say(f"starting moto (SQS, S3) and dynalite (DynamoDB) on 127.0.0.1, and the latency proxy "
        f"(SQS {trips.sqs_ms:g} ms, DynamoDB {trips.dynamodb_ms:g} ms a round trip)")  # fmt: skip
    with local_servers() as servers, delayed(servers, trips) as far:
        yield {DIRECT: servers, DELAYED: far}


def run_only(parts: Sequence[str], plan: Plan, say: Progress, profile_seconds: float) -> int:
    """Just these server parts, their figures to .bench/partial/results.json."""
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise SystemExit(f"--only: unknown part(s) {sorted(unknown)}; choose from {PARTS}")
    with servers_and_proxy(say) as fleets:
        results = asyncio.run(run_parts(fleets, plan, say, parts, profile_seconds))
    out = REPO_ROOT / ".bench" / "partial" / "results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    say(f"wrote {out.relative_to(REPO_ROOT)}")
    for key, regime in (("throughput", "without latency"), ("throughput_delayed", "with latency")):
        for kind, summary in results.get(key, {}).get("summary", {}).items():
            calls = summary["calls_per_command"]
            print(
                f"{regime:>15} {kind:>14}: {summary['commands_per_second']:6.1f} commands/s, "
                f"{sum(calls.values()):.2f} AWS calls/command, "
                f"{summary['cpu_ms_per_command']:.2f} CPU ms/command"
            )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run into .bench/quick")
    parser.add_argument("--only", help=f"comma-separated server parts of {PARTS}, no report")
    parser.add_argument("--profile-seconds", type=float, default=10.0,
                        help="with --only profile: seconds of sampling")  # fmt: skip
    parser.add_argument("--before", action="store_true",
                        help=f"part 3 also runs the worker of {BEFORE_REF}")  # fmt: skip
    args = parser.parse_args(argv)
    plan = dataclasses.replace(Plan.make(args.quick), before=args.before)
    say = Progress()
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    if args.only:
        return run_only(args.only.split(","), plan, say, args.profile_seconds)
    out_doc = (
        REPO_ROOT / ".bench" / "quick" if plan.quick else REPO_ROOT / "docs"
    ) / "BENCHMARKS.md"
    out_dir = out_doc.parent / "benchmarks"
    out_dir.mkdir(parents=True, exist_ok=True)
    WORK_DIR.mkdir(parents=True, exist_ok=True)

    load_at_start = list(os.getloadavg())
    mode = " --quick" if plan.quick else ""
    say(f"make bench{mode}: {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    say("part 1: the window vs LangChain's trim_messages")
    from bench.parts import compare_trim_messages

    trim_args = ["--out-dir", str(out_dir)] + (["--quick"] if plan.quick else [])
    compare_trim_messages.main(trim_args)
    trim = json.loads((out_dir / "trim_messages.json").read_text(encoding="utf-8"))
    say("part 1b: the Converse view beside the window; payload size with and without it")
    from bench.parts import converse_view_bench

    converse_view = converse_view_bench.run(quick=plan.quick)
    say("part 6: the fold gap, pipelined against single fold requests (a model, no servers)")
    from bench.parts import fold_gap

    fold = fold_gap.measure()

    with servers_and_proxy(say) as fleets:
        results = asyncio.run(run_parts(fleets, plan, say))
    say("part 9: brownouts of DynamoDB and of the model queue's sends (docs/RELIABILITY.md)")
    from bench.parts import brownout

    results["brownouts"] = brownout.measure(quick=plan.quick, say=say)

    from bench.reports import report

    document = {
        "load_average": {"start": load_at_start, "end": list(os.getloadavg())},
        "command": ".venv/bin/python -m bench.run_all" + (" --quick" if plan.quick else ""),
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "wall_seconds": time.monotonic() - say.started,
        "quick": plan.quick,
        "machine": machine(),
        "plan": plan.__dict__,
        "trim_messages": trim,
        "converse_view": converse_view,
        **results,
        "fold_gap": fold,
    }
    (out_dir / "results.json").write_text(
        json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    report.plots(document, out_dir)
    if "model_bill" in document:
        worker = document.get("throughput", {}).get("summary", {}).get("worker")
        model_bill.write(
            document["model_bill"], out_dir, worker["calls_per_command"] if worker else None
        )
    if "cache_ttl" in document and "model_bill" in document:
        from bench.reports import cache_ttl

        cache_ttl.write(document["cache_ttl"], document["model_bill"], out_dir)
    out_doc.write_text(report.markdown(document, out_dir, out_doc), encoding="utf-8")
    say(f"wrote {out_doc.relative_to(REPO_ROOT)} and {out_dir.relative_to(REPO_ROOT)}/")
    from bench.reports import scaling

    scaling_doc = out_doc.parent / "SCALING.md"
    results = (out_dir / "results.json").relative_to(REPO_ROOT)
    scaling_doc.write_text(scaling.markdown(document, str(results)), encoding="utf-8")
    say(f"wrote {scaling_doc.relative_to(REPO_ROOT)} (the capacity model, from these figures)")
    for line in report.verdicts(document):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
