"""Part 4: latency from a command's send to its payload's arrival on the model queue, at a
fixed offered load below saturation.

The load is open-loop: one ``SendMessage`` every ``1/rate`` seconds on a fixed schedule,
whatever the consumer does. Arrival is SQS's own ``SentTimestamp`` of the payload on the
model queue (milliseconds), so the benchmark's polling does not add to the figures. The
rates come from part 3 in the same regime: ``low`` half the naive consumer's throughput
(run by it and the worker), ``high`` 40% of the worker's (run by it and the replay).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from bench.contenders import contenders
from bench.load.traffic import draining, feed_at_rate
from bench.load.workload import Conversation, make_commands
from bench.parts.runs import arrived, make, queues, warmed_up
from bench.servers.servers import Servers

Say = Callable[[str], None]
#: (contender, load) of each row.
ROWS = (("naive", "low"), ("worker", "low"), ("worker", "high"), ("replay", "high"))


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of ``values``."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def rates(summary: dict[str, Any] | None) -> dict[str, float]:
    """The two loads, from part 3's summary in the same regime (defaults without one)."""
    if summary is None:
        return {"low": 10.0, "high": 40.0}
    return {
        "low": max(5.0, round(0.5 * summary["naive"]["commands_per_second"])),
        "high": max(10.0, round(0.4 * summary["worker"]["commands_per_second"], -1)),
    }


async def run(
    clients: Any,
    servers: Servers,
    conversations: dict[str, Conversation],
    text: Any,
    *,
    loads: dict[str, float],
    seconds: float,
    say: Say,
) -> dict[str, Any]:
    """Every row at its load: {rates, results, round_trips}."""
    far = "-lat" if servers.round_trips else ""
    say(f"part 4: latency at a fixed offered load{' with the latency' if far else ''}")
    pool = list(conversations.values())
    results = []
    for kind, load in ROWS:
        rate = loads[load]
        tag = f"lat-{kind}-{load}{far}"
        env, child = await queues(clients, servers, tag)
        warmup = make_commands(f"{tag}-w", pool, 20, text, seed=7)
        commands = make_commands(tag, pool, max(50, round(rate * seconds)), text, seed=8)
        contender = make(kind, child, tag, conversations, [*warmup, *commands])
        url = env["CONVERSE_QUEUE_URL"]
        async with draining(clients.sqs, env["MODEL_QUEUE_URL"], tasks=1, pause=0.1) as drain:
            try:
                before = await warmed_up(contender, clients.sqs, url, drain, warmup)
                say(f"  {tag}: {len(commands):,} commands at {rate:g}/s "
                    f"(~{len(commands) / rate:.0f} s)")  # fmt: skip
                sent_at: dict[str, float] = {}
                achieved = await feed_at_rate(clients.sqs, url, commands, rate=rate,
                                              sent_at=sent_at)  # fmt: skip
                await arrived(drain, commands, 60, tag)
                delta = contenders.diff(await contender.snapshot(), before)
            finally:
                await contender.stop()
        latencies = [
            drain.arrivals[c.command_id].arrived_ms - sent_at[c.command_id] * 1000 for c in commands
        ]
        n = len(commands)
        result = {
            "kind": kind,
            "load": load,
            "offered_per_second": rate,
            "achieved_per_second": achieved,
            "commands": n,
            "p50_ms": percentile(latencies, 50),
            "p95_ms": percentile(latencies, 95),
            "p99_ms": percentile(latencies, 99),
            "max_ms": max(latencies),
            "calls_per_command": {k: v / n for k, v in delta["calls"].items()},
            "cpu_ms_per_command": 1000 * delta["cpu_seconds"] / n,
            "latencies_ms": [round(x, 1) for x in sorted(latencies)],
        }
        results.append(result)
        say(f"  {tag}: p50 {result['p50_ms']:.0f} ms, p95 {result['p95_ms']:.0f} ms, "
            f"p99 {result['p99_ms']:.0f} ms")  # fmt: skip
    return {"rates": loads, "results": results, "round_trips": servers.round_trips_ms()}
