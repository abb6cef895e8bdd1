"""DynamoDB: the command ledger, idempotency on ``command_id``, in the stage's own table
(``LEDGER_TABLE``), never the history table other stages own.

A claim (``begin``) is one conditional UpdateItem per new command: it must be answered before
the send. The done mark after the send is a plain put of the whole ``done`` record, so the
marks of concurrent turns can leave together in one BatchWriteItem
(:class:`worker.delivery.done_marks.BatchingLedger`); a mark DynamoDB leaves unprocessed fails on
its own, and the stage tries it again with its backoff.

Both records keep the message's :class:`~worker.ports.MessageDigest` (never the text): a
salt drawn for the record and the HMAC of the message under it. A refused claim whose record
holds the digest of another message is an id reused for a new message, not a redelivery,
and an expired lease is taken over only for the same message. The salt is the record's, so
checking a delivery against a record takes the record first: a takeover is two calls (the
refusal returns the record, then the conditional takeover), a new command one.

Every request is built by a pure module-level function (``claim_request``,
``takeover_request``, ``lease_request``, ``done_record``, ``done_marks_request``,
``command_get_request``) that the ledger calls and that the benchmark's replay calls too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from worker.adapters.client_errors import aws_call
from worker.adapters.dynamodb import rfc3339
from worker.adapters.legacy_ledger import LegacyRecords
from worker.delivery.done_marks import MAX_WRITE_BATCH
from worker.errors import RetryableError, StoreUnavailable
from worker.ports import CommandClaim, CommandHold, DoneMark, MessageDigest

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
#: The record's attributes holding the message's digest and the salt it was made with.
DIGEST = "message_digest"
SALT = "digest_salt"
#: Every attribute a command record may hold: the retention table lists each of them.
RECORD_ATTRIBUTES = (
    "pk",
    "sk",
    "status",
    "owner",
    "lease_until",
    "expires_at",
    "attempts",
    "done_at",
    DIGEST,
    SALT,
)
#: A takeover whose condition fails (another owner took the record between the refusal and
#: the takeover) reads the record again and decides once more, this many times at most.
TAKEOVER_TRIES = 2


def command_key(conversation_id: str, command_id: str) -> dict[str, AttributeValueTypeDef]:
    """The key of a command's record, ``pk = <conversation_id>``, ``sk = cmd#<command_id>``."""
    return {"pk": {"S": conversation_id}, "sk": {"S": COMMAND_PREFIX + command_id}}


