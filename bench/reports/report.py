"""docs/BENCHMARKS.md and its plots, from the figures :mod:`bench.run_all` measured."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bench.reports import report_latency

#: How the report names the contenders of part 3.
NAMES = {
    "naive": "naive sequential consumer (boto3)",
    "worker-before": "worker before issue 14",
    "worker": "**worker**",
    "worker-uvloop": "worker on uvloop",
    "replay": "pure API replay (ceiling)",
}
#: The same, short, for the plots' axes.
SHORT = {
    "naive": "naive\n(boto3)",
    "worker-before": "worker\nbefore",
    "worker": "worker",
    "worker-uvloop": "worker\non uvloop",
    "replay": "API replay\n(ceiling)",
}
PURPOSES = ("turn", "idempotency", "compaction")


def _mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def _ms(x: float) -> str:
    return f"{x:,.1f}" if x < 100 else f"{x:,.0f}"


def calls_by_purpose(calls: dict[str, float]) -> dict[str, float]:
    out = dict.fromkeys(PURPOSES, 0.0)
    for label, n in calls.items():
        purpose = label.rsplit(" ", 1)[-1]
        out[purpose if purpose in out else "turn"] += n
    return out


def calls_by_operation(calls: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for label, n in calls.items():
        out[label.split(" ", 1)[0]] = out.get(label.split(" ", 1)[0], 0.0) + n
    return out


# -- verdicts --------------------------------------------------------------------------------


def targets(doc: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(target, measured, met) for each target of issues 7, 10 and 14."""
    out: list[tuple[str, str, bool]] = []
    rows = {r["messages"]: r for r in doc["trim_messages"]["results"]}
    if 10_000 in rows:
        ratio = rows[10_000]["ratio_trim_over_window"]
        out.append(("window ≥ 100× faster than trim_messages at 10,000 messages",
                    f"{ratio:,.0f}×", ratio >= 100))  # fmt: skip
    lengths = sorted(rows)
    if len(lengths) > 1:
        first = [rows[n]["window"]["timing"]["per_call_seconds"] for n in lengths if n >= 100]
        growth = max(first) / min(first)
        out.append((f"window flat from 100 to {lengths[-1]:,} messages",
                    f"slowest / fastest length = {growth:.2f}×", growth < 1.5))  # fmt: skip
    view = doc.get("converse_view")
    if view:
        worst = max(row["ratio"] for row in view["synthetic"])
        out.append(("Converse view: renderer under 20% of the window's time per call (issue 10)",
                    f"{100 * worst:.0f}% at worst ({100 * view['workload_pages']['ratio']:.0f}% "
                    "on the workload's pages)", worst < 0.2))  # fmt: skip
    cost = doc["cost"]["rows"]
    full = [r for r in cost if r["messages"] >= 100]
    items = {round(r["worker"]["items_per_turn"], 2) for r in full}
    out.append((
        "items read per turn constant in conversation length",
        f"{' / '.join(f'{i:g}' for i in sorted(items))} items per turn from "
        f"{full[0]['messages']:,} to {full[-1]['messages']:,} messages "
        f"(one Query each; {cost[0]['worker']['items_per_turn']:g} at {cost[0]['messages']} "
        "messages: the whole conversation)",
        len(items) == 1,
    ))  # fmt: skip
    summary = doc["throughput"]["summary"]
    worker, naive, replay = summary["worker"], summary["naive"], summary["replay"]
    ratio = worker["commands_per_second"] / naive["commands_per_second"]
    ceiling = replay["commands_per_second"] / naive["commands_per_second"]
    out.append(("≥ 5× the naive consumer's throughput, against the local servers as they are "
                "(issue 7)",
                f"{ratio:.1f}× (the replay ceiling itself is {ceiling:.1f}× the naive)",
                ratio >= 5))  # fmt: skip
    share = worker["commands_per_second"] / replay["commands_per_second"]
    out.append(("≥ 70% of the pure API replay ceiling", f"{100 * share:.0f}%", share >= 0.7))
    purposes = calls_by_purpose(worker["calls_per_command"])
    other = purposes["turn"] + purposes["compaction"]
    out.append((
        "≤ 1.5 AWS API calls per command at full batches, idempotency writes excluded",
        f"{other:.2f} ({purposes['turn']:.2f} for the turn + {purposes['compaction']:.3f} "
        f"for fold requests); idempotency writes {purposes['idempotency']:.2f} more",
        other <= 1.5,
    ))  # fmt: skip
    out += report_latency.targets(doc)
    if "telemetry" in doc:
        out.append(telemetry_target(doc))
    if "model_bill" in doc:
        from bench.reports.model_bill import targets as bill_targets

        out += bill_targets(doc["model_bill"], _part3_calls(doc))
    return out


