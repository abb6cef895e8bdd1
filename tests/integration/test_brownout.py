"""Brownouts over the real ``worker run``: AWS answering with its own throttling and 5xx
errors (``localaws.fault_proxy`` in front of moto) never dead-letters a valid command.

The converse queue here has a visibility timeout of 8 s and the redrive policy's
``maxReceiveCount`` of 5, and the worker retries a failed command after 0.5 s, 1 s, 2 s …
(``RETRY_BASE_SECONDS=0.5``): before issue 25 a full brownout walked every command to the
dead-letter queue in under 10 s. The brownouts here last 30 s (DynamoDB) and 25 s (the
model queue's sends), several times that, while commands keep arriving. Truth is by
counts: every command served exactly once, none dead-lettered, the highest receive count
of a served command, the worker's own events; the durations only make the outage long,
they never decide a result.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from localaws.fault_proxy import Fault, FaultProxy
from tests.integration.conftest import Stack, body_of, exchanges, running_worker
from worker.app.resources import Resources
from worker.delivery.pointers import POINTER_CLASS
from worker.telemetry.probe import check

pytestmark = pytest.mark.integration

WORKER = [sys.executable, "-m", "worker.cli", "run"]
VISIBILITY = 8


@dataclass
class WorkerProcess:
    """A ``worker run`` whose JSON log lines are read as they come."""

    process: asyncio.subprocess.Process
    events: list[dict[str, Any]] = field(default_factory=list)
    stderr: bytes = b""

    def count(self, event: str) -> int:
        return sum(1 for e in self.events if e.get("event") == event)

    def of(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("event") == event]

    async def until(self, event: str, count: int = 1, *, within: float = 120.0) -> None:
        async with asyncio.timeout(within):
            while self.count(event) < count:
                if self.process.returncode is not None:
                    raise AssertionError(f"the worker exited before {event}: {self.stderr!r}")
                await asyncio.sleep(0.05)

    async def stop(self, *, within: float = 30.0) -> int:
        self.process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(within):
            return await self.process.wait()


@contextlib.asynccontextmanager
async def worker_process(stack: Stack, endpoint: str, **env: str) -> AsyncIterator[WorkerProcess]:
    process = await asyncio.create_subprocess_exec(
        *WORKER,
        env=stack.process_env(AWS_ENDPOINT_URL=endpoint, **env),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    worker = WorkerProcess(process)

    async def read_stdout() -> None:
        assert process.stdout is not None
        async for line in process.stdout:
            with contextlib.suppress(ValueError):
                worker.events.append(json.loads(line))

    async def read_stderr() -> None:
        assert process.stderr is not None
        worker.stderr = await process.stderr.read()

    readers = [asyncio.create_task(read_stdout()), asyncio.create_task(read_stderr())]
    try:
        yield worker
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await asyncio.gather(*readers)


@pytest.fixture
async def short(stack: Stack) -> Stack:
    """The contract's resources with an 8 s converse visibility timeout (redrive at 5)."""
    resources = Resources(prefix="brownout", converse_visibility_timeout=VISIBILITY)
    return await stack.with_resources(resources)


@pytest.fixture
async def proxy(short: Stack) -> AsyncIterator[FaultProxy]:
    faults = FaultProxy(short.endpoint)
    await faults.start()
    yield faults
    await faults.close()


def worker_env(tmp_path: Path) -> dict[str, str]:
    return {
        "WORKER_CONCURRENCY": "8",
        "SHUTDOWN_GRACE_SECONDS": "4",
        "RETRY_BASE_SECONDS": "0.5",
        "RETRY_MAX_SECONDS": "4",
        "HEALTH_FILE": str(tmp_path / "health"),
        "HEALTH_MAX_SILENCE_SECONDS": "10",
    }


async def once_running(worker: WorkerProcess, proxy: FaultProxy, fault: Fault) -> None:
    """The brownout begins once the worker runs: a worker that cannot use a resource at
    start-up does not start at all (tests/integration/test_start_when_able.py)."""
    await worker.until("clerk.converse_worker_started")
    proxy.inject(fault)


