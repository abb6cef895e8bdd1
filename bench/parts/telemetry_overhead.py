"""Part 7: what operating the worker costs: its CPU per command with metrics and tracing
on and off (the target: under 5% more).

Two measurements, because the first is noisy on a shared two-core machine and the second
is not:

1. **The worker, end to end.** The same worker in three configurations, interleaved over
   rounds, each run a fresh process with fresh queues after a warm-up, fed open-loop at a
   fixed rate (so every configuration sees the same arrivals and fills its receives alike;
   a closed loop would let a noisier run batch less and cost more per command for that
   alone). The figure is the worker process's own CPU seconds over the measured commands.

   - ``off``: ``METRICS=off``, commands without a trace header (a developer's `worker run`);
   - ``on``: ``METRICS=emf`` and every command with an ``AWSTraceHeader``, no SDK: the
     container's default (EMF aggregation, the trace continued and sent on with the prompt
     and fold request, ``trace_id`` on every log line of the turn);
   - ``on, SDK``: the same with an OpenTelemetry SDK in the process
     (:mod:`bench.contenders.traced_worker`: a span per turn, made and batched, then dropped).

   moto drops ``MessageSystemAttributes`` from SendMessageBatch entries;
   ``localaws.moto`` keeps them, as SQS does, so the worker's batched prompts
   carry their header as in AWS.

2. **The telemetry path alone**, in this process: a turn's hooks exactly as the consumer
   and the stage call them (receive, span, header, window counts, outcome), with an EMF
   flush every 1,000 turns, timed per turn (best of several runs) for each configuration.

Standalone: ``.venv/bin/python -m bench.parts.telemetry_overhead [--quick] [--write]`` (its own
servers).
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.contenders import contenders
from bench.load.traffic import draining, feed_at_rate
from bench.load.workload import Conversation, make_commands
from bench.parts.runs import WORK_DIR, arrived, queues, seeded, warmed_up
from bench.reports import telemetry as telemetry_report
from bench.servers.servers import Servers, measured_on_local_servers

TARGET = 0.05
#: Commands a second, open loop: below what one worker serves here even with other work on
#: the machine (so no run falls behind its arrivals), high enough that receives and sends
#: carry several commands each, as under load.
RATE = 30.0
CONFIGS: dict[str, dict[str, Any]] = {
    "off": {"label": "metrics and tracing off", "env": {"METRICS": "off"}, "headers": False},
    "on": {"label": "METRICS=emf, trace headers, no SDK", "env": {"METRICS": "emf"},
           "headers": True},
    "sdk": {"label": "METRICS=emf, trace headers, OpenTelemetry SDK", "env": {"METRICS": "emf"},
            "headers": True, "module": "bench.contenders.traced_worker"},
}  # fmt: skip


def plan(quick: bool) -> dict[str, int]:
    return {"rounds": 1, "commands": 240} if quick else {"rounds": 3, "commands": 360}


def trace_header(rng: random.Random) -> str:
    root = f"1-{rng.getrandbits(32):08x}-{rng.getrandbits(96):024x}"
    return f"Root={root};Parent={rng.getrandbits(64):016x};Sampled=1"


class WithTraceHeaders:
    """The driver's SQS client, every command sent with a new trace's ``AWSTraceHeader``."""

    def __init__(self, sqs: Any, rng: random.Random) -> None:
        self._sqs = sqs
        self._rng = rng

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sqs, name)

    def _attribute(self) -> dict[str, Any]:
        header = {"DataType": "String", "StringValue": trace_header(self._rng)}
        return {"MessageSystemAttributes": {"AWSTraceHeader": header}}

    async def send_message(self, **kwargs: Any) -> Any:
        return await self._sqs.send_message(**kwargs, **self._attribute())

    async def send_message_batch(self, *, QueueUrl: str, Entries: list[dict[str, Any]]) -> Any:
        traced = [{**entry, **self._attribute()} for entry in Entries]
        return await self._sqs.send_message_batch(QueueUrl=QueueUrl, Entries=traced)


async def run_once(
    name: str,
    clients: Any,
    servers: Servers,
    config: dict[str, Any],
    *,
    pool: Sequence[Conversation],
    text: Any,
    commands: int,
    round_number: int,
) -> dict[str, Any]:
    """One configuration, one round: fresh process and queues, warm-up, measured commands."""
    tag = f"ops-{name}-r{round_number}"
    env, child = await queues(
        clients,
        servers,
        tag,
        concurrency=None,
        **config["env"],
        HEALTH_FILE=str(WORK_DIR / f"{tag}.health"),
    )
    contender = contenders.process(
        config.get("module", "bench.contenders.worker_process"), child, WORK_DIR, tag
    )
    rng = random.Random(round_number)
    sqs = WithTraceHeaders(clients.sqs, rng) if config["headers"] else clients.sqs
    warmup = make_commands(f"{tag}-w", pool, 40, text, seed=round_number)
    measured = make_commands(tag, pool, commands, text, seed=200 + round_number)
    url = env["CONVERSE_QUEUE_URL"]
    async with draining(clients.sqs, env["MODEL_QUEUE_URL"], tasks=1, pause=0.1) as drain:
        try:
            before = await warmed_up(contender, sqs, url, drain, warmup)
            started = time.perf_counter()
            await feed_at_rate(sqs, url, measured, rate=RATE)
            await arrived(drain, measured, 60, tag)
            seconds = time.perf_counter() - started
            delta = contenders.diff(await contender.snapshot(), before)
        finally:
            await contender.stop()
    emf, traced = _log_counts(contender.log_path)
    return {
        "commands": commands,
        "seconds": seconds,
        "cpu_ms_per_command": 1000 * delta["cpu_seconds"] / commands,
        "emf_lines": emf,
        "traced_turns": traced,
        "duplicates": drain.duplicates,
    }


async def measure(
    clients: Any,
    servers: Servers,
    pool: Sequence[Conversation],
    text: Any,
    *,
    quick: bool,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Both measurements; the end-to-end runs interleaved over the plan's rounds."""
    say("part 7: metrics and tracing on vs off, end to end and the telemetry path alone")
    figures = plan(quick)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in CONFIGS}
    for round_number in range(1, figures["rounds"] + 1):
        for name, config in CONFIGS.items():
            result = await run_once(
                name,
                clients,
                servers,
                config,
                pool=pool,
                text=text,
                commands=figures["commands"],
                round_number=round_number,
            )
            runs[name].append(result)
            say(
                f"  ops-{name}-r{round_number}: {result['cpu_ms_per_command']:.3f} CPU "
                f"ms/command at {RATE:g}/s"
            )
    say("  the telemetry path alone, in-process")
    return {
        "plan": {**figures, "rate": RATE},
        "target": TARGET,
        "summary": summarise(runs),
        "path": await asyncio.to_thread(path_cost),
    }