def _part3_calls(doc: dict[str, Any]) -> dict[str, float] | None:
    """Part 3's worker (sliding mode, full batches): AWS calls per command by label."""
    worker = doc.get("throughput", {}).get("summary", {}).get("worker")
    return dict(worker["calls_per_command"]) if worker else None


def telemetry_target(doc: dict[str, Any]) -> tuple[str, str, bool]:
    from bench.reports.telemetry import target_line

    return target_line(doc["telemetry"], _full_load_cpu_ms(doc))


def _full_load_cpu_ms(doc: dict[str, Any]) -> float | None:
    worker = doc.get("throughput", {}).get("summary", {}).get("worker")
    return float(worker["cpu_ms_per_command"]) if worker else None


def verdicts(doc: dict[str, Any]) -> list[str]:
    return [
        f"{'MET ' if met else 'MISSED'}  {target}: {figure}" for target, figure, met in targets(doc)
    ]


# -- plots -----------------------------------------------------------------------------------


def plots(doc: dict[str, Any], out_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    footer = (
        f"{doc['machine']['cores']} cores, Python {doc['machine']['python']}, moto "
        f"{doc['machine']['packages']['moto']}, dynalite — read the ratios; absolute figures "
        "are context"
    )

    # Part 2: cost per turn.
    rows = doc["cost"]["rows"]
    lengths = [r["messages"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.6), dpi=130)
    left.loglog(
        lengths,
        [r["load_all_trim"]["items_per_turn"] for r in rows],
        "o-",
        color="tab:orange",
        label="load the whole conversation + trim_messages",
    )
    left.loglog(lengths, [r["worker"]["items_per_turn"] for r in rows], "s-", color="tab:blue",
                label="the worker (one Query, one page)")  # fmt: skip
    left.set_xlabel("conversation length (messages)")
    left.set_ylabel("DynamoDB items read per turn")
    left.set_title("Items read per turn")
    left.legend(loc="upper left", fontsize=8)
    right.loglog(
        lengths,
        [r["load_all_trim"]["median_ms"] for r in rows],
        "o-",
        color="tab:orange",
        label="load all + trim_messages (history step)",
    )
    right.loglog(
        lengths,
        [r["ours"]["median_ms"] for r in rows],
        "s-",
        color="tab:blue",
        label="one Query + window (history step)",
    )
    right.loglog(lengths, [r["worker"]["latency_p50_ms"] for r in rows], "^--",
                 color="tab:green", label="worker turn, send → model queue (p50)")  # fmt: skip
    right.set_xlabel("conversation length (messages)")
    right.set_ylabel("milliseconds")
    right.set_title("Time per turn")
    right.legend(loc="upper left", fontsize=8)
    for axis in (left, right):
        axis.set_xticks(lengths, [f"{n:,}" for n in lengths])
        axis.grid(True, which="major", alpha=0.4)
    fig.text(0.99, 0.01, footer, ha="right", va="bottom", fontsize=7, color="0.4")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(out_dir / "cost_per_turn.png")
    plt.close(fig)

    # Part 3: throughput and calls.
    summary = doc["throughput"]["summary"]
    kinds = [k for k in NAMES if k in summary]
    labels = [SHORT[k] for k in kinds]
    naive = summary["naive"]["commands_per_second"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8), dpi=130)
    colours = ["tab:gray" if k == "naive" else "tab:purple" if k == "replay" else "tab:blue"
               for k in kinds]  # fmt: skip
    rates = [summary[k]["commands_per_second"] for k in kinds]
    bars = left.bar(range(len(kinds)), rates, color=colours)
    for bar, rate in zip(bars, rates, strict=True):
        left.annotate(
            f"{rate:.0f}/s\n{rate / naive:.1f}× naive",
            (bar.get_x() + bar.get_width() / 2, rate),
            textcoords="offset points",
            xytext=(0, 3),
            ha="center",
            fontsize=8,
        )
    left.set_xticks(range(len(kinds)), labels, fontsize=8)
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
    right.set_xticks(range(len(kinds)), labels, fontsize=8)
    right.set_ylabel("SQS + DynamoDB calls per command")
    right.set_title("AWS calls per command, by purpose")
    right.set_ylim(0, max(bottom) * 1.22)
    right.legend(fontsize=8, loc="upper center", ncols=3)
    fig.text(0.99, 0.01, footer, ha="right", va="bottom", fontsize=7, color="0.4")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(out_dir / "throughput.png")
    plt.close(fig)

    # Part 4: latency distribution.
    fig, axis = plt.subplots(figsize=(7.5, 4.6), dpi=130)
    report_latency.latency_cdf(
        axis, [(result, "", "-") for result in doc["latency"]["results"]], legend_size=8
    )
    fig.text(0.99, 0.01, footer, ha="right", va="bottom", fontsize=7, color="0.4")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(out_dir / "latency.png")
    plt.close(fig)

    report_latency.plot(doc, out_dir, footer)


