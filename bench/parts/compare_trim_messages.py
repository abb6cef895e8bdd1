"""The window against LangChain's ``trim_messages``: time per call against history length.

Issue 7, part 1 of ``make bench``. Both sides get the same synthetic histories
(:func:`bench.parts.window_bench.make_history`, seeded, so every run sees the same data):

- ours: ``bound_history(newest_first, limits)`` (the default limits) on the list newest-first, as
  the store's Query returns it;
- theirs: ``trim_messages(messages, strategy="last", token_counter=count_tokens_approximately,
  max_tokens=4000, start_on="human")`` on the same contents as ``HumanMessage`` /
  ``AIMessage`` objects, oldest first, as LangChain takes them.

Both inputs are built once, outside the timing, and share the same content strings.
Each cell is timed in eleven rounds taken in turn across every history and both sides,
after one untimed warm-up call, about 1 s of calls in all (at least one a round); its
figure is the lowest of its rounds' medians, so a slow spell of the shared machine falls
on every cell alike and is set aside (:func:`time_interleaved` says why).
The garbage collector stays on, as in production. Run::

    .venv/bin/python -m bench.parts.compare_trim_messages          # ~15 s, writes docs/benchmarks/
    .venv/bin/python -m bench.parts.compare_trim_messages --quick  # ~5 s, writes .bench/

Outputs: ``trim_messages.json`` (raw figures and the machine), ``trim_messages.md`` (the
table and what each side does that the other does not) and ``trim_messages.png`` (log-log
plot). Needs the benchmark extras: ``pip install 'langchain-core>=0.3' matplotlib``.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, trim_messages
from langchain_core.messages.utils import count_tokens_approximately

from bench.parts.window_bench import make_history
from worker.memory import (
    HistoryMessage,
    Window,
    WindowLimits,
    bound_history,
    estimate_tokens,
)
from worker.settings import Settings

REPO_ROOT = Path(__file__).resolve().parents[2]
FULL_OUT_DIR = REPO_ROOT / "docs" / "benchmarks"
QUICK_OUT_DIR = REPO_ROOT / ".bench" / "compare_trim_messages"
STEM = "trim_messages"

LENGTHS = (100, 1_000, 10_000, 100_000)
MAX_TOKENS = Settings.at_defaults().window_limits.max_tokens  # the window's budget
#: Messages in the page the worker reads: Limit = max_messages + 2 items, one is ``state``.
PAGE_MESSAGES = Settings.at_defaults().window_limits.max_messages + 1
MAX_CALLS = 200_000
#: Rounds each cell's timing is split into, taken in turn across every cell.
ROUNDS = 11
COMMAND = ".venv/bin/python -m bench.parts.compare_trim_messages"


@dataclass(frozen=True, slots=True)
class Timing:
    #: The cell's figure: the lowest of its rounds' medians (:func:`time_interleaved`).
    per_call_seconds: float
    #: The median of every timed call, whatever round it fell in.
    median_seconds: float
    calls: int
    total_seconds: float
    min_seconds: float
    max_seconds: float


@dataclass(frozen=True, slots=True)
class WindowCell:
    timing: Timing
    kept: int
    dropped: int
    trimmed: int
    oldest_kept_seq: int | None
    estimated_tokens: int  # our estimate of what was kept, after trimming
    closed_by: str  # why the window ends where it does (``Window.closed_by``), in words
    read: int  # messages the window took from its input (it reads lazily)


@dataclass(frozen=True, slots=True)
class TrimCell:
    timing: Timing
    kept: int
    dropped: int
    oldest_kept_seq: int | None
    counted_tokens: int  # count_tokens_approximately of what was kept
    estimated_tokens: int  # our estimate of the same contents, for a like-for-like figure


@dataclass(frozen=True, slots=True)
class Row:
    messages: int
    window: WindowCell
    trim_messages: TrimCell

    @property
    def ratio(self) -> float:
        return self.trim_messages.timing.per_call_seconds / self.window.timing.per_call_seconds


def call_samples(call: Callable[[], object], *, target_seconds: float) -> list[float]:
    """Single timed calls: at least one, and about ``target_seconds`` of them."""
    samples: list[float] = []
    spent = 0.0
    while not samples or (spent < target_seconds and len(samples) < MAX_CALLS):
        start = time.perf_counter()
        call()
        elapsed = time.perf_counter() - start
        samples.append(elapsed)
        spent += elapsed
    return samples


def timing_of(rounds: Sequence[Sequence[float]]) -> Timing:
    every = [sample for samples in rounds for sample in samples]
    return Timing(
        per_call_seconds=min(statistics.median(samples) for samples in rounds),
        median_seconds=statistics.median(every),
        calls=len(every),
        total_seconds=sum(every),
        min_seconds=min(every),
        max_seconds=max(every),
    )


def time_interleaved(
    calls: Mapping[str, Callable[[], object]], *, target_seconds: float
) -> dict[str, Timing]:
    """Each call timed in ``ROUNDS`` rounds taken in turn (a, b, c, a, b, c, …), about
    ``target_seconds`` in all and at least one call a round; a cell's figure is the lowest
    of its rounds' medians.

    On a shared virtual machine the cores have slow spells, seconds to minutes long: here
    the same window call on the same history measured about 18 µs in some rounds and about
    33 µs in others, whichever history it was. Timed in one block per history, a spell
    decided which history looked slow (the window's slowest / fastest length: 1.06× in
    issue 7's run, 1.90× in a run of this machine with the longest history the fastest).
    Rounds interleaved across every history and both sides spread the spells over all the
    cells, and, as ``timeit`` advises for its repeats, the lowest round is the one the
    machine disturbed least: the cost of the code itself. Both sides are timed the same
    way, so the ratios are like for like; the plain median of every call stays in the
    results (``median_seconds``)."""
    for call in calls.values():
        call()  # warm-up, untimed
    rounds: dict[str, list[list[float]]] = {label: [] for label in calls}
    for _ in range(ROUNDS):
        for label, call in calls.items():
            gc.collect()
            rounds[label].append(call_samples(call, target_seconds=target_seconds / ROUNDS))
    return {label: timing_of(taken) for label, taken in rounds.items()}


def closed_by(window: Window, limits: WindowLimits) -> str:
    """Why the window ends where it does, in words, as the window itself reports it."""
    return {
        "floor": "the floor alone was over the budget",
        "history": "the history ran out",
        "messages": "the next whole exchange would have taken it past the "
        f"{limits.max_messages}-message cap",
        "tokens": "the next whole exchange would have taken it past the "
        f"{limits.max_tokens:,}-token budget",
    }[window.closed_by]


def messages_read(newest_first: Sequence[HistoryMessage], limits: WindowLimits) -> int:
    """How many messages one window call pulls from its input."""
    count = 0

    def counting() -> Iterator[HistoryMessage]:
        nonlocal count
        for message in newest_first:
            count += 1
            yield message

    bound_history(counting(), limits)
    return count


def to_langchain(newest_first: Sequence[HistoryMessage]) -> list[BaseMessage]:
    """The same history oldest first, as LangChain messages sharing the content strings."""
    return [
        HumanMessage(content=m.content) if m.role == "user" else AIMessage(content=m.content)
        for m in reversed(newest_first)
    ]


def run_trim(messages: list[BaseMessage]) -> list[BaseMessage]:
    return trim_messages(
        messages,
        strategy="last",
        token_counter=count_tokens_approximately,
        max_tokens=MAX_TOKENS,
        start_on="human",
    )


def measure(
    newest_first: list[HistoryMessage],
    label: str,
    window_timing: Timing,
    trim_timing: Timing,
) -> Row:
    """One history's row (``newest_first``, seqs dense): both timings and what each kept."""
    limits = Settings.at_defaults().window_limits
    oldest_first = to_langchain(newest_first)
    seqs_oldest_first = [m.seq for m in reversed(newest_first)]
    window = bound_history(newest_first, limits)
    trimmed = run_trim(oldest_first)
    for side, timing, kept in (
        ("window       ", window_timing, window.kept),
        ("trim_messages", trim_timing, len(trimmed)),
    ):
        print(
            f"[{label}] {side}  {timing.per_call_seconds * 1e6:>12,.1f} µs/call"
            f"  ({timing.calls:,} calls)  kept {kept}",
            flush=True,
        )

    trim_oldest = seqs_oldest_first[len(oldest_first) - len(trimmed)] if trimmed else None
    row = Row(
        messages=len(newest_first),
        window=WindowCell(
            timing=window_timing,
            kept=window.kept,
            dropped=window.dropped,
            trimmed=window.trimmed,
            oldest_kept_seq=window.oldest_seq,
            estimated_tokens=window.estimated_tokens,
            closed_by=closed_by(window, limits),
            read=messages_read(newest_first, limits),
        ),
        trim_messages=TrimCell(
            timing=trim_timing,
            kept=len(trimmed),
            dropped=trim_oldest - 1 if trim_oldest is not None else newest_first[0].seq,
            oldest_kept_seq=trim_oldest,
            counted_tokens=count_tokens_approximately(trimmed),
            estimated_tokens=sum(estimate_tokens(str(m.content)) for m in trimmed),
        ),
    )
    print(f"[{label}] ratio trim/window: {row.ratio:,.0f}x", flush=True)
    return row


def measure_all(lengths: Sequence[int], *, target_seconds: float) -> tuple[list[Row], Row]:
    """Every length, and the page alone: both sides timed in rounds interleaved across all
    of them (:func:`time_interleaved`).

    The page is context for the table, not part of it: it separates the cost of reading
    the whole history from the cost of the work on what is kept."""
    histories: dict[str, list[HistoryMessage]] = {}
    for length in sorted(lengths):
        label = f"{length:>7,}"
        print(f"[{label}] building the history (both shapes)…", flush=True)
        histories[label] = make_history(length)
    histories["   page"] = make_history(LENGTHS[0])[:PAGE_MESSAGES]
    limits = Settings.at_defaults().window_limits
    calls: dict[str, Callable[[], object]] = {}
    for label, history in histories.items():
        oldest_first = to_langchain(history)
        calls[f"{label} window"] = lambda history=history: bound_history(history, limits)
        calls[f"{label} trim"] = lambda oldest_first=oldest_first: run_trim(oldest_first)
    print(f"timing both sides on every history, {ROUNDS} interleaved rounds…", flush=True)
    timings = time_interleaved(calls, target_seconds=target_seconds)
    rows = [
        measure(history, label, timings[f"{label} window"], timings[f"{label} trim"])
        for label, history in histories.items()
    ]
    return rows[:-1], rows[-1]


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict[str, Any]:
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "langchain_core": version("langchain-core"),
        "matplotlib": version("matplotlib"),
    }


