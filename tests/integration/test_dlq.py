"""`worker dlq` and `worker send` against the moto server, with the real worker."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from tests.conftest import captured_logs
from tests.integration.conftest import Stack, body_of, exchanges, running_worker
from worker.adapters.sqs import SqsQueue
from worker.adapters.sqs_admin import QueueAdmin
from worker.app.resources import DEAD_LETTER_RETENTION_SECONDS
from worker.cli import dlq_operations as dlq

pytestmark = pytest.mark.integration

WORKER = [sys.executable, "-m", "worker.cli"]
BAD = ['{"type": "converse"}', "{not json", '{"type": "converse", "command_id": "c", '
       '"conversation_id": "m", "message": "  "}']  # fmt: skip


def command_body(command_id: str, conversation_id: str = "matter-d") -> str:
    return json.dumps(
        {
            "type": "converse",
            "command_id": command_id,
            "conversation_id": conversation_id,
            "message": "PRIVILEGED question about clause 14.2",
        }
    )


async def dead_letter_queue_with_both_kinds(stack: Stack) -> SqsQueue:
    """Three commands the real worker rejected, and two retry-exhausted ones (moved there
    as SQS's redrive policy moves them: body and attributes as sent, no reason)."""
    for body in BAD:
        await stack.send_raw(body)
    async with running_worker(stack.settings()):
        while await depth(stack, await stack.dead_letter_url()) < len(BAD):
            await asyncio.sleep(0.1)
    url = await stack.dead_letter_url()
    for command_id in ("c-exhausted-1", "c-exhausted-2"):
        await stack.clients.sqs.send_message(QueueUrl=url, MessageBody=command_body(command_id))
    return SqsQueue(stack.clients.sqs, url)


async def depth(stack: Stack, url: str) -> int:
    response = await stack.clients.sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )
    return sum(int(value) for value in response["Attributes"].values())


async def inspect(
    stack: Stack, queue: SqsQueue, *, now: Callable[[], float] = time.time
) -> dlq.Inspection:
    """``worker dlq inspect``'s work, the retention read from the queue as the command reads it."""
    retention = await QueueAdmin(stack.clients.sqs).retention_seconds(queue.url)
    return await dlq.inspect(queue, retention_seconds=retention, now=now)


async def test_inspect_counts_by_reason_and_age_and_leaves_every_message_there(
    stack: Stack,
) -> None:
    queue = await dead_letter_queue_with_both_kinds(stack)
    inspection = await inspect(stack, queue)
    assert inspection.total == 5
    assert inspection.by_reason == {
        dlq.RETRY_EXHAUSTED: 2,
        "invalid command: command_id: Field required; conversation_id: Field required; "
        "message: Field required": 1,
        "body is not valid JSON (Expecting property name enclosed in double quotes at "
        "position 1)": 1,
        "message is blank": 1,
    }
    assert inspection.by_age == {"< 1 h": 5}
    assert len({m.message_id for m in inspection.messages}) == 5
    # Released at once: a second look sees all five again.
    assert (await inspect(stack, queue)).total == 5


async def test_inspect_counts_each_messages_time_left_from_its_first_send(stack: Stack) -> None:
    """The dead-letter queue keeps 14 days from ``SentTimestamp``: on a clock 10 days on,
    every message sent moments ago has 3 days and 23-odd hours left."""
    queue = await dead_letter_queue_with_both_kinds(stack)
    assert await QueueAdmin(stack.clients.sqs).retention_seconds(queue.url) == (
        DEAD_LETTER_RETENTION_SECONDS
    )
    ten_days_on = time.time() + 10 * 86_400
    inspection = await inspect(stack, queue, now=lambda: ten_days_on)
    assert {dlq.expiry(m.seconds_left) for m in inspection.messages} == {"expires in 3d 23h"}
    assert "the soonest expires in 3d 23h" in inspection.lines(with_ids=False)


async def test_redrive_moves_exactly_the_retry_exhausted_and_deletes_after_sending(
    stack: Stack,
) -> None:
    queue = await dead_letter_queue_with_both_kinds(stack)
    converse = SqsQueue(stack.clients.sqs, stack.env["CONVERSE_QUEUE_URL"])
    result = await dlq.redrive(queue, converse, include_rejected=False, per_second=100)
    assert (result.sent, result.skipped_rejected, result.failed) == (2, 3, 0)
    moved = await stack.drain("CONVERSE_QUEUE_URL")
    assert sorted(body_of(m)["command_id"] for m in moved) == ["c-exhausted-1", "c-exhausted-2"]
    left = await inspect(stack, queue)
    assert left.total == 3 and dlq.RETRY_EXHAUSTED not in left.by_reason


