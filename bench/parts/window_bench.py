"""Micro-benchmark: the window's cost per call against history length.

The window reads newest-first and stops once it is closed, so its cost should be
flat in the length of the conversation. Run: ``.venv/bin/python -m bench.parts.window_bench``
(``make bench`` compares it with LangChain's ``trim_messages`` instead).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from worker.memory import HistoryMessage, WindowLimits, bound_history
from worker.settings import Settings

LENGTHS = (100, 1_000, 10_000, 100_000)


def make_history(length: int, seed: int = 7) -> list[HistoryMessage]:
    """Newest first; a legal-matter mix: short questions, longer answers, the odd pasted clause."""
    rng = random.Random(seed)
    messages = []
    for seq in range(length, 0, -1):
        role = "user" if seq % 2 else "assistant"
        size = rng.choice((120, 400, 1_600, 2_400)) if role == "assistant" else 200
        if rng.random() < 0.03:
            size = 30_000  # a pasted contract, trimmed by the window
        messages.append(HistoryMessage(seq=seq, role=role, content="x" * size))  # type: ignore[arg-type]
    return messages


def median_call_seconds(history: list[HistoryMessage], limits: WindowLimits, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        bound_history(history, limits)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=2_000)
    args = parser.parse_args()
    limits = Settings.at_defaults().window_limits
    print(f"{'messages':>9}  {'median µs/call':>15}  {'kept':>5}  {'dropped':>8}")
    results = {}
    for length in LENGTHS:
        history = make_history(length)
        seconds = median_call_seconds(history, limits, args.repeat)
        window = bound_history(history, limits)
        results[length] = seconds
        print(f"{length:>9}  {seconds * 1e6:>15.1f}  {window.kept:>5}  {window.dropped:>8}")
    ratio = results[LENGTHS[-1]] / results[LENGTHS[0]]
    print(f"cost at {LENGTHS[-1]:,} / cost at {LENGTHS[0]:,} messages: {ratio:.2f}x")


if __name__ == "__main__":
    main()
