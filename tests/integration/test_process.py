"""`worker run`, `worker bootstrap` and `make run` as processes: exit codes, signals, stderr."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from localaws.proxy import TcpProxy
from tests.infra.cfn_outputs import RESOURCE_VARIABLES
from tests.integration.conftest import Stack, body_of, exchanges, running_worker

pytestmark = pytest.mark.integration

WORKER = [sys.executable, "-m", "worker.cli"]
ROOT = Path(__file__).resolve().parents[2]


async def test_sigterm_exits_zero_and_loses_nothing(stack: Stack) -> None:
    """GIVEN 60 commands and a worker serving them, WHEN it gets SIGTERM mid-stream, THEN
    it exits 0 within its grace period leaving nothing it received hidden, and a second
    worker serves the rest: every command reaches the model queue exactly once.

    Mid-stream by construction: the first worker talks to the server through a 200 ms
    round trip, so 60 turns take it at least 15 s however fast the machine, and it is
    stopped as soon as five prompts are out."""
    await stack.seed("matter-s", exchanges(5))
    ids = [f"c-{i}" for i in range(60)]
    await asyncio.gather(
        *(stack.send_command(command_id=c, conversation_id="matter-s") for c in ids)
    )
    proxy = TcpProxy(stack.endpoint, 0.2)
    process = await stack.worker_process(
        "run",
        SHUTDOWN_GRACE_SECONDS="10",
        WORKER_CONCURRENCY="4",
        AWS_ENDPOINT_URL=await proxy.start(),
    )
    try:
        first = await stack.drain("MODEL_QUEUE_URL", expect=5)
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):  # the grace period (10 s) and the poll, with room
            stdout, stderr = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
        await proxy.close()
    assert process.returncode == 0
    # One stream: the stage's events and every library record (botocore, aiohttp, asyncio)
    # are JSON lines on stdout; nothing reaches stderr.
    assert stderr == b""
    lines = [json.loads(line) for line in stdout.decode().splitlines()]
    assert all("event" in line for line in lines)
    forwarded = stdout.decode().count('"event": "clerk.converse_prompt_forwarded"')
    assert 5 <= forwarded < len(ids)  # it was stopped mid-stream
    # What it had received and not finished it made visible again at once: nothing waits
    # out a visibility timeout.
    hidden = await stack.clients.sqs.get_queue_attributes(
        QueueUrl=stack.env["CONVERSE_QUEUE_URL"],
        AttributeNames=["ApproximateNumberOfMessagesNotVisible"],
    )
    assert hidden["Attributes"]["ApproximateNumberOfMessagesNotVisible"] == "0"

    async with running_worker(stack.settings()):
        await stack.until_empty("CONVERSE_QUEUE_URL")  # every command settled
    rest = await stack.drain("MODEL_QUEUE_URL")  # all there: a late duplicate too
    served = Counter(body_of(m)["command_id"] for m in first + rest)
    assert set(served) == set(ids)
    assert set(served.values()) == {1}  # exactly once


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        (
            {"MEMORY_FOLD_MIN_TOKENS": "4000"},
            "HISTORY_WINDOW_MAX_TOKENS (4000) must be >= 2x MEMORY_FOLD_MIN_TOKENS (4000): "
            "the fold is async; below 2x a reference falls into a gap held by neither",
        ),
        ({"HISTORY_WINDOW_FLOOR_MESSAGES": "30"}, "HISTORY_WINDOW_FLOOR_MESSAGES (30) must be"),
        ({"HISTORY_TABLE": ""}, "HISTORY_TABLE: String should have at least 1 character"),
    ],
)
def test_a_configuration_error_stops_worker_run_with_the_reason(
    env: dict[str, str], reason: str
) -> None:
    base = {
        "CONVERSE_QUEUE_URL": "http://127.0.0.1:9/q/converse",
        "MODEL_QUEUE_URL": "http://127.0.0.1:9/q/model",
        "COMPACTION_QUEUE_URL": "http://127.0.0.1:9/q/compaction",
        "HISTORY_TABLE": "mira-history",
        "LEDGER_TABLE": "mira-ledger",
        "PATH": os.environ.get("PATH", ""),
    }
    result = subprocess.run(
        [*WORKER, "run"],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("worker: invalid configuration: ")
    assert reason in lines[0]


async def test_a_converse_queue_without_a_dead_letter_queue_refuses_to_start(
    stack: Stack,
) -> None:
    bare = await stack.clients.sqs.create_queue(QueueName="no-redrive")
    result = await asyncio.to_thread(
        subprocess.run,
        [*WORKER, "run"],
        env=stack.process_env(CONVERSE_QUEUE_URL=bare["QueueUrl"]),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "CONVERSE_QUEUE_URL: the queue has no RedrivePolicy" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


async def test_bootstrap_prints_the_env_lines_and_is_idempotent(stack: Stack) -> None:
    async def bootstrap() -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(
            subprocess.run,
            [*WORKER, "bootstrap", "--prefix", "other"],
            env=stack.process_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )

    first, second = await bootstrap(), await bootstrap()
    assert first.stdout == second.stdout
    lines = dict(line.split("=", 1) for line in first.stdout.splitlines())
    assert set(lines) == set(RESOURCE_VARIABLES)
    assert lines["CONVERSE_QUEUE_URL"].endswith("/other-converse")
    attributes = await stack.clients.sqs.get_queue_attributes(
        QueueUrl=lines["CONVERSE_QUEUE_URL"], AttributeNames=["RedrivePolicy"]
    )
    assert "other-converse-dlq" in attributes["Attributes"]["RedrivePolicy"]


DEMO = [sys.executable, "-m", "localaws.demo"]


def demo_env(tmp_path: Path) -> dict[str, str]:
    """The environment of `make run`, but its liveness file its own: not the default one in
    the shared temporary directory, which a demo beside it would write too."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "HISTORY_"))}
    return {**env, "HEALTH_FILE": str(tmp_path / "health")}


