"""Part 3: commands per second through one process, and what each command costs.

Side by side on the same servers (moto for SQS, dynalite for DynamoDB), the same
conversations and the same kind of commands:

- the worker (``worker run``, one process, ``WORKER_CONCURRENCY`` commands at once);
- the naive sequential consumer (:mod:`bench.contenders.naive_consumer`);
- the pure API replay (:mod:`bench.contenders.api_replay`): the ceiling the servers allow;
- with the injected latency, also two worker processes as one contender
  (:class:`bench.contenders.contenders.Group`): scale-out on one stack.

For each: warm up, then feed ``count`` commands closed-loop (never more than ``window``
between the converse queue and the model queue, so moto's queues stay shallow), time
from the first send to the last arrival, and diff the process's own counters (calls by
operation and purpose, CPU seconds) across the measured stretch.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.contenders import contenders
from bench.load.traffic import Drain, feed_closed_loop
from bench.load.workload import Command, Conversation, expected_payload, fold_through
from bench.servers.procstats import cpu_seconds

Say = Callable[[str], None]


@dataclass
class ServerPids:
    moto_pid: int | None
    dynalite_pid: int | None
    proxy_pid: int | None = None  # the latency proxy (localaws.proxy), when in use


async def measure(
    contender: contenders.Contender | contenders.Group,
    *,
    sqs: Any,
    converse_url: str,
    drain: Drain,
    warmup: Sequence[Command],
    commands: Sequence[Command],
    window: int,
    servers: ServerPids,
    say: Say,
) -> dict[str, Any]:
    """Run one contender over ``warmup`` then ``commands``; its figures for the latter."""
    contender.start()
    try:
        await feed_closed_loop(sqs, converse_url, warmup, drain, window=window)
        if not await drain.wait_for([c.command_id for c in warmup], within=60):
            raise RuntimeError(f"{contender.name}: warm-up did not finish\n{contender.log_tail()}")
        before = await contender.snapshot()
        moto0, dyn0 = cpu_seconds(servers.moto_pid), cpu_seconds(servers.dynalite_pid)
        proxy0 = cpu_seconds(servers.proxy_pid)
        own0 = cpu_seconds(os.getpid())
        started = time.perf_counter()
        await feed_closed_loop(
            sqs,
            converse_url,
            commands,
            drain,
            window=window,
            progress=lambda n: say(f"  {contender.name}: {n:,}/{len(commands):,} sent"),
        )
        if not await drain.wait_for([c.command_id for c in commands], within=120):
            raise RuntimeError(f"{contender.name}: commands did not all arrive")
        elapsed = time.perf_counter() - started
        after = await contender.snapshot()
        moto1, dyn1 = cpu_seconds(servers.moto_pid), cpu_seconds(servers.dynalite_pid)
        proxy1 = cpu_seconds(servers.proxy_pid)
        own1 = cpu_seconds(os.getpid())
    finally:
        final = await contender.stop()
    delta = contenders.diff(after, before)
    n = len(commands)
    return {
        "name": contender.name,
        "commands": n,
        "seconds": elapsed,
        "commands_per_second": n / elapsed,
        "calls": delta["calls"],
        "requests": delta["requests"],
        "failed": delta["failed"],
        "cpu_ms_per_command": 1000 * delta["cpu_seconds"] / n,
        "moto_cpu_ms_per_command": 1000 * (moto1 - moto0) / n,
        "dynalite_cpu_ms_per_command": 1000 * (dyn1 - dyn0) / n,
        "driver_cpu_ms_per_command": 1000 * (own1 - own0) / n,
        "proxy_cpu_ms_per_command": 1000 * (proxy1 - proxy0) / n,
        # VmHWM from /proc: getrusage's maxrss survives exec, so a child would report
        # the benchmark driver's own peak.
        "peak_rss_bytes": max(
            after.get("proc", {}).get("peak_rss_bytes", 0),
            final.get("proc_before_exit", {}).get("peak_rss_bytes", 0),
        ),
        "exit_code": final.get("exit_code"),
        "event_loop": after.get("event_loop"),
        "duplicates": drain.duplicates,
        "redelivered_to_drain": drain.redelivered,
    }


def write_payloads(
    path: Path,
    commands: Sequence[Command],
    conversations: dict[str, Conversation],
    limits: Any,
) -> None:
    """What the replay sends: command id -> [conversation id, prompt body, fold through]."""
    table = {
        c.command_id: [
            c.conversation_id,
            expected_payload(c, conversations[c.conversation_id], limits),
            fold_through(conversations[c.conversation_id]),
        ]
        for c in commands
    }
    path.write_text(json.dumps(table, ensure_ascii=False), encoding="utf-8")