def results_document(
    rows: Sequence[Row], page: Row, *, quick: bool, target_seconds: float
) -> dict[str, Any]:
    limits = Settings.at_defaults().window_limits
    return {
        "benchmark": "window (bound_history) vs langchain_core trim_messages",
        "command": COMMAND + (" --quick" if quick else ""),
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "quick": quick,
        "machine": machine(),
        "method": {
            "history": "bench.parts.window_bench.make_history(length, seed=7)",
            "window_input": "list[HistoryMessage], newest first (as the store returns it)",
            "trim_input": "list[HumanMessage | AIMessage], oldest first (as LangChain takes it)",
            "window_call": f"bound_history(newest_first, {limits!r})",
            "trim_call": (
                "trim_messages(messages, strategy='last', token_counter="
                f"count_tokens_approximately, max_tokens={MAX_TOKENS}, start_on='human')"
            ),
            "timing": (
                f"{ROUNDS} rounds interleaved across every history and both sides, "
                f"~{target_seconds} s of single perf_counter-timed calls per cell in all "
                "(at least one a round) after one untimed warm-up; per_call_seconds is the "
                "lowest of the cell's round medians, median_seconds the median of all its "
                "calls; gc on"
            ),
        },
        "results": [{**asdict(row), "ratio_trim_over_window": row.ratio} for row in rows],
        "page_only": {
            "what": (
                f"both sides on the newest {PAGE_MESSAGES} messages only (the page the "
                "worker's one Query returns, without the state item); context, not in the table"
            ),
            **asdict(page),
            "ratio_trim_over_window": page.ratio,
        },
    }


