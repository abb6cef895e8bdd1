"""SQS operations for operators (``worker dlq``), run with an operator's credentials.

Not part of the worker's turn: the task role does not grant these actions
(``tests/infra/test_task_role_matches_the_code.py`` reads only the turn's adapters).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from worker.adapters.errors import aws_call


@dataclass(frozen=True, slots=True)
class MoveTask:
    """One of SQS's own message move tasks (``StartMessageMoveTask``), as last listed."""

    handle: str
    status: str
    moved: int
    to_move: int | None


class QueueAdmin:
    def __init__(self, client: Any) -> None:
        self._client = client

    async def arn(self, queue_url: str) -> str:
        with aws_call("sqs.GetQueueAttributes"):
            response = await self._client.get_queue_attributes(
                QueueUrl=queue_url, AttributeNames=["QueueArn"]
            )
        return str(response["Attributes"]["QueueArn"])

    async def start_move(self, source_arn: str, destination_arn: str, per_second: int) -> str:
        """Ask SQS to move every message of ``source_arn`` back; returns the task handle."""
        with aws_call("sqs.StartMessageMoveTask"):
            response = await self._client.start_message_move_task(
                SourceArn=source_arn,
                DestinationArn=destination_arn,
                MaxNumberOfMessagesPerSecond=per_second,
            )
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
        return MoveTask(
            handle=handle,
            status=str(task.get("Status", "?")),
            moved=int(task.get("ApproximateNumberOfMessagesMoved", 0)),
            to_move=int(total) if total is not None else None,
        )
