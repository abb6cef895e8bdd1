"""SQS: the converse queue as a source, any queue as a sender.

Every request is built by a pure module-level function (``receive_request``,
``delete_entries``, ``visibility_entries``, ``send_entries``, ``send_request``,
``redrive_request``, ``queue_url_request``) that the queue calls and that the benchmark's
replay calls too.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Unpack

from worker.adapters.client_errors import aws_call, failure_kind
from worker.delivery.batching import Batcher
from worker.delivery.pointers import message_size
from worker.errors import ConfigError, StoreUnavailable
from worker.ports import DeleteFailure, ReceivedMessage, SendOptions
from worker.telemetry.tracing import outbound_trace_header

if TYPE_CHECKING:  # the stubs are a dev dependency: nothing of them runs
    from types_aiobotocore_sqs import SQSClient
    from types_aiobotocore_sqs.literals import MessageSystemAttributeNameType
    from types_aiobotocore_sqs.type_defs import (
        ChangeMessageVisibilityBatchRequestEntryTypeDef,
        DeleteMessageBatchRequestEntryTypeDef,
        GetQueueAttributesRequestTypeDef,
        GetQueueUrlRequestTypeDef,
        MessageAttributeValueTypeDef,
        MessageTypeDef,
        ReceiveMessageRequestTypeDef,
        SendMessageBatchRequestEntryTypeDef,
        SendMessageRequestTypeDef,
    )

#: The most a SendMessageBatch may carry in all, bodies and attributes.
MAX_BATCH_BYTES = 1_048_576

#: The system attributes every receive asks for.
SYSTEM_ATTRIBUTES: tuple[MessageSystemAttributeNameType, ...] = (
    "ApproximateReceiveCount",
    "SentTimestamp",
    "AWSTraceHeader",
)

#: What SQS accepts as a MessageGroupId or MessageDeduplicationId.
_FIFO_TOKEN = re.compile(r"[!-~]{1,128}")


def is_fifo(queue_url: str) -> bool:
    return queue_url.endswith(".fifo")


def fifo_token(value: str) -> str:
    """``value`` itself when SQS accepts it as a FIFO id, else its SHA-256 (same in, same out)."""
    if _FIFO_TOKEN.fullmatch(value):
        return value
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


def max_receive_count(policy: str) -> int | None:
    """The ``maxReceiveCount`` a RedrivePolicy names; None when it names none readable."""
    try:
        count = json.loads(policy).get("maxReceiveCount")
        return int(count) if int(count) >= 1 else None
    except (ValueError, AttributeError, TypeError):
        return None


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


def redrive_request(queue_url: str) -> GetQueueAttributesRequestTypeDef:
    """The attributes the converse queue is read for at start-up."""
    return {"QueueUrl": queue_url, "AttributeNames": ["VisibilityTimeout", "RedrivePolicy"]}


def queue_url_request(account: str, name: str) -> GetQueueUrlRequestTypeDef:
    return {"QueueName": name, "QueueOwnerAWSAccountId": account}


def receive_request(
    queue_url: str,
    max_messages: int,
    wait_seconds: int,
    *,
    visibility_timeout: int | None = None,
) -> ReceiveMessageRequestTypeDef:
    """One ReceiveMessage: the system attributes the stage reads and every message
    attribute; ``visibility_timeout`` overrides the queue's own."""
    request: ReceiveMessageRequestTypeDef = {
        "QueueUrl": queue_url,
        "MaxNumberOfMessages": max_messages,
        "WaitTimeSeconds": wait_seconds,
        "MessageSystemAttributeNames": list(SYSTEM_ATTRIBUTES),
        "MessageAttributeNames": ["All"],
    }
    if visibility_timeout is not None:
        request["VisibilityTimeout"] = visibility_timeout
    return request


def delete_entries(receipt_handles: Sequence[str]) -> list[DeleteMessageBatchRequestEntryTypeDef]:
    """DeleteMessageBatch entries, each ``Id`` its position (failures name it)."""
    return [{"Id": str(i), "ReceiptHandle": handle} for i, handle in enumerate(receipt_handles)]


def visibility_entries(
    receipt_handles: Sequence[str], timeout_seconds: int
) -> list[ChangeMessageVisibilityBatchRequestEntryTypeDef]:
    """ChangeMessageVisibilityBatch entries, each ``Id`` its position."""
    return [
        {"Id": str(i), "ReceiptHandle": handle, "VisibilityTimeout": timeout_seconds}
        for i, handle in enumerate(receipt_handles)
    ]


def send_entries(
    messages: Sequence[OutboundMessage], *, fifo: bool
) -> list[SendMessageBatchRequestEntryTypeDef]:
    """SendMessageBatch entries, each ``Id`` its position (results name it)."""
    entries: list[SendMessageBatchRequestEntryTypeDef] = []
    for i, message in enumerate(messages):
        entry: SendMessageBatchRequestEntryTypeDef = {"Id": str(i), "MessageBody": message.body}
        _message_fields(entry, message, fifo=fifo)
        entries.append(entry)
    return entries


