"""Part 7's page: what operating the worker costs, metrics and tracing on vs off.

Renders the figures :mod:`bench.parts.telemetry_overhead` measured (its ``results.json``
entry); imports nothing else of ``bench``.
"""

from __future__ import annotations

from typing import Any


def path_share(result: dict[str, Any], name: str, cpu_ms_per_command: float) -> float:
    """What the path adds to a command in ``name``, over none of it, as a share of
    ``cpu_ms_per_command``."""
    path = result["path"]
    return (path[name] - path["none"]) / (1000 * cpu_ms_per_command)


def target_line(
    result: dict[str, Any], full_load_cpu_ms: float | None = None
) -> tuple[str, str, bool]:
    """(target, measured, met) for the report's table. Met on the end-to-end figure; the
    path alone is said beside it, against the worker's CPU per command at full load (part
    3) when known, where the same microseconds weigh most."""
    summary = result["summary"]
    on, sdk = summary["on"]["overhead"], summary["sdk"]["overhead"]
    base = full_load_cpu_ms or summary["off"]["cpu_ms_per_command"]
    rate = result["plan"]["rate"]
    where = "at full load (part 3)" if full_load_cpu_ms else f"at {rate:g}/s"
    return (
        f"metrics and tracing on: < {100 * result['target']:g}% more worker CPU per command "
        "(issue 13)",
        f"{100 * on:+.1f}% end to end at {rate:g}/s (with an OpenTelemetry SDK making spans: "
        f"{100 * sdk:+.1f}%); the telemetry path alone: "
        f"{100 * path_share(result, 'on', base):.1f}% of a command's CPU {where} "
        f"(SDK: {100 * path_share(result, 'sdk', base):.1f}%)",
        on < result["target"],
    )


def markdown(result: dict[str, Any], full_load_cpu_ms: float | None = None) -> list[str]:
    summary, figures, path = result["summary"], result["plan"], result["path"]
    lines = [
        "## 7. What operating it costs: metrics and tracing on vs off",
        "",
        f"**End to end.** The worker in three configurations, interleaved over "
        f"{figures['rounds']} round(s) of {figures['commands']} commands each, fed open-loop at "
        f"{figures['rate']:g} commands/s (fresh process and queues, 40-command warm-up; a fixed "
        "rate gives every configuration the same arrivals, so the same batches). The figure "
        "is the worker's own CPU per command.",
        "",
        "| configuration | CPU ms / command (per round) | vs off (per round) | EMF lines | "
        "turns in a trace |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for row in summary.values():
        rounds = ", ".join(f"{v:.3f}" for v in row["per_round"])
        ratios = ", ".join(f"{100 * v:+.1f}%" for v in row["overhead_per_round"])
        lines.append(
            f"| {row['label']} | {row['cpu_ms_per_command']:.3f} ({rounds}) | "
            f"{100 * row['overhead']:+.1f}% ({ratios}) | "
            f"{', '.join(str(n) for n in row['emf_lines'])} | "
            f"{', '.join(str(n) for n in row['traced_turns'])} |"
        )
    base = full_load_cpu_ms or summary["off"]["cpu_ms_per_command"]
    where = "at full load (part 3's worker)" if full_load_cpu_ms else f"at {figures['rate']:g}/s"
    lines += [
        "",
        "**The telemetry path alone** (`bench/parts/telemetry_path.py`: a turn's hooks as the "
        "consumer "
        "and the stage call them, an EMF flush every 1,000 turns; CPU time per turn, best of 5 "
        f"runs of 5,000), and what it adds to a command's CPU {where} ({base:.2f} ms):",
        "",
        "| configuration | µs / turn | added over none | share of a command |",
        "| --- | ---: | ---: | ---: |",
        f"| none (the turn's log context only, as before issue 13) | {path['none']:.1f} | – | – |",
    ]
    for name, row in summary.items():
        lines.append(
            f"| {row['label']} | {path[name]:.1f} | {path[name] - path['none']:.1f} | "
            f"{100 * path_share(result, name, base):.1f}% |"
        )
    lines += [
        "",
        "`on` is what the container runs by default: the EMF book (a dict update per count, a "
        "list append per value; one flush a minute, values added in bulk), the X-Ray header "
        "parsed and, with no SDK, no span machinery at all; the header formatted once per turn "
        "for all its sends; `trace_id` bound to the turn's log lines. `on, SDK` makes real "
        "spans (attributes set, batched; exporting them, a collector's work, is not measured). "
        "On two shared cores the end-to-end figures move by several percent from run to run; "
        "the path's do not. Reproduce alone: `.venv/bin/python -m bench.parts.telemetry_overhead` "
        "(`--quick`: one round of 240).",
    ]
    return lines
