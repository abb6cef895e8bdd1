"""The sections of docs/BENCHMARKS.md for parts 1 to 5, from a run's figures (how each part
measures is written once, in docs/benchmarks/method.md)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

#: How the report names the contenders of parts 3 and 4, in their order.
NAMES = {
    "naive": "naive sequential consumer (boto3)",
    "worker": "**worker**",
    "worker-x2": "two worker processes, one stack",
    "replay": "pure API replay (ceiling)",
}
PURPOSES = ("turn", "idempotency", "compaction")
#: A target's verdict in a Targets table; None: nothing measured to judge it on.
VERDICTS = {True: "met", False: "**missed**", None: "n/a"}


def table(heads: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """A Markdown table, the first column left-aligned and the others right."""
    return [
        "| " + " | ".join(heads) + " |",
        "| --- |" + " ---: |" * (len(heads) - 1),
        *("| " + " | ".join(str(cell) for cell in row) + " |" for row in rows),
    ]


def ms(x: float) -> str:
    return f"{x:,.1f}" if x < 100 else f"{x:,.0f}"


def total_calls(summary: dict[str, Any]) -> float:
    return float(sum(summary["calls_per_command"].values()))


def calls_by_purpose(calls: dict[str, float]) -> dict[str, float]:
    out = dict.fromkeys(PURPOSES, 0.0)
    for label, n in calls.items():
        purpose = label.rsplit(" ", 1)[-1]
        out[purpose if purpose in out else "turn"] += n
    return out


def calls_by_operation(calls: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for label, n in calls.items():
        operation = label.split(" ", 1)[0]
        out[operation] = out.get(operation, 0.0) + n
    return out


def operations_table(columns: list[tuple[str, dict[str, Any]]], *, total: bool) -> list[str]:
    """Calls per command by operation, one column per (name, summary)."""
    by_op = [calls_by_operation(s["calls_per_command"]) for _, s in columns]
    rows = [
        [op, *(f"{ops[op]:.3f}" if ops.get(op) else "–" for ops in by_op)]
        for op in sorted({op for ops in by_op for op in ops})
    ]
    if total:
        rows.append(["**in all**", *(f"**{total_calls(s):.2f}**" for _, s in columns)])
    return table(["operation", *(name for name, _ in columns)], rows)


def cpu_table(summary: dict[str, Any], *, proxy: bool) -> list[str]:
    """Where the CPU went, ms per command, one row per contender."""
    keys = ["cpu", "moto_cpu", "dynalite_cpu", "driver_cpu", *(["proxy_cpu"] if proxy else [])]
    heads = ["itself", "moto", "dynalite", "driver", *(["proxy"] if proxy else [])]
    rows = [
        [name, *(f"{summary[kind][f'{k}_ms_per_command']:.2f}" for k in keys)]
        for kind, name in NAMES.items()
        if kind in summary
    ]
    return table(["contender", *heads], rows)


def trim_table(trim: dict[str, Any]) -> list[str]:
    heads = ["messages", "window µs/call", "trim_messages µs/call", "ratio", "kept (window / trim)"]
    return table(heads, (
        [f"{row['messages']:,}", f"{row['window']['timing']['per_call_seconds'] * 1e6:,.1f}",
         f"{row['trim_messages']['timing']['per_call_seconds'] * 1e6:,.0f}",
         f"{row['ratio_trim_over_window']:,.0f}×",
         f"{row['window']['kept']} / {row['trim_messages']['kept']}"]
        for row in trim["results"]
    ))  # fmt: skip


def part1(doc: dict[str, Any], rel: str) -> list[str]:
    trim = doc["trim_messages"]
    page, last = trim["page_only"], trim["results"][-1]
    w, t = last["window"], last["trim_messages"]
    version = doc["machine"]["packages"]["langchain-core"]
    return [
        "## 1. The window vs LangChain's `trim_messages`",
        "",
        f"Time per call of the window (`bound_history`) and of `trim_messages` (langchain-core "
        f'{version}, `strategy="last"`, `count_tokens_approximately`, the same 4,000-token '
        f"budget) on the same histories. What each does that the other does not: "
        f"[`{rel}/trim_messages.md`]({rel}/trim_messages.md).",
        "",
        *trim_table(trim),
        "",
        f"![window vs trim_messages]({rel}/trim_messages.png)",
        "",
        f"At {last['messages']:,} messages the window kept {w['kept']} messages, "
        f"{w['estimated_tokens']:,} tokens by our estimate ({w['trimmed']} trimmed; "
        f"{w['closed_by']}); `trim_messages` kept {t['kept']} whole messages, "
        f"{t['counted_tokens']:,} tokens by `count_tokens_approximately` "
        f"({t['estimated_tokens']:,} by our estimate). On one page only (the "
        f"{page['messages']} messages the worker's Query returns) `trim_messages` takes "
        f"{page['trim_messages']['timing']['per_call_seconds'] * 1e6:,.1f} µs against the "
        f"window's {page['window']['timing']['per_call_seconds'] * 1e6:,.1f} µs "
        f"({page['ratio_trim_over_window']:.0f}×): the like-for-like cost of the work itself; "
        "in the worker the window never sees more than that page (part 2).",
    ]


def part1b(doc: dict[str, Any]) -> list[str]:
    view = doc["converse_view"]
    pages, sizes = view["workload_pages"], view["sizes"]
    return [
        "## 1b. The model-ready view (`converse`) beside the window",
        "",
        "Time per call of the window (`bound_history`) and of the renderer (`render_converse`) "
        "over the same histories; the last row is the workload's pages. Reproduce alone: "
        "`.venv/bin/python -m bench.parts.converse_view_bench`.",
        "",
        *table(["history", "window µs/call", "renderer µs/call", "renderer / window"], [
            *([f"{row['messages']:,} messages", f"{row['window_seconds'] * 1e6:.2f}",
               f"{row['render_seconds'] * 1e6:.2f}", f"{100 * row['ratio']:.0f}%"]
              for row in view["synthetic"]),
            [f"workload pages ({pages['pages']})", f"{pages['window_seconds'] * 1e6:.2f}",
             f"{pages['render_seconds'] * 1e6:.2f}", f"{100 * pages['ratio']:.0f}%"],
        ]),
        "",
        f"Payload size, one command on each of the workload's {sizes['payloads']} "
        "conversations, without the view (no `converse`, no `window.left_out`) and with it:",
        "",
        *table(["", "median bytes", "p95 bytes", "max bytes", "over the 256 KiB inline limit"], (
            [name, f"{s['median']:,.0f}", f"{s['p95']:,}", f"{s['max']:,}", s["over_inline_limit"]]
            for name, s in (("without", sizes["before"]), ("with", sizes["after"]))
        )),
        "",
        f"All payloads together: {sizes['ratio_of_totals']:.2f}× the bytes.",
    ]  # fmt: skip


def part2(doc: dict[str, Any], rel: str) -> list[str]:
    rows = doc["cost"]["rows"]
    lines = [
        "## 2. Cost per turn vs conversation length",
        "",
        "Five conversations of 10 to 100,000 messages in one table on dynalite. *Worker*: the "
        "real worker process, one command at a time; *history step*: ours (the stage's read "
        "and plan) and the usual alternative (read the whole conversation, then "
        "`trim_messages`), timed in the benchmark's process.",
        "",
    ]
    heads = ["messages", "worker: Queries / turn", "items read / turn", "RCU / turn",
             "turn p50 (p95) ms", "ours: history step ms", "load all + trim_messages: ms",
             "items read", "RCU", "time ratio"]  # fmt: skip
    lines += table(heads, (
        [f"{r['messages']:,}", f"{w['queries_per_turn']:g}", f"{w['items_per_turn']:g}",
         f"{w['capacity_per_turn']:g}",
         f"{ms(w['latency_p50_ms'])} ({ms(w['latency_p95_ms'])})", ms(ours["median_ms"]),
         ms(them["median_ms"]), f"{them['items_per_turn']:,.0f}",
         f"{them['capacity_per_turn']:,.0f}", f"{them['median_ms'] / ours['median_ms']:,.1f}×"]
        for r in rows
        for w, ours, them in [(r["worker"], r["ours"], r["load_all_trim"])]
    ))  # fmt: skip
    first, last = rows[0], rows[-1]
    scanned = all(r["worker"]["scanned_per_turn"] == r["worker"]["items_per_turn"] for r in rows)
    lines += [
        "",
        f"![cost per turn]({rel}/cost_per_turn.png)",
        "",
        f"- The worker reads one page per turn: {last['worker']['items_per_turn']:g} items (the "
        f"`state` item and {last['worker']['items_per_turn'] - 1:g} messages) at "
        f"{last['messages']:,} messages, as at {rows[1]['messages']:,}; at {first['messages']} "
        "messages the page is the whole conversation. "
        + (
            "Items scanned = items returned in every turn."
            if scanned
            else "Items scanned per turn: "
            + ", ".join(f"{r['worker']['scanned_per_turn']:g}" for r in rows)
            + "."
        ),
        "- The load-everything alternative pays "
        f"{last['load_all_trim']['capacity_per_turn']:,.0f} read units a turn at "
        f"{last['messages']:,} messages.",
    ]
    return lines


def part3(doc: dict[str, Any], rel: str) -> list[str]:
    tp = doc["throughput"]
    summary = tp["summary"]
    naive = summary["naive"]["commands_per_second"]
    replay = summary["replay"]["commands_per_second"]
    workload = doc["workload"]
    lines = [
        "## 3. Throughput and AWS calls per command",
        "",
        "### 3a. Against the local servers as they are",
        "",
        f"One process each, on {workload['conversations']} seeded legal-matter conversations "
        f"({workload['items']:,} items; {min(workload['lengths'])} to "
        f"{max(workload['lengths']):,} messages; {workload['fold_due']} with a fold due). "
        f"{len(next(iter(tp['runs'].values())))} round(s), contenders interleaved; figures "
        "are over the measured commands only.",
        "",
    ]
    heads = ["contender", "commands/s (per round)", "× naive", "of replay", "calls / command",
             "idempotency", "compaction", "CPU ms / command", "peak RSS"]  # fmt: skip
    rows = []
    for kind, name in NAMES.items():
        if kind in summary:
            s = summary[kind]
            purposes = calls_by_purpose(s["calls_per_command"])
            rate = s["commands_per_second"]
            rows.append([
                name, f"{rate:.1f} ({', '.join(f'{x:.0f}' for x in s['per_round'])})",
                f"{rate / naive:.2f}×", f"{100 * rate / replay:.0f}%",
                f"{sum(purposes.values()):.2f}", f"{purposes['idempotency']:.2f}",
                f"{purposes['compaction']:.3f}", f"{s['cpu_ms_per_command']:.2f}",
                f"{s['peak_rss_bytes'] / 2**20:,.0f} MiB",
            ])  # fmt: skip
    lines += table(heads, rows)
    worker = summary["worker"]
    columns = [(NAMES[k].replace("*", ""), summary[k]) for k in NAMES if k in summary]
    return [
        *lines,
        "",
        f"![throughput]({rel}/throughput.png)",
        "",
        "Calls per command by operation (failed calls included):",
        "",
        *operations_table(columns, total=False),
        "",
        "Where the CPU went, ms per command (the driver is the benchmark's own feed and drain):",
        "",
        *cpu_table(summary, proxy=False),
        "",
        f"- The worker ran with `WORKER_CONCURRENCY={tp['concurrency']}` and a feed window of "
        f"{worker['window']} commands; the replay with the same {tp['concurrency']} commands in "
        f"flight ({tp['concurrency'] // 10} lanes of ten); the naive consumer holds one, with a "
        f"window of {summary['naive']['window']}. " + integrity(summary),
    ]


def integrity(summary: dict[str, Any]) -> str:
    duplicates = {k: s["duplicates"] for k, s in summary.items() if s["duplicates"]}
    redelivered = sum(s.get("redelivered_to_drain", 0) for s in summary.values())
    exits = all(c == 0 for s in summary.values() for c in s["exit_codes"])
    twice = (
        "payloads sent twice: "
        + ", ".join(f"{NAMES[k].replace('*', '')} {n}" for k, n in duplicates.items())
        + " (the naive consumer and the replay have no idempotency ledger)"
        if duplicates
        else "no command's payload was sent twice"
    )
    again = (
        f"; moto handed the benchmark's drain the same message twice {redelivered} time(s) "
        "(not counted as arrivals)"
        if redelivered
        else ""
    )
    return (
        f"Every command reached the model queue; {twice}{again}; every process exited "
        f"{'0' if exits else 'with an error (see the logs)'}."
    )


def profile_tables(profile: dict[str, Any] | None, regime: str) -> list[str]:
    if not profile or not profile.get("samples"):
        error = (profile or {}).get("error")
        return [f"py-spy could not sample the worker {regime}: {error}", ""] if error else []
    return [
        f"{regime.capitalize()} ({profile['samples']:,} samples of work), own time by package, "
        "and the stage's functions inclusive of what they call:",
        "",
        *table(
            ["package", "share"], ([k, f"{100 * v:.1f}%"] for k, v in profile["by_package"].items())
        ),
        "",
        *table(
            ["function", "share"],
            ([f"`{k}`", f"{100 * v:.1f}%"] for k, v in profile["worker_functions"].items()),
        ),
        "",
    ]


def part5(doc: dict[str, Any]) -> list[str]:
    lines = [
        "## 5. Profile",
        "",
        "py-spy sampled the worker process at full load (time parked in the event loop's "
        "`select` left out).",
        "",
        *profile_tables(doc.get("profile"), "against the servers as they are"),
        *profile_tables(doc.get("profile_delayed"), "with the injected latency"),
    ]
    return lines[:-1] if lines[-1] == "" else lines
