"""Shared test helpers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import structlog
from structlog.testing import LogCapture


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
