"""The local AWS of ``make bench``, each server in its own process on 127.0.0.1.

- moto (:func:`localaws.moto.running_moto`) for SQS and S3: its own process, so its CPU is
  not charged to the benchmark driver and its GIL does not throttle the driver's event loop;
- dynalite for DynamoDB (:mod:`localaws.dynalite`): moto's Query scans the whole table, so
  every part that measures the worker points DynamoDB at dynalite through
  ``AWS_ENDPOINT_URL_DYNAMODB``.

::

    with local_servers() as servers:
        env = servers.environ()   # AWS_ENDPOINT_URL (moto), AWS_ENDPOINT_URL_DYNAMODB, creds
        with delayed(servers, RoundTrips()) as far:
            far.child_environ()   # the same servers, a network round trip away
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from localaws.dynalite import start_dynalite
from localaws.endpoints import REGION, aws_environ
from localaws.moto import REPO_ROOT, quiet_werkzeug, running_moto, stop
from worker.app.resources import history_table_definition

T = TypeVar("T")
#: The two regimes of the server parts: the local servers as they are, and a network away.
DIRECT, DELAYED = "direct", "delayed"


@dataclass(frozen=True, slots=True)
class RoundTrips:
    """The network round trip the latency proxy adds per exchange, in milliseconds.
    Sources and reasoning: docs/benchmarks/method.md, "The injected latency"."""

    sqs_ms: float = 12.0
    dynamodb_ms: float = 5.0


@dataclass(frozen=True, slots=True)
class Servers:
    moto: str
    dynamodb: str
    moto_pid: int
    dynalite_pid: int | None
    #: The latency proxy in front of both (:func:`delayed`), if any.
    proxy_pid: int | None = None
    round_trips: RoundTrips | None = None

    def environ(self) -> dict[str, str]:
        """The AWS variables of a process pointed at these servers (nothing else)."""
        return aws_environ(self.moto, dynamodb=self.dynamodb)

    def child_environ(self, **extra: str) -> dict[str, str]:
        """This process's environment, AWS variables replaced by ours, plus ``extra``."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(self.environ())
        env.update(extra)
        return env

    def round_trips_ms(self) -> dict[str, float] | None:
        trips = self.round_trips
        return None if trips is None else {"sqs_ms": trips.sqs_ms, "dynamodb_ms": trips.dynamodb_ms}


@contextlib.contextmanager
def local_servers(*, dynalite: bool = True) -> Iterator[Servers]:
    """moto, and dynalite unless ``dynalite=False`` (then moto serves DynamoDB too)."""
    quiet_werkzeug()
    with running_moto() as (moto, moto_pid):
        if not dynalite:
            yield Servers(moto=moto, dynamodb=moto, moto_pid=moto_pid, dynalite_pid=None)
            return
        server = start_dynalite()
        try:
            yield Servers(
                moto=moto,
                dynamodb=server.endpoint,
                moto_pid=moto_pid,
                dynalite_pid=server.process.pid,
            )
        finally:
            stop(server.process)


@contextlib.contextmanager
def delayed(servers: Servers, round_trips: RoundTrips) -> Iterator[Servers]:
    """The same servers behind :mod:`localaws.proxy` (its own process): moto (SQS, S3) a
    ``sqs_ms`` round trip away, DynamoDB a ``dynamodb_ms`` one."""
    routes = [f"{servers.moto}={round_trips.sqs_ms:g}"]
    if servers.dynamodb != servers.moto:
        routes.append(f"{servers.dynamodb}={round_trips.dynamodb_ms:g}")
    process = subprocess.Popen(
        [sys.executable, "-m", "localaws.proxy", *(f"--route={r}" for r in routes)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=REPO_ROOT,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"localaws.proxy exited with code {process.wait()} at start")
        endpoints = json.loads(line)["endpoints"]
        yield Servers(
            moto=endpoints[servers.moto],
            dynamodb=endpoints.get(servers.dynamodb, endpoints[servers.moto]),
            moto_pid=servers.moto_pid,
            dynalite_pid=servers.dynalite_pid,
            proxy_pid=process.pid,
            round_trips=round_trips,
        )
    finally:
        stop(process)


@contextlib.contextmanager
def pointed_at(servers: Servers) -> Iterator[Servers]:
    """This process's AWS variables pointed at ``servers`` for the block, as they were after
    (a later part starts servers of its own)."""
    saved = dict(os.environ)
    os.environ.update(servers.environ())
    try:
        yield servers
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def both_regimes(say: Callable[[str], None]) -> Iterator[dict[str, Servers]]:
    """moto and dynalite, and the latency proxy in front of them: {regime: servers}, this
    process pointed at the servers as they are."""
    trips = RoundTrips()
    say(f"starting moto (SQS, S3) and dynalite (DynamoDB) on 127.0.0.1, and the latency proxy "
        f"(SQS {trips.sqs_ms:g} ms, DynamoDB {trips.dynamodb_ms:g} ms a round trip)")  # fmt: skip
    with local_servers() as servers, delayed(servers, trips) as far, pointed_at(servers):
        yield {DIRECT: servers, DELAYED: far}


def measured_on_local_servers(measure: Callable[[Any, Servers], Awaitable[T]]) -> T:
    """``measure(clients, servers)`` run once against fresh local servers (moto and
    dynalite), with this process's AWS variables pointed at them: a part's standalone run."""
    from worker.app.runtime import aws_clients

    async def run(servers: Servers) -> T:
        async with aws_clients(pool_size=64) as clients:
            return await measure(clients, servers)

    with local_servers() as servers, pointed_at(servers):
        return asyncio.run(run(servers))


class LocalDynamoDB:
    """The DynamoDB client ``worker bootstrap``'s code gets here: dynalite has no TTL
    (``UpdateTimeToLive`` is an unknown operation there, and no benchmark runs long enough
    to need one), and a table named in ``existing`` is reported as there already."""

    def __init__(self, client: Any, existing: tuple[str, ...] = ()) -> None:
        self._client = client
        self._existing = existing

    async def update_time_to_live(self, **_: Any) -> dict[str, Any]:
        return {}

    async def list_tables(self, **kwargs: Any) -> dict[str, Any]:
        listed = await self._client.list_tables(**kwargs)
        return {**listed, "TableNames": [*listed.get("TableNames", []), *self._existing]}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


async def create_table(dynamodb: Any, name: str) -> None:
    """The history table of the contract, waited for at dynalite's pace (not every 20 s)."""
    await dynamodb.create_table(**history_table_definition(name))
    await dynamodb.get_waiter("table_exists").wait(
        TableName=name, WaiterConfig={"Delay": 0.1, "MaxAttempts": 300}
    )


async def create_bench_resources(clients: Any, prefix: str, table: str) -> dict[str, str]:
    """The contract's queues and bucket under ``prefix`` (``worker bootstrap``'s own code),
    pointed at the history table ``table``, which is created if it is not there yet."""
    from worker.app.resources import Resources, create_resources

    resources = Resources(prefix=prefix)
    if table not in (await clients.dynamodb.list_tables())["TableNames"]:
        await create_table(clients.dynamodb, table)
    env = await create_resources(
        clients.sqs,
        LocalDynamoDB(clients.dynamodb, existing=(resources.table,)),
        clients.s3,
        resources,
        region=REGION,
    )
    env["HISTORY_TABLE"] = table
    return env