def _us(seconds: float) -> str:
    micro = seconds * 1e6
    return f"{micro:,.1f}" if micro < 100 else f"{micro:,.0f}"


def table(rows: Sequence[Row]) -> list[str]:
    lines = [
        "| messages | window µs/call | trim_messages µs/call | ratio (trim/window) "
        "| kept by window | kept by trim_messages |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        lines.append(
            f"| {row.messages:,} | {_us(row.window.timing.per_call_seconds)} "
            f"| {_us(row.trim_messages.timing.per_call_seconds)} | {row.ratio:,.0f}× "
            f"| {row.window.kept} | {row.trim_messages.kept} |"
        )
    return lines


def markdown(rows: Sequence[Row], page: Row, document: dict[str, Any]) -> str:
    box = document["machine"]
    by_length = {row.messages: row for row in rows}
    lines = [
        "<!-- generated by bench/parts/compare_trim_messages.py; edit the script, "
        "not this file -->",
        "",
        f"Time per call of the window (`bound_history`) and of LangChain's `trim_messages` "
        f"(langchain-core {box['langchain_core']}) on the same synthetic histories, "
        f"both with a {MAX_TOKENS:,}-token budget. Reproduce: `{document['command']}`.",
        "",
        *table(rows),
        "",
        *_verdict(by_length),
        "",
        *_kept_note(rows),
        "",
        *_notes(rows, box, page, document),
    ]
    return "\n".join(lines) + "\n"


