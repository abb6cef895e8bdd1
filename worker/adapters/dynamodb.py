"""DynamoDB: the history table of the contract, read with one Query per turn.

Every request is built by a pure module-level function (``history_page_query``,
``anchor_request``, ``fold_claim_request``, ``fold_release_request``) that the store calls
and that the benchmark's replay calls too, so "the stage's own requests" stay the stage's.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypeAlias

from worker.adapters.client_errors import aws_call
from worker.caching.anchor import SummarySnapshot, WindowAnchor
from worker.caching.observed import ModelUsage
from worker.memory import CompactionPlan, FoldState, HistoryMessage
from worker.memory.history_window import Role
from worker.ports import HistoryPage

if TYPE_CHECKING:  # the stubs are a dev dependency: nothing of them runs
    from types_aiobotocore_dynamodb import DynamoDBClient
    from types_aiobotocore_dynamodb.type_defs import (
        AttributeValueTypeDef,
        QueryInputTypeDef,
        QueryOutputTypeDef,
        UpdateItemInputTypeDef,
    )

    #: An item as DynamoDB's low-level API spells it: attribute name → typed value.
    Item: TypeAlias = Mapping[str, AttributeValueTypeDef]

STATE_KEY = "state"
MESSAGE_PREFIX = "msg#"
_ROLES: dict[str, Role] = {"user": "user", "assistant": "assistant"}
#: The cache-aligned window's anchor on the ``state`` item (written by this stage only).
ANCHOR_SET = "window_anchor = :anchor, window_anchor_folded_through = :anchor_folded"
#: The summary in force for the anchor (fold-lagged), beside it on the same item.
SNAPSHOT_ATTRIBUTES = ("window_summary", "window_summary_folded_through")


def message_key(seq: int) -> str:
    return f"{MESSAGE_PREFIX}{seq:012d}"


def rfc3339(moment: datetime) -> str:
    """Second precision, UTC, ``Z``: one fixed width, so strings compare as the times do."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def state_key(conversation_id: str) -> dict[str, AttributeValueTypeDef]:
    """The key of a conversation's ``state`` item."""
    return {"pk": {"S": conversation_id}, "sk": {"S": STATE_KEY}}


