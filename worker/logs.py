"""structlog set-up: JSON lines on stdout by default, the console renderer for humans.

Events are stable identifiers (``clerk.converse_…``). No event carries message content,
fold summaries or command bodies; per-message ids are bound with contextvars.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

from worker.errors import WorkerError


def configure_logging(log_format: Literal["json", "console"] = "json") -> None:
    renderer: structlog.types.Processor = (
        structlog.dev.ConsoleRenderer(colors=sys.stdout.isatty())
        if log_format == "console"
        else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stdout),
        cache_logger_on_first_use=True,
    )
    # Libraries log through the standard library; keep their chatter (and any request
    # bodies a debug level might print) out of the stage's output.
    for noisy in ("botocore", "aiobotocore", "aioboto3", "urllib3", "werkzeug"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def get_logger() -> structlog.stdlib.BoundLogger:
    return structlog.get_logger("worker")  # type: ignore[no-any-return]


def log_failure(event: str, exc: BaseException, **fields: object) -> None:
    """Log a caught exception: always its type; its text only for the stage's own errors,
    whose messages are written never to carry content. Anything else (a library's
    exception can quote a request) is a defect, logged as an error, by type alone."""
    if isinstance(exc, WorkerError):
        get_logger().warning(event, error_type=type(exc).__name__, error=str(exc), **fields)
    else:
        get_logger().error(event, error_type=type(exc).__name__, **fields)
