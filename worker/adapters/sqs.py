"""SQS: the converse queue as a source, any queue as a sender."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from worker.adapters.errors import aws_call, failure_kind
from worker.delivery.batching import Batcher
from worker.delivery.pointers import message_size
from worker.errors import ConfigError, StoreUnavailable
from worker.ports import DeleteFailure, ReceivedMessage
from worker.telemetry.tracing import outbound_trace_header

#: The most a SendMessageBatch may carry in all, bodies and attributes.
MAX_BATCH_BYTES = 1_048_576

#: The system attributes every receive asks for.
SYSTEM_ATTRIBUTES = ("ApproximateReceiveCount", "SentTimestamp", "AWSTraceHeader")

#: What SQS accepts as a MessageGroupId or MessageDeduplicationId.
_FIFO_TOKEN = re.compile(r"[!-~]{1,128}")


def is_fifo(queue_url: str) -> bool:
    return queue_url.endswith(".fifo")


def fifo_token(value: str) -> str:
    """``value`` itself when SQS accepts it as a FIFO id, else its SHA-256 (same in, same out)."""
    if _FIFO_TOKEN.fullmatch(value):
        return value
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


def dead_letter_target(policy: str) -> tuple[str, str]:
    """The account and queue name of the dead-letter queue a RedrivePolicy names.

    Raises ConfigError, in one line, for a policy that is not the JSON SQS writes or that
    names something other than an SQS queue.
    """
    try:
        arn = json.loads(policy)["deadLetterTargetArn"]
    except (ValueError, KeyError, TypeError):
        raise ConfigError(
            "CONVERSE_QUEUE_URL: the queue's RedrivePolicy has no readable deadLetterTargetArn"
        ) from None
    parts = arn.split(":") if isinstance(arn, str) else []
    if len(parts) != 6 or parts[0] != "arn" or parts[2] != "sqs" or not all(parts[4:]):
        raise ConfigError(
            "CONVERSE_QUEUE_URL: the queue's RedrivePolicy names a deadLetterTargetArn "
            "that is not an SQS queue's ARN"
        )
    return parts[4], parts[5]


class SqsQueue:
    """One queue: receive, batch delete, send. Implements MessageSource and MessageSender.

    ``receive_client``, if given, makes the receives (a client without botocore's retries:
    a retried long poll would outlive the stop's bound)."""

    def __init__(self, client: Any, url: str, *, receive_client: Any = None) -> None:
        self._client = client
        self._receive_client = receive_client or client
        self.url = url
        self.fifo = is_fifo(url)

    async def receive(
        self, max_messages: int, wait_seconds: int, *, visibility_timeout: int | None = None
    ) -> list[ReceivedMessage]:
        """One ReceiveMessage; ``visibility_timeout`` overrides the queue's own."""
        request: dict[str, Any] = {
            "QueueUrl": self.url,
            "MaxNumberOfMessages": max_messages,
            "WaitTimeSeconds": wait_seconds,
            "MessageSystemAttributeNames": list(SYSTEM_ATTRIBUTES),
            "MessageAttributeNames": ["All"],
        }
        if visibility_timeout is not None:
            request["VisibilityTimeout"] = visibility_timeout
        with aws_call("sqs.ReceiveMessage"):
            response = await self._receive_client.receive_message(**request)
        return [received_message(raw) for raw in response.get("Messages", [])]

    async def delete_batch(self, messages: Sequence[ReceivedMessage]) -> list[DeleteFailure]:
        if not messages:
            return []
        entries = [
            {"Id": str(i), "ReceiptHandle": m.receipt_handle} for i, m in enumerate(messages)
        ]
        with aws_call("sqs.DeleteMessageBatch"):
            response = await self._client.delete_message_batch(QueueUrl=self.url, Entries=entries)
        return [
            DeleteFailure(message_id=messages[int(f["Id"])].message_id, code=f.get("Code", "?"))
            for f in response.get("Failed", [])
        ]

    async def change_visibility_batch(
        self, messages: Sequence[ReceivedMessage], timeout_seconds: int
    ) -> list[DeleteFailure]:
        if not messages:
            return []
        entries = [
            {"Id": str(i), "ReceiptHandle": m.receipt_handle, "VisibilityTimeout": timeout_seconds}
            for i, m in enumerate(messages)
        ]
        with aws_call("sqs.ChangeMessageVisibilityBatch"):
            response = await self._client.change_message_visibility_batch(
                QueueUrl=self.url, Entries=entries
            )
        return [
            DeleteFailure(message_id=messages[int(f["Id"])].message_id, code=f.get("Code", "?"))
            for f in response.get("Failed", [])
        ]

    async def send_batch(self, messages: Sequence[OutboundMessage]) -> list[str | StoreUnavailable]:
        """One SendMessageBatch; each entry's message id, or the error SQS gave it."""
        entries = [{"Id": str(i), **self._fields(m)} for i, m in enumerate(messages)]
        with aws_call("sqs.SendMessageBatch"):
            response = await self._client.send_message_batch(QueueUrl=self.url, Entries=entries)
        results: list[str | StoreUnavailable] = [
            StoreUnavailable("sqs.SendMessageBatch: no result for the entry", service="sqs")
        ] * len(messages)
        for ok in response.get("Successful", []):
            results[int(ok["Id"])] = str(ok["MessageId"])
        for failed in response.get("Failed", []):
            code = str(failed.get("Code", "?"))
            results[int(failed["Id"])] = StoreUnavailable(
                f"sqs.SendMessageBatch failed: {code}",
                service="sqs",
                kind=failure_kind(code, 500 if failed.get("SenderFault") is False else None),
            )
        return results

    async def send(
        self,
        body: str,
        *,
        group_id: str,
        deduplication_id: str,
        attributes: Mapping[str, str | int] | None = None,
    ) -> str:
        message = OutboundMessage(
            body, group_id, deduplication_id, attributes, outbound_trace_header()
        )
        with aws_call("sqs.SendMessage"):
            response = await self._client.send_message(QueueUrl=self.url, **self._fields(message))
        return str(response["MessageId"])

    def _fields(self, message: OutboundMessage) -> dict[str, Any]:
        """A message as SendMessage and SendMessageBatch entries both spell it."""
        fields: dict[str, Any] = {"MessageBody": message.body}
        if message.attributes:
            fields["MessageAttributes"] = {
                name: _attribute_value(value) for name, value in message.attributes.items()
            }
        if message.trace_header:
            fields["MessageSystemAttributes"] = {
                "AWSTraceHeader": {"DataType": "String", "StringValue": message.trace_header}
            }
        if self.fifo:
            fields["MessageGroupId"] = fifo_token(message.group_id)
            fields["MessageDeduplicationId"] = fifo_token(message.deduplication_id)
        return fields

    async def describe(self) -> QueueDescription:
        """The queue's visibility timeout and the dead-letter queue its RedrivePolicy names."""
        with aws_call("sqs.GetQueueAttributes"):
            response = await self._client.get_queue_attributes(
                QueueUrl=self.url, AttributeNames=["VisibilityTimeout", "RedrivePolicy"]
            )
        attributes = response.get("Attributes", {})
        visibility = int(attributes.get("VisibilityTimeout", "30"))
        policy = attributes.get("RedrivePolicy")
        if not policy:
            return QueueDescription(visibility_timeout=visibility, dead_letter=None)
        account, name = dead_letter_target(policy)
        with aws_call("sqs.GetQueueUrl"):
            found = await self._client.get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)
        return QueueDescription(
            visibility_timeout=visibility, dead_letter=SqsQueue(self._client, found["QueueUrl"])
        )