def claim_request(
    table: str, hold: CommandHold, *, lease: timedelta, now: datetime, digest: MessageDigest
) -> UpdateItemInputTypeDef:
    """The claim of a new command: the record, absent, becomes the owner's until
    ``now + lease`` and keeps the message's ``digest`` with its salt; a refusal (the record
    exists) returns the record as it was, for :func:`claim_on_record` to decide."""
    return {
        "TableName": table,
        "Key": command_key(hold.conversation_id, hold.command_id),
        "UpdateExpression": "SET #status = :in_progress, lease_until = :until, "
        "#owner = :owner, expires_at = :ttl, #digest = :digest, #salt = :salt, attempts = :one",
        "ConditionExpression": "attribute_not_exists(pk)",
        "ExpressionAttributeNames": {
            "#status": "status",
            "#owner": "owner",
            "#digest": DIGEST,
            "#salt": SALT,
        },
        "ExpressionAttributeValues": {
            ":in_progress": {"S": IN_PROGRESS},
            ":digest": {"S": digest.value},
            ":salt": {"S": digest.salt},
            ":until": {"N": str(_epoch(now + lease))},
            ":owner": {"S": hold.owner},
            ":ttl": {"N": str(_epoch(now + COMMAND_RECORD_TTL))},
            ":one": {"N": "1"},
        },
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def takeover_request(
    table: str,
    hold: CommandHold,
    *,
    lease: timedelta,
    now: datetime,
    digest: MessageDigest | None,
) -> UpdateItemInputTypeDef:
    """The takeover of a record in progress whose lease has expired, or held under the hold's
    owner's own lease (a turn run again, held through a brownout, whose abandon failed): it
    becomes the owner's until ``now + lease`` if it still holds ``digest`` (the one the
    refusal returned; None: a record without one), so a record that changed in between is
    not taken. A refusal returns the record as it is now."""
    names = {"#status": "status", "#owner": "owner", "#digest": DIGEST}
    values: dict[str, AttributeValueTypeDef] = {
        ":in_progress": {"S": IN_PROGRESS},
        ":until": {"N": str(_epoch(now + lease))},
        ":owner": {"S": hold.owner},
        ":ttl": {"N": str(_epoch(now + COMMAND_RECORD_TTL))},
        ":zero": {"N": "0"},
        ":one": {"N": "1"},
        ":now": {"N": str(_epoch(now))},
    }
    if digest is None:
        same_message = "attribute_not_exists(#digest)"
    else:
        same_message = "#digest = :digest"
        values[":digest"] = {"S": digest.value}
    return {
        "TableName": table,
        "Key": command_key(hold.conversation_id, hold.command_id),
        "UpdateExpression": "SET lease_until = :until, #owner = :owner, expires_at = :ttl, "
        "attempts = if_not_exists(attempts, :zero) + :one",
        "ConditionExpression": "#status = :in_progress AND (lease_until < :now OR #owner = :owner)"
        f" AND {same_message}",
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
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
    keeps the message's digest and its salt, so a later delivery of the id is still told
    apart."""
    record: dict[str, AttributeValueTypeDef] = {
        **command_key(mark.conversation_id, mark.command_id),
        "status": {"S": DONE},
        "owner": {"S": mark.owner},
        "done_at": {"S": rfc3339(mark.now)},
        "expires_at": {"N": str(_epoch(mark.now + COMMAND_RECORD_TTL))},
    }
    if mark.digest is not None:
        record[DIGEST] = {"S": mark.digest.value}
        record[SALT] = {"S": mark.digest.salt}
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


def record_digest(item: Mapping[str, object]) -> MessageDigest | None:
    """The digest a record keeps; None for a record without one (or a malformed one)."""
    salt, value = _string(item, SALT), _string(item, DIGEST)
    return MessageDigest(salt, value) if salt is not None and value is not None else None


def claim_on_record(
    item: Mapping[str, object], hold: CommandHold, *, message: str, now: datetime
) -> CommandClaim | None:
    """What a refused claim found, from the record the refusal returned: ``reused`` (it
    holds another message's digest), ``done``, ``busy`` (another owner's live lease), or
    None when the record may be taken over (in progress, and its lease expired or the
    hold's owner's own)."""
    digest = record_digest(item)
    if digest is not None and not digest.matches(message):
        return CommandClaim(state="reused")
    if _string(item, "status") == DONE:
        return CommandClaim(state="done")
    until = int(_number(item, "lease_until") or "0")
    if _string(item, "status") == IN_PROGRESS and (
        until < _epoch(now) or _string(item, "owner") == hold.owner
    ):
        return None
    return CommandClaim(state="busy", lease_until=datetime.fromtimestamp(until, UTC))


class DynamoCommandLedger:
    """Implements CommandLedger: one record per command, ``pk = <conversation_id>``,
    ``sk = cmd#<command_id>``, in the stage's ledger table.

    States: ``in_progress`` (with an owner and a lease) and ``done``, each with the
    message's salted digest. With ``legacy``, a new claim also reads the record the previous
    release kept in the history table (:mod:`worker.adapters.legacy_ledger`): a command it
    forwarded or still holds is neither forwarded again nor lost while the ledger moves.
    """

    def __init__(
        self, client: DynamoDBClient, table: str, *, legacy: LegacyRecords | None = None
    ) -> None:
        self._client = client
        self._table = table
        self._legacy = legacy

    async def begin(
        self, hold: CommandHold, *, lease: timedelta, now: datetime, message: str
    ) -> CommandClaim:
        """Take the command: new, or in progress under a lease that has expired (or the
        hold's owner's own). Refused, a record holding another message's digest is
        ``reused``, whatever its state."""
        digest = MessageDigest.drawn(message)
        request = claim_request(self._table, hold, lease=lease, now=now, digest=digest)
        old = await self._update(request, hold)
        if old is None:
            return await self._started(hold, digest, now=now, message=message)
        for _ in range(TAKEOVER_TRIES):
            found = claim_on_record(old, hold, message=message, now=now)
            if found is not None:
                return found
            kept = record_digest(old)
            request = takeover_request(self._table, hold, lease=lease, now=now, digest=kept)
            taken = await self._update(request, hold)
            if taken is None:
                return await self._started(hold, kept, now=now, message=message)
            old = taken
        # Taken and given up again under our feet twice: try again in a moment.
        return claim_on_record(old, hold, message=message, now=now) or CommandClaim(
            state="busy", lease_until=now
        )

    async def _started(
        self, hold: CommandHold, digest: MessageDigest | None, *, now: datetime, message: str
    ) -> CommandClaim:
        """The claim of a record this owner now holds, checked against the previous
        release's record first when there is one to read (new or taken over, the command
        may be one that release forwarded); its lease is given up if that check fails."""
        claim = CommandClaim(state="started", digest=digest)
        if self._legacy is None:
            return claim
        try:
            return await self._check_legacy(self._legacy, hold, claim, now=now, message=message)
        except RetryableError:
            with contextlib.suppress(RetryableError):  # else the lease runs out by itself
                await self.abandon(hold)
            raise

    async def _check_legacy(
        self,
        legacy: LegacyRecords,
        hold: CommandHold,
        claim: CommandClaim,
        *,
        now: datetime,
        message: str,
    ) -> CommandClaim:
        """A new record's command as the previous release's record in the history table
        has it: ``done`` there is done here too (marked so), a live lease or another
        message there gives this record up, nothing there leaves the claim as it is."""
        verdict = await legacy.claim(hold, message=message, now=now)
        if verdict is None:
            return claim
        if verdict.state == "done":
            await self.finish(hold.done(now, claim.digest))
        else:
            await self.abandon(hold)
        return verdict

    async def _update(
        self, request: UpdateItemInputTypeDef, hold: CommandHold
    ) -> Mapping[str, object] | None:
        """One conditional UpdateItem: None when it was written, else the record as the
        refusal returned it (read again when the refusal carries none)."""
        with aws_call("dynamodb.UpdateItem"):
            try:
                await self._client.update_item(**request)
            except self._client.exceptions.ConditionalCheckFailedException as exc:
                # ALL_OLD puts the record in the refusal, a key botocore's stubs do not
                # declare for an error response: read it as a plain mapping.
                refusal: Mapping[str, object] = exc.response
                old = refusal.get("Item")
            else:
                return None
        return old if isinstance(old, Mapping) else await self._get(hold)

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

    async def _get(self, hold: CommandHold) -> Mapping[str, object]:
        request = command_get_request(self._table, hold.conversation_id, hold.command_id)
        with aws_call("dynamodb.GetItem"):
            response = await self._client.get_item(**request)
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
