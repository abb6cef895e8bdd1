"""DynamoDB: the command ledger, idempotency on ``command_id``, in the history table.

A claim (``begin``) is one conditional UpdateItem per command: it must be answered before
the send. The done mark after the send is a plain put of the whole ``done`` record, so the
marks of concurrent turns can leave together in one BatchWriteItem
(:class:`worker.delivery.done_marks.BatchingLedger`); a mark DynamoDB leaves unprocessed fails on
its own, and the stage tries it again with its backoff.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from worker.adapters.dynamodb import rfc3339
from worker.adapters.errors import aws_call
from worker.delivery.done_marks import MAX_WRITE_BATCH, DoneMark
from worker.errors import RetryableError, StoreUnavailable
from worker.ports import CommandClaim

COMMAND_PREFIX = "cmd#"
#: Command records outlive SQS's longest retention (14 days), then DynamoDB's TTL removes them.
COMMAND_RECORD_TTL = timedelta(days=15)
IN_PROGRESS = "in_progress"
DONE = "done"


class DynamoCommandLedger:
    """Implements CommandLedger: one record per command id, ``sk = cmd#<command_id>``.

    States: ``in_progress`` (with an owner and a lease) and ``done``. The record sorts
    before every ``msg#`` key and outside the history Query's range.
    """

    def __init__(self, client: Any, table: str) -> None:
        self._client = client
        self._table = table

    def _key(self, conversation_id: str, command_id: str) -> dict[str, dict[str, str]]:
        return {"pk": {"S": conversation_id}, "sk": {"S": COMMAND_PREFIX + command_id}}

    async def begin(
        self,
        conversation_id: str,
        command_id: str,
        *,
        owner: str,
        lease: timedelta,
        now: datetime,
    ) -> CommandClaim:
        """Take the command: new, or in progress under a lease that has expired."""
        with aws_call("dynamodb.UpdateItem"):
            try:
                await self._client.update_item(
                    TableName=self._table,
                    Key=self._key(conversation_id, command_id),
                    UpdateExpression="SET #status = :in_progress, lease_until = :until, "
                    "#owner = :owner, expires_at = :ttl, "
                    "attempts = if_not_exists(attempts, :zero) + :one",
                    ConditionExpression="attribute_not_exists(pk) OR "
                    "(#status = :in_progress AND lease_until < :now)",
                    ExpressionAttributeNames={"#status": "status", "#owner": "owner"},
                    ExpressionAttributeValues={
                        ":in_progress": {"S": IN_PROGRESS},
                        ":until": {"N": str(_epoch(now + lease))},
                        ":owner": {"S": owner},
                        ":ttl": {"N": str(_epoch(now + COMMAND_RECORD_TTL))},
                        ":zero": {"N": "0"},
                        ":one": {"N": "1"},
                        ":now": {"N": str(_epoch(now))},
                    },
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
            except self._client.exceptions.ConditionalCheckFailedException as exc:
                item = exc.response.get("Item") or await self._get(conversation_id, command_id)
                if item.get("status", {}).get("S") == DONE:
                    return CommandClaim(state="done")
                until = int(item.get("lease_until", {}).get("N", "0"))
                return CommandClaim(state="busy", lease_until=datetime.fromtimestamp(until, UTC))
        return CommandClaim(state="started")

    async def renew(
        self,
        conversation_id: str,
        command_id: str,
        *,
        owner: str,
        lease: timedelta,
        now: datetime,
    ) -> bool:
        """Push this owner's lease out; False if the command is no longer this owner's."""
        return await self._set_lease(conversation_id, command_id, owner, _epoch(now + lease))

    async def finish(
        self, conversation_id: str, command_id: str, *, owner: str, now: datetime
    ) -> None:
        """Mark the command done: a redelivery is then deleted without a second forward."""
        [result] = await self.finish_batch([DoneMark(conversation_id, command_id, owner, now)])
        if result is not None:
            raise result

    async def finish_batch(self, marks: Sequence[DoneMark]) -> list[RetryableError | None]:
        """Write the ``done`` records of up to 25 commands in one BatchWriteItem.

        Returns one result per mark: None once written, or the error of a mark DynamoDB
        left unprocessed (throttled), for the caller to try again later. A failure of the
        whole call is raised. Two marks of one command (a takeover finishing beside the
        turn it took over from) are one put: DynamoDB refuses a batch naming a key twice.
        """
        if len(marks) > MAX_WRITE_BATCH:
            raise ValueError(f"{len(marks)} done marks: BatchWriteItem takes {MAX_WRITE_BATCH}")
        if not marks:
            return []
        puts = {(m.conversation_id, m.command_id): self.done_record(m) for m in marks}
        with aws_call("dynamodb.BatchWriteItem"):
            response = await self._client.batch_write_item(
                RequestItems={self._table: [{"PutRequest": {"Item": i}} for i in puts.values()]}
            )
        unprocessed = {
            (item["pk"]["S"], item["sk"]["S"].removeprefix(COMMAND_PREFIX))
            for request in (response.get("UnprocessedItems") or {}).get(self._table, [])
            if (item := request.get("PutRequest", {}).get("Item"))
        }
        return [
            StoreUnavailable(
                "dynamodb.BatchWriteItem left the done mark unprocessed",
                service="dynamodb",
                kind="throttled",
            )
            if (m.conversation_id, m.command_id) in unprocessed
            else None
            for m in marks
        ]

    def done_record(self, mark: DoneMark) -> dict[str, dict[str, str]]:
        """The whole record of a forwarded command, which replaces the ``in_progress`` one."""
        return {
            **self._key(mark.conversation_id, mark.command_id),
            "status": {"S": DONE},
            "owner": {"S": mark.owner},
            "done_at": {"S": rfc3339(mark.now)},
            "expires_at": {"N": str(_epoch(mark.now + COMMAND_RECORD_TTL))},
        }

    async def abandon(self, conversation_id: str, command_id: str, *, owner: str) -> None:
        """Expire this owner's lease now, so a retry need not wait it out."""
        await self._set_lease(conversation_id, command_id, owner, 0)

    async def _set_lease(
        self, conversation_id: str, command_id: str, owner: str, until: int
    ) -> bool:
        """Set ``lease_until`` if the command is still in progress under ``owner``."""
        with aws_call("dynamodb.UpdateItem"):
            try:
                await self._client.update_item(
                    TableName=self._table,
                    Key=self._key(conversation_id, command_id),
                    UpdateExpression="SET lease_until = :until",
                    ConditionExpression="#status = :in_progress AND #owner = :owner",
                    ExpressionAttributeNames={"#status": "status", "#owner": "owner"},
                    ExpressionAttributeValues={
                        ":until": {"N": str(until)},
                        ":in_progress": {"S": IN_PROGRESS},
                        ":owner": {"S": owner},
                    },
                )
            except self._client.exceptions.ConditionalCheckFailedException:
                return False
        return True

    async def _get(self, conversation_id: str, command_id: str) -> dict[str, Any]:
        response = await self._client.get_item(
            TableName=self._table,
            Key=self._key(conversation_id, command_id),
            ConsistentRead=True,
        )
        return dict(response.get("Item", {}))


def _epoch(moment: datetime) -> int:
    return int(moment.timestamp())
