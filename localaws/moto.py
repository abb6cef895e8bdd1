"""moto as the tests and the benchmark run it: in this process (``ThreadedMotoServer``) or as
a process of its own, on 127.0.0.1, its request log off, and patched where moto 5.2 differs
from the services in a way the stage depends on.

::

    with threaded_moto() as endpoint: ...           # tests: one server for the session
    with running_moto() as (endpoint, pid): ...     # benchmark: its CPU measured apart

Run alone: ``python -m localaws.moto -H 127.0.0.1 -p PORT`` (both patches applied).
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from localaws.endpoints import HOST, free_port, wait_until_answering

#: ``setattr``, or ``monkeypatch.setattr`` in a test (undone at its end).
SetAttribute = Callable[[Any, str, Any], None]

REPO_ROOT = Path(__file__).resolve().parents[1]


def quiet_werkzeug() -> None:
    """werkzeug logs every request moto serves: CPU on each call that nobody reads."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)


def batch_entries_keep_their_trace_header(set_attribute: SetAttribute = setattr) -> None:
    """Keep each SendMessageBatch entry's ``AWSTraceHeader``, as SQS does.

    moto 5.2 keeps ``MessageSystemAttributes`` on SendMessage only and drops them from
    batch entries, and the worker sends its prompts in batches. LocalStack's SQS keeps them
    (``tests/integration/test_localstack.py`` checks it there, unpatched).
    """
    from moto.sqs.models import SQSBackend

    unpatched = SQSBackend.send_message_batch

    def send_message_batch(self: Any, queue_name: str, entries: dict[str, Any]) -> Any:
        messages, failed = unpatched(self, queue_name, entries)
        by_id = {entry["Id"]: entry for entry in entries.values()}
        for message in messages:
            system = by_id[message.user_id].get("MessageSystemAttributes")
            if system:
                message.system_attributes = system
        return messages, failed

    set_attribute(SQSBackend, "send_message_batch", send_message_batch)


def atomic_conditional_writes(set_attribute: SetAttribute = setattr) -> None:
    """Make moto's DynamoDB writes atomic, as DynamoDB's are.

    moto checks a write's ConditionExpression and then writes, with no lock in between,
    while its server answers each request on its own thread: two concurrent claims of one
    ``state`` item can both pass their condition, which DynamoDB never allows. The race
    tests are about the worker's conditions, not that gap, so the server's writes are
    serialised (the server must run in this process).
    """
    from moto.dynamodb.models import DynamoDBBackend

    lock = threading.Lock()
    for name in ("put_item", "update_item", "delete_item", "transact_write_items"):
        unlocked = getattr(DynamoDBBackend, name)

        def locked(*args: Any, _unlocked: Any = unlocked, **kwargs: Any) -> Any:
            with lock:
                return _unlocked(*args, **kwargs)

        set_attribute(DynamoDBBackend, name, locked)


@contextlib.contextmanager
def threaded_moto(set_attribute: SetAttribute = setattr) -> Iterator[str]:
    """A moto server in this process on 127.0.0.1 and a free port, with both patches
    (applied through ``set_attribute``); yields its URL and stops it on exit."""
    from moto.server import ThreadedMotoServer

    quiet_werkzeug()
    atomic_conditional_writes(set_attribute)
    batch_entries_keep_their_trace_header(set_attribute)
    server = ThreadedMotoServer(ip_address=HOST, port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def wait_for_moto(url: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    """Wait until the moto process at ``url`` answers its own API."""

    def probe() -> None:
        urllib.request.urlopen(url + "/moto-api/data.json", timeout=2).close()

    wait_until_answering(url, process, probe, timeout=timeout, name="moto_server")


def stop(process: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``grace`` seconds."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def running_moto(timeout: float = 30.0) -> Iterator[tuple[str, int]]:
    """``python -m localaws.moto`` on 127.0.0.1 on a free port, its output discarded;
    yields its URL and pid."""
    port = free_port(HOST)
    process = subprocess.Popen(
        [sys.executable, "-m", "localaws.moto", "-H", HOST, "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=REPO_ROOT,
    )
    url = f"http://{HOST}:{port}"
    try:
        wait_for_moto(url, process, timeout)
        yield url, process.pid
    finally:
        stop(process)


def reset_moto(url: str) -> None:
    """Forget every queue, message, table and bucket (``POST /moto-api/reset``)."""
    request = urllib.request.Request(url + "/moto-api/reset", method="POST")
    with urllib.request.urlopen(request, timeout=10):
        pass


if __name__ == "__main__":
    from moto.server import main

    quiet_werkzeug()
    batch_entries_keep_their_trace_header()
    atomic_conditional_writes()
    sys.exit(main(sys.argv[1:]))
