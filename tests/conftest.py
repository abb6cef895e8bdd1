"""Shared test helpers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import hypothesis
import pytest
import structlog
from structlog.testing import LogCapture

from worker.settings import Settings

# Property tests hold on any machine: Hypothesis's two wall-clock checks, a deadline per
# example and the "data generation is too slow" health check, fail a loaded slow machine
# on a test a fast one passes. What the properties state does not depend on speed.
hypothesis.settings.register_profile(
    "any-machine", deadline=None, suppress_health_check=[hypothesis.HealthCheck.too_slow]
)
hypothesis.settings.load_profile("any-machine")


def settings(**overrides: Any) -> Settings:
    """Settings with placeholder resources: the defaults, changed only where a test says."""
    return Settings(
        converse_queue_url="http://127.0.0.1:1/q/converse",
        model_queue_url="http://127.0.0.1:1/q/model",
        compaction_queue_url="http://127.0.0.1:1/q/compaction",
        history_table="history",
        **overrides,
    )


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--reliability-figures",
        action="store_true",
        help="print what the fault tests measured (make bench runs them with it)",
    )


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
