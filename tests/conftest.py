"""Shared test helpers."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import hypothesis
import pytest
import structlog
from structlog.testing import LogCapture

from tests import schedule
from worker.settings import Settings

# Property tests hold on any machine: Hypothesis's two wall-clock checks, a deadline per
# example and the "data generation is too slow" health check, fail a loaded slow machine
# on a test a fast one passes. What the properties state does not depend on speed.
# The same on every machine: from Hypothesis's default profile, not from whichever profile is
# loaded now (Hypothesis loads its own "ci" one where CI is set).
hypothesis.settings.register_profile(
    "any-machine",
    hypothesis.settings.get_profile("default"),
    deadline=None,
    suppress_health_check=[hypothesis.HealthCheck.too_slow],
)
# CI draws the same examples, as many, on every run (derandomized; so no example database,
# which the Pythons' runs side by side would otherwise share): a CI run fails on the code,
# never on a draw. A failure prints the blob that replays it.
hypothesis.settings.register_profile(
    "any-machine-ci",
    hypothesis.settings.get_profile("any-machine"),
    derandomize=True,
    print_blob=True,
)
hypothesis.settings.load_profile(
    "any-machine-ci" if os.environ.get("CI") == "true" else "any-machine"
)


def settings(**overrides: Any) -> Settings:
    """Settings with placeholder resources: the defaults, changed only where a test says."""
    return Settings(
        converse_queue_url="http://127.0.0.1:1/q/converse",
        model_queue_url="http://127.0.0.1:1/q/model",
        compaction_queue_url="http://127.0.0.1:1/q/compaction",
        history_table="history",
        ledger_table="ledger",
        **overrides,
    )


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--reliability-figures",
        action="store_true",
        help="print what the fault tests measured (make bench runs them with it)",
    )
    parser.addoption(
        "--store-durations",
        action="store_true",
        help="write each file's seconds in this run into tests/durations.json, the order "
        "in which make test's parallel workers take the files (tests/schedule.py)",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if schedule.is_xdist_worker():
        schedule.longest_files_first(items, schedule.read_durations())


_DURATIONS = schedule.Durations()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _DURATIONS.add(report)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if session.config.getoption("--store-durations") and not schedule.is_xdist_worker():
        _DURATIONS.store()


@contextmanager
def captured_logs() -> Iterator[list[dict[str, Any]]]:
    """Like ``structlog.testing.capture_logs``, but with the contextvars merged in, as the
    worker's real configuration does, so bound ids can be asserted."""
    capture = LogCapture()
    old = structlog.get_config()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            capture,
        ],
        cache_logger_on_first_use=False,
    )
    try:
        yield capture.entries
    finally:
        structlog.configure(**old)
