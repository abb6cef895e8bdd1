"""DynamoDB: the command ledger, idempotency on ``command_id``, in the history table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from worker.adapters.dynamodb import rfc3339
from worker.adapters.errors import aws_call
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
        with aws_call("dynamodb.UpdateItem"):
            await self._client.update_item(
                TableName=self._table,
                Key=self._key(conversation_id, command_id),
                UpdateExpression="SET #status = :done, done_at = :at, #owner = :owner "
                "REMOVE lease_until",
                ExpressionAttributeNames={"#status": "status", "#owner": "owner"},
                ExpressionAttributeValues={
                    ":done": {"S": DONE},
                    ":at": {"S": rfc3339(now)},
                    ":owner": {"S": owner},
                },
            )

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
