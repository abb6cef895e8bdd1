"""Part 3: commands per second through one process, and what each command costs.

Side by side on the same servers (moto for SQS, dynalite for DynamoDB), the same
conversations and the same kind of commands, in rounds, the contenders interleaved:

- the worker (``worker run``, one process, ``WORKER_CONCURRENCY`` commands at once);
- the naive sequential consumer (:mod:`bench.contenders.naive_consumer`);
- the pure API replay (:mod:`bench.contenders.api_replay`): the ceiling the servers allow;
- with the injected latency, also two worker processes as one contender
  (:class:`bench.contenders.contenders.Group`): scale-out on one stack.

Each run, in both regimes (the servers as they are, and a network round trip away): fresh
queues, a warm-up, then ``count`` commands fed closed-loop (never more than ``window``
between the converse queue and the model queue, so moto's queues stay shallow), timed from
the first send to the last arrival; the process's own counters (calls by operation and
purpose, CPU seconds) and the servers' CPU are diffed across the measured stretch.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.contenders import contenders
from bench.load.traffic import draining, feed_closed_loop
from bench.load.workload import Conversation, make_commands, put_items, state_item
from bench.parts.runs import CONCURRENCY, TABLE, arrived, make, queues, warmed_up
from bench.servers.procstats import cpu_seconds
from bench.servers.servers import DELAYED, Servers

Say = Callable[[str], None]
#: Per command, CPU of the contender, of each server, of the benchmark's feed and drain.
CPU = ("cpu", "moto_cpu", "dynalite_cpu", "driver_cpu", "proxy_cpu")


def kinds(regime: str) -> list[str]:
    """The contenders of one regime, in the order they run each round."""
    return ["naive", "worker", *(["worker-x2"] if regime == DELAYED else []), "replay"]


async def run(
    clients: Any,
    fleets: dict[str, Servers],
    conversations: dict[str, Conversation],
    text: Any,
    *,
    rounds: int,
    counts: dict[str, int],
    say: Say,
) -> dict[str, dict[str, Any]]:
    """Every regime's contenders over ``rounds``: {regime: {concurrency, runs, summary, ...}};
    ``counts`` is the commands per run by contender kind (``naive`` and ``naive-delayed``
    for the naive consumer, else ``commands``)."""
    say(f"part 3: throughput, {rounds} round(s) per contender, interleaved, without and with "
        "the injected latency")  # fmt: skip
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        regime: {kind: [] for kind in kinds(regime)} for regime in fleets
    }
    for round_number in range(1, rounds + 1):
        for regime, servers in fleets.items():
            for kind in runs[regime]:
                naive = "naive-delayed" if regime == DELAYED else "naive"
                count = counts[naive] if kind == "naive" else counts["commands"]
                result = await one_run(
                    clients,
                    servers,
                    conversations,
                    text,
                    kind=kind,
                    round_number=round_number,
                    count=count,
                    say=say,
                )
                runs[regime][kind].append(result)
    return {
        regime: {
            "concurrency": CONCURRENCY,
            "runs": regime_runs,
            "summary": {kind: summarise(r) for kind, r in regime_runs.items()},
            "round_trips": fleets[regime].round_trips_ms(),
        }
        for regime, regime_runs in runs.items()
    }


async def one_run(
    clients: Any,
    servers: Servers,
    conversations: dict[str, Conversation],
    text: Any,
    *,
    kind: str,
    round_number: int,
    count: int,
    say: Say,
    checkouts: Mapping[str, Path] | None = None,
) -> dict[str, Any]:
    """One contender, one round, one regime: fresh queues, warm-up, measured commands
    (``checkouts``: where the ``worker@<label>`` contenders' code is)."""
    label = kind.replace("@", "-")
    tag = f"{label}{'-lat' if servers.round_trips else ''}-r{round_number}"
    pool = list(conversations.values())
    # Every contender finds the fold state as seeded: nothing pending.
    await put_items(clients.dynamodb, TABLE, [state_item(c) for c in pool])
    env, child = await queues(clients, servers, f"tp-{tag}")
    warmup = make_commands(f"{tag}-w", pool, 40, text, seed=round_number)
    commands = make_commands(tag, pool, count, text, seed=100 + round_number)
    processes = 2 if kind == "worker-x2" else 1
    window = 20 if kind == "naive" else processes * (CONCURRENCY + 10)
    contender = make(kind, child, tag, conversations, [*warmup, *commands], checkouts)
    url = env["CONVERSE_QUEUE_URL"]
    pids = {"moto_cpu": servers.moto_pid, "dynalite_cpu": servers.dynalite_pid,
            "proxy_cpu": servers.proxy_pid, "driver_cpu": os.getpid()}  # fmt: skip
    async with draining(clients.sqs, env["MODEL_QUEUE_URL"]) as drain:
        try:
            before = await warmed_up(contender, clients.sqs, url, drain, warmup, window=window)
            cpu = {key: cpu_seconds(pid) for key, pid in pids.items()}
            started = time.perf_counter()
            await feed_closed_loop(
                clients.sqs,
                url,
                commands,
                drain,
                window=window,
                progress=lambda n: say(f"  {tag}: {n:,}/{count:,} sent"),
            )
            await arrived(drain, commands, 120, tag)
            elapsed = time.perf_counter() - started
            after = await contender.snapshot()
            cpu = {key: cpu_seconds(pid) - cpu[key] for key, pid in pids.items()}
        finally:
            final = await contender.stop()
    delta = contenders.diff(after, before)
    cpu["cpu"] = delta["cpu_seconds"]
    result = {
        "kind": kind,
        "round": round_number,
        "window": window,
        "processes": processes,
        "commands": count,
        "seconds": elapsed,
        "commands_per_second": count / elapsed,
        "calls": delta["calls"],
        "requests": delta["requests"],
        "failed": delta["failed"],
        **{f"{key}_ms_per_command": 1000 * seconds / count for key, seconds in cpu.items()},
        # VmHWM from /proc: getrusage's maxrss survives exec, so a child would report
        # the benchmark driver's own peak.
        "peak_rss_bytes": max(
            after.get("proc", {}).get("peak_rss_bytes", 0),
            final.get("proc_before_exit", {}).get("peak_rss_bytes", 0),
        ),
        "exit_code": final.get("exit_code"),
        "duplicates": drain.duplicates,
        "redelivered_to_drain": drain.redelivered,
    }
    say(f"  {tag}: {result['commands_per_second']:.1f} commands/s, "
        f"{sum(delta['calls'].values()) / count:.2f} AWS calls/command, "
        f"{result['cpu_ms_per_command']:.2f} CPU ms/command")  # fmt: skip
    return result


def summarise(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Over the rounds (throughput as commands / seconds in all, CPU weighted by commands),
    with the spread."""
    commands = sum(r["commands"] for r in runs)
    seconds = sum(r["seconds"] for r in runs)
    calls: Counter[str] = Counter()
    for r in runs:
        calls.update(r["calls"])
    return {
        "commands": commands,
        "seconds": seconds,
        "commands_per_second": commands / seconds,
        "per_round": [r["commands_per_second"] for r in runs],
        "calls_per_command": {k: v / commands for k, v in sorted(calls.items())},
        "requests_per_command": sum(sum(r["requests"].values()) for r in runs) / commands,
        "failed": {k: v for r in runs for k, v in r["failed"].items()},
        **{
            f"{key}_ms_per_command": sum(r[f"{key}_ms_per_command"] * r["commands"] for r in runs)
            / commands
            for key in CPU
        },
        "processes": runs[0]["processes"],
        "peak_rss_bytes": max(r["peak_rss_bytes"] for r in runs),
        "duplicates": sum(r["duplicates"] for r in runs),
        "redelivered_to_drain": sum(r["redelivered_to_drain"] for r in runs),
        "window": runs[0]["window"],
        "exit_codes": [r["exit_code"] for r in runs],
    }
