"""The plots of docs/BENCHMARKS.md, from a run's figures, into ``docs/benchmarks/``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bench.reports import model_bill
from bench.reports.sections import PURPOSES, calls_by_purpose

#: The contenders of parts 3 and 4, short, for the axes.
SHORT = {
    "naive": "naive\n(boto3)",
    "worker": "worker",
    "worker-x2": "2 workers",
    "replay": "API replay\n(ceiling)",
}


def plots(doc: dict[str, Any], out_dir: Path) -> None:
    """Every plot whose part is in ``doc``."""
    import matplotlib

    matplotlib.use("Agg")
    box = doc["machine"]
    footer = (
        f"{box['cores']} cores, Python {box['python']}, moto {box['packages']['moto']}, "
        "dynalite — read the ratios; absolute figures are context"
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    trim_messages(doc["trim_messages"], footer, out_dir / "trim_messages.png")
    cost_per_turn(doc["cost"]["rows"], footer, out_dir / "cost_per_turn.png")
    throughput(doc["throughput"]["summary"], footer, out_dir / "throughput.png")
    latency(doc["latency"]["results"], footer, out_dir / "latency.png")
    if "throughput_delayed" in doc:
        both_regimes(doc, footer, out_dir / "throughput_latency.png")
    bill(doc["model_bill"], out_dir / "model_bill.png")


def _save(fig: Any, footer: str, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig.text(0.99, 0.01, footer, ha="right", va="bottom", fontsize=7, color="0.4")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path)
    plt.close(fig)


def trim_messages(trim: dict[str, Any], footer: str, path: Path) -> None:
    import matplotlib.pyplot as plt

    rows = trim["results"]
    lengths = [row["messages"] for row in rows]
    window_us = [row["window"]["timing"]["per_call_seconds"] * 1e6 for row in rows]
    trim_us = [row["trim_messages"]["timing"]["per_call_seconds"] * 1e6 for row in rows]
    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=150)
    ax.loglog(lengths, trim_us, "o-", color="tab:orange", label="LangChain trim_messages")
    ax.loglog(lengths, window_us, "s-", color="tab:blue", label="window (bound_history)")
    for row, top in zip(rows, trim_us, strict=True):
        ax.annotate(f"{row['ratio_trim_over_window']:,.0f}×", (row["messages"], top),
                    textcoords="offset points", xytext=(0, 8), ha="center", fontsize=8,
                    color="tab:orange")  # fmt: skip
    ax.set_xlabel("history length (messages)")
    ax.set_ylabel("time per call (µs, lowest round median)")
    ax.set_title("Time per call vs history length (labels: trim/window ratio)")
    ax.set_xticks(lengths, [f"{n:,}" for n in lengths])
    low, high = min(window_us) / 3, max(trim_us) * 4
    ax.set_ylim(10 ** math.floor(math.log10(low)), 10 ** math.ceil(math.log10(high)))
    ax.set_xlim(lengths[0] / 1.6, lengths[-1] * 1.6)
    ax.grid(True, which="major", alpha=0.4)
    ax.grid(True, which="minor", alpha=0.12)
    ax.legend(loc="upper left")
    _save(fig, footer, path)


def cost_per_turn(rows: list[dict[str, Any]], footer: str, path: Path) -> None:
    import matplotlib.pyplot as plt

    lengths = [r["messages"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.6), dpi=130)
    panels = (
        (left, "Items read per turn", "DynamoDB items read per turn", (
            ("load_all_trim", "items_per_turn", "o-", "tab:orange",
             "load the whole conversation + trim_messages"),
            ("worker", "items_per_turn", "s-", "tab:blue", "the worker (one Query, one page)"),
        )),
        (right, "Time per turn", "milliseconds", (
            ("load_all_trim", "median_ms", "o-", "tab:orange",
             "load all + trim_messages (history step)"),
            ("ours", "median_ms", "s-", "tab:blue", "the stage's read and plan (history step)"),
            ("worker", "latency_p50_ms", "^--", "tab:green",
             "worker turn, send → model queue (p50)"),
        )),
    )  # fmt: skip
    for axis, title, unit, series in panels:
        for side, key, style, colour, label in series:
            axis.loglog(lengths, [r[side][key] for r in rows], style, color=colour, label=label)
        axis.set_title(title)
        axis.set_ylabel(unit)
        axis.set_xlabel("conversation length (messages)")
        axis.legend(loc="upper left", fontsize=8)
        axis.set_xticks(lengths, [f"{n:,}" for n in lengths])
        axis.grid(True, which="major", alpha=0.4)
    _save(fig, footer, path)


def throughput(summary: dict[str, Any], footer: str, path: Path) -> None:
    import matplotlib.pyplot as plt

    kinds = [k for k in SHORT if k in summary]
    labels = [SHORT[k] for k in kinds]
    naive = summary["naive"]["commands_per_second"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8), dpi=130)
    colours = ["tab:gray" if k == "naive" else "tab:purple" if k == "replay" else "tab:blue"
               for k in kinds]  # fmt: skip
    rates = [summary[k]["commands_per_second"] for k in kinds]
    bars = left.bar(range(len(kinds)), rates, color=colours)
    for bar, rate in zip(bars, rates, strict=True):
        left.annotate(f"{rate:.0f}/s\n{rate / naive:.1f}× naive",
                      (bar.get_x() + bar.get_width() / 2, rate), textcoords="offset points",
                      xytext=(0, 3), ha="center", fontsize=8)  # fmt: skip
    left.set_ylabel("commands per second (one process)")
    left.set_title("Throughput against moto (SQS) + dynalite (DynamoDB)")
    left.set_ylim(0, max(rates) * 1.25)
    bottom = [0.0] * len(kinds)
    for purpose, colour in zip(PURPOSES, ("tab:blue", "tab:orange", "tab:green"), strict=True):
        values = [calls_by_purpose(summary[k]["calls_per_command"])[purpose] for k in kinds]
        right.bar(range(len(kinds)), values, bottom=bottom, color=colour, label=purpose)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    for i, total in enumerate(bottom):
        right.annotate(f"{total:.2f}", (i, total), textcoords="offset points", xytext=(0, 3),
                       ha="center", fontsize=8)  # fmt: skip
    right.axhline(1.5, color="0.5", linestyle=":", linewidth=1)
    right.set_ylabel("SQS + DynamoDB calls per command")
    right.set_title("AWS calls per command, by purpose")
    right.set_ylim(0, max(bottom) * 1.22)
    right.legend(fontsize=8, loc="upper center", ncols=3)
    for axis in (left, right):
        axis.set_xticks(range(len(kinds)), labels, fontsize=8)
    _save(fig, footer, path)


def latency(results: list[dict[str, Any]], footer: str, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, axis = plt.subplots(figsize=(7.5, 4.6), dpi=130)
    latency_cdf(axis, [(result, "", "-") for result in results], legend_size=8)
    _save(fig, footer, path)


def both_regimes(doc: dict[str, Any], footer: str, path: Path) -> None:
    import matplotlib.pyplot as plt

    from bench.reports.report_latency import trips

    near = doc["throughput"]["summary"]
    far = doc["throughput_delayed"]["summary"]
    kinds = [k for k in SHORT if k in far]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12.5, 4.8), dpi=130)
    width = 0.38
    for offset, (label, summary, colour) in enumerate(
        (("without latency", near, "tab:gray"), (f"with latency ({trips(doc)})", far, "tab:blue"))
    ):
        naive = summary["naive"]["commands_per_second"]
        xs = [i + (offset - 0.5) * width for i in range(len(kinds))]
        rates = [summary[k]["commands_per_second"] if k in summary else 0.0 for k in kinds]
        bars = left.bar(xs, rates, width=width, color=colour, label=label)
        for bar, rate in zip(bars, rates, strict=True):
            if rate:
                left.annotate(f"{rate:.0f}/s\n{rate / naive:.1f}×", (bar.get_x() + width / 2, rate),
                              textcoords="offset points", xytext=(0, 2), ha="center",
                              fontsize=7)  # fmt: skip
    left.set_xticks(range(len(kinds)), [SHORT[k] for k in kinds], fontsize=8)
    left.set_ylabel("commands per second")
    left.set_title("Throughput, without and with a network round trip")
    top = max(s["commands_per_second"] for s in (*near.values(), *far.values()))
    left.set_ylim(0, top * 1.3)
    left.legend(fontsize=7, loc="upper left")
    curves = [
        (result, f", {regime}", style)
        for key, regime, style in (("latency", "without", "-"),
                                   ("latency_delayed", "with latency", "--"))
        for result in doc.get(key, {}).get("results", [])
    ]  # fmt: skip
    latency_cdf(right, curves, legend_size=6)
    _save(fig, footer, path)


def latency_cdf(
    axis: Any, curves: list[tuple[dict[str, Any], str, str]], *, legend_size: float
) -> None:
    """Part 4's latency distributions on ``axis``: one curve per (result, label suffix,
    line style), each the fraction of commands against send → arrival."""
    for result, suffix, style in curves:
        values = result["latencies_ms"]
        fractions = [(i + 1) / len(values) for i in range(len(values))]
        axis.plot(values, fractions, style,
                  label=f"{result['kind']} at {result['offered_per_second']:g}/s{suffix} "
                        f"(p99 {result['p99_ms']:.0f} ms)")  # fmt: skip
    axis.set_xscale("log")
    axis.set_xlabel("send → arrival on the model queue (ms)")
    axis.set_ylabel("fraction of commands")
    axis.set_title("Latency at a fixed offered load")
    axis.grid(True, alpha=0.4)
    axis.legend(fontsize=legend_size, loc="lower right")


def bill(doc: dict[str, Any], path: Path) -> None:
    """Part 8: billed input per turn by contender and case."""
    import matplotlib.pyplot as plt

    cases = doc["cases"]
    fig, axis = plt.subplots(figsize=(10, 0.65 * len(cases) + 1.8), dpi=130)
    height = 0.16
    for k, name in enumerate(model_bill.NAMES):
        values = [c["contenders"][name]["billed_per_turn"] for c in cases]
        positions = [i + (k - 2) * height for i in range(len(cases))]
        colour = model_bill.COLOURS[name]
        label = model_bill.NAMES[name].replace("*", "").replace("`", "")
        axis.barh(positions, values, height=height, color=colour, label=label)
        if name == "cache-aligned":
            for pos, case, value in zip(positions, cases, values, strict=True):
                share = case["contenders"][name]["billed_share"]
                axis.annotate(f"{share:.0%}", (value, pos), textcoords="offset points",
                              xytext=(3, -3), fontsize=7, color=colour)  # fmt: skip
    axis.set_yticks(range(len(cases)), [c["case"] for c in cases], fontsize=8)
    axis.invert_yaxis()
    axis.set_xlabel("billed input units per turn (read 0.1×, written 1.25× or 2×, the rest 1×)")
    axis.set_title(f"The model's input bill per turn, {doc['turns']:,} turns per contender\n"
                   "label: cache-aligned (the default lifetimes) as a share of sliding",
                   fontsize=10)  # fmt: skip
    top = max(c["contenders"][n]["billed_per_turn"] for c in cases for n in model_bill.NAMES)
    axis.set_xlim(0, top * 1.5)  # room for the legend beside the bars
    axis.legend(fontsize=7, loc="lower right")
    axis.grid(True, axis="x", alpha=0.4)
    _save(fig, "tokens estimated (chars / 4); the stage's own plans, priced", path)
