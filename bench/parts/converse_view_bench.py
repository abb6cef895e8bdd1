"""The model-ready view's cost: the renderer's time per call beside the window's, and the
payload's size with and without the ``converse`` view.

- Time: the window (``bound_history``) and the renderer (``render_converse``, on the window
  just built) over the same histories, newest first: part 1's synthetic histories from
  100 to 100,000 messages, and the benchmark workload's 200 legal-matter pages (the page
  the worker's one Query returns). Each figure is the median over batches of calls.
- Size: the prompt payload of one command on each of the workload's 200 conversations,
  as the stage plans and encodes it, against the same payload without ``converse`` and
  ``window.left_out``.

Run: ``.venv/bin/python -m bench.parts.converse_view_bench [--quick] [--write]`` (part 1b of
``make bench``).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench.load.workload import (
    SYNTHETIC_LENGTHS,
    make_commands,
    mixed_conversations,
    stage_prompt,
    synthetic_history,
)
from worker.delivery.pointers import message_size
from worker.memory import HistoryMessage, Window, bound_history, render_converse
from worker.settings import Settings
from worker.turn.commands import encode_body, parse_command

LIMITS = Settings.at_defaults().window_limits
CURRENT = "Given all that, can the buyer terminate under clause 14.2 now?"
SUMMARY = "Counsel acts for the buyer under a 2024 master supply agreement. " * 20
INLINE_MAX_BYTES = Settings.at_defaults().payload_inline_max_bytes


def median_seconds(call: Callable[[], object], *, batches: int, per_batch: int) -> float:
    """Median over ``batches`` of the mean time of ``per_batch`` calls."""
    samples = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(per_batch):
            call()
        samples.append((time.perf_counter() - start) / per_batch)
    return statistics.median(samples)


def time_pair(
    pages: Sequence[Sequence[HistoryMessage]], *, batches: int, per_batch: int
) -> dict[str, float]:
    """Seconds per call of the window and of the renderer over ``pages`` (one call each)."""
    windows: list[Window] = [bound_history(page, LIMITS) for page in pages]

    def windows_all() -> None:
        for page in pages:
            bound_history(page, LIMITS)

    def renders_all() -> None:
        for window in windows:
            render_converse(window, CURRENT, SUMMARY)

    window_s = median_seconds(windows_all, batches=batches, per_batch=per_batch) / len(pages)
    render_s = median_seconds(renders_all, batches=batches, per_batch=per_batch) / len(pages)
    return {"window_seconds": window_s, "render_seconds": render_s, "ratio": render_s / window_s}


def payload_sizes() -> dict[str, Any]:
    """Bytes of one payload per workload conversation, with the view and without it."""
    built, text = mixed_conversations(200)
    conversations = [c for c, _ in built]
    by_id = {c.conversation_id: c for c in conversations}
    commands = make_commands("size", conversations, len(conversations), text)
    before, after = [], []
    for command in commands:
        _, payload = stage_prompt(parse_command(command.body), by_id[command.conversation_id].page)
        after.append(message_size(encode_body(payload)))
        del payload["converse"]
        del payload["window"]["left_out"]
        before.append(message_size(encode_body(payload)))

    def summary(sizes: list[int]) -> dict[str, float]:
        ordered = sorted(sizes)
        return {
            "median": statistics.median(ordered),
            "p95": ordered[int(0.95 * (len(ordered) - 1))],
            "max": ordered[-1],
            "over_inline_limit": sum(size > INLINE_MAX_BYTES for size in ordered),
        }

    return {
        "payloads": len(commands),
        "before": summary(before),
        "after": summary(after),
        "ratio_of_totals": sum(after) / sum(before),
    }


def run(*, quick: bool = False) -> dict[str, Any]:
    batches, per_batch = (5, 20) if quick else (31, 200)
    synthetic = []
    for length in SYNTHETIC_LENGTHS:
        row = time_pair([synthetic_history(length)], batches=batches, per_batch=per_batch)
        synthetic.append({"messages": length, **row})
    built, _ = mixed_conversations(200)
    pages = [conversation.newest for conversation, _ in built]
    workload = time_pair(pages, batches=max(3, batches // 4), per_batch=max(1, per_batch // 20))
    return {
        "synthetic": synthetic,
        "workload_pages": {"pages": len(pages), **workload},
        "sizes": payload_sizes(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    from bench.reports import report, sections

    def render(figures: dict[str, Any]) -> list[str]:
        return sections.part1b({"converse_view": figures})

    return report.part_main(argv, __doc__, "converse_view", lambda quick: run(quick=quick), render)


if __name__ == "__main__":
    sys.exit(main())
