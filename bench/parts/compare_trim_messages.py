"""Part 1 of ``make bench``: the window against LangChain's ``trim_messages``, time per call
against history length.

Both sides get the same synthetic histories (:func:`bench.load.workload.synthetic_history`,
seeded, so every run sees the same data):

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
The garbage collector stays on, as in production. What each side does that the other does
not: docs/benchmarks/trim_messages.md. Run::

    .venv/bin/python -m bench.parts.compare_trim_messages          # ~15 s: the table
    .venv/bin/python -m bench.parts.compare_trim_messages --quick  # ~5 s
    .venv/bin/python -m bench.parts.compare_trim_messages --write  # also into docs/BENCHMARKS.md
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, trim_messages
from langchain_core.messages.utils import count_tokens_approximately

from bench.load.workload import SYNTHETIC_LENGTHS as LENGTHS
from bench.load.workload import synthetic_history
from bench.servers.procstats import machine
from worker.memory import HistoryMessage, Window, WindowLimits, bound_history, estimate_tokens
from worker.settings import Settings

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

    On a shared virtual machine the cores have slow spells, seconds to minutes long, that
    can nearly double a call's time: timed in one block per history, a spell would decide
    which history looks slow. Rounds interleaved across every history and both sides spread
    the spells over all the cells, and, as ``timeit`` advises for its repeats, the lowest
    round is the one the machine disturbed least: the cost of the code itself. Both sides
    are timed the same way, so the ratios are like for like; the plain median of every call
    stays in the results (``median_seconds``)."""
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


def row_of(
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
        histories[label] = synthetic_history(length)
    histories["   page"] = synthetic_history(LENGTHS[0])[:PAGE_MESSAGES]
    limits = Settings.at_defaults().window_limits
    calls: dict[str, Callable[[], object]] = {}
    for label, history in histories.items():
        oldest_first = to_langchain(history)
        calls[f"{label} window"] = lambda history=history: bound_history(history, limits)
        calls[f"{label} trim"] = lambda oldest_first=oldest_first: run_trim(oldest_first)
    print(f"timing both sides on every history, {ROUNDS} interleaved rounds…", flush=True)
    timings = time_interleaved(calls, target_seconds=target_seconds)
    rows = [
        row_of(history, label, timings[f"{label} window"], timings[f"{label} trim"])
        for label, history in histories.items()
    ]
    return rows[:-1], rows[-1]


def results_document(
    rows: Sequence[Row], page: Row, *, quick: bool, target_seconds: float
) -> dict[str, Any]:
    limits = Settings.at_defaults().window_limits
    return {
        "benchmark": "window (bound_history) vs langchain_core trim_messages",
        "command": COMMAND + (" --quick" if quick else ""),
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "quick": quick,
        "machine": machine("langchain-core"),
        "method": {
            "history": "bench.load.workload.synthetic_history(length, seed=7)",
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


def measure(*, quick: bool) -> dict[str, Any]:
    """The part's figures (JSON-ready): every length and the page alone, both sides."""
    target_seconds = 0.1 if quick else 1.0
    rows, page = measure_all(LENGTHS, target_seconds=target_seconds)
    return results_document(rows, page, quick=quick, target_seconds=target_seconds)


def main(argv: Sequence[str] | None = None) -> int:
    from bench.reports import report, sections

    return report.part_main(argv, __doc__, "trim_messages", lambda quick: measure(quick=quick),
                            sections.trim_table)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