async def send(stack: Stack, ids: list[str]) -> None:
    await asyncio.gather(
        *(stack.send_command(command_id=c, conversation_id=f"matter-{c}") for c in ids)
    )


async def dead_lettered(stack: Stack) -> int:
    return await stack.depth(await stack.dead_letter_url())


async def assert_served_once(stack: Stack, worker: WorkerProcess, ids: list[str]) -> dict[str, int]:
    """Every command forwarded exactly once, none dead-lettered; returns the receive count
    each was served on."""
    await stack.until_empty("CONVERSE_QUEUE_URL", within=180)
    prompts = await stack.drain("MODEL_QUEUE_URL", expect=len(ids), within=60)
    prompts += await stack.drain("MODEL_QUEUE_URL")  # a late duplicate too
    served = Counter(body_of(m)["command_id"] for m in prompts)
    assert set(served) == set(ids)
    assert set(served.values()) == {1}
    assert await dead_lettered(stack) == 0
    return {
        e["command_id"]: e["receive_count"]
        for e in worker.of("clerk.converse_prompt_forwarded")
        if "command_id" in e
    }


BROWNOUTS = {
    # A table throttled on every call: a hot partition, on-demand scaling, a regional event.
    "dynamodb": (lambda stack: Fault("dynamodb", "throughput"), "dynamodb", 30.0),
    # The model queue refusing every send (the converse queue is answering).
    "model-queue-sends": (
        lambda stack: Fault(
            "sqs",
            "throttled",
            operations=("SendMessageBatch", "SendMessage"),
            queue=stack.env["MODEL_QUEUE_URL"].rsplit("/", 1)[-1],
        ),
        "model_queue",
        25.0,
    ),
}


@pytest.mark.parametrize("name", list(BROWNOUTS))
async def test_a_full_brownout_dead_letters_nothing_and_serves_everything_once(
    short: Stack, proxy: FaultProxy, tmp_path: Path, name: str
) -> None:
    """GIVEN a backlog of 30 commands and a steady flow of one every half second, WHEN the
    dependency fails every call for several times the old threshold, THEN the worker
    judges it failing (once), receives nothing while it is, keeps passing its liveness
    probe, and once it recovers serves every command exactly once, none dead-lettered,
    none on more than its third receive."""
    fault, dependency, seconds = BROWNOUTS[name]
    backlog = [f"b-{i}" for i in range(30)]
    flow = [f"f-{i}" for i in range(int(seconds * 2))]
    async with worker_process(short, proxy.endpoint, **worker_env(tmp_path)) as worker:
        await once_running(worker, proxy, fault(short))
        await send(short, backlog)
        await worker.until("clerk.converse_dependency_failing")
        receives_at_failing = proxy.snapshot().of("sqs", "ReceiveMessage")[0]
        healthy = []
        for i, command in enumerate(flow):
            await send(short, [command])
            await asyncio.sleep(seconds / len(flow))
            if i % 10 == 0:
                healthy.append(check(tmp_path / "health", time.time()))
        # While failing: not a receive (those under way when it opened aside).
        assert proxy.snapshot().of("sqs", "ReceiveMessage")[0] - receives_at_failing <= 1
        assert worker.count("clerk.converse_dependency_recovered") == 0
        failing_calls = proxy.snapshot().answered
        proxy.clear()
        served_on = await assert_served_once(short, worker, backlog + flow)
        assert worker.count("clerk.converse_dependency_failing") == 1
        assert worker.count("clerk.converse_dependency_recovered") == 1
        [event] = worker.of("clerk.converse_dependency_failing")
        assert (event["dependency"], event["kind"]) == (dependency, "throttled")
        assert all(ok for ok, _ in healthy), healthy
        assert max(served_on.values()) <= 3, Counter(served_on.values())
        assert sum(failing_calls.values()) < 200  # bounded: probes, not a hammering
        assert await worker.stop() == 0
    assert b"Traceback" not in worker.stderr


