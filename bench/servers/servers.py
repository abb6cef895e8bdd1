"""The local AWS of ``make bench``, each server in its own process on 127.0.0.1.

- moto (``moto_server``) for SQS and S3: its own process, so its CPU is not charged to
  the benchmark driver and its GIL does not throttle the driver's event loop;
- dynalite for DynamoDB (:mod:`bench.servers.dynalite`): moto's Query scans the whole table, so
  every part that measures the worker points DynamoDB at dynalite through
  ``AWS_ENDPOINT_URL_DYNAMODB``.

::

    with local_servers() as servers:
        env = servers.environ()   # AWS_ENDPOINT_URL (moto), AWS_ENDPOINT_URL_DYNAMODB, creds
        with delayed(servers, RoundTrips()) as far:
            far.child_environ()   # the same servers, a network round trip away
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.servers.dynalite import free_port, start_dynalite, stop
from worker.cli.bootstrap import history_table_definition

HOST = "127.0.0.1"
REPO_ROOT = Path(__file__).resolve().parents[2]
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}


@dataclass(frozen=True, slots=True)
class RoundTrips:
    """The network round trip the latency proxy adds per exchange, in milliseconds.
    Sources and reasoning: docs/BENCHMARKS.md, "The injected latency"."""

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
        env = dict(CREDENTIALS, AWS_ENDPOINT_URL=self.moto)
        if self.dynamodb != self.moto:
            env["AWS_ENDPOINT_URL_DYNAMODB"] = self.dynamodb
        return env

    def child_environ(self, **extra: str) -> dict[str, str]:
        """This process's environment, AWS variables replaced by ours, plus ``extra``."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(self.environ())
        env.update(extra)
        return env


def _wait_for_http(url: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    deadline = time.perf_counter() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"moto_server exited with code {process.returncode} at start")
        try:
            with socket.create_connection((host, int(port)), timeout=0.5):
                pass
            with urllib.request.urlopen(url + "/moto-api/data.json", timeout=2):  # noqa: S310
                return
        except OSError:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"moto_server did not answer on {url} in {timeout} s") from None
            time.sleep(0.05)


@contextlib.contextmanager
def running_moto(timeout: float = 30.0) -> Iterator[tuple[str, int]]:
    """``moto_server`` on 127.0.0.1 on a free port, its request log discarded."""
    port = free_port(HOST)
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.servers.moto_server", "-H", HOST, "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=REPO_ROOT,
    )
    url = f"http://{HOST}:{port}"
    try:
        _wait_for_http(url, process, timeout)
        yield url, process.pid
    finally:
        stop(process)


def reset_moto(url: str) -> None:
    """Forget every queue, message and bucket (``POST /moto-api/reset``)."""
    request = urllib.request.Request(url + "/moto-api/reset", method="POST")  # noqa: S310
    with urllib.request.urlopen(request, timeout=10):  # noqa: S310
        pass


@contextlib.contextmanager
def local_servers(*, dynalite: bool = True) -> Iterator[Servers]:
    """moto, and dynalite unless ``dynalite=False`` (then moto serves DynamoDB too)."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
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
    """The same servers behind :mod:`bench.servers.netdelay` (its own process): moto (SQS, S3) a
    ``sqs_ms`` round trip away, DynamoDB a ``dynamodb_ms`` one."""
    routes = [f"{servers.moto}={round_trips.sqs_ms:g}"]
    if servers.dynamodb != servers.moto:
        routes.append(f"{servers.dynamodb}={round_trips.dynamodb_ms:g}")
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.servers.netdelay", *(f"--route={r}" for r in routes)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=REPO_ROOT,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"bench.servers.netdelay exited with code {process.wait()} at start")
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
    from worker.cli.bootstrap import Resources, create_resources

    resources = Resources(prefix=prefix)
    if table not in (await clients.dynamodb.list_tables())["TableNames"]:
        await create_table(clients.dynamodb, table)
    env = await create_resources(
        clients.sqs,
        LocalDynamoDB(clients.dynamodb, existing=(resources.table,)),
        clients.s3,
        resources,
        region=CREDENTIALS["AWS_DEFAULT_REGION"],
    )
    env["HISTORY_TABLE"] = table
    return env
