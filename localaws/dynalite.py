"""dynalite: a real DynamoDB implementation on 127.0.0.1, for measuring per-turn reads.

moto's DynamoDB scans the whole table on every Query (``docs/benchmarks/method.md``, "The
local servers"), so per-turn costs are measured against dynalite instead. This module
installs it with npm into ``.bench/dynalite`` (once; nothing is downloaded beyond the npm
registry), starts it in memory on a free port, waits until it answers, and stops it::

    with running_dynalite() as endpoint:
        client = boto3.client("dynamodb", endpoint_url=endpoint, **DUMMY_CLIENT_ARGS)

Point only DynamoDB at it with ``AWS_ENDPOINT_URL_DYNAMODB=<endpoint>``; SQS and S3
can stay on moto through ``AWS_ENDPOINT_URL``.

Smoke check (install, start, create a table, put and query an item, stop)::

    .venv/bin/python -m localaws.dynalite
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import boto3
from botocore.config import Config

from localaws.endpoints import DUMMY_CLIENT_ARGS, HOST, free_port, wait_until_answering
from localaws.moto import stop
from worker.adapters.dynamodb import history_page_query
from worker.app.resources import history_table_definition

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DIR = REPO_ROOT / ".bench" / "dynalite"
PACKAGE = "dynalite@4"

_PROBE_CONFIG = Config(
    connect_timeout=0.5, read_timeout=2, retries={"max_attempts": 1, "mode": "standard"}
)


class DynaliteError(RuntimeError):
    """dynalite could not be installed or did not come up."""


def dynalite_binary(install_dir: Path = DEFAULT_DIR) -> Path:
    return install_dir / "node_modules" / ".bin" / "dynalite"


def ensure_installed(install_dir: Path = DEFAULT_DIR) -> Path:
    """Install dynalite@4 under ``install_dir`` unless it is already there; return the binary."""
    binary = dynalite_binary(install_dir)
    if binary.exists():
        return binary
    npm = shutil.which("npm")
    if npm is None:
        raise DynaliteError("npm is not on PATH: dynalite needs Node.js 20 and npm")
    install_dir.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--prefix", str(install_dir), PACKAGE],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0 or not binary.exists():
        raise DynaliteError(
            f"npm install {PACKAGE} failed (exit {result.returncode}): {result.stderr.strip()}"
        )
    return binary


def dynamodb_client(endpoint: str, config: Config | None = None) -> Any:
    """A boto3 DynamoDB client for ``endpoint`` with dummy credentials."""
    return boto3.client("dynamodb", endpoint_url=endpoint, config=config, **DUMMY_CLIENT_ARGS)


def wait_until_ready(
    endpoint: str, process: subprocess.Popen[bytes], timeout: float = 30.0
) -> None:
    """Wait for the port to accept connections, then for ``ListTables`` to succeed."""
    client = dynamodb_client(endpoint, _PROBE_CONFIG)
    try:
        wait_until_answering(
            endpoint, process, lambda: client.list_tables(Limit=1), timeout=timeout, name="dynalite"
        )
    except RuntimeError as exc:
        raise DynaliteError(str(exc)) from None


@dataclass(frozen=True, slots=True)
class Dynalite:
    """A started dynalite: its endpoint, its process and how long it took to answer."""

    endpoint: str
    process: subprocess.Popen[bytes]
    startup_seconds: float


def start_dynalite(
    install_dir: Path = DEFAULT_DIR, *, timeout: float = 30.0, log: IO[bytes] | None = None
) -> Dynalite:
    """Start an in-memory dynalite on 127.0.0.1 on a free port; return once it answers.

    ``startup_seconds`` runs from the spawn to the first successful ``ListTables``.
    The caller must :func:`stop` the process; :func:`running_dynalite` does that.
    """
    binary = ensure_installed(install_dir)
    dynamodb_client(f"http://{HOST}:1")  # load botocore's model before the clock starts
    port = free_port()
    endpoint = f"http://{HOST}:{port}"
    start = time.perf_counter()
    process = subprocess.Popen(
        [str(binary), "--host", HOST, "--port", str(port)],
        stdout=log if log is not None else subprocess.DEVNULL,
        stderr=subprocess.STDOUT if log is not None else subprocess.DEVNULL,
        cwd=install_dir,
    )
    try:
        wait_until_ready(endpoint, process, timeout)
    except BaseException:
        stop(process)
        raise
    return Dynalite(endpoint, process, time.perf_counter() - start)


@contextlib.contextmanager
def running_dynalite(
    install_dir: Path = DEFAULT_DIR, *, timeout: float = 30.0, log: IO[bytes] | None = None
) -> Iterator[str]:
    """Start an in-memory dynalite on 127.0.0.1 and yield its endpoint URL; stop it on exit.

    Its output goes to ``log`` (discarded by default). The data lives in memory only
    and is gone when the block ends. Tables stay CREATING for dynalite's default
    500 ms, as on DynamoDB: wait with the ``table_exists`` waiter.
    """
    server = start_dynalite(install_dir, timeout=timeout, log=log)
    try:
        yield server.endpoint
    finally:
        stop(server.process)


def _smoke(endpoint: str) -> dict[str, float]:
    """Create a table of the contract's layout, put a message, Query it newest-first."""
    client = dynamodb_client(endpoint)
    timings: dict[str, float] = {}
    start = time.perf_counter()
    client.create_table(**history_table_definition("history-smoke"))
    client.get_waiter("table_exists").wait(
        TableName="history-smoke", WaiterConfig={"Delay": 0.1, "MaxAttempts": 100}
    )
    timings["create_table_s"] = time.perf_counter() - start
    start = time.perf_counter()
    for seq, role in ((1, "user"), (2, "assistant")):
        client.put_item(
            TableName="history-smoke",
            Item={
                "pk": {"S": "matter-1187"},
                "sk": {"S": f"msg#{seq:012d}"},
                "seq": {"N": str(seq)},
                "role": {"S": role},
                "content": {"S": f"message {seq}"},
            },
        )
    client.put_item(
        TableName="history-smoke",
        Item={"pk": {"S": "matter-1187"}, "sk": {"S": "state"}, "folded_through": {"N": "0"}},
    )
    timings["put_item_s"] = (time.perf_counter() - start) / 3
    start = time.perf_counter()
    response = client.query(**history_page_query("history-smoke", "matter-1187", 27))
    timings["query_s"] = time.perf_counter() - start
    keys = [item["sk"]["S"] for item in response["Items"]]
    expected = ["state", "msg#000000000002", "msg#000000000001"]
    if keys != expected:
        raise DynaliteError(f"Query newest-first returned {keys}, expected {expected}")
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description="Install, start and smoke-check dynalite.")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="install directory")
    args = parser.parse_args()
    install_dir: Path = args.dir
    start = time.perf_counter()
    already = dynalite_binary(install_dir).exists()
    ensure_installed(install_dir)
    install_s = time.perf_counter() - start
    print(
        f"dynalite in {install_dir}: "
        + ("already installed" if already else f"installed in {install_s:.1f} s"),
        flush=True,
    )
    with tempfile.TemporaryFile() as log:
        try:
            server = start_dynalite(install_dir, log=log)
        except DynaliteError:
            log.seek(0)
            print(log.read().decode(errors="replace"), end="")
            raise
        try:
            print(
                f"up at {server.endpoint} after {server.startup_seconds:.2f} s"
                " (spawn to first successful ListTables)",
                flush=True,
            )
            timings = _smoke(server.endpoint)
        finally:
            stop(server.process)
    print(
        "create_table {create_table_s:.3f} s, put_item {put_item_s:.4f} s/item, "
        "query (newest first, Limit=27) {query_s:.4f} s: ok".format(**timings)
    )
    print(f"stopped (exit code {server.process.returncode})")


if __name__ == "__main__":
    main()
