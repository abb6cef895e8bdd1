"""Scale-in never hides a command: `worker run` processes stopped and started on the moto
server, which parks long polls as SQS does.

A long poll cancelled on the client stays parked on the server, and the next message
sent goes to it and then stays invisible for a whole visibility timeout (60 s here).
The worker lets its poll return on SIGTERM instead, and releases what it brings.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections import Counter
from typing import Any

import pytest

from tests.integration.conftest import PollsByQueue, Stack, body_of
from worker.app.resources import CONVERSE_VISIBILITY_TIMEOUT
from worker.app.runtime import queue_name

pytestmark = pytest.mark.integration

WORKER = [sys.executable, "-m", "worker.cli", "run"]
#: Long enough that a poll cancelled on a stop would still be parked when the next command
#: comes (the old stop took ~1.3 s, and let the poll 1 s to return); short enough to keep
#: the tests quick: a stop now waits for the poll, so up to this long.
RECEIVE_WAIT_SECONDS = "5"
#: Seconds between two commands while workers come and go. Denser traffic would hide the
#: fault: a parked poll that gets a message within the old 1 s of grace returned it.
COMMAND_GAP_SECONDS = 0.5
#: Commands sent during each scale-in cycle, at least: the next cycle waits for them.
COMMANDS_PER_CYCLE = 2


class WorkerProcess:
    """One `worker run`, its JSON log lines read as they come (so its pipe never fills)."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.events: list[dict[str, Any]] = []
        self.started = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, stack: Stack, **env: str) -> WorkerProcess:
        """Start a worker and return once it is consuming."""
        process = await asyncio.create_subprocess_exec(
            *WORKER,
            env=stack.process_env(RECEIVE_WAIT_SECONDS=RECEIVE_WAIT_SECONDS, **env),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        worker = cls(process)
        async with asyncio.timeout(30):
            await worker.started.wait()
        return worker

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while line := await self.process.stdout.readline():
            event = json.loads(line)
            self.events.append(event)
            if event["event"] == "clerk.converse_worker_started":
                self.started.set()

    def forwarded(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == "clerk.converse_prompt_forwarded"]

    async def stop(self) -> int:
        """SIGTERM, then wait for the exit code (the drain included)."""
        self.process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            code = await self.process.wait()
            await self._reader
        return code

    def kill(self) -> None:
        if self.process.returncode is None:
            self.process.kill()


async def test_a_command_sent_after_an_idle_worker_stopped_is_served_at_once(
    stack: Stack, moto_polls: PollsByQueue
) -> None:
    """GIVEN a worker idle on its long poll (the poll has reached the server), WHEN it gets
    SIGTERM and, once it has exited, a command is sent and a second worker starts, THEN the
    command is served on its first receive, well within the visibility timeout it would
    have sat out had the stopped worker left a poll parked on the server (the bound is a
    third of that timeout, not a speed: a slow machine's worker start must not fail it)."""
    converse_polls = moto_polls.of(queue_name(stack.env["CONVERSE_QUEUE_URL"]))
    first = await WorkerProcess.start(stack)
    try:
        await converse_polls.reached(1)  # on its long poll, on the server
        assert await first.stop() == 0
    finally:
        first.kill()
    await stack.send_command(command_id="c-after", conversation_id="matter-scale")
    loop = asyncio.get_running_loop()
    sent_at = loop.time()
    second = await WorkerProcess.start(stack)
    try:
        [message] = await stack.drain("MODEL_QUEUE_URL", expect=1, within=30)
        served_after = loop.time() - sent_at
        assert await second.stop() == 0
    finally:
        second.kill()
    assert body_of(message)["command_id"] == "c-after"
    assert served_after < CONVERSE_VISIBILITY_TIMEOUT / 3
    [forwarded] = second.forwarded()
    assert forwarded["receive_count"] == 1
    assert first.forwarded() == []


async def test_ten_scale_in_cycles_while_commands_flow_leave_no_command_waiting(
    stack: Stack,
) -> None:
    """GIVEN commands sent two a second, WHEN a new worker starts and the previous one
    gets SIGTERM, ten times over, with at least two commands sent during each cycle,
    THEN every command is served exactly once, each within a third of the visibility
    timeout of its sending: none sat out a timeout in a poll that a stopped worker left
    parked.

    The cycles wait for the commands by count: how many are sent while ten workers start
    must not depend on how fast the machine starts them."""
    loop = asyncio.get_running_loop()
    sent: dict[str, float] = {}
    served: dict[str, float] = {}
    copies: Counter[str] = Counter()
    producing = True
    sent_more = asyncio.Condition()

    async def produce() -> None:
        while producing:
            command_id = f"c-{len(sent):03d}"
            sent[command_id] = loop.time()
            await stack.send_command(command_id=command_id, conversation_id=f"m-{len(sent) % 7}")
            async with sent_more:
                sent_more.notify_all()
            await asyncio.sleep(COMMAND_GAP_SECONDS)

    async def commands_sent(count: int) -> None:
        async with sent_more:
            await sent_more.wait_for(lambda: len(sent) >= count)

    def record(messages: list[dict[str, Any]]) -> None:
        for message in messages:
            command_id = body_of(message)["command_id"]
            copies[command_id] += 1
            served.setdefault(command_id, loop.time())

    reading = True

    async def consume_model_queue() -> None:
        while reading:
            record(await stack.drain("MODEL_QUEUE_URL", within=1))

    producer = asyncio.create_task(produce())
    reader = asyncio.create_task(consume_model_queue())
    workers = [await WorkerProcess.start(stack)]
    stops: list[asyncio.Task[int]] = []
    try:
        for _ in range(10):
            cycle_starts_at = len(sent)
            workers.append(await WorkerProcess.start(stack))
            stops.append(asyncio.create_task(workers[-2].stop()))
            async with asyncio.timeout(60):
                await commands_sent(cycle_starts_at + COMMANDS_PER_CYCLE)
        producing = False
        await producer
        async with asyncio.timeout(CONVERSE_VISIBILITY_TIMEOUT):
            while set(served) != set(sent):
                await asyncio.sleep(0.2)
        assert await workers[-1].stop() == 0
        assert [await stop for stop in stops] == [0] * 10
    finally:
        producer.cancel()
        for worker in workers:
            worker.kill()
        reading = False
        await reader  # its last drain recorded, not cut off
    # Every worker has exited: whatever any of them sent (a late duplicate too) is there now.
    record(await stack.drain("MODEL_QUEUE_URL"))
    waits = {command_id: served[command_id] - sent[command_id] for command_id in sent}
    assert copies == Counter(sent.keys())  # every command sent, served exactly once
    assert max(waits.values()) < CONVERSE_VISIBILITY_TIMEOUT / 3, sorted(waits.values())[-5:]