# -- markdown --------------------------------------------------------------------------------


def markdown(doc: dict[str, Any], out_dir: Path, out_doc: Path) -> str:
    rel = os.path.relpath(out_dir, out_doc.parent)
    box = doc["machine"]
    lines = [
        "<!-- generated by bench/run_all.py (make bench); edit the scripts, not this file -->",
        "",
        "# Benchmarks: the converse stage against what users would pick instead",
        "",
        f"Reproduce: `make bench` (installs the `bench` extras, then runs `{doc['command']}`; "
        f"this run took {doc['wall_seconds'] / 60:.1f} min). Measured {doc['measured_at']} on "
        f"{box['cores']} cores ({box['cpu']}), {box['platform']}, Python {box['python']}, "
        f"Node {box['node']}; "
        + ", ".join(f"{k} {v}" for k, v in box["packages"].items())
        + f". Load average (1, 5, 15 min) at the start {_load(doc, 'start')}, at the end "
        f"{_load(doc, 'end')}: anything else running on the machine shows in the absolute "
        "figures and, less, in the ratios. "
        f"Raw figures: [`{rel}/results.json`]({rel}/results.json).",
        "",
        "**Every comparison ran side by side in this one run, on this one machine; read the "
        "ratios. Absolute times are context only:** the servers are local stand-ins (moto for "
        "SQS, dynalite for DynamoDB), all processes share two cores, and moto's own CPU per "
        "call is the ceiling of parts 3 and 4 as they are. Parts 3 to 5 also run with a "
        "network round trip injected per request (part 3b), the regime the stage runs in "
        "on AWS.",
        "",
        "## Targets",
        "",
        "| target | measured | |",
        "| --- | --- | --- |",
    ]
    for target, figure, met in targets(doc):
        lines.append(f"| {target} | {figure} | {'met' if met else '**missed**'} |")
    parts = [_part1(doc, rel), _part1b(doc), _part2(doc, rel), _part3(doc, rel),
             report_latency.injected_section(doc, rel), _part4(doc, rel), _profile(doc),
             _fold_gap(doc), _telemetry(doc), _model_bill(doc, rel), _notes(doc)]  # fmt: skip
    for part in parts:
        lines += ["", *part]
    return "\n".join(lines) + "\n"


def _load(doc: dict[str, Any], when: str) -> str:
    values = doc.get("load_average", {}).get(when)
    return " / ".join(f"{v:.2f}" for v in values) if values else "?"


