"""DynamoDB: the command records the previous release kept in the history table, read while
the ledger moves to ``LEDGER_TABLE`` (``LEDGER_LEGACY_READS``; docs/DEPLOY.md, "Moving the
ledger out of the history table").

That release kept one record per command in the history table, ``pk = <conversation_id>``,
``sk = cmd#<command_id>``: ``status`` (``in_progress`` or ``done``), ``owner``,
``lease_until`` (epoch seconds) and ``message_sha256`` (the SHA-256 of the message, hex; absent
on its oldest records). This module only reads them, with the Query the stage's role has on
that table; DynamoDB's TTL (``expires_at``, 15 days) removes them.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from worker.adapters.client_errors import aws_call
from worker.ports import CommandClaim, CommandHold

if TYPE_CHECKING:  # the stubs are a dev dependency: nothing of them runs
    from types_aiobotocore_dynamodb import DynamoDBClient
    from types_aiobotocore_dynamodb.type_defs import QueryInputTypeDef

LEGACY_PREFIX = "cmd#"
LEGACY_DIGEST = "message_sha256"


def legacy_record_query(table: str, conversation_id: str, command_id: str) -> QueryInputTypeDef:
    """The one record of a command in the history table, read consistently by its key."""
    return {
        "TableName": table,
        "KeyConditionExpression": "pk = :pk AND sk = :sk",
        "ExpressionAttributeValues": {
            ":pk": {"S": conversation_id},
            ":sk": {"S": LEGACY_PREFIX + command_id},
        },
        "ConsistentRead": True,
        "Limit": 1,
    }


def legacy_claim(item: Mapping[str, object], *, message: str, now: datetime) -> CommandClaim | None:
    """What the previous release's record says of a command: ``reused`` (it holds another
    message's digest), ``done`` (forwarded), ``busy`` (a live lease), or None (its lease has
    expired: the command is free to take)."""
    stored = _attribute(item, LEGACY_DIGEST, "S")
    if stored is not None:
        asked = hashlib.sha256(message.encode("utf-8")).hexdigest()
        if not hmac.compare_digest(stored, asked):
            return CommandClaim(state="reused")
    status = _attribute(item, "status", "S")
    if status == "done":
        return CommandClaim(state="done")
    raw_until = _attribute(item, "lease_until", "N") or "0"
    until = int(raw_until) if raw_until.isdigit() and len(raw_until) < 12 else 0
    if status == "in_progress" and until >= int(now.timestamp()):
        return CommandClaim(state="busy", lease_until=datetime.fromtimestamp(until, UTC))
    return None


class LegacyRecords:
    """The previous release's command records in the history table, read one at a time."""

    def __init__(self, client: DynamoDBClient, table: str) -> None:
        self._client = client
        self._table = table

    async def claim(self, hold: CommandHold, *, message: str, now: datetime) -> CommandClaim | None:
        """:func:`legacy_claim` of the command's record; None when there is none."""
        request = legacy_record_query(self._table, hold.conversation_id, hold.command_id)
        with aws_call("dynamodb.Query"):
            response = await self._client.query(**request)
        items = response.get("Items", [])
        return legacy_claim(items[0], message=message, now=now) if items else None


def _attribute(item: Mapping[str, object], name: str, kind: str) -> str | None:
    value = item.get(name)
    raw = value.get(kind) if isinstance(value, Mapping) else None
    return raw if isinstance(raw, str) else None