@dataclass(frozen=True, slots=True)
class OutboundMessage:
    body: str
    group_id: str
    deduplication_id: str
    attributes: Mapping[str, str | int] | None = None
    #: ``AWSTraceHeader``: a system attribute, which SQS does not count in the size.
    trace_header: str | None = None

    @property
    def size(self) -> int:
        return message_size(self.body, self.attributes)


class BatchingSender:
    """A MessageSender whose sends, made one per turn, leave as SendMessageBatch calls of
    up to ten entries and at most ``max_batch_bytes`` (SQS: 1 MiB for a whole batch).

    With ``coming`` (turns still on their way to a send, :mod:`worker.consumer.cohorts`), a
    batch waits for them up to ``max_linger`` and leaves at once when none are; without
    it, for ``linger`` after each item (``max_linger`` at most)."""

    def __init__(
        self,
        queue: SqsQueue,
        *,
        linger: float = 0.005,
        max_linger: float | None = None,
        max_batch_bytes: int = MAX_BATCH_BYTES,
        coming: Callable[[], int] | None = None,
    ) -> None:
        self._batcher: Batcher[OutboundMessage, str] = Batcher(
            queue.send_batch,
            linger=linger,
            max_linger=max_linger,
            max_bytes=max_batch_bytes,
            size=lambda message: message.size,
            name=f"send-batch:{queue.url.rsplit('/', 1)[-1]}",
            coming=coming,
        )

    def nudge(self) -> None:
        """A turn the batch may be waiting for ended without sending."""
        self._batcher.nudge()

    def outstanding(self) -> int:
        """Sends made whose results are not in yet."""
        return self._batcher.outstanding()

    async def send(
        self,
        body: str,
        *,
        group_id: str,
        deduplication_id: str,
        attributes: Mapping[str, str | int] | None = None,
    ) -> str:
        # Read here, in the turn's task: the batcher's own task is outside every trace.
        message = OutboundMessage(
            body, group_id, deduplication_id, attributes, outbound_trace_header()
        )
        return await self._batcher.submit(message)

    async def close(self) -> None:
        await self._batcher.close()


@dataclass(frozen=True, slots=True)
class QueueDescription:
    visibility_timeout: int
    dead_letter: SqsQueue | None


def _attribute_value(value: str | int) -> dict[str, str]:
    if isinstance(value, int):
        return {"DataType": "Number", "StringValue": str(value)}
    return {"DataType": "String", "StringValue": value}


def received_message(raw: Mapping[str, Any]) -> ReceivedMessage:
    """A ReceiveMessage entry as the stage sees it."""
    system = raw.get("Attributes", {})
    attributes = {
        name: str(value.get("StringValue", ""))
        for name, value in raw.get("MessageAttributes", {}).items()
    }
    return ReceivedMessage(
        message_id=raw["MessageId"],
        receipt_handle=raw["ReceiptHandle"],
        body=raw.get("Body", ""),
        receive_count=int(system.get("ApproximateReceiveCount", "1")),
        attributes=attributes,
        sent_timestamp_ms=int(system["SentTimestamp"]) if "SentTimestamp" in system else None,
        trace_header=system.get("AWSTraceHeader"),
    )