def _verdict(by_length: dict[int, Row]) -> list[str]:
    lines = []
    if 10_000 in by_length:
        ratio = by_length[10_000].ratio
        met = "met" if ratio >= 100 else "NOT met"
        lines.append(
            f'- Target "window ≥ 100× faster than trim_messages at 10,000 messages": {met} '
            f"({ratio:,.0f}×)."
        )
    shortest, longest = min(by_length), max(by_length)
    if shortest != longest:
        window_growth = (
            by_length[longest].window.timing.per_call_seconds
            / by_length[shortest].window.timing.per_call_seconds
        )
        trim_growth = (
            by_length[longest].trim_messages.timing.per_call_seconds
            / by_length[shortest].trim_messages.timing.per_call_seconds
        )
        flat = "flat" if window_growth < 2 else "NOT flat"
        lines.append(
            f'- Target "window flat from {shortest:,} to {longest:,} messages": {flat} '
            f"(cost at {longest:,} / cost at {shortest:,} = {window_growth:.2f}×; "
            f"trim_messages: {trim_growth:,.0f}×)."
        )
    return lines


def _kept_note(rows: Sequence[Row]) -> list[str]:
    row = rows[-1]
    window, trim = row.window, row.trim_messages
    same = all((r.window.kept, r.trim_messages.kept) == (window.kept, trim.kept) for r in rows)
    where = (
        "The same at every length (the newest messages of these histories are identical): "
        if same
        else f"At {row.messages:,} messages: "
    )
    return [
        f"{where}the window kept {window.kept} messages, {window.estimated_tokens:,} tokens "
        f"by our estimate, {window.trimmed} of them trimmed; {window.closed_by}. "
        f"`trim_messages` kept {trim.kept} whole messages, {trim.counted_tokens:,} tokens by "
        "`count_tokens_approximately` (content, role and 3 tokens a message), "
        f"{trim.estimated_tokens:,} by our estimate.",
    ]


def _notes(
    rows: Sequence[Row], box: dict[str, Any], page: Row, document: dict[str, Any]
) -> list[str]:
    read = max(row.window.read for row in rows)
    return [
        "**Read the ratios; absolute times are context.** Measured "
        f"{document['measured_at'][:10]} on {box['cores']} cores ({box['cpu']}), "
        f"Python {box['python']}, langchain-core {box['langchain_core']}; "
        f"{document['method']['timing']}. Inputs are built once, outside the timing, and "
        "share the same strings: ours newest first (as the store's Query returns it), "
        "theirs oldest first (as LangChain takes it). The window stops reading once it is "
        f"closed (at most {read} messages read here, whatever the length), while "
        "`trim_messages` converts, copies, reverses and counts the whole list before it "
        "binary-searches the cut, so its cost grows with the history: the gap at 100,000 "
        "messages is about what is read. "
        "In the worker the window only ever sees one page; a `trim_messages` caller that "
        f"loaded only the newest page would be flat too. On that page alone (the newest "
        f"{page.messages} messages) `trim_messages` takes "
        f"{_us(page.trim_messages.timing.per_call_seconds)} µs against the window's "
        f"{_us(page.window.timing.per_call_seconds)} µs ({page.ratio:,.0f}×), keeping "
        f"{page.trim_messages.kept} messages to the window's {page.window.kept}.",
        "",
        "What `trim_messages` does not do that the window does:",
        "",
        "- **Per-message trim.** The window cuts each message above 1,000 tokens to its "
        'head and tail around a counted marker (`"\\n… N tokens omitted …\\n"`). '
        "`trim_messages` keeps or drops whole messages; `allow_partial=True` keeps one end "
        "of the boundary message only, split by its text splitter, with no marker.",
        "- **A floor that beats the budget.** The window always keeps the newest 10 messages, "
        "whatever they cost. With a newest message over 4,000 tokens (one pasted contract), "
        "`trim_messages` returns an empty history.",
        "- **Whole question/answer exchanges.** The window grows one exchange at a time and "
        'stops at the first that does not fit. `start_on="human"` gives `trim_messages` '
        "the same start edge on a history like this one, but answers before the first "
        "question are dropped rather than kept as an exchange of their own.",
        "- **The 25-message cap alongside the token budget.** `trim_messages` has one budget: "
        "tokens, or messages with `token_counter=len`, not both at once.",
        "",
        "What `trim_messages` does that the window does not:",
        "",
        "- **Counts per message type.** `count_tokens_approximately` adds the role, the name, "
        "tool calls and tool-call ids, 3 tokens of overhead a message and 85 tokens an image; "
        "or `token_counter` can be a chat model's own tokenizer. Ours is `ceil(chars / 4)` of "
        "the content only.",
        '- **Other strategies and shapes.** `strategy="first"`, `allow_partial`, '
        "`include_system` (keep the system prompt), `end_on`, any message type "
        "(system, tool, function), message-like dicts and tuples, and use as a Runnable.",
    ]