def demo(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The demo as `make run` runs it, from the repository (localaws is not installed)."""
    return subprocess.run(
        [*DEMO, *args],
        env=demo_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        cwd=ROOT,
    )


def test_make_run_shows_the_window_the_payload_and_the_fold_request(tmp_path: Path) -> None:
    """`python -m localaws.demo --once` is `make run` stopping after the first turn."""
    result = demo(tmp_path, "--once")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "window mode: cache-aligned" in out
    assert "clerk.converse_history_window_bounded" in out
    assert "──── prompt payload ────" in out
    assert "command c-demo-1 · conversation matter-1187 · contract 1" in out
    assert '"trimmed": 1' in out
    assert re.search(r"'Here is the agreement.*⟪… \d+ tokens omitted …⟫ …", out)  # the marker
    assert out.count("converse.messages") == 2
    assert '"left_out": 1' in out
    assert "reasons={'leading_answer': 1}" in out and "reasons={'blank': 1}" in out
    assert "──── compaction request ────" in out
    assert '"type": "compact",\n  "contract": 1,' in out
    assert "clerk.converse_compaction_requested" in out
    assert "──── model stage (stand-in): answered at 09:00:06" in out
    assert "worker bill" not in out


def test_make_run_answers_each_question_with_its_bill_and_ends_on_the_bill(
    tmp_path: Path,
) -> None:
    """`make run`: the stand-in answers the long matter's five questions, each stored with
    its model_usage; the worker reads the bills back (clerk.converse_cache_observed on each
    later turn), and the demo ends by itself with `worker bill`'s report of all five."""
    result = demo(tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.count("──── model stage (stand-in): answered at ") == 5
    assert out.count("clerk.converse_cache_observed") == 4
    report = out[out.index("──── worker bill --conversation matter-1187 ────") :]
    lines = report.splitlines()
    assert "history: 67 messages read in 1 Query; 5 answers with a bill, 27 without" in lines
    assert "    3-57  no bill stored (27 answers)" in lines
    rows = [line.split() for line in lines if re.match(r"\s+\d+  2026-11-30T", line)]
    assert [row[2] for row in rows] == ["c-demo-1", "c-demo-3", "c-demo-4", "c-demo-5", "c-demo-6"]
    assert [row[1][11:] for row in rows] == [
        "09:00:06Z",
        "09:03:06Z",
        "09:05:06Z",
        "09:17:06Z",
        "09:19:06Z",
    ]
    reads = [int(row[4].replace(",", "")) for row in rows]
    assert reads[1] > 0  # two minutes on, the prefix the first answer wrote is read
    assert any(line.startswith("sliding window, ESTIMATED for the same 5 turns") for line in lines)
    assert "Clause 14.2" not in report and "clause 22" not in report  # no content


def test_make_run_serve_keeps_the_worker_until_ctrl_c(tmp_path: Path) -> None:
    """`python -m localaws.demo --serve` prints the bill, then a `worker send` line that reads
    the message from stdin (none in argv, history or ps), and stops on SIGINT with 0."""
    process = subprocess.Popen(
        [*DEMO, "--serve"],
        env=demo_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert process.stdout is not None
    seen = []
    try:
        for line in process.stdout:  # the hint comes after the bill
            seen.append(line)
            if "(the message is read from stdin" in line:
                break
        process.send_signal(signal.SIGINT)
        rest, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    out = "".join(seen) + rest
    assert process.returncode == 0, stderr
    assert out.index("──── worker bill") < out.index("the worker runs until Ctrl-C")
    assert "/bin/worker send --conversation matter-1187 < question.txt\n" in out
