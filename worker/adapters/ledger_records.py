"""The command ledger's records (``LEDGER_TABLE``), as pure values: each request the ledger
makes, built by a module-level function that the ledger, the start-up checks, the retention
table's test and the benchmark's replay all call, and the reading of a refused claim.

A record: ``pk = <conversation_id>``, ``sk = cmd#<command_id>``; ``status`` (``in_progress``
or ``done``), ``owner``, ``lease_until``, ``expires_at`` (DynamoDB's TTL), ``attempts``,
``done_at``, and the message's :class:`~worker.ports.MessageDigest` (``message_digest``, the
HMAC under ``digest_salt``, a salt drawn for the record).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from worker.adapters.dynamodb import rfc3339
from worker.delivery.done_marks import MAX_WRITE_BATCH
from worker.ports import CommandClaim, CommandHold, DoneMark, MessageDigest

if TYPE_CHECKING:  # the stubs are a dev dependency: nothing of them runs
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
            ":until": {"N": str(epoch(now + lease))},
            ":owner": {"S": hold.owner},
            ":ttl": {"N": str(epoch(now + COMMAND_RECORD_TTL))},
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
        ":until": {"N": str(epoch(now + lease))},
        ":owner": {"S": hold.owner},
        ":ttl": {"N": str(epoch(now + COMMAND_RECORD_TTL))},
        ":zero": {"N": "0"},
        ":one": {"N": "1"},
        ":now": {"N": str(epoch(now))},
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
        "expires_at": {"N": str(epoch(mark.now + COMMAND_RECORD_TTL))},
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
        until < epoch(now) or _string(item, "owner") == hold.owner
    ):
        return None
    return CommandClaim(state="busy", lease_until=datetime.fromtimestamp(until, UTC))


def _string(item: Mapping[str, object], name: str) -> str | None:
    value = item.get(name)
    raw = value.get("S") if isinstance(value, Mapping) else None
    return raw if isinstance(raw, str) else None


def _number(item: Mapping[str, object], name: str) -> str | None:
    value = item.get(name)
    raw = value.get("N") if isinstance(value, Mapping) else None
    return raw if isinstance(raw, str) else None


def epoch(moment: datetime) -> int:
    """Epoch seconds, as ``lease_until`` and ``expires_at`` hold them."""
    return int(moment.timestamp())
