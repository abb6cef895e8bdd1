"""structlog set-up: one stream of JSON lines on stdout (the console renderer for humans),
for the stage's own events and for every standard-library record alike.

Events are stable identifiers (``clerk.converse_…``). No event carries message content,
fold summaries or command bodies; per-message ids are bound with contextvars.

Library records (botocore, aiobotocore, urllib3, aiohttp, asyncio, Python warnings) go
through structlog's ``ProcessorFormatter`` into the same lines, written by the same
``PrintLogger`` under the same per-file lock, so no line of one is cut by a line of the
other. Each carries the bound ids (``conversation_id``, ``command_id``, ``message_id``,
``trace_id``), so a library's warning during a turn names the turn. Without this they went
to ``logging.lastResort``: plain text on stderr, tied to no conversation.

What of a library record passes, and why. A record's text is the library's, and can quote
a request (botocore's debug lines print parameters) or a service's answer (an exception's
text), so it is never rendered. A line carries only:

- ``event = "library.log"``, ``level``, ``timestamp`` and the bound ids;
- ``logger`` (the record's logger name) and ``source`` (file name and line of the logging
  call): code, and together they name the message exactly;
- ``message_template``: the record's ``msg`` before %-interpolation, and only when the
  record has arguments. A %-template with arguments is a literal of the library's code;
  the values, which are data, are the arguments, and those are dropped. A message without
  arguments cannot be told from text formatted beforehand (asyncio's unhandled-exception
  report embeds reprs that way), so it is left out;
- ``exc_type``: the type of an attached exception, never its text or its traceback;
- ``warning_category``, for a Python warning (whose text is left out for the same reason).

Records below WARNING never reach the stream, whatever a library's own logger level.
Records emitted before :func:`configure_logging` runs still go to ``logging.lastResort``.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
import warnings
from pathlib import Path
from typing import Literal, TextIO

import structlog
from structlog.typing import EventDict, WrappedLogger

from worker.errors import WorkerError
from worker.events import LIBRARY

#: The ``event`` of every line that comes from a standard-library record (declared with the
#: stage's own events, in :mod:`worker.events`).
LIBRARY_EVENT = LIBRARY.name
#: Libraries whose chatter (and any request body a debug level would print) stays out.
NOISY_LIBRARIES = ("botocore", "aiobotocore", "aioboto3", "urllib3", "werkzeug")

_original_showwarning = warnings.showwarning


def configure_logging(log_format: Literal["json", "console"] = "json") -> None:
    """Set up the stage's events and the standard library's records as one stream on stdout.

    Idempotent: a second call replaces the first's handler."""
    renderer: structlog.types.Processor = (
        structlog.dev.ConsoleRenderer(colors=sys.stdout.isatty())
        if log_format == "console"
        else structlog.processors.JSONRenderer()
    )
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stdout),
        cache_logger_on_first_use=True,
    )
    handler = StdoutLines(sys.stdout)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, library_fields],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            # The record's ``msg`` as it is: ``getMessage()`` would interpolate the arguments.
            use_get_message=False,
            # Only to tell a template from a text: ``library_fields`` drops the arguments.
            pass_foreign_args=True,
        )
    )
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, StdoutLines)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    for noisy in NOISY_LIBRARIES:
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # In place of ``logging.captureWarnings``, which would log the formatted warning text.
    warnings.showwarning = _show_warning


class StdoutLines(logging.Handler):
    """Writes formatted records through a structlog ``PrintLogger`` on the stage's stdout:
    the same ``print`` under the same per-file lock as the stage's own events."""

    def __init__(self, file: TextIO) -> None:
        super().__init__()
        self._printer = structlog.PrintLogger(file)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:  # logging's own contract: a record that cannot be written is reported
            self.handleError(record)
            return
        self._printer.msg(line)


def library_fields(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """Replace a library record's text with what may pass (the module docstring says why)."""
    record: logging.LogRecord = event_dict["_record"]
    args = event_dict.pop("positional_args", None)
    event_dict.pop("exc_info", None)
    event_dict.pop("stack_info", None)
    event_dict["event"] = LIBRARY_EVENT
    event_dict["logger"] = record.name
    event_dict["source"] = f"{os.path.basename(record.pathname)}:{record.lineno}"
    if args and isinstance(record.msg, str):
        event_dict["message_template"] = record.msg
    if record.exc_info and record.exc_info[1] is not None:
        event_dict["exc_type"] = type(record.exc_info[1]).__name__
    category = getattr(record, "warning_category", None)
    if isinstance(category, str):
        event_dict["warning_category"] = category
    return event_dict


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """A Python warning as a record of ``py.warnings``, placed where it was raised."""
    if file is not None:  # a caller asked for this warning on a file of its own
        _original_showwarning(message, category, filename, lineno, file, line)
        return
    logger = logging.getLogger("py.warnings")
    extra: dict[str, object] = {"warning_category": category.__name__}
    logger.handle(
        logger.makeRecord(
            logger.name, logging.WARNING, filename, lineno, "warning", (), None, extra=extra
        )
    )


def get_logger() -> structlog.stdlib.BoundLogger:
    return structlog.get_logger("worker")  # type: ignore[no-any-return]


#: The ``worker`` package's directory: frames under it are the stage's own.
_PACKAGE_ROOT = Path(__file__).resolve().parent


def raised_at(exc: BaseException) -> str:
    """Where ``exc`` was raised, as ``worker/…/module.py:line in function``: the innermost
    frame of this package (a library's own frames say less to an operator), or of any code
    when none is ours. Names code, never values."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "unknown"
    ours = [frame for frame in frames if _PACKAGE_ROOT in Path(frame.filename).parents]
    frame = (ours or frames)[-1]
    path = Path(frame.filename)
    shown = path.relative_to(_PACKAGE_ROOT.parent) if _PACKAGE_ROOT in path.parents else path.name
    return f"{shown}:{frame.lineno} in {frame.name}"


def log_failure(event: str, exc: BaseException, **fields: object) -> None:
    """Log a caught exception: always its type; its text only for the stage's own errors,
    whose messages are written never to carry content. Anything else (a library's
    exception can quote a request) is a defect, logged as an error, by type alone."""
    if isinstance(exc, WorkerError):
        get_logger().warning(event, error_type=type(exc).__name__, error=str(exc), **fields)
    else:
        get_logger().error(event, error_type=type(exc).__name__, **fields)
