"""DynamoDB: the command ledger, idempotency on ``command_id``, in the history table.

A claim (``begin``) is one conditional UpdateItem per command: it must be answered before
the send. The done mark after the send is a plain put of the whole ``done`` record, so the
marks of concurrent turns can leave together in one BatchWriteItem
(:class:`worker.delivery.done_marks.BatchingLedger`); a mark DynamoDB leaves unprocessed fails on
its own, and the stage tries it again with its backoff.

Both records keep ``message_sha256``, the digest of the command's message (never the text):
a refused claim whose record holds another digest is an id reused for a new message, not a
redelivery, and an expired lease is taken over only for the same message.

Every request is built by a pure module-level function (``claim_request``,
``lease_request``, ``done_record``, ``done_marks_request``, ``command_get_request``) that
the ledger calls and that the benchmark's replay calls too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from worker.adapters.client_errors import aws_call
from worker.adapters.dynamodb import rfc3339
from worker.delivery.done_marks import MAX_WRITE_BATCH
from worker.errors import RetryableError, StoreUnavailable
from worker.ports import CommandClaim, CommandHold, DoneMark

if TYPE_CHECKING:  # the stubs are a dev dependency: nothing of them runs
    from types_aiobotocore_dynamodb import DynamoDBClient
    from types_aiobotocore_dynamodb.type_defs import (
        AttributeValueTypeDef,
        BatchWriteItemInputTypeDef,
        GetItemInputTypeDef,
        UpdateItemInputTypeDef,
    )

COMMAND_PREFIX = "cmd#"
#: Command records outlive SQS's longest retention (14 days), then DynamoDB's TTL removes them.
COMMAND_RECORD_TTL = timedelta(days=15)
IN_PROGRESS = "in_progress"
DONE = "done"
#: The record's attribute holding the message's digest (:func:`worker.ports.message_digest`).
DIGEST = "message_sha256"


def command_key(conversation_id: str, command_id: str) -> dict[str, AttributeValueTypeDef]:
    """The key of a command's record, ``sk = cmd#<command_id>``."""
    return {"pk": {"S": conversation_id}, "sk": {"S": COMMAND_PREFIX + command_id}}