def send_request(
    queue_url: str, message: OutboundMessage, *, fifo: bool
) -> SendMessageRequestTypeDef:
    """One SendMessage, its fields spelt as a SendMessageBatch entry's."""
    request: SendMessageRequestTypeDef = {"QueueUrl": queue_url, "MessageBody": message.body}
    _message_fields(request, message, fifo=fifo)
    return request


def _message_fields(
    fields: SendMessageRequestTypeDef | SendMessageBatchRequestEntryTypeDef,
    message: OutboundMessage,
    *,
    fifo: bool,
) -> None:
    """Add what SendMessage and a SendMessageBatch entry both carry besides the body."""
    if message.attributes:
        fields["MessageAttributes"] = {
            name: _attribute_value(value) for name, value in message.attributes.items()
        }
    if message.trace_header:
        fields["MessageSystemAttributes"] = {
            "AWSTraceHeader": {"DataType": "String", "StringValue": message.trace_header}
        }
    if fifo:
        fields["MessageGroupId"] = fifo_token(message.group_id)
        fields["MessageDeduplicationId"] = fifo_token(message.deduplication_id)


class SqsQueue:
    """One queue: receive, batch delete, send. Implements MessageSource and MessageSender.

    ``receive_client``, if given, makes the receives (a client without botocore's retries:
    a retried long poll would outlive the stop's bound)."""

    def __init__(
        self, client: SQSClient, url: str, *, receive_client: SQSClient | None = None
    ) -> None:
        self._client = client
        self._receive_client = receive_client or client
        self.url = url
        self.fifo = is_fifo(url)

    async def receive(
        self, max_messages: int, wait_seconds: int, *, visibility_timeout: int | None = None
    ) -> list[ReceivedMessage]:
        """One ReceiveMessage; ``visibility_timeout`` overrides the queue's own."""
        request = receive_request(
            self.url, max_messages, wait_seconds, visibility_timeout=visibility_timeout
        )
        with aws_call("sqs.ReceiveMessage"):
            response = await self._receive_client.receive_message(**request)
        return [received_message(raw) for raw in response.get("Messages", [])]

    async def delete_batch(self, messages: Sequence[ReceivedMessage]) -> list[DeleteFailure]:
        if not messages:
            return []
        entries = delete_entries([m.receipt_handle for m in messages])
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
        entries = visibility_entries([m.receipt_handle for m in messages], timeout_seconds)
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
        entries = send_entries(messages, fifo=self.fifo)
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

    async def send(self, body: str, **options: Unpack[SendOptions]) -> str:
        message = OutboundMessage.of(body, options)
        with aws_call("sqs.SendMessage"):
            response = await self._client.send_message(
                **send_request(self.url, message, fifo=self.fifo)
            )
        return str(response["MessageId"])

    async def describe(self) -> QueueDescription:
        """The queue's visibility timeout and the dead-letter queue its RedrivePolicy names."""
        visibility, policy = await self.redrive()
        if not policy:
            return QueueDescription(visibility_timeout=visibility, dead_letter=None)
        return QueueDescription(
            visibility_timeout=visibility,
            dead_letter=await self.dead_letter_queue(*dead_letter_target(policy)),
            max_receive_count=max_receive_count(policy),
        )

    async def redrive(self) -> tuple[int, str | None]:
        """The queue's visibility timeout and its RedrivePolicy (None without one)."""
        with aws_call("sqs.GetQueueAttributes"):
            response = await self._client.get_queue_attributes(**redrive_request(self.url))
        attributes = response.get("Attributes", {})
        return int(attributes.get("VisibilityTimeout", "30")), attributes.get("RedrivePolicy")

    async def dead_letter_queue(self, account: str, name: str) -> SqsQueue:
        """The queue ``name`` of ``account`` (a RedrivePolicy's target), on this client."""
        with aws_call("sqs.GetQueueUrl"):
            found = await self._client.get_queue_url(**queue_url_request(account, name))
        return SqsQueue(self._client, found["QueueUrl"])


@dataclass(frozen=True, slots=True)
class OutboundMessage:
    body: str
    group_id: str
    deduplication_id: str
    attributes: Mapping[str, str | int] | None = None
    #: ``AWSTraceHeader``: a system attribute, which SQS does not count in the size.
    trace_header: str | None = None

    @classmethod
    def of(cls, body: str, options: SendOptions) -> OutboundMessage:
        """A message one ``send`` makes, with the trace header of the task sending it."""
        return cls(
            body,
            options["group_id"],
            options["deduplication_id"],
            options.get("attributes"),
            outbound_trace_header(),
        )

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

    async def send(self, body: str, **options: Unpack[SendOptions]) -> str:
        # Built here, in the turn's task: the batcher's own task is outside every trace.
        return await self._batcher.submit(OutboundMessage.of(body, options))

    async def close(self) -> None:
        await self._batcher.close()


@dataclass(frozen=True, slots=True)
class QueueDescription:
    visibility_timeout: int
    dead_letter: SqsQueue | None
    #: The receives after which SQS moves a message to ``dead_letter`` (its RedrivePolicy).
    max_receive_count: int | None = None


def _attribute_value(value: str | int) -> MessageAttributeValueTypeDef:
    if isinstance(value, int):
        return {"DataType": "Number", "StringValue": str(value)}
    return {"DataType": "String", "StringValue": value}


def received_message(raw: MessageTypeDef) -> ReceivedMessage:
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
