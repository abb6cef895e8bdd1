"""The benchmark's traffic: converse commands in, prompt payloads out, both queues shallow.

moto's SQS slows sharply with a backlog (``docs/benchmarks/method.md``, "The local
servers"), so nothing here lets a queue grow: the closed-loop feeder keeps at most ``window``
commands between the converse queue and the model queue; the open-loop feeder sends at a fixed
rate below saturation; the drain empties the model queue as payloads arrive.

Arrival time is the model queue's own ``SentTimestamp`` (when SQS accepted the
payload), so how fast the drain polls does not colour the latencies.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.load.workload import Command


@dataclass(frozen=True, slots=True)
class Arrival:
    command_id: str
    arrived_ms: int  # the model queue's SentTimestamp (epoch milliseconds)
    body_bytes: int


@dataclass
class Drain:
    """Receives and deletes everything on a queue, recording each payload's arrival."""

    sqs: Any
    url: str
    tasks: int = 2
    #: Seconds to wait after a receive that did not fill a batch. Arrival times are SQS's
    #: own, so a lazy drain costs the latency figures nothing and moto far fewer calls.
    pause: float = 0.0
    arrivals: dict[str, Arrival] = field(default_factory=dict)
    duplicates: int = 0  # a second payload (another SQS message) for a command
    redelivered: int = 0  # the same SQS message handed to the drain twice
    _message_ids: set[str] = field(default_factory=set)
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    _running: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.arrivals)

    def start(self) -> None:
        self._running = [asyncio.create_task(self._loop()) for _ in range(self.tasks)]

    async def stop(self) -> None:
        for task in self._running:
            task.cancel()
        for task in self._running:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _loop(self) -> None:
        while True:
            response = await self.sqs.receive_message(
                QueueUrl=self.url,
                MaxNumberOfMessages=10,
                WaitTimeSeconds=1,
                MessageSystemAttributeNames=["SentTimestamp"],
            )
            messages = response.get("Messages", [])
            if len(messages) < 10 and self.pause:
                await asyncio.sleep(self.pause)
            if not messages:
                continue
            await self.sqs.delete_message_batch(
                QueueUrl=self.url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                    for i, m in enumerate(messages)
                ],
            )
            async with self._changed:
                for message in messages:
                    if message["MessageId"] in self._message_ids:
                        self.redelivered += 1
                        continue
                    self._message_ids.add(message["MessageId"])
                    body = message["Body"]
                    document = json.loads(body)
                    command_id = (
                        document.get("command_id", "?")
                        if isinstance(document, dict)
                        else f"pointer:{message['MessageId']}"
                    )
                    if command_id in self.arrivals:
                        self.duplicates += 1
                        continue
                    self.arrivals[command_id] = Arrival(
                        command_id,
                        int(message["Attributes"]["SentTimestamp"]),
                        len(body.encode("utf-8")),
                    )
                self._changed.notify_all()

    async def wait(self, predicate: Callable[[], bool], within: float) -> bool:
        """Wait until ``predicate()`` holds; False if ``within`` seconds pass first."""
        async with self._changed:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(within):
                    await self._changed.wait_for(predicate)
            return predicate()

    async def wait_for(self, command_ids: Sequence[str], within: float) -> bool:
        return await self.wait(lambda: all(c in self.arrivals for c in command_ids), within)


@contextlib.asynccontextmanager
async def draining(sqs: Any, url: str, **options: Any) -> AsyncIterator[Drain]:
    """A :class:`Drain` on ``url``, running for the block."""
    drain = Drain(sqs, url, **options)
    drain.start()
    try:
        yield drain
    finally:
        await drain.stop()


async def send_batch(sqs: Any, url: str, commands: Sequence[Command]) -> None:
    response = await sqs.send_message_batch(
        QueueUrl=url,
        Entries=[{"Id": str(i), "MessageBody": c.body} for i, c in enumerate(commands)],
    )
    if response.get("Failed"):
        raise RuntimeError(f"SendMessageBatch refused entries: {response['Failed']}")


async def feed_closed_loop(
    sqs: Any,
    url: str,
    commands: Sequence[Command],
    drain: Drain,
    *,
    window: int,
    progress: Callable[[int], None] | None = None,
) -> None:
    """Send ``commands`` in batches of ten, never more than ``window`` not yet arrived.

    Everything sent before has arrived already: arrivals past the drain's count at the
    start are these commands'."""
    base = drain.count

    def arrived() -> int:
        return drain.count - base

    sent = 0
    next_report = 0
    while sent < len(commands):
        needed = sent - (window - 10)  # arrivals before the next batch may go
        await drain.wait(lambda needed=needed: arrived() >= needed, within=60)
        if arrived() < needed:
            raise RuntimeError(
                f"no progress for 60 s: {sent} sent, {arrived()} arrived on the model queue"
            )
        batch = commands[sent : sent + 10]
        await send_batch(sqs, url, batch)
        sent += len(batch)
        if progress is not None and sent >= next_report:
            progress(sent)
            next_report += max(10, len(commands) // 4)


async def feed_at_rate(
    sqs: Any,
    url: str,
    commands: Sequence[Command],
    *,
    rate: float,
    sent_at: dict[str, float] | None = None,
) -> float:
    """Send one command every ``1/rate`` s on a fixed schedule (open loop: a slow send
    does not delay the next); returns the achieved rate."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    pending: set[asyncio.Task[Any]] = set()

    async def send_one(command: Command) -> None:
        if sent_at is not None:
            sent_at[command.command_id] = time.time()
        await sqs.send_message(QueueUrl=url, MessageBody=command.body)

    for i, command in enumerate(commands):
        delay = start + i / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(send_one(command))
        pending.add(task)
        task.add_done_callback(pending.discard)
    if pending:
        await asyncio.gather(*pending)
    elapsed = loop.time() - start
    return len(commands) / elapsed if elapsed > 0 else float("inf")