def _log_counts(log: Path) -> tuple[int, int]:
    """EMF documents the worker wrote, and prompts it forwarded within a trace: the proof
    that each configuration ran as labelled."""
    emf = traced = 0
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        emf += line.startswith("{") and '"_aws"' in line
        traced += '"clerk.converse_prompt_forwarded"' in line and '"trace_id"' in line
    return emf, traced


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for name, results in runs.items():
        commands = sum(r["commands"] for r in results)
        summary[name] = {
            "label": CONFIGS[name]["label"],
            "commands": commands,
            "cpu_ms_per_command": sum(r["cpu_ms_per_command"] * r["commands"] for r in results)
            / commands,
            "per_round": [r["cpu_ms_per_command"] for r in results],
            "emf_lines": [r["emf_lines"] for r in results],
            "traced_turns": [r["traced_turns"] for r in results],
            "duplicates": sum(r["duplicates"] for r in results),
        }
    base = summary["off"]["cpu_ms_per_command"]
    for name in summary:
        summary[name]["overhead"] = summary[name]["cpu_ms_per_command"] / base - 1
        # Round by round against the "off" run just before: the spread the pooled figure hides.
        summary[name]["overhead_per_round"] = [
            mine / off - 1
            for mine, off in zip(
                summary[name]["per_round"], summary["off"]["per_round"], strict=True
            )
        ]
    return summary


def path_cost(turns: int = 5_000, repeats: int = 5) -> dict[str, float]:
    """µs of CPU per turn of the telemetry path in each configuration, and with none of it."""
    from bench.parts.telemetry_path import time_path

    return {name: time_path(name, turns=turns, repeats=repeats) for name in ("none", *CONFIGS)}


async def _standalone(clients: Any, servers: Servers, quick: bool) -> dict[str, Any]:
    history = await seeded(clients, 40 if quick else 100)
    return await measure(clients, servers, history.pool, history.text, quick=quick, say=print)


def main(argv: Sequence[str] | None = None) -> int:
    from bench.reports import report

    def measure_alone(quick: bool) -> dict[str, Any]:
        return measured_on_local_servers(lambda c, s: _standalone(c, s, quick))

    def render(result: dict[str, Any]) -> list[str]:
        target, figure, met = telemetry_report.target_line(result)
        return [
            *telemetry_report.markdown(result),
            f"{'MET ' if met else 'MISSED'}  {target}: {figure}",
        ]

    return report.part_main(argv, __doc__, "telemetry", measure_alone, render)


if __name__ == "__main__":
    sys.exit(main())