def history_page_query(
    table: str, conversation_id: str, limit: int, *, older_than: str | None = None
) -> QueryInputTypeDef:
    """The Query of one turn: ``state`` (it sorts after every ``msg#``), then the newest
    messages; ``cmd#`` records and other item kinds fall outside the key range. With
    ``older_than`` (a sort key), the page that continues below that key."""
    query: QueryInputTypeDef = {
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


def anchor_request(
    table: str, conversation_id: str, anchor: WindowAnchor
) -> UpdateItemInputTypeDef:
    """Set the window's anchor and the summary in force for it on ``state`` (created if
    missing), nothing else."""
    return {
        "TableName": table,
        "Key": state_key(conversation_id),
        "UpdateExpression": f"SET {_anchor_clauses(anchor)}",
        "ExpressionAttributeValues": _anchor_values(anchor),
    }


def fold_claim_request(
    table: str,
    conversation_id: str,
    through: int,
    *,
    seen: FoldState,
    now: datetime,
    anchor: WindowAnchor | None = None,
) -> UpdateItemInputTypeDef:
    """The fold claim: the request mark set to ``through`` if its version is still the one
    ``seen`` holds (:meth:`DynamoHistoryStore.claim_compaction` says why); with ``anchor``,
    the window's anchor in the same write."""
    condition, values = _mark_unchanged(seen)
    update = (
        "SET compaction_requested_through = :through, "
        "compaction_requested_at = :now, compaction_request_version = :claimed"
    )
    if anchor is not None:
        update += f", {_anchor_clauses(anchor)}"
        values = {**values, **_anchor_values(anchor)}
    return {
        "TableName": table,
        "Key": state_key(conversation_id),
        "UpdateExpression": update,
        "ConditionExpression": condition,
        "ExpressionAttributeValues": {
            ":through": {"N": str(through)},
            ":now": {"S": rfc3339(now)},
            ":claimed": {"N": str(seen.request_version + 1)},
            **values,
        },
    }


def fold_release_request(
    table: str, conversation_id: str, through: int, *, seen: FoldState, claimed_at: datetime
) -> UpdateItemInputTypeDef:
    """Put back the mark ``seen`` held, if the mark is still the claim made at ``claimed_at``."""
    update, values = _restore_mark(seen)
    return {
        "TableName": table,
        "Key": state_key(conversation_id),
        "UpdateExpression": update,
        "ConditionExpression": "compaction_request_version = :claimed"
        " AND compaction_requested_through = :through"
        " AND compaction_requested_at = :at",
        "ExpressionAttributeValues": {
            ":claimed": {"N": str(seen.request_version + 1)},
            ":through": {"N": str(through)},
            ":at": {"S": rfc3339(claimed_at)},
            **values,
        },
    }


def history_page(response: QueryOutputTypeDef) -> HistoryPage:
    """A history Query's answer as the stage reads it: the ``state`` item's fold state and
    anchor, the well-formed messages newest first, one reason per malformed message item,
    and where the next older page starts (DynamoDB's ``LastEvaluatedKey``), if it stopped
    at the limit."""
    state = FoldState()
    anchor: WindowAnchor | None = None
    messages: list[HistoryMessage] = []
    malformed: list[str] = []
    usage: list[ModelUsage] = []
    for item in response.get("Items", []):
        sk = item.get("sk", {}).get("S", "")
        if sk == STATE_KEY:
            state, anchor = _fold_state(item), window_anchor(item)
            continue
        parsed = _history_message(item)
        if isinstance(parsed, str):
            malformed.append(parsed)
            continue
        messages.append(parsed)
        if parsed.role == "assistant" and (bill := model_usage(item, parsed.seq)) is not None:
            usage.append(bill)
    older = response.get("LastEvaluatedKey", {}).get("sk", {}).get("S")
    return HistoryPage(
        state=state,
        messages=tuple(messages),
        malformed=tuple(malformed),
        older=older,
        anchor=anchor,
        usage=tuple(usage),
    )


def model_usage(item: Item, seq: int) -> ModelUsage | None:
    """An answer's ``model_usage`` (the bill the writer stored with it), or None when it has
    none or it is not one (an older writer's answer, or a malformed map: the turn then
    behaves as without it)."""
    value = item.get("model_usage")
    if not isinstance(value, Mapping) or "M" not in value:
        return None
    return ModelUsage.from_json(seq, _plain(value))


def _plain(value: object, depth: int = 0) -> object:
    """A DynamoDB attribute value as a plain one (maps, lists, strings, numbers, booleans,
    None); anything else, or nesting past 8 levels, as None."""
    if not isinstance(value, Mapping) or len(value) != 1 or depth > 8:
        return None
    ((kind, inner),) = value.items()
    if kind == "M" and isinstance(inner, Mapping):
        return {str(key): _plain(member, depth + 1) for key, member in inner.items()}
    if kind == "L" and isinstance(inner, list):
        return [_plain(member, depth + 1) for member in inner]
    if kind == "N" and isinstance(inner, str):
        try:
            return int(inner)
        except ValueError:
            try:
                return float(inner)
            except ValueError:
                return None
    if kind == "S" and isinstance(inner, str):
        return inner
    if kind == "BOOL" and isinstance(inner, bool):
        return inner
    return None


class DynamoHistoryStore:
    """Implements HistoryStore, FoldClaims and WindowAnchors over the contract's table layout."""

    def __init__(self, client: DynamoDBClient, table: str) -> None:
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
        return history_page(response)

    async def store_anchor(self, conversation_id: str, anchor: WindowAnchor) -> None:
        """Set the window's anchor on ``state`` (created if missing), nothing else."""
        with aws_call("dynamodb.UpdateItem"):
            await self._client.update_item(**anchor_request(self._table, conversation_id, anchor))

    async def claim_compaction(
        self,
        conversation_id: str,
        plan: CompactionPlan,
        *,
        seen: FoldState,
        now: datetime,
        anchor: WindowAnchor | None = None,
    ) -> bool:
        """Write ``plan`` as the request mark on ``state`` if the mark is still the one
        ``seen`` holds; False if another worker moved it first.

        When a request is due is decided once, by the pure rule that made ``plan``
        (:mod:`worker.memory.fold`); the condition only makes that decision stick: of two
        workers that planned from one state, exactly one write succeeds. It compares the
        mark's version, a number bumped by every claim, so no time (nor its spelling) is
        compared here. With ``anchor``, the window's anchor rides the same write.
        """
        request = fold_claim_request(
            self._table, conversation_id, plan.through, seen=seen, now=now, anchor=anchor
        )
        with aws_call("dynamodb.UpdateItem"):
            try:
                await self._client.update_item(**request)
            except self._client.exceptions.ConditionalCheckFailedException:
                return False
        return True

    async def release_compaction(
        self, conversation_id: str, plan: CompactionPlan, *, seen: FoldState, claimed_at: datetime
    ) -> None:
        """Put back the mark ``seen`` held, if the mark is still this caller's claim."""
        request = fold_release_request(
            self._table, conversation_id, plan.through, seen=seen, claimed_at=claimed_at
        )
        with aws_call("dynamodb.UpdateItem"):
            try:
                await self._client.update_item(**request)
            except self._client.exceptions.ConditionalCheckFailedException:
                return


def _mark_unchanged(seen: FoldState) -> tuple[str, dict[str, AttributeValueTypeDef]]:
    """The claim's one condition: the request mark's version is still the one read."""
    if seen.request_version == 0:
        return "attribute_not_exists(compaction_request_version)", {}
    return "compaction_request_version = :seen", {":seen": {"N": str(seen.request_version)}}


def _restore_mark(seen: FoldState) -> tuple[str, dict[str, AttributeValueTypeDef]]:
    """The update that puts back the request mark ``seen`` held (removed where it had none)."""
    previous: dict[str, AttributeValueTypeDef | None] = {
        "compaction_requested_through": (
            {"N": str(seen.requested_through)} if seen.requested_through is not None else None
        ),
        "compaction_requested_at": (
            {"S": rfc3339(seen.requested_at)} if seen.requested_at is not None else None
        ),
        "compaction_request_version": (
            {"N": str(seen.request_version)} if seen.request_version else None
        ),
    }
    kept = [name for name, value in previous.items() if value is not None]
    gone = [name for name, value in previous.items() if value is None]
    clauses = []
    if kept:
        clauses.append("SET " + ", ".join(f"{name} = :was_{name}" for name in kept))
    if gone:
        clauses.append("REMOVE " + ", ".join(gone))
    values = {f":was_{name}": value for name, value in previous.items() if value is not None}
    return " ".join(clauses), values


def _anchor_values(anchor: WindowAnchor) -> dict[str, AttributeValueTypeDef]:
    values: dict[str, AttributeValueTypeDef] = {
        ":anchor": {"N": str(anchor.seq)},
        ":anchor_folded": {"N": str(anchor.folded_through)},
    }
    snapshot = anchor.snapshot
    if snapshot is not None:
        values[":summary_folded"] = {"N": str(snapshot.folded_through)}
        if snapshot.summary is not None:
            values[":summary"] = {"S": snapshot.summary}
    return values


def _anchor_clauses(anchor: WindowAnchor) -> str:
    """The anchor's and its snapshot's clauses, to follow a ``SET`` (or a SET list): the
    anchor write and the fold claim that carries it write the same attributes."""
    return f"{ANCHOR_SET}{_snapshot_set(anchor)}{_snapshot_remove(anchor)}"


def _snapshot_set(anchor: WindowAnchor) -> str:
    """The snapshot's SET clauses (after the anchor's), for what it holds."""
    snapshot = anchor.snapshot
    if snapshot is None:
        return ""
    clause = ", window_summary_folded_through = :summary_folded"
    return clause + (", window_summary = :summary" if snapshot.summary is not None else "")


def _snapshot_remove(anchor: WindowAnchor) -> str:
    """Removes what the new anchor does not carry: an older snapshot must not outlive it."""
    snapshot = anchor.snapshot
    if snapshot is None:
        return " REMOVE " + ", ".join(SNAPSHOT_ATTRIBUTES)
    return " REMOVE window_summary" if snapshot.summary is None else ""


def window_anchor(item: Item) -> WindowAnchor | None:
    """The anchor a ``state`` item holds; None when either attribute is missing or is not
    a whole number in range (the window then re-anchors, as on a first turn)."""
    seq = _whole_number(item, "window_anchor")
    folded = _whole_number(item, "window_anchor_folded_through")
    if seq is None or folded is None or seq < 1 or folded < 0:
        return None
    return WindowAnchor(seq=seq, folded_through=folded, snapshot=summary_snapshot(item))


def summary_snapshot(item: Item) -> SummarySnapshot | None:
    """The summary in force a ``state`` item holds for its anchor; None when its mark is
    missing or malformed, or its text is not a string (the anchor then re-anchors when the
    fold moves, as without one)."""
    folded = _whole_number(item, "window_summary_folded_through")
    if folded is None or folded < 0:
        return None
    value = item.get("window_summary")
    if value is None:
        return SummarySnapshot(None, folded)
    text = value.get("S") if isinstance(value, Mapping) else None
    return SummarySnapshot(text, folded) if isinstance(text, str) else None


def _whole_number(item: Item, name: str) -> int | None:
    value = item.get(name)
    raw = value.get("N") if isinstance(value, Mapping) else None
    if not isinstance(raw, str):
        return None
    try:
        return int(raw)
    except ValueError:
        return None


def _history_message(item: Item) -> HistoryMessage | str:
    """A message, or the reason it is malformed (a reason, never its content)."""
    stored = item.get("role", {}).get("S")
    if stored is None:
        return "missing role"
    role = _ROLES.get(stored)
    if role is None:
        return "unknown role"
    content = item.get("content", {})
    if "S" not in content:
        return "content is not a string"
    seq = _seq(item)
    if seq is None:
        return "missing seq"
    return HistoryMessage(seq=seq, role=role, content=content["S"], created_at=_created_at(item))


def _created_at(item: Item) -> datetime | None:
    """The message's ``created_at``, if it is an RFC 3339 string (else none: no gap)."""
    value = item.get("created_at")
    text = value.get("S") if isinstance(value, Mapping) else None
    return _parse_time(text) if isinstance(text, str) else None


def _seq(item: Item) -> int | None:
    raw = item.get("seq", {}).get("N")
    if raw is not None:
        try:
            return int(raw)
        except ValueError:
            return None
    digits = item.get("sk", {}).get("S", "").removeprefix(MESSAGE_PREFIX)
    return int(digits) if digits.isdigit() else None


def _fold_state(item: Item) -> FoldState:
    def number(name: str) -> int | None:
        raw = item.get(name, {}).get("N")
        return int(raw) if raw is not None else None

    requested_at = item.get("compaction_requested_at", {}).get("S")
    return FoldState(
        folded_through=number("folded_through") or 0,
        summary=item.get("fold_summary", {}).get("S"),
        requested_through=number("compaction_requested_through"),
        requested_at=_parse_time(requested_at) if requested_at else None,
        request_version=number("compaction_request_version") or 0,
    )


def _parse_time(text: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
