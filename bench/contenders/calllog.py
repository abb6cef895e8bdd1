"""When each AWS call of a process began, went out and came back, and which commands it served.

Attached to botocore clients (boto3 or aiobotocore) through their own events, beside
:class:`bench.contenders.callcount.CallCounter`:

- ``before-parameter-build``: the call begins (the caller awaits it from here);
- ``before-sign``: its first HTTP request is serialised and about to be signed and sent;
- ``after-call`` / ``after-call-error``: its answer is parsed: the caller resumes soon after.

Each call names the commands it served, read from its parameters or its answer: a ledger
record's ``cmd#`` key, a payload's or a received command's ``command_id``, a Query's
conversation, a delete's receipt handles (matched to the receive that brought them). Times
are the wall clock (``time.time()``), so the calls of the contender and the sends and
arrivals of the benchmark's driver, in another process, share one axis.

A child process keeps its log when ``BENCH_CALL_LOG`` names a file: one JSON line per call,
written at exit (:func:`call_log_from_environment`). :mod:`bench.parts.timeline` reads it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

#: Where a child process writes its call log (unset: it keeps none).
CALL_LOG_ENV = "BENCH_CALL_LOG"


@dataclass
class Call:
    """One API call: ``service.Operation``, its times (epoch seconds) and what it served."""

    operation: str
    began: float
    sent: float | None = None
    ended: float | None = None
    commands: list[str] = field(default_factory=list)
    conversations: list[str] = field(default_factory=list)
    failed: bool = False


def _command_id(body: str) -> str | None:
    try:
        document = json.loads(body)
    except ValueError:
        return None
    value = document.get("command_id") if isinstance(document, dict) else None
    return value if isinstance(value, str) else None


def _ids(values: Iterable[str | None]) -> list[str]:
    return [v for v in values if v]


class CallLog:
    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._by_receipt: dict[str, str] = {}

    def _handlers(self) -> tuple[tuple[str, Any], ...]:
        return (
            ("before-parameter-build", self._began),
            ("before-sign", self._sent),
            ("after-call", self._ended),
            ("after-call-error", self._failed),
        )

    def attach(self, client: Any) -> Any:
        for event, handler in self._handlers():
            client.meta.events.register(event, handler)
        return client

    # -- handlers (they must return None: botocore reads a handler's value as an answer)

    def _began(self, params: dict[str, Any], context: dict[str, Any], **kwargs: Any) -> None:
        _, service, operation = kwargs["event_name"].split(".", 2)
        call = Call(f"{service}.{operation}", time.time())
        call.commands, call.conversations = self._served(operation, params)
        context["bench_call"] = call
        self.calls.append(call)

    def _sent(self, request: Any, **_: Any) -> None:
        call = getattr(request, "context", {}).get("bench_call")
        if isinstance(call, Call) and call.sent is None:
            call.sent = time.time()

    def _ended(self, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        call = context.get("bench_call")
        if not isinstance(call, Call):
            return
        call.ended = time.time()
        for message in parsed.get("Messages", []) if call.operation == "sqs.ReceiveMessage" else []:
            command = _command_id(message.get("Body", ""))
            if command is not None:
                call.commands.append(command)
                self._by_receipt[message.get("ReceiptHandle", "")] = command

    def _failed(self, context: dict[str, Any], **_: Any) -> None:
        call = context.get("bench_call")
        if isinstance(call, Call):
            call.ended, call.failed = time.time(), True

    def _served(self, operation: str, params: dict[str, Any]) -> tuple[list[str], list[str]]:
        """(commands, conversations) a call's parameters name."""
        if operation in ("SendMessageBatch",):
            return _ids(_command_id(e.get("MessageBody", "")) for e in params["Entries"]), []
        if operation == "SendMessage":
            return _ids([_command_id(params.get("MessageBody", ""))]), []
        if operation in ("DeleteMessageBatch", "ChangeMessageVisibilityBatch"):
            handles = [e.get("ReceiptHandle", "") for e in params.get("Entries", [])]
            return _ids(self._by_receipt.get(h) for h in handles), []
        if operation in ("DeleteMessage", "ChangeMessageVisibility"):
            return _ids([self._by_receipt.get(params.get("ReceiptHandle", ""))]), []
        if operation == "BatchWriteItem":
            items = [
                r.get("PutRequest", {}).get("Item", {})
                for table in params.get("RequestItems", {}).values()
                for r in table
            ]
            keys = [str(i.get("sk", {}).get("S", "")) for i in items]
            return [k.removeprefix("cmd#") for k in keys if k.startswith("cmd#")], []
        if operation in ("UpdateItem", "GetItem", "PutItem"):
            key = params.get("Key", {})
            sk, pk = str(key.get("sk", {}).get("S", "")), str(key.get("pk", {}).get("S", ""))
            if sk.startswith("cmd#"):
                return [sk.removeprefix("cmd#")], [pk]
            return [], [pk]
        if operation == "Query":
            pk = params.get("ExpressionAttributeValues", {}).get(":pk", {}).get("S")
            return [], _ids([pk])
        return [], []

    def write(self, path: str) -> None:
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as out:
            for call in self.calls:
                out.write(json.dumps(asdict(call)) + "\n")
        os.replace(tmp, path)


def call_log_from_environment() -> CallLog | None:
    """A call log when ``BENCH_CALL_LOG`` is set (the caller writes it there at exit)."""
    return CallLog() if os.environ.get(CALL_LOG_ENV) else None


def write_call_log(log: CallLog | None) -> None:
    if log is not None:
        log.write(os.environ[CALL_LOG_ENV])


def read_call_log(path: str) -> list[Call]:
    with open(path, encoding="utf-8") as lines:
        return [Call(**json.loads(line)) for line in lines if line.strip()]
