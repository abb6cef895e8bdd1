"""``worker run`` with its AWS calls counted: the worker process the benchmarks measure.

It is ``worker.cli.main(["run"])`` itself (same settings from the environment, same
logging, same event loop choice, same signals) with these additions:

- every aioboto3 client the worker opens gets a :class:`bench.contenders.callcount.CallCounter`;
- SIGUSR1 writes a snapshot (calls, CPU seconds, peak RSS) to ``BENCH_STATS_PATH``,
  and one more is written when the worker exits;
- with ``BENCH_CALL_LOG`` set, every call's times go to that file at exit
  (:mod:`bench.contenders.calllog`);
- with ``BENCH_LOOP_TRACE`` set, every event-loop callback's start and end go to that
  file at exit (:mod:`bench.contenders.looptrace`).

``BENCH_CONSUMED_CAPACITY=1`` asks DynamoDB to return the capacity each Query and
UpdateItem consumed.

``BENCH_UNCLAIMED=1`` is a study, never the stage: the ledger grants every new command's claim
at once, in the process, without its UpdateItem (the done mark is still written). It
measures what the claim costs a lone command's path (:mod:`bench.parts.claim_cost`); it
gives up the guarantee the claim buys (a redelivered command would be forwarded twice).
Run: ``python -m bench.contenders.worker_process`` with the worker's environment.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from typing import Any

import worker.app.runtime as runtime
import worker.cli
from bench.contenders.callcount import CallCounter, install_snapshot_handler
from bench.contenders.calllog import call_log_from_environment, write_call_log
from bench.contenders.contenders import UNCLAIMED_ENV
from bench.contenders.looptrace import loop_trace_from_environment, write_loop_trace


def grant_claims_unasked() -> None:
    """Every claim of a new command granted at once, with the digest the real claim would
    have stored; the ledger's other calls (the done mark, leases) are left as they are."""
    from worker.adapters.ledger import DynamoCommandLedger
    from worker.ports import CommandClaim, MessageDigest

    async def begin(self: Any, hold: Any, *, lease: Any, now: Any, message: str) -> CommandClaim:
        return CommandClaim(state="started", digest=MessageDigest.drawn(message))

    DynamoCommandLedger.begin = begin  # type: ignore[method-assign]


def main() -> int:
    counter = CallCounter(consumed_capacity=os.environ.get("BENCH_CONSUMED_CAPACITY") == "1")
    writer = install_snapshot_handler(counter)
    calls = call_log_from_environment()
    loop_trace = loop_trace_from_environment()
    original_clients = runtime.aws_clients
    original_run = runtime.run_worker

    @contextlib.asynccontextmanager
    async def counted_clients(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async with original_clients(*args, **kwargs) as clients:
            # The receives have a client of their own (no retries): counted like the rest.
            receive = clients.sqs_receive
            for client in (clients.sqs, clients.dynamodb, clients.s3, *filter(None, [receive])):
                counter.attach(client)
                if calls is not None:
                    calls.attach(client)
            yield clients

    async def run_worker(settings: Any, stopping: asyncio.Event) -> None:
        if writer is not None:  # as a loop callback: never in the middle of a count
            asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, writer.write)
        await original_run(settings, stopping)

    if os.environ.get(UNCLAIMED_ENV) == "1":
        grant_claims_unasked()
    runtime.aws_clients = counted_clients  # type: ignore[assignment]
    runtime.run_worker = run_worker  # type: ignore[assignment]
    try:
        return worker.cli.main(["run"])
    finally:
        if writer is not None:
            writer.write()
        write_call_log(calls)
        write_loop_trace(loop_trace)


if __name__ == "__main__":
    sys.exit(main())
