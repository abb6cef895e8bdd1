"""Brownouts: DynamoDB, or the model queue's sends, failing every call for a minute or five,
with a backlog and a steady flow, on the CloudFormation defaults (converse visibility 60 s,
``maxReceiveCount`` 5) and the worker's default settings::

    .venv/bin/python -m bench.parts.brownout                      # 60 s and 300 s, both
    .venv/bin/python -m bench.parts.brownout --seconds 60 --only dynamodb
    .venv/bin/python -m bench.parts.brownout --seconds 300 --only dynamodb --flow 1

One moto server (its own process), the fault proxy (``localaws.fault_proxy``, in this
process) in front of it, one ``worker run`` (``WORKER_CONCURRENCY`` 16) pointed at the
proxy. Per scenario: a steady flow of 4 commands a second throughout; 20 s of normal
running; then a backlog of 200 commands at once and the fault switched on for the
brownout; then off, and 60 s more of the flow (longer if the queue has not drained). A
backlog of 200 without a fault, before the brownout, gives the worker's normal rate at
capacity on this machine. Prints one JSON line per scenario:
commands dead-lettered and duplicated, the highest receive count of a served command,
requests/s that reached the failing service during the brownout (answered by the proxy),
the seconds from recovery until every command sent before it was served, and the served
rate before the brownout and in the 30 s after recovery.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localaws.endpoints import aws_environ
from localaws.fault_proxy import Fault, FaultProxy
from localaws.moto import running_moto
from worker.app.resources import Resources, create_resources, dead_letter_name
from worker.app.runtime import Clients, aws_clients
from worker.telemetry.probe import check

WORKER = [sys.executable, "-m", "worker.cli", "run"]
FLOW_PER_SECOND = 4
BACKLOG = 200
WARM_SECONDS = 20.0
#: After recovery: the flow goes on this long, or until the queue has drained if longer.
AFTER_SECONDS = 60.0
#: The longest wait for the commands sent before recovery to be served.
DRAIN_WITHIN_SECONDS = 300.0
LOGS = Path(__file__).resolve().parents[2] / ".bench" / "brownout"

FAULTS: dict[str, tuple[str, Callable[[dict[str, str]], Fault]]] = {
    "dynamodb": ("dynamodb", lambda env: Fault("dynamodb", "throughput")),
    "model-queue-sends": (
        "sqs",
        lambda env: Fault(
            "sqs",
            "throttled",
            operations=("SendMessageBatch", "SendMessage"),
            queue=env["MODEL_QUEUE_URL"].rsplit("/", 1)[-1],
        ),
    ),
}


@dataclass
class Worker:
    process: asyncio.subprocess.Process
    forwarded: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    events: Counter[str] = field(default_factory=Counter)
    #: When the worker logged the dependency recovered (this process's clock).
    recovered_at: float | None = None

    def served(self) -> set[str]:
        return {e["command_id"] for _, e in self.forwarded if "command_id" in e}

    async def until_served(self, ids: set[str], within: float) -> float | None:
        """Seconds until every one of ``ids`` was forwarded, or None past ``within``."""
        start = time.monotonic()
        while not ids <= self.served():
            if time.monotonic() - start > within:
                return None
            await asyncio.sleep(0.25)
        return time.monotonic() - start


@contextlib.asynccontextmanager
async def worker(env: dict[str, str], log: Path) -> AsyncIterator[Worker]:
    process = await asyncio.create_subprocess_exec(
        *WORKER, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    running = Worker(process)

    async def read() -> None:
        assert process.stdout is not None
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("wb") as out:
            async for line in process.stdout:
                out.write(line)
                record(line)

    def record(line: bytes) -> None:
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            running.events[event.get("event", "")] += 1
            if event.get("event") == "clerk.converse_prompt_forwarded":
                running.forwarded.append((time.monotonic(), event))
            elif event.get("event") == "clerk.converse_dependency_recovered":
                running.recovered_at = time.monotonic()

    reader = asyncio.create_task(read())
    try:
        yield running
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            await asyncio.wait_for(process.wait(), 60)
        await reader


async def depth(clients: Clients, url: str) -> int:
    response = await clients.sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )
    return sum(int(v) for v in response["Attributes"].values())


async def drain(clients: Clients, url: str) -> list[str]:
    ids = []
    while True:
        response = await clients.sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1
        )
        messages = response.get("Messages", [])
        if not messages:
            return ids
        for message in messages:
            ids.append(json.loads(message["Body"])["command_id"])
        await clients.sqs.delete_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
            ],
        )


async def scenario(
    moto: str, name: str, seconds: float, flow_per_second: int = FLOW_PER_SECOND
) -> dict[str, Any]:
    service, fault_of = FAULTS[name]
    resources = Resources(prefix=f"brown-{name}-{int(seconds)}-{flow_per_second}")
    async with aws_clients() as clients:
        env = await create_resources(
            clients.sqs, clients.dynamodb, clients.s3, resources, region="us-east-1"
        )
        dlq = (
            await clients.sqs.get_queue_url(
                QueueName=dead_letter_name(f"{resources.prefix}-converse")
            )
        )["QueueUrl"]
        proxy = FaultProxy(moto)
        endpoint = await proxy.start()
        health = Path(tempfile.mkdtemp()) / "health"
        process_env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
            **aws_environ(endpoint),
            **env,
            "HEALTH_FILE": str(health),
        }
        sent: list[tuple[float, str]] = []
        counter = iter(range(10**9))

        async def send(count: int) -> None:
            ids = [f"{name}-{next(counter)}" for _ in range(count)]
            for start in range(0, count, 10):
                batch = ids[start : start + 10]
                await clients.sqs.send_message_batch(
                    QueueUrl=env["CONVERSE_QUEUE_URL"],
                    Entries=[
                        {
                            "Id": str(i),
                            "MessageBody": json.dumps(
                                {
                                    "type": "converse",
                                    "command_id": c,
                                    "conversation_id": f"matter-{c}",
                                    "message": "What does clause 14.2 say?",
                                }
                            ),
                        }
                        for i, c in enumerate(batch)
                    ],
                )
            now = time.monotonic()
            sent.extend((now, c) for c in ids)

        flowing = True

        async def flow() -> None:
            while flowing:
                await send(flow_per_second)
                await asyncio.sleep(1.0)

        unhealthy = []
        log = LOGS / f"{resources.prefix}.log"
        async with worker(process_env, log) as running:
            flow_task = asyncio.create_task(flow())
            await asyncio.sleep(WARM_SECONDS)
            # The normal rate at capacity: a backlog with no fault, the flow going on.
            await send(BACKLOG)
            normal_start = time.monotonic()
            normal_seconds = await running.until_served({c for _, c in sent}, 300)
            normal_rate = rate(running, normal_start, normal_start + (normal_seconds or 300))
            await send(BACKLOG)
            proxy.inject(fault_of(env))
            began = time.monotonic()
            answered_before = proxy.snapshot().of(service)[1]
            receives_before = proxy.snapshot().of("sqs", "ReceiveMessage")[0]
            while time.monotonic() - began < seconds:
                await asyncio.sleep(5)
                ok, line = check(health, time.time())
                if not ok:
                    unhealthy.append(line)
            answered = proxy.snapshot().of(service)[1] - answered_before
            receives = proxy.snapshot().of("sqs", "ReceiveMessage")[0] - receives_before
            proxy.clear()
            recovered = time.monotonic()
            before = {c for t, c in sent if t <= recovered}
            drained_in = await running.until_served(before, DRAIN_WITHIN_SECONDS)
            if time.monotonic() - recovered < AFTER_SECONDS:
                await asyncio.sleep(AFTER_SECONDS - (time.monotonic() - recovered))
            flowing = False
            await flow_task
            while await depth(clients, env["CONVERSE_QUEUE_URL"]):  # noqa: ASYNC110 a remote queue
                await asyncio.sleep(0.5)
            seen = running.recovered_at or recovered
            after_rate = rate(running, seen, seen + 30)
        await proxy.close()
        prompts = Counter(await drain(clients, env["MODEL_QUEUE_URL"]))
        receive_counts = Counter(e.get("receive_count") for _, e in running.forwarded)
        return {
            "scenario": name,
            "brownout_seconds": seconds,
            "flow_per_second": flow_per_second,
            "sent": len(sent),
            "served": len(prompts),
            "dead_lettered": await depth(clients, dlq),
            "duplicates": sum(n - 1 for n in prompts.values()),
            "highest_receive_count": max(k for k in receive_counts if k is not None),
            "receive_counts": dict(sorted(receive_counts.items())),
            "failing_requests_per_second": round(answered / seconds, 2),
            "receives_during_brownout": receives,
            "recovery_to_drained_seconds": None if drained_in is None else round(drained_in, 1),
            "recovery_seen_after_seconds": round(seen - recovered, 1),
            "backlog_after_recovery": len(before) - len(before & served_before(running, recovered)),
            "served_per_second_normal": normal_rate,
            "served_per_second_after_recovery": after_rate,
            "dependency_failing_events": running.events["clerk.converse_dependency_failing"],
            "probe_failed_events": running.events["clerk.converse_dependency_probe_failed"],
            "health_failures": len(unhealthy),
        }


def served_before(running: Worker, moment: float) -> set[str]:
    return {e["command_id"] for t, e in running.forwarded if t <= moment and "command_id" in e}


def rate(running: Worker, start: float, end: float) -> float:
    count = sum(1 for t, _ in running.forwarded if start <= t < end)
    return round(count / (end - start), 2)


async def main(
    seconds: list[float],
    only: list[str],
    say: Callable[[str], None] = print,
    flow_per_second: int = FLOW_PER_SECOND,
) -> list[dict[str, Any]]:
    """Each scenario in turn, on a moto server of its own; each result also ``say``-ed."""
    results = []
    with running_moto() as (moto, _pid):
        os.environ.update(aws_environ(moto))
        for length in seconds:
            for name in only:
                results.append(await scenario(moto, name, length, flow_per_second))
                say(json.dumps(results[-1]))
    return results


def measure(*, quick: bool, say: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """``make bench``'s part: 60 s and 5 min of each (``--quick``: 20 s of each)."""
    return asyncio.run(main([20.0] if quick else [60.0, 300.0], list(FAULTS), say))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--seconds", type=float, action="append", help="default: 60 and 300")
    parser.add_argument("--only", action="append", choices=list(FAULTS))
    parser.add_argument("--flow", type=int, default=FLOW_PER_SECOND, help="commands a second")
    args = parser.parse_args()
    asyncio.run(main(args.seconds or [60.0, 300.0], args.only or list(FAULTS), print, args.flow))