async def test_a_redriven_command_that_was_served_is_not_forwarded_twice(stack: Stack) -> None:
    """GIVEN a command the worker served, WHEN a copy of it sits in the dead-letter queue
    (a duplicate delivery that ran out of receives) and is redriven, THEN the worker deletes
    it as a duplicate: the model queue holds the one prompt of the first delivery."""
    await stack.seed("matter-d", exchanges(2))
    await stack.send_raw(command_body("c-served"))
    url = await stack.dead_letter_url()
    converse = SqsQueue(stack.clients.sqs, stack.env["CONVERSE_QUEUE_URL"])
    with captured_logs() as logs:
        async with running_worker(stack.settings()):
            [first] = await stack.drain("MODEL_QUEUE_URL", expect=1)
            await stack.clients.sqs.send_message(QueueUrl=url, MessageBody=command_body("c-served"))
            result = await dlq.redrive(
                SqsQueue(stack.clients.sqs, url), converse, include_rejected=False, per_second=50
            )
            assert result.sent == 1
            while not [e for e in logs if e["event"] == "clerk.converse_command_duplicate"]:
                await asyncio.sleep(0.1)
        again = await stack.drain("MODEL_QUEUE_URL", within=2)
    assert body_of(first)["command_id"] == "c-served"
    assert again == []
    assert await depth(stack, url) == 0
    assert await depth(stack, stack.env["CONVERSE_QUEUE_URL"]) == 0


def run_cli(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    env = stack.process_env()
    return subprocess.run(
        [*WORKER, *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


async def test_the_cli_inspects_and_redrives_without_printing_a_body(stack: Stack) -> None:
    await dead_letter_queue_with_both_kinds(stack)
    inspected = await asyncio.to_thread(run_cli, stack, "dlq", "inspect", "--ids")
    assert inspected.returncode == 0, inspected.stderr
    assert inspected.stdout.startswith("5 message(s) in the dead-letter queue\n")
    assert "       2  (retry exhausted: no RejectionReason)" in inspected.stdout
    assert inspected.stdout.count("< 1 h") == 6  # the age line and each of the five ids
    # Sent moments ago to a queue keeping 14 days: the summary line and each of the five.
    assert inspected.stdout.count("expires in 13d 23h") == 6
    everything = await asyncio.to_thread(run_cli, stack, "dlq", "redrive", "--include-rejected")
    assert everything.returncode == 0, everything.stderr
    # moto has no StartMessageMoveTask: the tool falls back to its own loop.
    assert "redriven 5 to the converse queue (receive, send, delete)" in everything.stdout
    for output in (inspected, everything):
        assert "PRIVILEGED" not in output.stdout + output.stderr
        assert "{not json" not in output.stdout + output.stderr
    assert len(await stack.drain("CONVERSE_QUEUE_URL")) == 5


def send_from_stdin(stack: Stack, stdin: bytes, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*WORKER, "send", "--conversation", "matter-1187", *args],
        env=stack.process_env(),
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("args", [(), ("-",)], ids=["absent", "dash"])
async def test_worker_send_reads_the_message_from_stdin_so_argv_never_holds_it(
    stack: Stack, args: tuple[str, ...]
) -> None:
    """The message comes from stdin (UTF-8, its one trailing newline dropped, every other
    character kept), so no privileged text is in the process's argv, shell history or ps."""
    question = "Clause 14.2 — may the buyer terminate?\n\tIf so, on what notice?"
    sent = await asyncio.to_thread(send_from_stdin, stack, (question + "\n").encode(), *args)
    assert sent.returncode == 0, sent.stderr
    [message] = await stack.drain("CONVERSE_QUEUE_URL")
    command = body_of(message)
    assert command["message"] == question
    assert sent.stdout.decode().strip() == f"sent {command['command_id']} on matter-1187"
    assert sent.stderr == b""


@pytest.mark.parametrize(
    ("stdin", "error"),
    [
        (b" \n\t\n", "worker: the message on stdin is blank: nothing to send\n"),
        (b"", "worker: the message on stdin is blank: nothing to send\n"),
        (b"PRIVILEGED \xff\xfe", "worker: the message on stdin is not UTF-8 text\n"),
    ],
    ids=["blank", "empty", "not-utf8"],
)
async def test_worker_send_refuses_a_blank_or_undecodable_stdin_without_sending(
    stack: Stack, stdin: bytes, error: str
) -> None:
    sent = await asyncio.to_thread(send_from_stdin, stack, stdin)
    assert (sent.returncode, sent.stderr.decode()) == (2, error)
    assert await stack.drain("CONVERSE_QUEUE_URL") == []


async def test_worker_send_still_takes_the_message_as_an_argument_for_older_scripts(
    stack: Stack,
) -> None:
    sent = await asyncio.to_thread(
        run_cli, stack, "send", "--conversation", "matter-1187", "Can the buyer terminate?"
    )
    assert sent.returncode == 0, sent.stderr
    [message] = await stack.drain("CONVERSE_QUEUE_URL")
    command = body_of(message)
    assert sent.stdout.strip() == f"sent {command['command_id']} on matter-1187"
    assert command["type"] == "converse"
    assert command["conversation_id"] == "matter-1187"
    assert command["message"] == "Can the buyer terminate?"


def test_worker_send_without_a_queue_says_so_in_one_line() -> None:
    env = {k: v for k, v in os.environ.items() if k != "CONVERSE_QUEUE_URL"}
    result = subprocess.run(
        [*WORKER, "send", "--conversation", "m", "q"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr == "worker: CONVERSE_QUEUE_URL: Field required\n"
