"""Writes history items as the contract lays them out: the demo's seed, the tests' and the
benchmark's, in one place.

The stage itself never writes messages (the writer upstream does), so this lives with the other
stages' stand-ins; it is the one copy of that writer's layout here, so a seed cannot drift from
what the stage reads (:mod:`worker.adapters.dynamodb`). :func:`write_items` sends BatchWriteItem
calls of 25 and sends again what DynamoDB leaves unprocessed (it does under throttling), with a
bounded backoff; items still unprocessed after the last attempt are a :class:`StoreUnavailable`
naming counts, never content.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from worker.adapters.client_errors import aws_call
from worker.adapters.dynamodb import STATE_KEY, message_key, rfc3339
from worker.errors import StoreUnavailable
from worker.timing import Backoff

if TYPE_CHECKING:  # the stubs are a dev dependency: nothing of them runs
    from types_aiobotocore_dynamodb import DynamoDBClient
    from types_aiobotocore_dynamodb.type_defs import (
        AttributeValueTypeDef,
        WriteRequestOutputTypeDef,
        WriteRequestTypeDef,
        WriteRequestUnionTypeDef,
    )

#: BatchWriteItem takes at most 25 requests.
WRITE_BATCH = 25
#: Calls per batch in all, the first included, before what is left unprocessed is an error.
UNPROCESSED_ATTEMPTS = 8
#: Between those calls: DynamoDB's own advice for unprocessed items is an exponential backoff.
UNPROCESSED_BACKOFF = Backoff(base=0.05, cap=2.0)

Sleep = Callable[[float], Awaitable[None]]


def message_item(
    conversation_id: str,
    seq: int,
    role: str,
    content: str,
    created_at: datetime | None = None,
) -> dict[str, AttributeValueTypeDef]:
    """A message item: ``sk = msg#<seq, 12 digits>``, ``seq``, ``role``, ``content`` and,
    when given, ``created_at`` (RFC 3339, UTC, second precision)."""
    item: dict[str, AttributeValueTypeDef] = {
        "pk": {"S": conversation_id},
        "sk": {"S": message_key(seq)},
        "seq": {"N": str(seq)},
        "role": {"S": role},
        "content": {"S": content},
    }
    if created_at is not None:
        item["created_at"] = {"S": rfc3339(created_at)}
    return item


def state_item(
    conversation_id: str, *, folded_through: int | None = None, summary: str | None = None
) -> dict[str, AttributeValueTypeDef]:
    """A ``state`` item with the fold's mark and summary, each only when given (an absent
    ``folded_through`` reads as 0)."""
    item: dict[str, AttributeValueTypeDef] = {
        "pk": {"S": conversation_id},
        "sk": {"S": STATE_KEY},
    }
    if folded_through is not None:
        item["folded_through"] = {"N": str(folded_through)}
    if summary is not None:
        item["fold_summary"] = {"S": summary}
    return item


async def write_items(
    client: DynamoDBClient,
    table: str,
    items: Sequence[dict[str, AttributeValueTypeDef]],
    *,
    parallel: int = 1,
    sleep: Sleep = asyncio.sleep,
) -> None:
    """Put ``items`` in BatchWriteItem calls of 25, up to ``parallel`` at once after the
    first, each re-sending what DynamoDB left unprocessed.

    The first batch goes alone: moto creates a new partition's item collection in a
    read-modify-write, so two batches writing one new key at once can lose one batch's
    items (seen: a 40-message seed read back as 25). An item list must not name one key
    twice in a batch (DynamoDB refuses the call)."""
    batches = [items[i : i + WRITE_BATCH] for i in range(0, len(items), WRITE_BATCH)]
    if not batches:
        return
    await _write_batch(client, table, batches[0], sleep)
    semaphore = asyncio.Semaphore(max(1, parallel))

    async def write(batch: Sequence[dict[str, AttributeValueTypeDef]]) -> None:
        async with semaphore:
            await _write_batch(client, table, batch, sleep)

    await asyncio.gather(*(write(batch) for batch in batches[1:]))


async def _write_batch(
    client: DynamoDBClient,
    table: str,
    batch: Sequence[dict[str, AttributeValueTypeDef]],
    sleep: Sleep,
) -> None:
    puts: list[WriteRequestTypeDef] = [{"PutRequest": {"Item": item}} for item in batch]
    pending: Sequence[WriteRequestUnionTypeDef] = puts
    for attempt in range(1, UNPROCESSED_ATTEMPTS + 1):
        if attempt > 1:
            await sleep(UNPROCESSED_BACKOFF.delay(attempt - 1))
        with aws_call("dynamodb.BatchWriteItem"):
            response = await client.batch_write_item(RequestItems={table: pending})
        left: list[WriteRequestOutputTypeDef] = (response.get("UnprocessedItems") or {}).get(
            table, []
        )
        if not left:
            return
        pending = left
    raise StoreUnavailable(
        f"dynamodb.BatchWriteItem left {len(pending)} of {len(batch)} items unprocessed "
        f"after {UNPROCESSED_ATTEMPTS} attempts",
        service="dynamodb",
        kind="throttled",
    )