def plot(rows: Sequence[Row], box: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lengths = [row.messages for row in rows]
    window_us = [row.window.timing.per_call_seconds * 1e6 for row in rows]
    trim_us = [row.trim_messages.timing.per_call_seconds * 1e6 for row in rows]
    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=150)
    ax.loglog(lengths, trim_us, "o-", color="tab:orange", label="LangChain trim_messages")
    ax.loglog(lengths, window_us, "s-", color="tab:blue", label="window (bound_history)")
    for row, top in zip(rows, trim_us, strict=True):
        ax.annotate(
            f"{row.ratio:,.0f}×",
            (row.messages, top),
            textcoords="offset points",
            xytext=(0, 8),
            ha="center",
            fontsize=8,
            color="tab:orange",
        )
    ax.set_xlabel("history length (messages)")
    ax.set_ylabel("time per call (µs, lowest round median)")
    ax.set_title("Time per call vs history length (labels: trim/window ratio)")
    ax.set_xticks(lengths, [f"{n:,}" for n in lengths])
    low = min(window_us) / 3
    high = max(trim_us) * 4
    ax.set_ylim(10 ** math.floor(math.log10(low)), 10 ** math.ceil(math.log10(high)))
    ax.set_xlim(lengths[0] / 1.6, lengths[-1] * 1.6)
    ax.grid(True, which="major", alpha=0.4)
    ax.grid(True, which="minor", alpha=0.12)
    ax.legend(loc="upper left")
    fig.text(
        0.99,
        0.01,
        f"{box['cores']} cores, Python {box['python']}, langchain-core {box['langchain_core']}"
        " — read the ratios; absolute times are context",
        ha="right",
        va="bottom",
        fontsize=7,
        color="0.4",
    )
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Time the window against LangChain's trim_messages."
    )
    parser.add_argument(
        "--quick", action="store_true", help="~0.1 s of calls a cell; writes under .bench/"
    )
    parser.add_argument(
        "--lengths", type=int, nargs="+", default=list(LENGTHS), help="history lengths"
    )
    parser.add_argument("--out-dir", type=Path, default=None, help="where the outputs go")
    args = parser.parse_args(argv)
    quick: bool = args.quick
    target_seconds = 0.1 if quick else 1.0
    out_dir: Path = args.out_dir or (QUICK_OUT_DIR if quick else FULL_OUT_DIR)

    rows, page = measure_all(args.lengths, target_seconds=target_seconds)
    document = results_document(rows, page, quick=quick, target_seconds=target_seconds)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{STEM}.json").write_text(
        json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    (out_dir / f"{STEM}.md").write_text(markdown(rows, page, document), encoding="utf-8")
    plot(rows, document["machine"], out_dir / f"{STEM}.png")
    print()
    print("\n".join(table(rows)))
    print("\n".join(_verdict({row.messages: row for row in rows})))
    print(f"\nwrote {out_dir / STEM}.json, .md and .png", flush=True)


if __name__ == "__main__":
    main()
