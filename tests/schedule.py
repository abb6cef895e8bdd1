"""The order in which `make test`'s parallel workers take the test files: the longest first.

`make test` runs the suite on several pytest-xdist workers, each file on one worker
(``--dist loadfile``: a module's fixtures, LocalStack or a deploy, start once), handed out in
the order the workers collected them (``--no-loadscope-reorder``). A worker that took the
longest file last would keep the others waiting, so every worker sorts the files by the
seconds ``tests/durations.json`` records for them, longest first. A file it does not list (a
new one) weighs the mean of its directory's listed files; files of equal weight keep their
order, and each file's tests theirs. The order decides only when a file runs, never what it
proves: every worker collects the same tests in the same order, as xdist checks.

``pytest --store-durations`` writes what the run measured (each file's set-up, call and
tear-down seconds) into the record, over the files it ran, and drops the files that are gone.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from statistics import mean

import pytest

ROOT = Path(__file__).resolve().parents[1]
DURATIONS = ROOT / "tests" / "durations.json"


def file_of(nodeid: str) -> str:
    """``tests/unit/test_x.py`` for ``tests/unit/test_x.py::test_y[case]``."""
    return nodeid.split("::", 1)[0]


def weights(files: Iterable[str], recorded: Mapping[str, float]) -> dict[str, float]:
    """Each file's recorded seconds; an unrecorded one, its directory's mean (or the mean
    over every recorded file, where its directory has none)."""
    by_directory: dict[str, list[float]] = defaultdict(list)
    for path, seconds in recorded.items():
        by_directory[os.path.dirname(path)].append(seconds)
    overall = mean(recorded.values()) if recorded else 0.0
    return {
        path: recorded.get(path, mean(by_directory.get(os.path.dirname(path)) or [overall]))
        for path in files
    }


def read_durations(path: Path = DURATIONS) -> dict[str, float]:
    if not path.exists():
        return {}
    recorded: dict[str, float] = json.loads(path.read_text(encoding="utf-8"))
    return recorded


def longest_files_first(items: list[pytest.Item], recorded: Mapping[str, float]) -> None:
    """Sort ``items`` in place, by their file's weight, heaviest first (a stable sort)."""
    weight = weights({file_of(item.nodeid) for item in items}, recorded)
    items.sort(key=lambda item: -weight[file_of(item.nodeid)])


def is_xdist_worker() -> bool:
    return "PYTEST_XDIST_WORKER" in os.environ


class Durations:
    """Seconds per file of the reports this process sees: under xdist the controller sees
    every worker's."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def add(self, report: pytest.TestReport) -> None:
        self.seconds[file_of(report.nodeid)] += report.duration

    def store(self, path: Path = DURATIONS) -> None:
        recorded = {**read_durations(path), **self.seconds}
        kept = {name: round(s, 1) for name, s in recorded.items() if (ROOT / name).exists()}
        ordered = dict(sorted(kept.items(), key=lambda entry: (-entry[1], entry[0])))
        path.write_text(json.dumps(ordered, indent=1) + "\n", encoding="utf-8")
