"""DynamoDB: the history table of the contract, read with one Query per turn."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from worker.adapters.errors import aws_call
from worker.memory import CompactionPlan, FoldState, HistoryMessage
from worker.ports import CommandClaim, HistoryPage

STATE_KEY = "state"
MESSAGE_PREFIX = "msg#"
COMMAND_PREFIX = "cmd#"
#: Command records outlive SQS's longest retention (14 days), then DynamoDB's TTL removes them.
COMMAND_RECORD_TTL = timedelta(days=15)
IN_PROGRESS = "in_progress"
DONE = "done"
_ROLES = ("user", "assistant")


def message_key(seq: int) -> str:
    return f"{MESSAGE_PREFIX}{seq:012d}"


def rfc3339(moment: datetime) -> str:
    """Second precision, UTC, ``Z``: one fixed width, so strings compare as the times do."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def history_page_query(
    table: str, conversation_id: str, limit: int, *, older_than: str | None = None
) -> dict[str, Any]:
    """The Query of one turn: ``state`` (it sorts after every ``msg#``), then the newest
    messages; ``cmd#`` records and other item kinds fall outside the key range. With
    ``older_than`` (a sort key), the page that continues below that key."""
    query: dict[str, Any] = {
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
    if older_than is not None:
        query["ExclusiveStartKey"] = {"pk": {"S": conversation_id}, "sk": {"S": older_than}}
    return query


class DynamoHistoryStore:
    """Implements HistoryStore and FoldClaims over the contract's table layout."""

    def __init__(self, client: Any, table: str) -> None:
        self._client = client
        self._table = table

    async def load_page(
        self, conversation_id: str, limit: int, *, older_than: str | None = None
    ) -> HistoryPage:
        """One Query, newest first: the ``state`` item (it sorts after every ``msg#``), then
        the newest messages (with ``older_than``: the messages below that key). ``older`` is
        set when DynamoDB stopped at the limit (its ``LastEvaluatedKey``)."""
        with aws_call("dynamodb.Query"):
            response = await self._client.query(
                **history_page_query(self._table, conversation_id, limit, older_than=older_than)
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
        older = response.get("LastEvaluatedKey", {}).get("sk", {}).get("S")
        return HistoryPage(
            state=state, messages=tuple(messages), malformed=tuple(malformed), older=older
        )

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
