"""Nothing lost, nothing doubled: duplicate delivery, kill -9, storage outage, bad input.

Each test drives the real worker against the moto server and counts what reaches the
model queue per command id. The figures the kill -9 tests measure are reported in the
terminal summary (and in docs/RELIABILITY.md).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections import Counter
from typing import Any

import pytest

from localaws.proxy import TcpProxy
from tests.integration.conftest import Stack, body_of, exchanges, running_worker
from worker.adapters.sqs import received_message
from worker.app.resources import Resources
from worker.app.runtime import build_stage

pytestmark = pytest.mark.integration

WORKER = [sys.executable, "-m", "worker.cli", "run"]


async def forwarded(stack: Stack, model_url: str | None = None) -> Counter[str]:
    """Prompt payloads per command id, counted once every command was settled (the converse
    queue empty: a command is deleted only after its prompt went out), so a late duplicate
    is counted too, whatever the machine's speed."""
    await stack.until_empty("CONVERSE_QUEUE_URL")
    url = model_url or stack.env["MODEL_QUEUE_URL"]
    # Nothing more will be sent: take exactly what is there (moto's counts are exact), with
    # room for moto's slow receives from a backlog of a few hundred on a loaded machine.
    prompts = await stack.drain(url, expect=await stack.depth(url), within=240)
    return Counter(body_of(m)["command_id"] for m in prompts)


@pytest.fixture
async def short_lease(stack: Stack) -> Stack:
    """The contract's resources with a 4-second converse visibility timeout."""
    return await stack.with_resources(Resources(prefix="fast", converse_visibility_timeout=4))


async def test_the_same_command_sent_five_times_is_forwarded_once(short_lease: Stack) -> None:
    stack = short_lease
    await stack.seed("matter-d", exchanges(2))
    for _ in range(5):
        await stack.send_command(command_id="c-dup", conversation_id="matter-d")
    async with running_worker(stack.settings(shutdown_grace_seconds=2.0)):
        counts = await forwarded(stack)  # every copy deleted, and only then counted
    assert counts == {"c-dup": 1}
    assert await stack.depth(await stack.dead_letter_url()) == 0


async def test_a_message_redelivered_after_it_was_served_is_not_forwarded_again(
    short_lease: Stack,
) -> None:
    """GIVEN a worker that forwarded a command and died before deleting it, WHEN the
    message comes back after its visibility timeout, THEN it is deleted unforwarded."""
    stack = short_lease
    await stack.seed("matter-r", exchanges(2))
    await stack.send_command(command_id="c-once", conversation_id="matter-r")
    settings = stack.settings(shutdown_grace_seconds=2.0)
    [raw] = (
        await stack.clients.sqs.receive_message(
            QueueUrl=stack.env["CONVERSE_QUEUE_URL"],
            MessageSystemAttributeNames=["ApproximateReceiveCount"],
        )
    )["Messages"]
    stage = build_stage(stack.clients, settings, visibility_timeout=4)
    outcome = await stage.handle(received_message(raw))
    assert type(outcome).__name__ == "Done"  # forwarded; the delete never happens
    async with running_worker(settings):
        counts = await forwarded(stack)  # the redelivered copy deleted, and only then counted
    assert counts == {"c-once": 1}


