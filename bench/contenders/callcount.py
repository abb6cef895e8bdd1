"""Count every AWS call a process makes, by operation and by what it is for.

Attached to botocore clients (boto3 or aiobotocore) through their own event system:

- ``before-parameter-build``: the request parameters name the purpose of the call (the
  queue it goes to, the key it writes), recorded in the call's context;
- ``before-send``: one HTTP request (retries included), by ``service.Operation``;
- ``after-call`` / ``after-call-error``: one API call, by purpose, with its HTTP status;
  for a Query, the items it returned and scanned and the read capacity it consumed.

With ``consumed_capacity=True`` every Query and UpdateItem also asks DynamoDB for
``ReturnConsumedCapacity=TOTAL`` (one extra request field, nothing else changes), so
the report can give the capacity units a turn costs.

A child process dumps its counts with :func:`install_snapshot_handler`: on SIGUSR1 (and
at exit) it writes them, its CPU time and its peak RSS as JSON to ``BENCH_STATS_PATH``.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import resource
import signal
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

#: Purposes of the calls, as the report groups them.
IDEMPOTENCY = "idempotency"
COMPACTION = "compaction"
#: The cache-aligned window's anchor written on its own (one riding a fold claim's write
#: is that claim's call).
ANCHOR = "anchor"
STARTUP = "startup"
LEASES = "leases"
REJECTS = "dead-letter"
TURN = "turn"


class CallCounter:
    def __init__(self, *, consumed_capacity: bool = False) -> None:
        self.consumed_capacity = consumed_capacity
        self.reset()

    def reset(self) -> None:
        self.requests: Counter[str] = Counter()  # HTTP requests by service.Operation
        self.calls: Counter[str] = Counter()  # API calls by "service.Operation purpose"
        self.failed: Counter[str] = Counter()  # calls answered >= 300 or not at all
        self.query_items = 0
        self.query_scanned = 0
        self.query_capacity = 0.0
        self.write_capacity = 0.0
        #: partition key -> [(items returned, items scanned, capacity units)], one per Query
        self.queries_by_pk: dict[str, list[tuple[int, int, float]]] = defaultdict(list)

    def _handlers(self) -> tuple[tuple[str, Any], ...]:
        return (
            ("before-parameter-build", self._classify),
            ("before-send", self._on_send),
            ("after-call", self._after_call),
            ("after-call-error", self._after_error),
        )

    def attach(self, client: Any) -> Any:
        for event, handler in self._handlers():
            client.meta.events.register(event, handler)
        return client

    def detach(self, client: Any) -> None:
        for event, handler in self._handlers():
            client.meta.events.unregister(event, handler)

    @contextlib.contextmanager
    def attached(self, client: Any) -> Iterator[Any]:
        self.attach(client)
        try:
            yield client
        finally:
            self.detach(client)

    def calls_matching(self, prefix: str) -> int:
        return sum(n for label, n in self.calls.items() if label.startswith(prefix))

    # -- handlers (they must return None: a value from before-send would be the response)

    def _classify(self, params: dict[str, Any], context: dict[str, Any], **kwargs: Any) -> None:
        event = kwargs["event_name"]  # before-parameter-build.<service>.<Operation>
        _, service, operation = event.split(".", 2)
        context["bench_label"] = f"{service}.{operation} {purpose(service, operation, params)}"
        if service == "dynamodb" and operation == "Query":
            pk = params.get("ExpressionAttributeValues", {}).get(":pk", {}).get("S")
            context["bench_pk"] = pk
        if (
            self.consumed_capacity
            and service == "dynamodb"
            and operation in ("Query", "UpdateItem", "GetItem")
        ):
            params.setdefault("ReturnConsumedCapacity", "TOTAL")

    def _on_send(self, **kwargs: Any) -> None:
        event = kwargs["event_name"]  # before-send.<service>.<Operation>
        _, service, operation = event.split(".", 2)
        self.requests[f"{service}.{operation}"] += 1

    def _after_call(
        self, http_response: Any, parsed: dict[str, Any], context: dict[str, Any], **_: Any
    ) -> None:
        label = context.get("bench_label", "?")
        self.calls[label] += 1
        if http_response.status_code >= 300:
            code = parsed.get("Error", {}).get("Code", http_response.status_code)
            self.failed[f"{label} {code}"] += 1
            return
        consumed = parsed.get("ConsumedCapacity", {})
        # BatchWriteItem (the done marks) answers a list, one entry per table.
        entries = consumed if isinstance(consumed, list) else [consumed]
        capacity = sum(float(entry.get("CapacityUnits", 0.0)) for entry in entries)
        if label.startswith("dynamodb.Query"):
            count, scanned = int(parsed.get("Count", 0)), int(parsed.get("ScannedCount", 0))
            self.query_items += count
            self.query_scanned += scanned
            self.query_capacity += capacity
            pk = context.get("bench_pk")
            if pk is not None:
                self.queries_by_pk[pk].append((count, scanned, capacity))
        elif label.startswith("dynamodb."):
            self.write_capacity += capacity

    def _after_error(self, context: dict[str, Any], exception: BaseException, **_: Any) -> None:
        label = context.get("bench_label", "?")
        self.calls[label] += 1
        self.failed[f"{label} {type(exception).__name__}"] += 1

    def snapshot(self) -> dict[str, Any]:
        return {
            "requests": dict(self.requests),
            "calls": dict(self.calls),
            "failed": dict(self.failed),
            "query_items": self.query_items,
            "query_scanned": self.query_scanned,
            "query_capacity": self.query_capacity,
            "write_capacity": self.write_capacity,
            "queries_by_pk": {pk: list(v) for pk, v in self.queries_by_pk.items()},
        }


def purpose(service: str, operation: str, params: dict[str, Any]) -> str:
    """What a call is for, from its parameters alone."""
    if service == "sqs":
        if operation in ("GetQueueAttributes", "GetQueueUrl"):
            return STARTUP
        queue = str(params.get("QueueUrl", "")).rsplit("/", 1)[-1]
        if operation.startswith("ChangeMessageVisibility"):
            return LEASES
        if queue.endswith(("-dlq", "-dlq.fifo")):
            return REJECTS
        if "compaction" in queue:
            return COMPACTION
        return TURN
    if service == "dynamodb":
        if operation == "BatchWriteItem":  # the ledger's done marks: puts of cmd# records
            requests = [r for table in params.get("RequestItems", {}).values() for r in table]
            keys = [str(r.get("PutRequest", {}).get("Item", {}).get("sk", {}).get("S", ""))
                    for r in requests]  # fmt: skip
            return IDEMPOTENCY if keys and all(k.startswith("cmd#") for k in keys) else TURN
        sk = str(params.get("Key", {}).get("sk", {}).get("S", ""))
        if sk == "state":
            update = str(params.get("UpdateExpression", ""))
            if "window_anchor" in update and "compaction_requested" not in update:
                return ANCHOR
            return COMPACTION
        if sk.startswith("cmd#"):
            return IDEMPOTENCY
        return TURN
    return TURN


def rusage() -> dict[str, float]:
    """CPU seconds of this process. (Its peak RSS is read from /proc by the benchmark:
    ``ru_maxrss`` survives ``exec``, so a child would report its parent's peak.)"""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu_seconds": usage.ru_utime + usage.ru_stime}


class GcPauses:
    """The garbage collector's pauses in this process, by generation: how many, and the
    longest (ms). A full collection stops every turn of an event loop at once."""

    def __init__(self) -> None:
        self.counts = [0, 0, 0]
        self.longest_ms = [0.0, 0.0, 0.0]
        #: Pauses of 5 ms or more: (wall clock at its start, generation, ms).
        self.long: list[tuple[float, int, float]] = []
        self._began = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        generation = info["generation"]
        self.counts[generation] += 1
        pause = 1000 * (time.perf_counter() - self._began)
        self.longest_ms[generation] = max(self.longest_ms[generation], pause)
        if pause >= 5.0:
            self.long.append((time.time() - pause / 1000, generation, round(pause, 1)))

    def snapshot(self) -> dict[str, Any]:
        return {
            "gc_counts": list(self.counts),
            "gc_longest_ms": list(self.longest_ms),
            "gc_long_pauses": list(self.long),
        }


class SnapshotWriter:
    """Writes ``{seq, counts, cpu, rss, gc, extra}`` to ``path`` atomically, seq increasing."""

    def __init__(self, path: str, counter: CallCounter) -> None:
        self.path = path
        self.counter = counter
        self.gc = GcPauses()
        self.seq = 0
        self.extra: dict[str, Any] = {}

    def write(self) -> None:
        self.seq += 1
        document = {"seq": self.seq, "pid": os.getpid(), **rusage(), **self.counter.snapshot(),
                    **self.gc.snapshot()}  # fmt: skip
        document.update(self.extra)
        tmp = f"{self.path}.tmp"
        with open(tmp, "w", encoding="utf-8") as out:
            json.dump(document, out)
        os.replace(tmp, self.path)


def install_snapshot_handler(counter: CallCounter) -> SnapshotWriter | None:
    """On SIGUSR1, write a snapshot to ``BENCH_STATS_PATH`` (if set). Returns the writer."""
    path = os.environ.get("BENCH_STATS_PATH")
    if not path:
        return None
    writer = SnapshotWriter(path, counter)
    with contextlib.suppress(ValueError):  # not the main thread: the caller installs it
        signal.signal(signal.SIGUSR1, lambda *_: writer.write())
    return writer
