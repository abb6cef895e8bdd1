"""What the source checks of ``worker/`` share (the declared log events, the declared
metrics): a copy of the package to break on purpose, and a way to break it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

WORKER = Path(__file__).resolve().parents[2] / "worker"


@pytest.fixture
def worker_copy(tmp_path: Path) -> Path:
    """A copy of ``worker/`` for one test to change, the real one left alone."""
    copy = tmp_path / "worker"
    shutil.copytree(WORKER, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def append_function(module: Path, body: str) -> int:
    """Append a function (its argument ``metrics``) whose one line is ``body``; returns that
    line's number. The checks read the source, never run it."""
    source = module.read_text()
    module.write_text(f"{source}\n\ndef _appended(metrics) -> None:\n    {body}\n")
    return source.count("\n") + 4