async def test_partial_throttling_of_every_service_serves_everything_once(
    short: Stack, proxy: FaultProxy, tmp_path: Path
) -> None:
    """25% of DynamoDB calls and 25% of SQS sends, deletes and visibility changes throttled,
    10% of everything else a 500, for the whole run, start-up included: the start-up checks
    retry what they meet, botocore's retries absorb nearly all of the rest, and whatever gets
    through is a passing failure."""
    ids = [f"p-{i}" for i in range(60)]
    await send(short, ids)
    proxy.inject(
        Fault("dynamodb", "throttling", share=0.25),
        Fault(
            "sqs",
            "throttled",
            share=0.25,
            operations=("SendMessageBatch", "DeleteMessageBatch", "ChangeMessageVisibilityBatch"),
        ),
        Fault("sqs", "server", share=0.1),
        Fault("dynamodb", "server", share=0.1),
    )
    async with worker_process(short, proxy.endpoint, **worker_env(tmp_path)) as worker:
        await assert_served_once(short, worker, ids)
        assert sum(proxy.snapshot().answered.values()) > 20  # the faults were met
        assert await worker.stop() == 0
    assert b"Traceback" not in worker.stderr


async def test_a_sigterm_during_a_brownout_exits_zero_and_releases_what_it_held(
    short: Stack, proxy: FaultProxy, tmp_path: Path
) -> None:
    """The held turns end at once on the stop (their messages made visible, their receive
    counts unspent); a worker after the brownout serves every command once."""
    ids = [f"s-{i}" for i in range(12)]
    async with worker_process(short, proxy.endpoint, **worker_env(tmp_path)) as worker:
        await once_running(worker, proxy, Fault("dynamodb", "throughput"))
        await send(short, ids)
        await worker.until("clerk.converse_dependency_failing")
        assert await worker.stop(within=20) == 0
    assert b"Traceback" not in worker.stderr
    assert worker.count("clerk.converse_messages_released") >= 1
    proxy.clear()
    async with running_worker(short.settings()):
        await short.until_empty("CONVERSE_QUEUE_URL", within=120)
    prompts = await short.drain("MODEL_QUEUE_URL")
    assert Counter(body_of(m)["command_id"] for m in prompts) == Counter(ids)
    assert await dead_lettered(short) == 0


async def test_a_command_whose_own_payload_keeps_failing_is_still_dead_lettered(
    short: Stack, proxy: FaultProxy, tmp_path: Path
) -> None:
    """A pointer command whose object S3 never serves (every GetObject a 500) among valid
    commands: its failures are its own (S3 is no dependency of every turn, and the others
    succeed in between), so it spends its receives as before and the redrive policy moves
    it to the dead-letter queue; every other command is served once."""
    await short.seed("matter-x", exchanges(2))
    key = "in/unreadable.json"
    pointer = json.dumps(
        [POINTER_CLASS, {"s3BucketName": short.env["PAYLOAD_BUCKET"], "s3Key": key}]
    )
    await short.clients.sqs.send_message(
        QueueUrl=short.env["CONVERSE_QUEUE_URL"],
        MessageBody=pointer,
        MessageAttributes={"ExtendedPayloadSize": {"DataType": "Number", "StringValue": "100"}},
    )
    ids = [f"v-{i}" for i in range(20)]
    proxy.inject(Fault("s3", "server", operations=("GetObject",)))
    async with worker_process(short, proxy.endpoint, **worker_env(tmp_path)) as worker:
        await send(short, ids)
        dlq = await short.dead_letter_url()
        async with asyncio.timeout(180):
            while await short.depth(dlq) < 1:
                await asyncio.sleep(0.2)
        await assert_served_once_but_one(short, ids)
        assert worker.count("clerk.converse_dependency_failing") == 0
        assert await worker.stop() == 0


async def assert_served_once_but_one(stack: Stack, ids: list[str]) -> None:
    await stack.until_empty("CONVERSE_QUEUE_URL", within=180)
    prompts = await stack.drain("MODEL_QUEUE_URL", expect=len(ids), within=60)
    assert Counter(body_of(m)["command_id"] for m in prompts) == Counter(ids)
    assert await dead_lettered(stack) == 1
