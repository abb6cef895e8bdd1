"""DynamoDB: the history table of the contract, read with one Query per turn.

Every request is built by a pure module-level function (``history_page_query``,
``anchor_request``, ``fold_claim_request``, ``fold_release_request``) that the store calls
and that the benchmark's replay calls too, so "the stage's own requests" stay the stage's.
"""

from __future__ import annotations

from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from worker.adapters.client_errors import aws_call
from worker.adapters.stored_attributes import MESSAGE_PREFIX as MESSAGE_PREFIX
from worker.adapters.stored_attributes import STATE_KEY as STATE_KEY
from worker.adapters.stored_items import StateReading, read_message, read_state
from worker.caching.anchor import WindowAnchor
from worker.caching.bills import ModelUsage
from worker.memory import FoldState, HistoryMessage
from worker.ports import FoldClaim, HistoryPage, StoredDefect

if TYPE_CHECKING:  # the stubs are a dev dependency: nothing of them runs
    from types_aiobotocore_dynamodb import DynamoDBClient
    from types_aiobotocore_dynamodb.type_defs import (
        AttributeValueTypeDef,
        QueryInputTypeDef,
        QueryOutputTypeDef,
        UpdateItemInputTypeDef,
    )

ANCHOR_SET = "window_anchor = :anchor, window_anchor_folded_through = :anchor_folded"
#: The summary in force for the anchor (fold-lagged), beside it on the same item.
SNAPSHOT_ATTRIBUTES = ("window_summary", "window_summary_folded_through")
#: The attributes of a conversation's ``state`` item the contract gives this stage: the fold
#: request mark and the cache-aligned window's anchor and summary snapshot. Never the
#: writer's ``folded_through`` and ``fold_summary``.
STAGE_STATE_ATTRIBUTES = (
    "compaction_requested_through",
    "compaction_requested_at",
    "compaction_request_version",
    "window_anchor",
    "window_anchor_folded_through",
    *SNAPSHOT_ATTRIBUTES,
)


def message_key(seq: int) -> str:
    return f"{MESSAGE_PREFIX}{seq:012d}"


def rfc3339(moment: datetime) -> str:
    """Second precision, UTC, ``Z``: one fixed width, so strings compare as the times do."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def condition_held(client: DynamoDBClient, update: Awaitable[object]) -> bool:
    """Await one conditional UpdateItem, ``update`` (made with ``client``, where the call
    stays visible to the task role's test): False when its condition failed (another writer
    moved the item first), which is an answer, not an error."""
    with aws_call("dynamodb.UpdateItem"):
        try:
            await update
        except client.exceptions.ConditionalCheckFailedException:
            return False
    return True


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
    table: str, claim: FoldClaim, *, anchor: WindowAnchor | None = None
) -> UpdateItemInputTypeDef:
    """The fold claim: the request mark set to the plan's ``through`` if its version is
    still the one ``claim.seen`` holds (:meth:`DynamoHistoryStore.claim_compaction` says
    why); with ``anchor``, the window's anchor in the same write."""
    condition, values = _mark_unchanged(claim.seen)
    update = (
        "SET compaction_requested_through = :through, "
        "compaction_requested_at = :now, compaction_request_version = :claimed"
    )
    if anchor is not None:
        update += f", {_anchor_clauses(anchor)}"
        values = {**values, **_anchor_values(anchor)}
    return {
        "TableName": table,
        "Key": state_key(claim.conversation_id),
        "UpdateExpression": update,
        "ConditionExpression": condition,
        "ExpressionAttributeValues": {
            ":through": {"N": str(claim.plan.through)},
            ":now": {"S": rfc3339(claim.claimed_at)},
            ":claimed": {"N": str(claim.seen.request_version + 1)},
            **values,
        },
    }