def _part1(doc: dict[str, Any], rel: str) -> list[str]:
    trim = doc["trim_messages"]
    lines = [
        "## 1. The window vs LangChain's `trim_messages`",
        "",
        f"Time per call of the window (`bound_history`) and of `trim_messages` (langchain-core "
        f'{trim["machine"]["langchain_core"]}, `strategy="last"`, '
        "`count_tokens_approximately`, the same 4,000-token budget) on the same histories. "
        f"Details, what each does that the other does not: [`{rel}/trim_messages.md`]"
        f"({rel}/trim_messages.md).",
        "",
        "| messages | window µs/call | trim_messages µs/call | ratio | kept (window / trim) |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in trim["results"]:
        lines.append(
            f"| {row['messages']:,} | {row['window']['timing']['per_call_seconds'] * 1e6:,.1f} "
            f"| {row['trim_messages']['timing']['per_call_seconds'] * 1e6:,.0f} "
            f"| {row['ratio_trim_over_window']:,.0f}× "
            f"| {row['window']['kept']} / {row['trim_messages']['kept']} |"
        )
    page = trim["page_only"]
    lines += [
        "",
        f"![window vs trim_messages]({rel}/trim_messages.png)",
        "",
        "The window reads newest-first and stops once it is closed; `trim_messages` converts "
        "and counts the whole list, so the gap grows with the history. On one page only (the "
        f"{page['messages']} messages the worker's Query returns) the gap is "
        f"{page['ratio_trim_over_window']:.0f}×: that is the like-for-like cost of the work "
        "itself, and in the worker the window never sees more than that page (part 2).",
    ]
    return lines


def _part1b(doc: dict[str, Any]) -> list[str]:
    view = doc.get("converse_view")
    if not view:
        return []
    lines = [
        "## 1b. The model-ready view (`converse`) beside the window",
        "",
        "Time per call of the window (`bound_history`) and of the renderer (`render_converse`, "
        "on the window just built, with a fold summary) over the same histories; the last row "
        "is the benchmark workload's 200 legal-matter pages, the page the worker's Query "
        "returns. Medians over batches of calls, in one process, interleaved. "
        "Reproduce alone: `.venv/bin/python -m bench.parts.converse_view_bench`.",
        "",
        "| history | window µs/call | renderer µs/call | renderer / window |",
        "| --- | ---: | ---: | ---: |",
    ]
    for row in view["synthetic"]:
        lines.append(
            f"| {row['messages']:,} messages | {row['window_seconds'] * 1e6:.2f} "
            f"| {row['render_seconds'] * 1e6:.2f} | {100 * row['ratio']:.0f}% |"
        )
    pages = view["workload_pages"]
    lines.append(
        f"| workload pages ({pages['pages']}) | {pages['window_seconds'] * 1e6:.2f} "
        f"| {pages['render_seconds'] * 1e6:.2f} | {100 * pages['ratio']:.0f}% |"
    )
    sizes = view["sizes"]
    before, after = sizes["before"], sizes["after"]
    lines += [
        "",
        f"Payload size, one command on each of the workload's {sizes['payloads']} "
        "conversations, as the worker encodes it, before (no `converse`, no "
        "`window.left_out`) and after:",
        "",
        "| | median bytes | p95 bytes | max bytes | over the 256 KiB inline limit |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| before | {before['median']:,.0f} | {before['p95']:,} | {before['max']:,} "
        f"| {before['over_inline_limit']} |",
        f"| after | {after['median']:,.0f} | {after['p95']:,} | {after['max']:,} "
        f"| {after['over_inline_limit']} |",
        "",
        f"All payloads together: {sizes['ratio_of_totals']:.2f}× the bytes. The window's text "
        "rides twice, in `history` (with seqs, for audit) and in `converse` (for the model "
        "API as is); the current message too. A payload over the inline limit travels "
        "through S3 as before.",
    ]
    return lines


def _part2(doc: dict[str, Any], rel: str) -> list[str]:
    rows = doc["cost"]["rows"]
    lines = [
        "## 2. Cost per turn vs conversation length",
        "",
        "Five conversations of 10 to 100,000 messages in **one** table on dynalite (a real "
        "DynamoDB implementation: its Query cost does not grow with the table). *Worker*: "
        "the real worker process, one command at a time, round-robin over the lengths; its "
        "Query responses counted in the process (items returned, items scanned, read "
        "capacity with `ReturnConsumedCapacity=TOTAL` added by the benchmark), latency from "
        "the command's send to the payload's `SentTimestamp` on the model queue. *History "
        "step*: the same step timed in the benchmark process, ours (one Query + the window) "
        "and the usual alternative (read the whole conversation with a paginated Query, as a "
        "message-history class that loads every message does, then `trim_messages`).",
        "",
        "| messages | worker: Queries / turn | items read / turn | RCU / turn | turn p50 (p95) ms "
        "| ours: history step ms | load all + trim_messages: ms | items read | RCU | time ratio |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        w, ours, them = r["worker"], r["ours"], r["load_all_trim"]
        lines.append(
            f"| {r['messages']:,} | {w['queries_per_turn']:g} | {w['items_per_turn']:g} "
            f"| {w['capacity_per_turn']:g} | {_ms(w['latency_p50_ms'])} "
            f"({_ms(w['latency_p95_ms'])}) | {_ms(ours['median_ms'])} | {_ms(them['median_ms'])} "
            f"| {them['items_per_turn']:,.0f} | {them['capacity_per_turn']:,.0f} "
            f"| {them['median_ms'] / ours['median_ms']:,.1f}× |"
        )
    first, last = rows[0], rows[-1]
    lines += [
        "",
        f"![cost per turn]({rel}/cost_per_turn.png)",
        "",
        f"- The worker reads one page per turn: {last['worker']['items_per_turn']:g} items "
        f"(the `state` item and {last['worker']['items_per_turn'] - 1:g} messages: one more than "
        "the window can hold, so it can tell a whole exchange from half of one) at "
        f"{last['messages']:,} messages, as at {rows[1]['messages']:,}; at "
        f"{first['messages']} messages the page is the whole conversation. "
        + (
            "Items scanned = items returned in every turn (no filter discards anything)."
            if all(r["worker"]["scanned_per_turn"] == r["worker"]["items_per_turn"] for r in rows)
            else "Items scanned per turn: "
            + ", ".join(f"{r['worker']['scanned_per_turn']:g}" for r in rows)
            + "."
        ),
        "- Read capacity per turn depends on the size of those items (strongly consistent "
        "reads, 4 KB a unit), not on the conversation's length; the load-everything "
        f"alternative pays {last['load_all_trim']['capacity_per_turn']:,.0f} units a turn at "
        f"{last['messages']:,} messages.",
        "- The worker's turn latency includes two SQS hops through moto, the ledger's claim "
        "and its done mark; it is flat for the same reason.",
    ]
    return lines


def _part3(doc: dict[str, Any], rel: str) -> list[str]:
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
        f"One process each, against one moto server (SQS) and dynalite (DynamoDB), on "
        f"{workload['conversations']} seeded legal-matter conversations ({workload['items']:,} "
        f"items; {min(workload['lengths'])} to {max(workload['lengths']):,} messages; "
        f"{workload['fold_due']} with a fold due, whose first turn sends one compaction "
        "request). Commands go to random conversations and are fed closed-loop in batches of "
        "ten, never more than a small window ahead of the arrivals on the model queue (moto's "
        "SQS slows with depth: it scans every held message on every receive). "
        f"{len(next(iter(tp['runs'].values())))} round(s), contenders interleaved, each in a "
        "fresh process with fresh queues after a 40-command warm-up; figures are over the "
        "measured commands only.",
        "",
        "| contender | commands/s (per round) | × naive | of replay | calls / command "
        "| idempotency | compaction | CPU ms / command | peak RSS |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for kind, name in NAMES.items():
        if kind not in summary:
            continue
        s = summary[kind]
        purposes = calls_by_purpose(s["calls_per_command"])
        rate = s["commands_per_second"]
        lines.append(
            f"| {name} | {rate:.1f} ({', '.join(f'{x:.0f}' for x in s['per_round'])}) "
            f"| {rate / naive:.2f}× | {100 * rate / replay:.0f}% "
            f"| {sum(purposes.values()):.2f} | {purposes['idempotency']:.2f} "
            f"| {purposes['compaction']:.3f} | {s['cpu_ms_per_command']:.2f} "
            f"| {_mib(s['peak_rss_bytes'])} |"
        )
    ops = sorted(
        {op for s in summary.values() for op in calls_by_operation(s["calls_per_command"])}
    )
    lines += [
        "",
        f"![throughput]({rel}/throughput.png)",
        "",
        "Calls per command by operation (each purpose counted from the request: a ledger "
        "write is keyed `cmd#…`, a fold claim `state`; failed calls included):",
        "",
        "| operation | "
        + " | ".join(NAMES[k].replace("*", "") for k in NAMES if k in summary)
        + " |",
        "| --- |" + " ---: |" * sum(1 for k in NAMES if k in summary),
    ]
    for op in ops:
        cells = []
        for kind in NAMES:
            if kind in summary:
                value = calls_by_operation(summary[kind]["calls_per_command"]).get(op, 0.0)
                cells.append(f"{value:.3f}" if value else "–")
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Where the CPU went, ms per command (moto and dynalite are the servers, the driver is "
        "the benchmark's own feeding and draining):",
        "",
        "| contender | itself | moto | dynalite | driver |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for kind, name in NAMES.items():
        if kind in summary:
            s = summary[kind]
            lines.append(
                f"| {name} | {s['cpu_ms_per_command']:.2f} | {s['moto_cpu_ms_per_command']:.2f} "
                f"| {s['dynalite_cpu_ms_per_command']:.2f} | {s['driver_cpu_ms_per_command']:.2f} |"
            )
    worker = summary["worker"]
    lines += [
        "",
        f"- The worker ran with `WORKER_CONCURRENCY={tp['concurrency']}` (two full SQS "
        f"batches) and a feed window of {worker['window']} commands; the replay with the same "
        f"{tp['concurrency']} commands in flight ({tp['concurrency'] // 10} lanes of ten); the "
        f"naive consumer holds one, with a window of {summary['naive']['window']}. "
        + _integrity(summary),
        "- The naive consumer does less per command than the worker: no idempotency ledger "
        "(a claim and a share of a batched done mark), no leases, no dead-lettering, no fold "
        "requests. Its 4 calls are one each of receive, Query, send and delete.",
        "- The replay issues the worker's own requests (same expressions, same client "
        "configuration, batches of ten) with precomputed payloads and no stage logic: no "
        "validation, no window, no encoding, no consumer bookkeeping, no logs. It is the "
        "ceiling the servers allow at this concurrency, not a bound on every design.",
    ]
    return lines


def _part4(doc: dict[str, Any], rel: str) -> list[str]:
    lat = doc["latency"]
    lines = [
        "## 4. Latency at a fixed offered load",
        "",
        "Open-loop load: one `SendMessage` every 1/rate seconds on a fixed schedule, whatever "
        "the consumer does. Latency = the payload's `SentTimestamp` on the model queue "
        "(SQS's clock, milliseconds) minus the time the command's send began, so the "
        "benchmark's polling adds nothing (its drain polls lazily, every 100 ms when the "
        "queue is quiet, to leave moto to the consumer). Loads: "
        f"{lat['rates']['low']:g}/s (half the naive consumer's measured throughput, run by "
        f"both) and {lat['rates']['high']:g}/s (40% of the worker's, near the naive "
        "consumer's limit). Calls and CPU per command are the consumer's own over the "
        "measured commands.",
        "",
        "| consumer | offered /s | achieved /s | commands | p50 ms | p95 ms | p99 ms | max ms "
        "| calls / command | CPU ms / command |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in lat["results"]:
        lines.append(
            f"| {NAMES[r['kind']]} | {r['offered_per_second']:g} "
            f"| {r['achieved_per_second']:.1f} | {r['commands']:,} | {_ms(r['p50_ms'])} "
            f"| {_ms(r['p95_ms'])} | {_ms(r['p99_ms'])} | {_ms(r['max_ms'])} "
            f"| {sum(r['calls_per_command'].values()):.2f} | {r['cpu_ms_per_command']:.2f} |"
        )
    lines += [
        "",
        f"![latency]({rel}/latency.png)",
        "",
        "The worker's path is longer than the naive loop's by design: a ledger claim before "
        "the Query and, on the way out, a send that waits for the prompts of turns still on "
        "their way to it (100 ms at most; a lone prompt does not wait) so that ten sends "
        "leave as one call under load. Below saturation the batches are small: a long poll "
        "returns as soon as one message is there, so each command costs about one receive, "
        "one send and one delete call, as in the naive loop, plus the ledger's claim and "
        "done mark. The replay's lanes wait for each whole batch's calls in turn, which "
        "costs it latency the worker's independent turns do not pay.",
        *report_latency.latency_section(doc, NAMES),
    ]
    return lines


def _profile(doc: dict[str, Any]) -> list[str]:
    lines = ["## 5. Profile and optimisations", ""]
    profile = doc.get("profile")
    if profile and profile.get("samples"):
        lines += [
            f"py-spy sampled the worker process at full load ({profile['samples']:,} samples "
            "of work; time parked in the event loop's `select` left out), first against the "
            "servers as they are. Own time by package:",
            "",
            "| package | share |",
            "| --- | ---: |",
            *(f"| {k} | {100 * v:.1f}% |" for k, v in profile["by_package"].items()),
            "",
            "The stage's own functions, inclusive of what they call (botocore included where "
            "they call it):",
            "",
            "| function | share |",
            "| --- | ---: |",
            *(f"| `{k}` | {100 * v:.1f}% |" for k, v in profile["worker_functions"].items()),
            "",
        ]
    elif profile and profile.get("error"):
        lines += [f"py-spy could not sample the worker: {profile['error']}", ""]
    lines += report_latency.profile_section(doc)
    summary = doc["throughput"]["summary"]
    after, uv = summary["worker"], summary.get("worker-uvloop")
    lines += [
        *report_latency.before_after(doc),
        "- **Tried, not kept:** uvloop"
        + (
            f" (here {uv['commands_per_second']:.1f} commands/s and "
            f"{uv['cpu_ms_per_command']:.2f} CPU ms/command against asyncio's "
            f"{after['commands_per_second']:.1f} and {after['cpu_ms_per_command']:.2f})"
            if uv
            else ""
        )
        + ": the loop is not where the time goes (botocore's serialising, signing and "
        "parsing is), so the worker stays on asyncio and needs no new dependency.",
        "- **Left where it is (by design):** one conditional claim and one history Query per "
        "command; neither can be batched (the claim must be answered before the send, and "
        "DynamoDB has no batch Query). Per turn the payload is UTF-8 encoded three times to "
        "size it (offload check, batch byte cap, log) and serialised once by `json.dumps` "
        "(`encode_body`), then again by botocore for the request. Against moto every "
        "request opens a new TCP connection (werkzeug closes each one), client and server "
        "CPU that real SQS, with keep-alive, does not cost.",
    ]
    return lines


def _integrity(summary: dict[str, Any]) -> str:
    duplicates = {k: s["duplicates"] for k, s in summary.items() if s["duplicates"]}
    redelivered = sum(s.get("redelivered_to_drain", 0) for s in summary.values())
    exits = all(c == 0 for s in summary.values() for c in s["exit_codes"])
    return (
        "Every command reached the model queue; "
        + (
            "no command's payload was sent twice"
            if not duplicates
            else "payloads sent twice: "
            + ", ".join(f"{NAMES[k].replace('*', '')} {n}" for k, n in duplicates.items())
            + " (the naive consumer and the replay have no idempotency ledger)"
        )
        + (
            f"; moto handed the benchmark's drain the same message twice {redelivered} "
            "time(s) (not counted as arrivals)"
            if redelivered
            else ""
        )
        + f"; every process exited {'0' if exits else 'with an error (see the logs)'}."
    )


def _telemetry(doc: dict[str, Any]) -> list[str]:
    """Part 7 (issue 13): metrics and tracing on vs off."""
    if "telemetry" not in doc:
        return []
    from bench.reports.telemetry import markdown as telemetry_markdown

    return telemetry_markdown(doc["telemetry"], _full_load_cpu_ms(doc))


def _model_bill(doc: dict[str, Any], rel: str) -> list[str]:
    """Part 8 (issue 19): the model's input bill under the prompt cache, both modes."""
    if "model_bill" not in doc:
        return []
    from bench.reports.model_bill import section

    lines = [*section(doc["model_bill"], rel, part3=_part3_calls(doc)), ""]
    if "cache_ttl" in doc:  # issue 24's contenders, within part 8
        from bench.reports import cache_ttl

        lines += [cache_ttl.doc_section(doc["cache_ttl"], doc["model_bill"]), ""]
    return lines


def _fold_gap(doc: dict[str, Any]) -> list[str]:
    """Part 6 (issue 12): unfolded messages outside the window, per request rule."""
    fold = doc.get("fold_gap")
    if not fold:
        return []
    from bench.reports.fold_gap import REPORTED_LAGS, table

    runs = fold["profiles"]

    def gap(profile: str, lag: int, rule: str = "pipelined") -> int:
        return int(runs[profile][str(lag)][rule]["gap_message_turns"])

    def requests(profile: str, rule: str) -> str:
        return f"{runs[profile]['3'][rule]['requests']}"

    targets = [
        (
            "no unfolded message outside the window, tiny conversations, lag ≤ 3",
            max(gap("tiny", lag) for lag in range(4)),
        ),
        (
            "no unfolded message outside the window, paste-heavy conversations, lag ≤ 3",
            max(gap("paste-heavy", lag) for lag in range(4)),
        ),
    ]
    return [
        "## 6. The fold gap: unfolded messages held by neither window nor fold",
        "",
        f"Reproduce: `{fold['command']}` (deterministic, about a second: no servers). "
        f"{fold['turns']} turns per conversation, seed {fold['seed']}. A conversation grows "
        "one exchange a turn: the stage reads the history and sends the prompt (and a "
        "compaction request if one is due); a writer appends counsel's question and the "
        "answer; a compactor serves each request *lag* turns late (lag 0: before the next "
        "turn), folding from the state's current mark up to the request's `through`, only "
        "forward. The gap of a turn is the messages after `folded_through` that are older "
        "than the window. Message sizes in characters: *tiny* questions 10-80 and answers "
        "20-240; *medium* 100-600 and 300-2,000; *mixed* each message tiny, medium or long "
        "(45 / 45 / 10 %, long 3,000-12,000); *paste-heavy* 30 % of messages 4,000-20,000 "
        "(the window trims each to about 805 tokens), the rest medium.",
        "",
        "The model is the worker's own window, trigger and gap functions, fed one page of "
        "the history as the stage reads it. `make test` runs the same conversations through "
        "the real `worker run` process at lags 0-3 and requires it to agree turn for turn "
        "(`tests/integration/test_fold_gap.py`); the single-request rule, kept in "
        "`bench/parts/fold_gap.py` only for this comparison, agreed turn for turn with the worker "
        "as it was before issue 12 (commit `4e08365`) run the same way.",
        "",
        "Gap in message-turns (unfolded messages outside the window, summed over the turns; "
        "in brackets the turns with a gap), **pipelined** (the worker's rule) / single "
        "request at a time (the rule before issue 12):",
        "",
        *table(fold, REPORTED_LAGS),
        "",
        "| target (issue 12) | measured (pipelined, worst lag) | |",
        "| --- | --- | --- |",
        *(
            f"| {target} | {worst} message-turns | {'met' if worst == 0 else '**missed**'} |"
            for target, worst in targets
        ),
        "",
        "- **Pipelining keeps the unfolded tail near one lag.** With one request at a time, "
        "the next left only once the fold had caught up, so the tail grew to about twice "
        f"the lag: paste-heavy at lag 3, {gap('paste-heavy', 3, 'single')} message-turns "
        f"then, {gap('paste-heavy', 3)} now; at lag 5, {gap('paste-heavy', 5, 'single')} "
        f"then, {gap('paste-heavy', 5)} now. The price is more fold requests: at lag 3, "
        + ", ".join(
            f"{p} {requests(p, 'pipelined')} instead of {requests(p, 'single')}" for p in runs
        )
        + f" over {fold['turns']} turns.",
        "- **What is left, and why.** A request for a stretch leaves only once the stretch "
        "after the pending one reaches the trigger by itself (contract), and its fold "
        "lands lag + 1 turns later: at lag 3 the unfolded tail is the 8 messages in flight "
        "plus the stretch still under the trigger. Pastes shrink the window to its floor "
        "(10 messages), so two exchanges under the trigger followed by pasted ones leave a "
        "message or two outside it for a turn, each logged as "
        "`clerk.converse_history_fold_gap`. Where the tail seldom outruns one trigger the "
        "two rules are about even and either can come out a little ahead (medium at lag "
        f"5: {gap('medium', 5)} against {gap('medium', 5, 'single')}): a pipelined request "
        "can leave a short stretch behind it that the single rule, asking from the fold's "
        "mark once it has caught up, takes in.",
        "",
    ]


def _notes(doc: dict[str, Any]) -> list[str]:
    summary = doc["throughput"]["summary"]
    worker, naive, replay = summary["worker"], summary["naive"], summary["replay"]
    rate = worker["commands_per_second"]
    parts = ("cpu_ms_per_command", "moto_cpu_ms_per_command", "dynalite_cpu_ms_per_command",
             "driver_cpu_ms_per_command")  # fmt: skip
    total = sum(worker[p] for p in parts)
    cores = doc["machine"]["cores"] or 2
    retries = {
        NAMES[k].replace("*", ""): s["requests_per_command"] - sum(s["calls_per_command"].values())
        for k, s in summary.items()
    }
    retried = {k: v for k, v in retries.items() if v > 0.0005}
    target = 5 * naive["commands_per_second"]
    budget = 1000 * cores / target
    floor = sum(replay[p] for p in parts[1:])
    return [
        "## What these figures show, and what they do not",
        "",
        *report_latency.notes(doc),
        "- **Without the latency, the servers are the ceiling, and they share the two "
        f"cores.** In the worker's "
        f"runs one command cost {total:.1f} ms of CPU in all: {worker['cpu_ms_per_command']:.1f} "
        f"in the worker, {worker['moto_cpu_ms_per_command']:.1f} in moto, "
        f"{worker['dynalite_cpu_ms_per_command']:.1f} in dynalite and "
        f"{worker['driver_cpu_ms_per_command']:.1f} in the benchmark's feed and drain. At "
        f"{rate:.0f} commands/s that is {total * rate / 1000:.1f} of {cores} cores busy, moto "
        f"alone {worker['moto_cpu_ms_per_command'] * rate / 1000:.2f} of a core (one Python "
        "process, one GIL, a new thread and TCP connection per request; more commands in "
        "flight made every contender slower, not faster, in trials during development, "
        "because moto's receive cost grows with the messages a queue holds). The pure API "
        f"replay, the worker's calls without any logic, reached "
        f"{replay['commands_per_second']:.0f} commands/s, "
        f"{replay['commands_per_second'] / naive['commands_per_second']:.1f}× the naive "
        f"consumer. 5× the naive consumer here is {target:.0f} commands/s, which would need "
        f"at most {budget:.1f} ms of CPU per command across every process, fully busy; the "
        f"servers and the feed alone took {floor:.1f} ms per command even for the replay"
        + (
            ". No consumer can be 5× the naive one against these servers on this machine."
            if floor >= budget
            else "."
        ),
        "- **Without the latency, the naive consumer is bounded by waiting, the worker by "
        "the servers.** The naive "
        "loop does four round trips in sequence per command (and costs moto the most per "
        "command: one call per message), so it leaves the machine partly idle; the worker "
        "overlaps its turns and batches its SQS calls until moto is the limit. "
        "Against real SQS and DynamoDB, whose round trips take milliseconds of network and "
        "none of this machine's CPU, the naive loop gets slower and the worker's bound becomes "
        f"its own {worker['cpu_ms_per_command']:.1f} CPU ms per command (about "
        f"{1000 / worker['cpu_ms_per_command']:.0f} commands/s a core, before network waits "
        "that its concurrency hides).",
        "- **Calls are counted, not estimated**: every request each process made, from its "
        "own botocore client events, between two snapshots around the measured commands. "
        + (
            "HTTP requests beyond API calls (retries): "
            + ", ".join(f"{k} {v:.3f}/command" for k, v in retried.items())
            + "."
            if retried
            else "No request was retried (HTTP requests = API calls)."
        ),
        "- **moto's queue depth matters**: its receive scans every message the queue holds, "
        "so the feed keeps queues shallow; a deeper feed window lowers every contender's "
        "throughput. dynalite has no TTL: the ledger's expiry attribute is written but never "
        "acted on, which changes nothing measured here.",
        "- **Not measured here**: S3-offloaded payloads (`bench/parts/payload_bench.py`), "
        "FIFO model "
        "queues, the cost of a fold (another stage), throttling and retries under faults.",
    ]