async def kill_mid_batch(
    stack: Stack, *, commands: int, report: dict[str, Any], label: str
) -> Counter[str]:
    """Start `worker run`, SIGKILL it with commands in flight, let a second worker finish."""
    ids = [f"c-{i:03d}" for i in range(commands)]
    conversations = [f"matter-k{i % 20}" for i in range(commands)]
    for conversation_id in set(conversations):
        await stack.seed(conversation_id, exchanges(3))
    entries = [
        {
            "Id": str(i),
            "MessageBody": json.dumps(
                {"type": "converse", "command_id": c, "conversation_id": m, "message": "q?"}
            ),
        }
        for i, (c, m) in enumerate(zip(ids, conversations, strict=True))
    ]
    for start in range(0, len(entries), 10):
        await stack.clients.sqs.send_message_batch(
            QueueUrl=stack.env["CONVERSE_QUEUE_URL"], Entries=entries[start : start + 10]
        )
    process = await asyncio.create_subprocess_exec(
        *WORKER,
        env=stack.process_env(SHUTDOWN_GRACE_SECONDS="2", WORKER_CONCURRENCY="16"),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    model_url = stack.env["MODEL_QUEUE_URL"]
    try:
        # Nothing is taken off the model queue until the end: moto's FIFO deduplication,
        # unlike SQS's five-minute window, only looks at messages still in the queue.
        while await stack.depth(model_url) < commands // 4:
            await asyncio.sleep(0.05)
    finally:
        process.send_signal(signal.SIGKILL)
        await process.wait()
    async with running_worker(stack.settings(shutdown_grace_seconds=2.0)):
        counts = await forwarded(stack)
    assert await stack.depth(model_url) == 0  # all of it counted
    duplicates = sum(n - 1 for n in counts.values())
    report[label] = {
        "commands": commands,
        "forwarded_before_kill (at least)": commands // 4,
        "distinct_forwarded": len(counts),
        "duplicates": duplicates,
    }
    assert set(counts) == set(ids)  # nothing lost
    assert await stack.depth(await stack.dead_letter_url()) == 0
    return counts


async def test_kill_9_mid_batch_loses_nothing_and_duplicates_only_in_the_residual_window(
    short_lease: Stack, reliability_report: dict[str, Any]
) -> None:
    counts = await kill_mid_batch(
        short_lease, commands=200, report=reliability_report, label="kill -9, standard model queue"
    )
    # A duplicate needs a crash between a send and its record being marked done: at most
    # one per command in flight (16) at the kill.
    assert sum(n - 1 for n in counts.values()) <= 16


async def test_kill_9_with_a_fifo_model_queue_forwards_exactly_once(
    stack: Stack, reliability_report: dict[str, Any]
) -> None:
    fifo = await stack.with_resources(
        Resources(prefix="fifo", fifo_model_queue=True, converse_visibility_timeout=4)
    )
    counts = await kill_mid_batch(
        fifo, commands=200, report=reliability_report, label="kill -9, FIFO model queue"
    )
    assert set(counts.values()) == {1}


@pytest.mark.parametrize("fifo", [False, True], ids=["standard", "fifo"])
async def test_a_storage_outage_under_load_loses_nothing(
    stack: Stack,
    monkeypatch: pytest.MonkeyPatch,
    reliability_report: dict[str, Any],
    fifo: bool,
) -> None:
    """GIVEN 80 commands being served, WHEN the endpoint goes down for 4 s and comes back,
    THEN the worker stays up, nothing reaches a DLQ and every command is forwarded.

    A send whose response was lost in the cut is ambiguous: on a standard model queue it
    can be forwarded twice (measured and reported); a FIFO model queue deduplicates it."""
    stack = await stack.with_resources(
        Resources(prefix="outage", fifo_model_queue=fifo, converse_visibility_timeout=4)
    )
    proxy = TcpProxy(stack.endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL", await proxy.start())
    ids = [f"c-{i:02d}" for i in range(80)]
    for i in range(8):
        await stack.seed(f"matter-o{i}", exchanges(3))
    await asyncio.gather(
        *(
            stack.send_command(command_id=c, conversation_id=f"matter-o{i % 8}")
            for i, c in enumerate(ids)
        )
    )
    settings = stack.settings(shutdown_grace_seconds=2.0, worker_concurrency=8)
    model_url = stack.env["MODEL_QUEUE_URL"]
    async with running_worker(settings):
        while await stack.depth(model_url) < 15:
            await asyncio.sleep(0.05)
        await proxy.cut()
        await asyncio.sleep(4)  # the outage itself: a span of wall time, not a wait for work
        await proxy.restore()
        counts = await forwarded(stack, model_url)
    await proxy.close()
    assert await stack.depth(model_url) == 0  # all of it counted
    duplicates = sum(n - 1 for n in counts.values())
    reliability_report[f"storage outage (4 s), {'FIFO' if fifo else 'standard'} model queue"] = {
        "commands": len(ids),
        "distinct_forwarded": len(counts),
        "duplicates": duplicates,
    }
    assert set(counts) == set(ids)
    assert duplicates == 0 if fifo else duplicates <= 2 * settings.worker_concurrency
    for env_name in ("CONVERSE_QUEUE_URL", "MODEL_QUEUE_URL", "COMPACTION_QUEUE_URL"):
        assert await stack.depth(await stack.dead_letter_url(env_name)) == 0
