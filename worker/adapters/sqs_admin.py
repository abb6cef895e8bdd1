"""SQS operations for operators (``worker dlq``, ``worker erase``), run with an operator's
credentials.

Not part of the worker's turn: the task role does not grant these actions
(``tests/infra/test_task_role_matches_the_code.py`` reads only the turn's adapters).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from worker.adapters.client_errors import aws_call, error_code, http_status
from worker.adapters.sqs import max_receive_count

if TYPE_CHECKING:  # the stubs are a dev dependency: nothing of them runs
    from types_aiobotocore_sqs import SQSClient

#: What an endpoint without message move tasks answers StartMessageMoveTask with: moto
#: fails it with HTTP 500 ("not implemented"), other emulators name the action unknown.
_NO_MOVE_TASKS = frozenset({"InvalidAction", "UnknownOperation", "UnknownOperationException"})


@dataclass(frozen=True, slots=True)
class QueueDepth:
    """A queue's approximate counts, and its ``maxReceiveCount`` when it has a RedrivePolicy."""

    visible: int
    in_flight: int
    max_receive_count: int | None = None


@dataclass(frozen=True, slots=True)
class MoveTask:
    """One of SQS's own message move tasks (``StartMessageMoveTask``), as last listed."""

    handle: str
    status: str
    moved: int
    to_move: int | None
    #: Why a task ended FAILED, as SQS words it (names a cause, never a message's content).
    failure_reason: str | None = None


class QueueAdmin:
    def __init__(self, client: SQSClient) -> None:
        self._client = client

    async def arn(self, queue_url: str) -> str:
        with aws_call("sqs.GetQueueAttributes"):
            response = await self._client.get_queue_attributes(
                QueueUrl=queue_url, AttributeNames=["QueueArn"]
            )
        return str(response["Attributes"]["QueueArn"])

    async def retention_seconds(self, queue_url: str) -> int:
        """How long the queue keeps a message (``MessageRetentionPeriod``), in seconds."""
        with aws_call("sqs.GetQueueAttributes"):
            response = await self._client.get_queue_attributes(
                QueueUrl=queue_url, AttributeNames=["MessageRetentionPeriod"]
            )
        return int(response["Attributes"]["MessageRetentionPeriod"])

    async def depth(self, queue_url: str) -> QueueDepth:
        """What a scan of the queue cannot see, read in one call: the messages visible (at the
        scan's end: arrived since, or held back behind another of their FIFO group), those in
        flight (received by another reader), and the queue's own ``maxReceiveCount`` if it
        has a RedrivePolicy (a scan counts one receive on every message it looks at)."""
        with aws_call("sqs.GetQueueAttributes"):
            response = await self._client.get_queue_attributes(
                QueueUrl=queue_url,
                AttributeNames=[
                    "ApproximateNumberOfMessages",
                    "ApproximateNumberOfMessagesNotVisible",
                    "RedrivePolicy",
                ],
            )
        attributes = response.get("Attributes", {})
        policy = attributes.get("RedrivePolicy")
        return QueueDepth(
            visible=int(attributes.get("ApproximateNumberOfMessages", "0")),
            in_flight=int(attributes.get("ApproximateNumberOfMessagesNotVisible", "0")),
            max_receive_count=max_receive_count(policy) if policy else None,
        )

    async def start_move(
        self, source_arn: str, destination_arn: str, per_second: int
    ) -> str | None:
        """Ask SQS to move every message of ``source_arn`` back; returns the task handle, or
        None where the endpoint has no move tasks (a 5xx or an unknown action). Any other
        refusal (a denied action, a task already running, a bad parameter) is raised."""
        with aws_call("sqs.StartMessageMoveTask"):
            try:
                response = await self._client.start_message_move_task(
                    SourceArn=source_arn,
                    DestinationArn=destination_arn,
                    MaxNumberOfMessagesPerSecond=per_second,
                )
            except ClientError as exc:
                if error_code(exc) in _NO_MOVE_TASKS or (http_status(exc) or 0) >= 500:
                    return None
                raise
        return str(response["TaskHandle"])

    async def move_task(self, source_arn: str, handle: str) -> MoveTask | None:
        """The task with ``handle`` among the source queue's recent move tasks, if listed."""
        with aws_call("sqs.ListMessageMoveTasks"):
            response = await self._client.list_message_move_tasks(
                SourceArn=source_arn, MaxResults=10
            )
        results = response.get("Results", [])
        # SQS names the handle only while a task runs; once it ends, it is the newest listed.
        task = next((t for t in results if t.get("TaskHandle") == handle), None)
        if task is None and results and "TaskHandle" not in results[0]:
            task = results[0]
        if task is None:
            return None
        total = task.get("ApproximateNumberOfMessagesToMove")
        reason = task.get("FailureReason")
        return MoveTask(
            handle=handle,
            status=str(task.get("Status", "?")),
            moved=int(task.get("ApproximateNumberOfMessagesMoved", 0)),
            to_move=int(total) if total is not None else None,
            failure_reason=str(reason) if reason else None,
        )