def fold_release_request(table: str, claim: FoldClaim) -> UpdateItemInputTypeDef:
    """Put back the mark ``claim.seen`` held, if the mark is still the one ``claim`` made."""
    update, values = _restore_mark(claim.seen)
    return {
        "TableName": table,
        "Key": state_key(claim.conversation_id),
        "UpdateExpression": update,
        "ConditionExpression": "compaction_request_version = :claimed"
        " AND compaction_requested_through = :through"
        " AND compaction_requested_at = :at",
        "ExpressionAttributeValues": {
            ":claimed": {"N": str(claim.seen.request_version + 1)},
            ":through": {"N": str(claim.plan.through)},
            ":at": {"S": rfc3339(claim.claimed_at)},
            **values,
        },
    }


def history_page(response: QueryOutputTypeDef) -> HistoryPage:
    """A history Query's answer as the stage reads it, every item through the one reader
    (:mod:`worker.adapters.stored_items`): the ``state`` item's fold state and anchor (or the
    refusal naming a state attribute no reading makes safe), the well-formed messages newest
    first, one reason per message item left out, the answers' bills and the bills dropped,
    the attributes read as absent, and where the next older page starts (DynamoDB's
    ``LastEvaluatedKey``), if it stopped at the limit."""
    state = StateReading()
    messages: list[HistoryMessage] = []
    malformed: list[str] = []
    usage: list[ModelUsage] = []
    dropped: list[StoredDefect] = []
    ignored: list[StoredDefect] = []
    for item in response.get("Items", []):
        if item.get("sk") == {"S": STATE_KEY}:
            state = read_state(item)
            continue
        read = read_message(item)
        if isinstance(read, str):
            malformed.append(read)
            continue
        messages.append(read.message)
        ignored += read.ignored
        if read.bill is not None:
            usage.append(read.bill)
        if read.dropped_bill is not None:
            dropped.append(read.dropped_bill)
    older = response.get("LastEvaluatedKey", {}).get("sk", {}).get("S")
    return HistoryPage(
        state=state.state,
        messages=tuple(messages),
        malformed=tuple(malformed),
        older=older,
        anchor=state.anchor,
        usage=tuple(usage),
        bills_dropped=tuple(dropped),
        ignored=(*state.ignored, *ignored),
        refusal=state.refusal,
    )


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
        self, claim: FoldClaim, *, anchor: WindowAnchor | None = None
    ) -> bool:
        """Write ``claim.plan`` as the request mark on ``state`` if the mark is still the one
        ``claim.seen`` holds; False if another worker moved it first.

        When a request is due is decided once, by the pure rule that made ``plan``
        (:mod:`worker.memory.fold`); the condition only makes that decision stick: of two
        workers that planned from one state, exactly one write succeeds. It compares the
        mark's version, a number bumped by every claim, so no time (nor its spelling) is
        compared here. With ``anchor``, the window's anchor rides the same write.
        """
        request = fold_claim_request(self._table, claim, anchor=anchor)
        return await condition_held(self._client, self._client.update_item(**request))

    async def release_compaction(self, claim: FoldClaim) -> None:
        """Put back the mark ``claim.seen`` held, if the mark is still this caller's claim."""
        request = fold_release_request(self._table, claim)
        await condition_held(self._client, self._client.update_item(**request))


def _mark_unchanged(seen: FoldState) -> tuple[str, dict[str, AttributeValueTypeDef]]:
    """The claim's one condition: the request mark's version is still the one read. A
    version that was not a count is compared as it stands: the same string or number, or,
    of another type, any value of that type (no writer of this table stores one)."""
    unreadable = seen.unreadable_version
    if unreadable is not None:
        kind, raw = unreadable
        if raw is not None and kind in ("S", "N"):
            value: AttributeValueTypeDef = {"S": raw} if kind == "S" else {"N": raw}
            return "compaction_request_version = :seen", {":seen": value}
        if not kind:
            return "attribute_exists(compaction_request_version)", {}
        return "attribute_type(compaction_request_version, :seen_type)", {":seen_type": {"S": kind}}
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