def claim_request(
    table: str, hold: CommandHold, *, lease: timedelta, now: datetime, digest: str
) -> UpdateItemInputTypeDef:
    """The claim: the command new, in progress under a lease that has expired, or in
    progress under the hold's owner's own lease, becomes the owner's until ``now + lease``,
    and the record keeps the message's ``digest``; a refusal returns the record as it was.
    An owner names one delivery in one worker, so its own lease is a turn run again (held
    through a brownout) whose abandon failed. A record in progress is taken only when it
    holds the same digest or none (written before records kept one): an expired lease on
    another message is refused, never taken over."""
    return {
        "TableName": table,
        "Key": command_key(hold.conversation_id, hold.command_id),
        "UpdateExpression": "SET #status = :in_progress, lease_until = :until, "
        "#owner = :owner, expires_at = :ttl, #digest = :digest, "
        "attempts = if_not_exists(attempts, :zero) + :one",
        "ConditionExpression": "attribute_not_exists(pk) OR "
        "(#status = :in_progress AND (lease_until < :now OR #owner = :owner) "
        "AND (attribute_not_exists(#digest) OR #digest = :digest))",
        "ExpressionAttributeNames": {"#status": "status", "#owner": "owner", "#digest": DIGEST},
        "ExpressionAttributeValues": {
            ":in_progress": {"S": IN_PROGRESS},
            ":digest": {"S": digest},
            ":until": {"N": str(_epoch(now + lease))},
            ":owner": {"S": hold.owner},
            ":ttl": {"N": str(_epoch(now + COMMAND_RECORD_TTL))},
            ":zero": {"N": "0"},
            ":one": {"N": "1"},
            ":now": {"N": str(_epoch(now))},
        },
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def lease_request(table: str, hold: CommandHold, *, until: int) -> UpdateItemInputTypeDef:
    """Set ``lease_until`` (epoch seconds) if the command is still in progress under the
    hold's owner."""
    return {
        "TableName": table,
        "Key": command_key(hold.conversation_id, hold.command_id),
        "UpdateExpression": "SET lease_until = :until",
        "ConditionExpression": "#status = :in_progress AND #owner = :owner",
        "ExpressionAttributeNames": {"#status": "status", "#owner": "owner"},
        "ExpressionAttributeValues": {
            ":until": {"N": str(until)},
            ":in_progress": {"S": IN_PROGRESS},
            ":owner": {"S": hold.owner},
        },
    }


def done_record(mark: DoneMark) -> dict[str, AttributeValueTypeDef]:
    """The whole record of a forwarded command, which replaces the ``in_progress`` one: it
    keeps the message's digest, so a later delivery of the id is still told apart."""
    record: dict[str, AttributeValueTypeDef] = {
        **command_key(mark.conversation_id, mark.command_id),
        "status": {"S": DONE},
        "owner": {"S": mark.owner},
        "done_at": {"S": rfc3339(mark.now)},
        "expires_at": {"N": str(_epoch(mark.now + COMMAND_RECORD_TTL))},
    }
    if mark.digest is not None:
        record[DIGEST] = {"S": mark.digest}
    return record


def done_marks_request(table: str, marks: Sequence[DoneMark]) -> BatchWriteItemInputTypeDef:
    """One BatchWriteItem of the ``done`` records of ``marks`` (up to 25). Two marks of one
    command are one put: DynamoDB refuses a batch naming a key twice."""
    if len(marks) > MAX_WRITE_BATCH:
        raise ValueError(f"{len(marks)} done marks: BatchWriteItem takes {MAX_WRITE_BATCH}")
    puts = {(m.conversation_id, m.command_id): done_record(m) for m in marks}
    return {"RequestItems": {table: [{"PutRequest": {"Item": i}} for i in puts.values()]}}


def command_get_request(table: str, conversation_id: str, command_id: str) -> GetItemInputTypeDef:
    """Read a command's record, consistently."""
    return {
        "TableName": table,
        "Key": command_key(conversation_id, command_id),
        "ConsistentRead": True,
    }


class DynamoCommandLedger:
    """Implements CommandLedger: one record per command id, ``sk = cmd#<command_id>``.

    States: ``in_progress`` (with an owner and a lease) and ``done``, each with the
    message's digest. The record sorts before every ``msg#`` key and outside the history
    Query's range.
    """

    def __init__(self, client: DynamoDBClient, table: str) -> None:
        self._client = client
        self._table = table

    async def begin(
        self, hold: CommandHold, *, lease: timedelta, now: datetime, digest: str
    ) -> CommandClaim:
        """Take the command: new, or in progress under a lease that has expired. Refused,
        a record holding another digest than ``digest`` is ``reused``, whatever its state."""
        request = claim_request(self._table, hold, lease=lease, now=now, digest=digest)
        with aws_call("dynamodb.UpdateItem"):
            try:
                await self._client.update_item(**request)
            except self._client.exceptions.ConditionalCheckFailedException as exc:
                # ALL_OLD puts the record in the refusal, a key botocore's stubs do not
                # declare for an error response: read it as a plain mapping.
                refusal: Mapping[str, object] = exc.response
                old = refusal.get("Item")
                item = (
                    old
                    if isinstance(old, Mapping)
                    else await self._get(hold.conversation_id, hold.command_id)
                )
                if _string(item, DIGEST) not in (None, digest):
                    return CommandClaim(state="reused")
                if _string(item, "status") == DONE:
                    return CommandClaim(state="done")
                until = int(_number(item, "lease_until") or "0")
                return CommandClaim(state="busy", lease_until=datetime.fromtimestamp(until, UTC))
        return CommandClaim(state="started")

    async def renew(self, hold: CommandHold, *, lease: timedelta, now: datetime) -> bool:
        """Push this owner's lease out; False if the command is no longer this owner's."""
        return await self._set_lease(hold, _epoch(now + lease))

    async def finish(self, mark: DoneMark) -> None:
        """Mark the command done: a redelivery is then deleted without a second forward."""
        [result] = await self.finish_batch([mark])
        if result is not None:
            raise result

    async def finish_batch(self, marks: Sequence[DoneMark]) -> list[RetryableError | None]:
        """Write the ``done`` records of up to 25 commands in one BatchWriteItem.

        Returns one result per mark: None once written, or the error of a mark DynamoDB
        left unprocessed (throttled), for the caller to try again later. A failure of the
        whole call is raised. Two marks of one command (a takeover finishing beside the
        turn it took over from) are one put: DynamoDB refuses a batch naming a key twice.
        """
        if not marks:
            return []
        request = done_marks_request(self._table, marks)
        with aws_call("dynamodb.BatchWriteItem"):
            response = await self._client.batch_write_item(**request)
        unprocessed = {
            (item["pk"].get("S"), item["sk"].get("S", "").removeprefix(COMMAND_PREFIX))
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

    async def abandon(self, hold: CommandHold) -> None:
        """Expire this owner's lease now, so a retry need not wait it out."""
        await self._set_lease(hold, 0)

    async def _set_lease(self, hold: CommandHold, until: int) -> bool:
        """Set ``lease_until`` if the command is still in progress under the hold's owner."""
        request = lease_request(self._table, hold, until=until)
        with aws_call("dynamodb.UpdateItem"):
            try:
                await self._client.update_item(**request)
            except self._client.exceptions.ConditionalCheckFailedException:
                return False
        return True

    async def _get(self, conversation_id: str, command_id: str) -> Mapping[str, object]:
        response = await self._client.get_item(
            **command_get_request(self._table, conversation_id, command_id)
        )
        return response.get("Item", {})


def _string(item: Mapping[str, object], name: str) -> str | None:
    value = item.get(name)
    raw = value.get("S") if isinstance(value, Mapping) else None
    return raw if isinstance(raw, str) else None


def _number(item: Mapping[str, object], name: str) -> str | None:
    value = item.get(name)
    raw = value.get("N") if isinstance(value, Mapping) else None
    return raw if isinstance(raw, str) else None


def _epoch(moment: datetime) -> int:
    return int(moment.timestamp())
