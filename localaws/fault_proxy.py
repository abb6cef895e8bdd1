"""An HTTP proxy in front of a local AWS endpoint that answers chosen requests itself, with
the error responses the real services give under load: throttling and 5xx, as botocore
parses them.

Unlike :mod:`localaws.proxy` (a byte pipe), it reads each HTTP/1.1 request, recognises its
service and operation (``X-Amz-Target`` for the JSON protocols, DynamoDB and SQS; method and
path for S3) and either passes it on (one upstream connection per request: moto closes
each one anyway) or answers it:

=============== ========================================= ===== ==============================
error           service: what botocore reads              HTTP  botocore retries it as
=============== ========================================= ===== ==============================
``throttling``  DynamoDB ``ThrottlingException``;         400   throttling
                SQS ``ThrottlingException``;
                S3 ``SlowDown``                           503
``throughput``  DynamoDB ``ProvisionedThroughputExceeded  400   throttling
                Exception``
``throttled``   SQS ``RequestThrottled``                  400   throttling
``server``      DynamoDB ``InternalServerError``;         500   transient
                SQS ``InternalError``; S3 ``InternalError``
``unavailable`` the same as ``server``, HTTP 503          503   transient
``unprocessed`` DynamoDB ``BatchWriteItem``: 200 with     200   not at all: the caller must
                every item back in ``UnprocessedItems``         retry what is left
``denied``      S3 ``AccessDenied``                       403   not at all
                DynamoDB ``AccessDeniedException``        400   not at all
=============== ========================================= ===== ==============================

DynamoDB speaks JSON 1.0 (``__type`` ``com.amazonaws.dynamodb.v20120810#…``, and
``x-amzn-ErrorType``); SQS, in botocore 1.40, the JSON protocol with its query-compatible
``x-amzn-query-error`` header (``RequestThrottled;Sender``); S3 REST-XML.

Schedules: a :class:`Fault` matches a service, optionally some operations, (SQS) a queue and
(DynamoDB) a table, and applies to a ``share`` of the requests it matches (a seeded draw, so
a run is repeatable), from when it is injected until it is cleared or its ``until`` (on the
proxy's clock, injectable) passes. Tests switch faults on and off explicitly; the benchmark uses
windows. Every request is counted by (service, operation), passed on or answered.

``after=True`` passes the request on first and then answers the error: the service executed
it and the caller never heard (a 5xx after the fact). What it cannot imitate: DynamoDB's
per-partition throttling (it throttles by operation, not by key), nor which requests a real
service executes before a 5xx (with ``after`` every answered one was).

Run alone (the benchmark)::

    python -m localaws.fault_proxy --target http://127.0.0.1:5000

prints ``{"endpoint": ...}`` and serves until SIGTERM; faults are then set over HTTP:
``POST /fault-proxy/faults`` with a JSON list of faults (``[]`` clears), ``GET
/fault-proxy/counts``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import signal
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from urllib.parse import urlsplit

from localaws.http_wire import read_body, read_head, read_response, write_response

HOST = "127.0.0.1"
CONTROL_PREFIX = "/fault-proxy/"

DYNAMODB_JSON = "application/x-amz-json-1.0"
DYNAMODB_NS = "com.amazonaws.dynamodb.v20120810#"
SQS_NS = "com.amazonaws.sqs#"

#: (service, error) → (HTTP status, code, query-compatible code or None, message).
ERRORS: dict[tuple[str, str], tuple[int, str, str | None, str]] = {
    ("dynamodb", "throttling"): (
        400,
        "ThrottlingException",
        None,
        "Rate of requests exceeds the allowed throughput.",
    ),
    ("dynamodb", "throughput"): (
        400,
        "ProvisionedThroughputExceededException",
        None,
        "The level of configured provisioned throughput for the table was exceeded.",
    ),
    ("dynamodb", "server"): (500, "InternalServerError", None, "Internal server error"),
    ("dynamodb", "unavailable"): (503, "ServiceUnavailable", None, "Service unavailable"),
    ("sqs", "throttling"): (
        400,
        "ThrottlingException",
        "ThrottlingException;Sender",
        "Rate exceeded",
    ),
    ("sqs", "throttled"): (
        400,
        "RequestThrottled",
        "RequestThrottled;Sender",
        "Request is throttled.",
    ),
    ("sqs", "server"): (500, "InternalError", "InternalError;Receiver", "Internal error"),
    ("sqs", "unavailable"): (
        503,
        "ServiceUnavailable",
        "ServiceUnavailable;Receiver",
        "Service unavailable",
    ),
    ("s3", "throttling"): (503, "SlowDown", None, "Please reduce your request rate."),
    ("s3", "server"): (500, "InternalError", None, "We encountered an internal error."),
    ("s3", "unavailable"): (503, "ServiceUnavailable", None, "Service unavailable"),
    # A read the role may not make: S3 answers GetObject on an object under a KMS key the
    # caller may not use for decryption this way, HeadObject on it still shows the object.
    ("s3", "denied"): (403, "AccessDenied", None, "Access Denied"),
    # A call the role may not make: IAM's answer quotes the caller and the resource.
    ("dynamodb", "denied"): (
        400,
        "AccessDeniedException",
        None,
        "User: arn:aws:sts::123456789012:assumed-role/mira-converse/task is not authorized "
        "to perform: dynamodb:Query on resource: arn:aws:dynamodb:eu-west-1:123456789012:"
        "table/mira-history because no identity-based policy allows the dynamodb:Query action",
    ),
}


@dataclass(frozen=True, slots=True)
class Fault:
    """Answer ``error`` to a ``share`` of the requests to ``service`` (its ``operations``
    only, if given; on SQS, only those naming ``queue``, on DynamoDB only those naming
    ``table``, if given), until ``until``."""

    service: str
    error: str
    operations: tuple[str, ...] = ()
    share: float = 1.0
    queue: str | None = None
    table: str | None = None
    until: float | None = None
    #: Pass the request on first, then answer the error: the service executed it and the
    #: caller never heard (a 5xx after the fact, a lost response).
    after: bool = False

    def __post_init__(self) -> None:
        if self.error != "unprocessed" and (self.service, self.error) not in ERRORS:
            raise ValueError(f"no {self.error!r} error for {self.service}")

    def matches(self, request: Request) -> bool:
        if request.service != self.service:
            return False
        if self.operations and request.operation not in self.operations:
            return False
        if self.table is not None and f'"{self.table}"'.encode() not in request.body:
            return False
        return self.queue is None or self.queue.encode() in request.body


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    target: str
    headers: dict[str, str]  # names lower-cased
    body: bytes
    service: str = ""
    operation: str = ""


def recognise(method: str, target: str, headers: dict[str, str]) -> tuple[str, str]:
    """(service, operation) of a request: from ``X-Amz-Target`` for the JSON protocols,
    from method and path for S3."""
    amz_target = headers.get("x-amz-target", "")
    if amz_target.startswith("DynamoDB_"):
        return "dynamodb", amz_target.split(".", 1)[1]
    if amz_target.startswith("AmazonSQS."):
        return "sqs", amz_target.split(".", 1)[1]
    path = urlsplit(target).path
    if path.startswith("/moto-api") or path.startswith(CONTROL_PREFIX):
        return "", ""
    segments = [s for s in path.split("/") if s]
    if len(segments) >= 2:  # /bucket/key: an object
        verb = {"GET": "Get", "PUT": "Put", "HEAD": "Head", "DELETE": "Delete"}.get(method, method)
        return "s3", f"{verb}Object"
    return "s3", f"{method}Bucket"


def error_response(fault: Fault, request: Request) -> tuple[int, dict[str, str], bytes]:
    """The status, headers and body the real service answers with ``fault.error``."""
    request_id = uuid.uuid4().hex
    if fault.error == "unprocessed":  # BatchWriteItem: every item back, as throttled
        items = json.loads(request.body or b"{}").get("RequestItems", {})
        body = json.dumps({"UnprocessedItems": items}).encode()
        return 200, {"Content-Type": DYNAMODB_JSON, "x-amzn-RequestId": request_id}, body
    status, code, query_code, message = ERRORS[(fault.service, fault.error)]
    if fault.service == "s3":
        xml = (
            f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code>"
            f"<Message>{message}</Message><RequestId>{request_id}</RequestId>"
            f"<HostId>{request_id}</HostId></Error>"
        )
        body = b"" if request.method == "HEAD" else xml.encode()
        return status, {"Content-Type": "application/xml", "x-amz-request-id": request_id}, body
    if fault.service == "dynamodb":
        payload = {"__type": DYNAMODB_NS + code, "message": message}
        headers = {"Content-Type": DYNAMODB_JSON, "x-amzn-ErrorType": code}
    else:
        payload = {"__type": SQS_NS + code, "message": message}
        headers = {"Content-Type": DYNAMODB_JSON, "x-amzn-query-error": query_code or code}
    headers["x-amzn-RequestId"] = request_id
    return status, headers, json.dumps(payload).encode()


@dataclass
class Counts:
    """Requests by (service, operation): all seen, and those answered with a fault."""

    seen: Counter[tuple[str, str]] = field(default_factory=Counter)
    answered: Counter[tuple[str, str]] = field(default_factory=Counter)

    def of(self, service: str, *operations: str) -> tuple[int, int]:
        """(seen, answered) for the service, its given operations only if any."""
        keys = [k for k in self.seen if k[0] == service and (not operations or k[1] in operations)]
        return sum(self.seen[k] for k in keys), sum(self.answered[k] for k in keys)


class FaultProxy:
    """Listens on ``127.0.0.1:<port>`` in front of ``target``."""

    def __init__(
        self, target: str, *, seed: int = 25, clock: Callable[[], float] = time.monotonic
    ) -> None:
        parts = urlsplit(target)
        self._host = parts.hostname or HOST
        self._port_up = parts.port or 80
        self._clock = clock
        self._random = random.Random(seed)
        self._faults: list[Fault] = []
        self._lock = threading.Lock()  # counts are read from other threads
        self.counts = Counts()
        self._server: asyncio.Server | None = None
        self.endpoint = ""

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, HOST, 0)
        port = self._server.sockets[0].getsockname()[1]
        self.endpoint = f"http://{HOST}:{port}"
        return self.endpoint

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
            self._server = None

    def inject(self, *faults: Fault) -> None:
        """Add faults (in force until cleared or their ``until``)."""
        with self._lock:
            self._faults.extend(faults)

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def snapshot(self) -> Counts:
        with self._lock:
            return Counts(Counter(self.counts.seen), Counter(self.counts.answered))

    def _fault_for(self, request: Request) -> Fault | None:
        now = self._clock()
        with self._lock:
            self._faults = [f for f in self._faults if f.until is None or f.until > now]
            key = (request.service, request.operation)
            if request.service:
                self.counts.seen[key] += 1
            for fault in self._faults:
                if fault.matches(request) and self._random.random() < fault.share:
                    self.counts.answered[key] += 1
                    return fault
        return None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await read_request(reader, writer)
                if request is None:
                    return
                if request.target.startswith(CONTROL_PREFIX):
                    status, headers, body = self._control(request)
                elif (fault := self._fault_for(request)) is not None:
                    if fault.after:
                        await self._forward(request)
                    status, headers, body = error_response(fault, request)
                else:
                    status, headers, body = await self._forward(request)
                write_response(writer, status, headers, body, head=request.method == "HEAD")
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            return
        finally:
            writer.transport.abort()

    def _control(self, request: Request) -> tuple[int, dict[str, str], bytes]:
        if request.method == "POST" and request.target == CONTROL_PREFIX + "faults":
            faults = [
                Fault(**{**f, "operations": tuple(f.get("operations", ()))})
                for f in json.loads(request.body)
            ]
            with self._lock:
                self._faults = faults
            return 200, {"Content-Type": "application/json"}, b"{}"
        counts = self.snapshot()
        body = {
            "seen": {f"{s}.{o}": n for (s, o), n in counts.seen.items()},
            "answered": {f"{s}.{o}": n for (s, o), n in counts.answered.items()},
        }
        return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()

    async def _forward(self, request: Request) -> tuple[int, dict[str, str], bytes]:
        up_reader, up_writer = await asyncio.open_connection(self._host, self._port_up)
        try:
            head = [f"{request.method} {request.target} HTTP/1.1"]
            for name, value in request.headers.items():
                if name not in ("connection", "transfer-encoding", "content-length"):
                    head.append(f"{name}: {value}")
            head += [f"content-length: {len(request.body)}", "connection: close", "", ""]
            up_writer.write("\r\n".join(head).encode("latin-1") + request.body)
            await up_writer.drain()
            return await read_response(up_reader, head=request.method == "HEAD")
        finally:
            up_writer.transport.abort()


async def read_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> Request | None:
    head = await read_head(reader)
    if head is None:
        return None
    line, headers = head
    if headers.pop("expect", "").lower() == "100-continue":  # S3 PutObject waits for it
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await writer.drain()
    method, target, _ = line.split(" ", 2)
    body = await read_body(reader, headers) or b""
    service, operation = recognise(method, target, headers)
    return Request(method, target, headers, body, service, operation)


@contextlib.contextmanager
def threaded_fault_proxy(target: str, **options: object) -> Iterator[FaultProxy]:
    """A :class:`FaultProxy` served by an event loop of its own on a thread, for callers
    without a loop (boto3) or whose loop must not carry it."""
    loop = asyncio.new_event_loop()
    proxy = FaultProxy(target, **options)  # type: ignore[arg-type]
    started = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(proxy.start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, name="fault-proxy", daemon=True)
    thread.start()
    started.wait(10)
    try:
        yield proxy
    finally:
        asyncio.run_coroutine_threadsafe(_shut(proxy), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


async def _shut(proxy: FaultProxy) -> None:
    """Close the proxy and end the connections it still serves (the loop is closed next)."""
    await proxy.close()
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


def faults_json(faults: Sequence[Fault]) -> bytes:
    """The body of ``POST /fault-proxy/faults`` for these faults."""
    return json.dumps([asdict(f) for f in faults]).encode()


async def _main(target: str) -> None:
    proxy = FaultProxy(target)
    print(json.dumps({"endpoint": await proxy.start()}), flush=True)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    await stopping.wait()
    await proxy.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--target", required=True)
    asyncio.run(_main(parser.parse_args().target))
    sys.exit(0)
