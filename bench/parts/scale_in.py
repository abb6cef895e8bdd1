"""The scale-in wait: how long a command sent just after a worker stopped waits to be served.

A worker idle on its long poll gets SIGTERM; once it has exited, a command is sent and a
second worker starts. If the first worker left its poll parked on the server, the server
hands it the command, and the command stays invisible for a whole visibility timeout::

    .venv/bin/python -m bench.parts.scale_in              # RECEIVE_WAIT_SECONDS=20, as deployed
    .venv/bin/python -m bench.parts.scale_in --wait 5
    .venv/bin/python -m bench.parts.scale_in --during     # sent while the first worker stops

It starts its own moto server on 127.0.0.1 (which parks long polls as SQS does) and prints
one JSON line: the first worker's stop time, the command's wait, its receive count.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

from bench.servers.servers import Servers, local_servers
from worker.app.resources import Resources, create_resources
from worker.app.runtime import aws_clients

WORKER = [sys.executable, "-m", "worker.cli", "run"]


async def start_worker(env: dict[str, str]) -> asyncio.subprocess.Process:
    """``worker run``, returned once it has logged that it is consuming."""
    process = await asyncio.create_subprocess_exec(
        *WORKER, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    assert process.stdout is not None
    while line := await process.stdout.readline():
        if b"clerk.converse_worker_started" in line:
            return process
    raise RuntimeError(f"worker exited with {await process.wait()} before it started")


async def forwarded(process: asyncio.subprocess.Process, within: float) -> dict[str, Any]:
    """The worker's ``clerk.converse_prompt_forwarded`` event."""
    assert process.stdout is not None
    async with asyncio.timeout(within):
        while line := await process.stdout.readline():
            event = json.loads(line)
            if event.get("event") == "clerk.converse_prompt_forwarded":
                return dict(event)
    raise RuntimeError("worker exited before forwarding")


async def exit_time(process: asyncio.subprocess.Process) -> float:
    await process.wait()
    return time.perf_counter()


async def measure(servers: Servers, wait: int, idle: float, during: bool) -> dict[str, Any]:
    os.environ.update(servers.environ())
    async with aws_clients() as clients:
        env = await create_resources(
            clients.sqs, clients.dynamodb, clients.s3, Resources(), region="us-east-1"
        )
        child = servers.child_environ(**env, RECEIVE_WAIT_SECONDS=str(wait))
        first = await start_worker(child)
        await asyncio.sleep(idle)  # parked on its long poll
        stopped_at = time.perf_counter()
        first.send_signal(signal.SIGTERM)
        exited = asyncio.ensure_future(exit_time(first))
        if not during:
            await exited
        command = {"type": "converse", "command_id": "c-1", "conversation_id": "m-1"}
        await clients.sqs.send_message(
            QueueUrl=env["CONVERSE_QUEUE_URL"],
            MessageBody=json.dumps(command | {"message": "What does clause 14.2 say?"}),
        )
        sent_at = time.perf_counter()
        second = await start_worker(child)
        try:
            event = await forwarded(second, within=180)
            served_seconds = time.perf_counter() - sent_at
        finally:
            second.send_signal(signal.SIGTERM)
            await second.wait()
        stop_seconds = await exited - stopped_at
    return {
        "sent": "while the first worker stops" if during else "after it exited",
        "receive_wait_seconds": wait,
        "first_worker_stop_seconds": round(stop_seconds, 1),
        "command_served_after_seconds": round(served_seconds, 1),
        "receive_count": event.get("receive_count", "not logged"),
        "visibility_timeout": Resources().converse_visibility_timeout,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wait", type=int, default=20, help="RECEIVE_WAIT_SECONDS")
    parser.add_argument("--idle", type=float, default=2.0, help="seconds idle before SIGTERM")
    parser.add_argument(
        "--during", action="store_true", help="send the command while the first worker stops"
    )
    args = parser.parse_args(argv)
    with local_servers(dynalite=False) as servers:
        result = asyncio.run(measure(servers, args.wait, args.idle, args.during))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
