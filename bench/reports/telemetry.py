"""Part 7's section: what operating the worker costs, metrics and tracing on vs off (what
each configuration runs: docs/benchmarks/method.md).

Renders the figures :mod:`bench.parts.telemetry_overhead` measured; imports nothing else of
``bench``.
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
        f"metrics and tracing on: < {100 * result['target']:g}% more worker CPU per command",
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
        f"{figures['rate']:g} commands/s; the worker's own CPU per command. Reproduce alone: "
        "`.venv/bin/python -m bench.parts.telemetry_overhead` (`--quick`: one round of 240).",
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
        "**The telemetry path alone** (`bench/parts/telemetry_path.py`; CPU time per turn, "
        f"best of 5 runs of 5,000), and what it adds to a command's CPU {where} "
        f"({base:.2f} ms):",
        "",
        "| configuration | µs / turn | added over none | share of a command |",
        "| --- | ---: | ---: | ---: |",
        f"| none (the turn's log context only) | {path['none']:.1f} | – | – |",
    ]
    for name, row in summary.items():
        lines.append(
            f"| {row['label']} | {path[name]:.1f} | {path[name] - path['none']:.1f} | "
            f"{100 * path_share(result, name, base):.1f}% |"
        )
    return lines
