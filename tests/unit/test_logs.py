"""One log stream: the standard library's records are JSON lines of the stage's stdout,
with the turn's ids and none of a record's text.

Each case runs in a fresh interpreter: what is pinned is where the bytes go (stdout, and
nothing on stderr), which an in-process test cannot see (pytest's own logging handlers
would hide ``logging.lastResort``) and which would outlive the test in the process."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

SECRET = "PRIVILEGED-clause-14.2"

PRELUDE = """
import logging, warnings
import structlog
from structlog.contextvars import bound_contextvars
from worker.logs import configure_logging, get_logger
"""


@dataclass(frozen=True)
class Output:
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stdout.splitlines()]


def source_line(script: str, call: str) -> str:
    """Where a record made by ``call`` in ``script`` says it came from."""
    lines = (PRELUDE + textwrap.dedent(script)).splitlines()
    return f"<string>:{next(n for n, line in enumerate(lines, 1) if call in line)}"


def run(script: str) -> Output:
    result = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=ROOT,  # the script may import the tests' fakes
    )
    return Output(result.stdout, result.stderr)


def test_a_botocore_warning_during_a_turn_is_one_json_line_with_the_turns_ids() -> None:
    script = """
        configure_logging()
        with bound_contextvars(conversation_id="matter-1", command_id="c-1", message_id="m-1",
                               trace_id="1-5759e988-bd862e3fe1be46a994272793"):
            logging.getLogger("botocore.credentials").warning("Refreshing %s", "credentials")
        """
    out = run(script)
    assert out.stderr == ""
    [line] = out.lines
    assert line["event"] == "library.log"
    assert line["level"] == "warning"
    assert line["logger"] == "botocore.credentials"
    assert line["conversation_id"] == "matter-1"
    assert line["command_id"] == "c-1"
    assert line["message_id"] == "m-1"
    assert line["trace_id"] == "1-5759e988-bd862e3fe1be46a994272793"
    assert line["message_template"] == "Refreshing %s"
    assert line["source"] == source_line(script, ".warning(")
    assert "timestamp" in line


def test_a_botocore_warning_inside_a_real_turn_carries_the_ids_the_stage_bound() -> None:
    """The stage's own turn (over the unit tests' fakes), whose history read makes botocore
    warn: the line names the turn, as the stage's own events of that turn do."""
    out = run(
        f"""
        import asyncio
        from tests.unit.turn.test_stage import MemoryHistory, Turn, delivery

        class WarningHistory(MemoryHistory):
            async def load_page(self, conversation_id, limit):
                logging.getLogger("botocore.credentials").warning("Refreshing %s", {SECRET!r})
                return await super().load_page(conversation_id, limit)

        configure_logging()
        turn = Turn(history=WarningHistory())
        asyncio.run(turn.stage.handle(delivery()))
        """
    )
    assert out.stderr == ""
    assert SECRET not in out.stdout
    [library] = [line for line in out.lines if line["event"] == "library.log"]
    forwarded = next(e for e in out.lines if e["event"] == "clerk.converse_prompt_forwarded")
    assert (library["conversation_id"], library["command_id"]) == ("matter-1", "c-1")
    assert (forwarded["conversation_id"], forwarded["command_id"]) == ("matter-1", "c-1")
    assert library["logger"] == "botocore.credentials"


def test_a_library_records_arguments_and_exception_text_never_pass() -> None:
    out = run(
        f"""
        configure_logging()
        log = logging.getLogger("botocore.endpoint")
        log.warning("Sending request %s to %r", {SECRET!r}, {{"body": {SECRET!r}}})
        log.error("Response %(body)s", {{"body": {SECRET!r}}})
        try:
            raise RuntimeError({SECRET!r})
        except RuntimeError:
            logging.getLogger("asyncio").exception("Task exception: " + {SECRET!r})
        """
    )
    assert SECRET not in out.stdout + out.stderr
    assert out.stderr == ""
    sent, answered, task = out.lines
    assert sent["message_template"] == "Sending request %s to %r"
    assert answered["message_template"] == "Response %(body)s"
    # No arguments: the text may have been formatted before it was logged, so it is left out.
    assert "message_template" not in task
    assert task["exc_type"] == "RuntimeError"
    assert task["level"] == "error"
    assert "Traceback" not in out.stdout


def test_library_records_below_warning_stay_out_whatever_the_loggers_level() -> None:
    out = run(
        """
        configure_logging()
        logging.getLogger("botocore.endpoint").setLevel(logging.DEBUG)
        logging.getLogger("botocore.endpoint").debug("Making request %s", "params")
        logging.getLogger("some.library").info("Started %s", "x")
        logging.getLogger("urllib3.connectionpool").warning("Retrying %s", "x")
        """
    )
    assert [line["logger"] for line in out.lines] == ["urllib3.connectionpool"]
    assert out.stderr == ""


def test_a_python_warning_is_a_line_by_category_and_place_without_its_text() -> None:
    script = f"""
        configure_logging()
        warnings.simplefilter("always")
        with bound_contextvars(conversation_id="matter-1"):
            warnings.warn({SECRET!r}, DeprecationWarning, stacklevel=1)
        """
    out = run(script)
    assert out.stderr == ""
    [line] = out.lines
    assert SECRET not in out.stdout
    assert line["logger"] == "py.warnings"
    assert line["warning_category"] == "DeprecationWarning"
    assert line["conversation_id"] == "matter-1"
    assert line["source"] == source_line(script, "warnings.warn(")


def test_the_stages_events_and_library_records_share_one_stream_and_one_shape() -> None:
    out = run(
        """
        configure_logging()
        configure_logging()  # a second set-up replaces the first: still one line per record
        with bound_contextvars(conversation_id="matter-1", command_id="c-1"):
            get_logger().info("clerk.converse_prompt_forwarded", kept=3)
            logging.getLogger("aiobotocore.credentials").warning("Refreshing %s", "x")
        """
    )
    assert out.stderr == ""
    stage, library = out.lines
    assert stage["event"] == "clerk.converse_prompt_forwarded"
    assert library["event"] == "library.log"
    shared = {"conversation_id", "command_id", "level", "timestamp"}
    assert shared <= stage.keys() and shared <= library.keys()


def test_the_console_format_renders_library_records_for_humans_too() -> None:
    out = run(
        f"""
        configure_logging("console")
        logging.getLogger("botocore.credentials").warning("Refreshing %s", {SECRET!r})
        """
    )
    assert out.stderr == ""
    [line] = out.stdout.splitlines()
    assert "library.log" in line and "botocore.credentials" in line
    assert SECRET not in line


def test_a_defect_is_placed_at_the_packages_innermost_frame_by_file_line_and_function() -> None:
    """``raised_at`` names code, never values: a TypeError raised inside the package is placed
    in the package's file and function; one raised in a library called from it, at the
    package's frame that called it."""
    from worker.logs import raised_at
    from worker.memory.tokens import estimate_tokens

    try:
        estimate_tokens(None)  # type: ignore[arg-type]
    except TypeError as exc:
        inside = raised_at(exc)
    assert re.fullmatch(r"worker/memory/tokens\.py:\d+ in estimate_tokens", inside)
    try:
        json.loads("{PRIVILEGED")
    except ValueError as exc:
        outside = raised_at(exc)
    assert re.fullmatch(r"decoder\.py:\d+ in raw_decode", outside)  # no frame of the package
    assert "PRIVILEGED" not in inside + outside
