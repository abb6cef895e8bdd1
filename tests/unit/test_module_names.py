"""A module's name says what it holds, once: no two modules of ``worker/`` share a file name
(package ``__init__`` and ``__main__`` modules aside), so a name in a traceback, a log line's
``logger`` or a review points at one file."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

WORKER = Path(__file__).resolve().parents[2] / "worker"


def test_no_two_modules_of_the_worker_share_a_name() -> None:
    names = Counter(
        path.name
        for path in WORKER.rglob("*.py")
        if path.name not in ("__init__.py", "__main__.py")
    )
    assert sorted(name for name, count in names.items() if count > 1) == []
