"""DynamoDB: the history table of the contract, read with one Query per turn."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from worker.adapters.errors import aws_call
from worker.memory import CompactionPlan, FoldState, HistoryMessage
from worker.ports import HistoryPage

STATE_KEY = "state"
MESSAGE_PREFIX = "msg#"
_ROLES = ("user", "assistant")


def message_key(seq: int) -> str:
    return f"{MESSAGE_PREFIX}{seq:012d}"


def rfc3339(moment: datetime) -> str:
    """Second precision, UTC, ``Z``: one fixed width, so strings compare as the times do."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def history_page_query(table: str, conversation_id: str, limit: int) -> dict[str, Any]:
    """The Query of one turn: ``state`` (it sorts after every ``msg#``), then the newest
    messages; ``cmd#`` records and other item kinds fall outside the key range."""
    return {
        "TableName": table,
        "KeyConditionExpression": "pk = :pk AND sk BETWEEN :first AND :state",
        "ExpressionAttributeValues": {
            ":pk": {"S": conversation_id},
            ":first": {"S": MESSAGE_PREFIX},
            ":state": {"S": STATE_KEY},
        },
        "ScanIndexForward": False,
        "Limit": limit,
        "ConsistentRead": True,
    }


class DynamoHistoryStore:
    """Implements HistoryStore and FoldClaims over the contract's table layout."""

    def __init__(self, client: Any, table: str) -> None:
        self._client = client
        self._table = table

    async def load_page(self, conversation_id: str, limit: int) -> HistoryPage:
        """One Query, newest first: the ``state`` item (it sorts after every ``msg#``), then
        the newest messages. ``cmd#`` records and other item kinds fall outside the range."""
        with aws_call("dynamodb.Query"):
            response = await self._client.query(
                **history_page_query(self._table, conversation_id, limit)
            )
        state = FoldState()
        messages: list[HistoryMessage] = []
        malformed: list[str] = []
        for item in response.get("Items", []):
            sk = item.get("sk", {}).get("S", "")
            if sk == STATE_KEY:
                state = _fold_state(item)
                continue
            parsed = _history_message(item)
            if isinstance(parsed, str):
                malformed.append(parsed)
            else:
                messages.append(parsed)
        return HistoryPage(state=state, messages=tuple(messages), malformed=tuple(malformed))

    async def claim_compaction(
        self, conversation_id: str, plan: CompactionPlan, *, now: datetime, retry_after: timedelta
    ) -> bool:
        """Write the request mark on ``state`` only if no other request is pending.

        The condition is the pending rule itself, evaluated by DynamoDB: no request yet,
        or the fold has reached the last one, or the last one is older than the retry
        period. Two workers racing on one conversation: exactly one write succeeds.
        """
        with aws_call("dynamodb.UpdateItem"):
            try:
                await self._client.update_item(
                    TableName=self._table,
                    Key={"pk": {"S": conversation_id}, "sk": {"S": STATE_KEY}},
                    UpdateExpression="SET compaction_requested_through = :through, "
                    "compaction_requested_at = :now",
                    ConditionExpression="attribute_not_exists(compaction_requested_through)"
                    " OR compaction_requested_through <= folded_through"
                    " OR attribute_not_exists(compaction_requested_at)"
                    " OR compaction_requested_at < :cutoff",
                    ExpressionAttributeValues={
                        ":through": {"N": str(plan.through)},
                        ":now": {"S": rfc3339(now)},
                        ":cutoff": {"S": rfc3339(now - retry_after)},
                    },
                )
            except self._client.exceptions.ConditionalCheckFailedException:
                return False
        return True

    async def release_compaction(
        self, conversation_id: str, plan: CompactionPlan, *, claimed_at: datetime
    ) -> None:
        """Remove this caller's mark, if it is still the one on ``state``."""
        with aws_call("dynamodb.UpdateItem"):
            try:
                await self._client.update_item(
                    TableName=self._table,
                    Key={"pk": {"S": conversation_id}, "sk": {"S": STATE_KEY}},
                    UpdateExpression="REMOVE compaction_requested_through, compaction_requested_at",
                    ConditionExpression="compaction_requested_through = :through"
                    " AND compaction_requested_at = :at",
                    ExpressionAttributeValues={
                        ":through": {"N": str(plan.through)},
                        ":at": {"S": rfc3339(claimed_at)},
                    },
                )
            except self._client.exceptions.ConditionalCheckFailedException:
                return


def _history_message(item: Mapping[str, Any]) -> HistoryMessage | str:
    """A message, or the reason it is malformed (a reason, never its content)."""
    role = item.get("role", {}).get("S")
    if role is None:
        return "missing role"
    if role not in _ROLES:
        return "unknown role"
    content = item.get("content", {})
    if "S" not in content:
        return "content is not a string"
    seq = _seq(item)
    if seq is None:
        return "missing seq"
    return HistoryMessage(seq=seq, role=role, content=content["S"])


def _seq(item: Mapping[str, Any]) -> int | None:
    raw = item.get("seq", {}).get("N")
    if raw is not None:
        try:
            return int(raw)
        except ValueError:
            return None
    digits = item.get("sk", {}).get("S", "").removeprefix(MESSAGE_PREFIX)
    return int(digits) if digits.isdigit() else None


def _fold_state(item: Mapping[str, Any]) -> FoldState:
    def number(name: str) -> int | None:
        raw = item.get(name, {}).get("N")
        return int(raw) if raw is not None else None

    requested_at = item.get("compaction_requested_at", {}).get("S")
    return FoldState(
        folded_through=number("folded_through") or 0,
        summary=item.get("fold_summary", {}).get("S"),
        requested_through=number("compaction_requested_through"),
        requested_at=_parse_time(requested_at) if requested_at else None,
    )


def _parse_time(text: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
