"""Part 4: latency from a command's send to its payload's arrival on the model queue, at a
fixed offered load below saturation.

The load is open-loop: one ``SendMessage`` every ``1/rate`` seconds on a fixed schedule,
whatever the consumer does. Arrival is SQS's own ``SentTimestamp`` of the payload on the
model queue (milliseconds), so the benchmark's polling does not add to the figures.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from bench.contenders import contenders
from bench.load.traffic import Drain, feed_at_rate, feed_closed_loop
from bench.load.workload import Command

Say = Callable[[str], None]


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of ``values``."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


async def measure(
    contender: contenders.Contender,
    *,
    sqs: Any,
    converse_url: str,
    drain: Drain,
    warmup: Sequence[Command],
    commands: Sequence[Command],
    rate: float,
    say: Say,
) -> dict[str, Any]:
    contender.start()
    try:
        await feed_closed_loop(sqs, converse_url, warmup, drain, window=20)
        if not await drain.wait_for([c.command_id for c in warmup], within=60):
            raise RuntimeError(f"{contender.name}: warm-up did not finish\n{contender.log_tail()}")
        sent_at: dict[str, float] = {}
        before = await contender.snapshot()
        say(
            f"  {contender.name}: {len(commands):,} commands at {rate:g}/s "
            f"(~{len(commands) / rate:.0f} s)"
        )
        achieved = await feed_at_rate(sqs, converse_url, commands, rate=rate, sent_at=sent_at)
        if not await drain.wait_for([c.command_id for c in commands], within=60):
            raise RuntimeError(f"{contender.name}: commands did not all arrive")
        delta = contenders.diff(await contender.snapshot(), before)
    finally:
        await contender.stop()
    latencies = [
        drain.arrivals[c.command_id].arrived_ms - sent_at[c.command_id] * 1000 for c in commands
    ]
    n = len(commands)
    return {
        "name": contender.name,
        "offered_per_second": rate,
        "achieved_per_second": achieved,
        "commands": len(commands),
        "p50_ms": percentile(latencies, 50),
        "p95_ms": percentile(latencies, 95),
        "p99_ms": percentile(latencies, 99),
        "max_ms": max(latencies),
        "calls_per_command": {k: v / n for k, v in delta["calls"].items()},
        "cpu_ms_per_command": 1000 * delta["cpu_seconds"] / n,
        "latencies_ms": [round(x, 1) for x in sorted(latencies)],
    }
