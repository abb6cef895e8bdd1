"""docs/BENCHMARKS.md, the parts measured with a network round trip injected per request:
their targets, the side-by-side throughput (3b), scale-out on one stack, and where the time
goes with the latency."""

from __future__ import annotations

from typing import Any

from bench.reports.sections import (
    NAMES,
    calls_by_purpose,
    cpu_table,
    operations_table,
    total_calls,
)


def trips(doc: dict[str, Any]) -> str:
    t = doc["throughput_delayed"]["round_trips"]
    return f"SQS {t['sqs_ms']:g} ms, DynamoDB {t['dynamodb_ms']:g} ms a round trip"


def targets(doc: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(target, measured, met) with the injected latency, and calls per command in all."""
    delayed = doc.get("throughput_delayed")
    if not delayed:
        return []
    far, near = delayed["summary"], doc["throughput"]["summary"]
    worker, naive, replay = far["worker"], far["naive"], far["replay"]
    ratio = worker["commands_per_second"] / naive["commands_per_second"]
    share = worker["commands_per_second"] / replay["commands_per_second"]
    calls = {"without": total_calls(near["worker"]), "with": total_calls(worker)}
    return [
        (
            f"≥ 5× the naive consumer's throughput with the injected latency ({trips(doc)})",
            f"{ratio:.1f}× ({worker['commands_per_second']:.0f} against "
            f"{naive['commands_per_second']:.1f} commands/s; the replay ceiling is "
            f"{replay['commands_per_second'] / naive['commands_per_second']:.1f}×)",
            ratio >= 5,
        ),
        (
            "≥ 70% of the replay ceiling with the injected latency",
            f"{100 * share:.0f}%",
            share >= 0.7,
        ),
        (
            "≤ 2.5 AWS calls per command in all at full batches, idempotency included",
            f"{calls['without']:.2f} without the latency, {calls['with']:.2f} with it "
            f"(idempotency {calls_by_purpose(worker['calls_per_command'])['idempotency']:.2f} "
            "of them)",
            max(calls.values()) <= 2.5,
        ),
    ]


def injected_section(doc: dict[str, Any], rel: str) -> list[str]:
    delayed = doc.get("throughput_delayed")
    if not delayed:
        return []
    far, near = delayed["summary"], doc["throughput"]["summary"]
    t = delayed["round_trips"]
    naive_far = far["naive"]["commands_per_second"]
    naive_near = near["naive"]["commands_per_second"]
    replay_far = far["replay"]["commands_per_second"]
    lines = [
        "### 3b. The same, a network away: a round trip injected per request",
        "",
        f"The contenders again, in the same rounds, each request and its response delayed by "
        f"a fixed round trip: **SQS (and S3) {t['sqs_ms']:g} ms, DynamoDB "
        f"{t['dynamodb_ms']:g} ms** (how, and why these: [`{rel}/method.md`]"
        f'({rel}/method.md), "The injected latency").',
        "",
        "| contender | without: commands/s | × naive | with latency: commands/s (per round) "
        "| × naive | of replay | calls / command | CPU ms / command |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for kind in NAMES:
        if kind not in far:
            continue
        s = far[kind]
        rate = s["commands_per_second"]
        plain = near.get(kind)
        plain_cells = (
            f"{plain['commands_per_second']:.1f} | {plain['commands_per_second'] / naive_near:.2f}×"
            if plain
            else "– | –"
        )
        lines.append(
            f"| {NAMES[kind]} | {plain_cells} "
            f"| {rate:.1f} ({', '.join(f'{x:.0f}' for x in s['per_round'])}) "
            f"| {rate / naive_far:.2f}× | {100 * rate / replay_far:.0f}% "
            f"| {total_calls(s):.2f} | {s['cpu_ms_per_command']:.2f} |"
        )
    columns = [
        (f"{NAMES[k].replace('*', '')}{suffix}", summary[k])
        for suffix, summary in ((" (without)", near), (" (with)", far))
        for k in ("worker", "worker-x2", "replay")
        if k in summary
    ]
    return [
        *lines,
        "",
        f"![throughput with and without the latency]({rel}/throughput_latency.png)",
        "",
        "Calls per command by operation, the worker and the replay in both regimes (the "
        "naive consumer's are one each of ReceiveMessage, Query, SendMessage and "
        "DeleteMessage):",
        "",
        *operations_table(columns, total=True),
        "",
        "Where the CPU went with the latency, ms per command (the proxy is the latency "
        "injector itself: a cost of the measurement, not of any contender):",
        "",
        *cpu_table(far, proxy=True),
        "",
        *_scale_out(doc),
    ]


def _scale_out(doc: dict[str, Any]) -> list[str]:
    far = doc["throughput_delayed"]["summary"]
    one, two = far.get("worker"), far.get("worker-x2")
    if not (one and two):
        return []
    gain = two["commands_per_second"] / one["commands_per_second"]
    cores = doc["machine"]["cores"] or 2
    calls = total_calls(two) / total_calls(one) - 1
    return [
        "**Scale-out on one stack** (with the latency): two `worker run` processes on the "
        "same queues and table, each with the same concurrency and the feed window doubled, "
        f"against one. Together {two['commands_per_second']:.1f} commands/s, "
        f"{two['commands_per_second'] / 2:.1f} per process, against "
        f"{one['commands_per_second']:.1f} for one: {gain:.2f}×. CPU per command "
        f"{two['cpu_ms_per_command']:.2f} ms (both processes) against "
        f"{one['cpu_ms_per_command']:.2f}; calls per command {total_calls(two):.2f} against "
        f"{total_calls(one):.2f} ({calls:+.0%}); payloads sent twice: {two['duplicates']}. "
        f"All the processes here, servers included, share {cores} cores, so this row "
        "measures the stack on this machine more than the workers: "
        + (
            "a second process added throughput."
            if gain > 1.05
            else "a second process did not add throughput here."
        )
        + " The capacity model built from what a command costs is `docs/SCALING.md`.",
    ]


def notes(doc: dict[str, Any]) -> list[str]:
    """Where the time goes with the latency: the 5× target's arithmetic."""
    delayed = doc.get("throughput_delayed")
    if not delayed:
        return []
    far = delayed["summary"]
    worker, naive, replay = far["worker"], far["naive"], far["replay"]
    parts = ("cpu_ms_per_command", "moto_cpu_ms_per_command", "dynalite_cpu_ms_per_command",
             "driver_cpu_ms_per_command", "proxy_cpu_ms_per_command")  # fmt: skip
    total = sum(worker[p] for p in parts)
    rate = worker["commands_per_second"]
    cores = doc["machine"]["cores"] or 2
    naive_ms = 1000 / naive["commands_per_second"]
    t = delayed["round_trips"]
    waits = 3 * t["sqs_ms"] + t["dynamodb_ms"]
    target = 5 * naive["commands_per_second"]
    budget = 1000 * cores / target
    floor = sum(replay[p] for p in parts[1:])
    ratio = rate / naive["commands_per_second"]
    verdict = (
        f"- **The 5× target with the latency: met here ({ratio:.1f}×).**"
        if ratio >= 5
        else f"- **The 5× target with the latency: missed here ({ratio:.1f}×).** 5× the naive "
        f"consumer is {target:.0f} commands/s, at most {budget:.1f} ms of CPU per command "
        f"across every process; the servers, the feed and drain and the proxy alone took "
        f"{floor:.1f} ms per command for the replay. The naive consumer's {naive_ms:.0f} ms a "
        f"command was only {waits:g} ms of injected waiting; the rest was its own CPU and the "
        f"servers' per call (moto {naive['moto_cpu_ms_per_command']:.1f} ms for it)."
    )
    return [
        f"- **With the latency, the naive consumer is bound by waiting.** It took "
        f"{naive_ms:.0f} ms a command, {waits:g} ms of it the four round trips "
        f"(three SQS, one DynamoDB) it waits for in turn; the worker overlaps them across "
        f"its {delayed['concurrency']} turns in flight. The worker's own bound is its CPU: "
        f"{worker['cpu_ms_per_command']:.1f} ms a command here, about "
        f"{1000 / worker['cpu_ms_per_command']:.0f} commands/s a core. Here it shared "
        f"{cores} cores with the servers: one command cost {total:.1f} ms of CPU in all "
        f"(worker {worker['cpu_ms_per_command']:.1f}, moto "
        f"{worker['moto_cpu_ms_per_command']:.1f}, dynalite "
        f"{worker['dynalite_cpu_ms_per_command']:.1f}, feed and drain "
        f"{worker['driver_cpu_ms_per_command']:.1f}, proxy "
        f"{worker['proxy_cpu_ms_per_command']:.1f}), so at {rate:.0f} commands/s "
        f"{total * rate / 1000:.1f} of {cores} cores were busy. The replay, the same calls "
        f"without the stage, reached {replay['commands_per_second']:.0f}/s.",
        verdict,
    ]
