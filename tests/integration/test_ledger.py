"""The command ledger on DynamoDB: who forwards a command, and whether it is done."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from tests.integration.conftest import Stack
from worker.adapters.dynamodb import DynamoHistoryStore
from worker.adapters.ledger import DynamoCommandLedger
from worker.delivery.done_marks import BatchingLedger

pytestmark = pytest.mark.integration

NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
LEASE = timedelta(seconds=60)


@pytest.fixture
def ledger(stack: Stack) -> DynamoCommandLedger:
    return DynamoCommandLedger(stack.clients.dynamodb, stack.env["HISTORY_TABLE"])


async def test_a_new_command_is_started_and_a_second_claim_finds_it_busy(
    ledger: DynamoCommandLedger,
) -> None:
    first = await ledger.begin("m", "c1", owner="w1", lease=LEASE, now=NOW)
    second = await ledger.begin("m", "c1", owner="w2", lease=LEASE, now=NOW + timedelta(seconds=5))
    assert first.state == "started"
    assert second.state == "busy"
    assert second.lease_until == NOW + LEASE


async def test_an_expired_lease_is_taken_over_and_the_old_owner_loses_it(
    ledger: DynamoCommandLedger,
) -> None:
    await ledger.begin("m", "c2", owner="w1", lease=LEASE, now=NOW)
    later = NOW + LEASE + timedelta(seconds=1)
    taken = await ledger.begin("m", "c2", owner="w2", lease=LEASE, now=later)
    assert taken.state == "started"
    assert not await ledger.renew("m", "c2", owner="w1", lease=LEASE, now=later)
    assert await ledger.renew("m", "c2", owner="w2", lease=LEASE, now=later)


async def test_a_turn_run_again_takes_its_own_live_claim_and_no_one_elses(
    ledger: DynamoCommandLedger,
) -> None:
    """A turn held through a brownout runs again under the same owner (this worker, this
    delivery) after its abandon failed: its own live lease is its own (issue 25)."""
    await ledger.begin("m", "c9", owner="w1/m9/1", lease=LEASE, now=NOW)
    soon = NOW + timedelta(seconds=5)
    assert (
        await ledger.begin("m", "c9", owner="w1/m9/1", lease=LEASE, now=soon)
    ).state == "started"
    assert (await ledger.begin("m", "c9", owner="w2/m9/2", lease=LEASE, now=soon)).state == "busy"
    await ledger.finish("m", "c9", owner="w1/m9/1", now=soon)
    assert (await ledger.begin("m", "c9", owner="w1/m9/1", lease=LEASE, now=soon)).state == "done"


async def test_a_done_command_stays_done(ledger: DynamoCommandLedger, stack: Stack) -> None:
    await ledger.begin("m", "c3", owner="w1", lease=LEASE, now=NOW)
    await ledger.finish("m", "c3", owner="w1", now=NOW)
    far_later = NOW + timedelta(days=1)
    assert (await ledger.begin("m", "c3", owner="w2", lease=LEASE, now=far_later)).state == "done"
    item = (
        await stack.clients.dynamodb.get_item(
            TableName=stack.env["HISTORY_TABLE"],
            Key={"pk": {"S": "m"}, "sk": {"S": "cmd#c3"}},
        )
    )["Item"]
    assert item["status"] == {"S": "done"}
    assert int(item["expires_at"]["N"]) >= int((NOW + timedelta(days=14)).timestamp())


async def test_an_abandoned_lease_can_be_taken_at_once(ledger: DynamoCommandLedger) -> None:
    await ledger.begin("m", "c4", owner="w1", lease=LEASE, now=NOW)
    await ledger.abandon("m", "c4", owner="w1")
    assert (await ledger.begin("m", "c4", owner="w2", lease=LEASE, now=NOW)).state == "started"


async def test_command_records_stay_out_of_the_history_page(
    ledger: DynamoCommandLedger, stack: Stack
) -> None:
    await stack.seed("m", [("user", "q"), ("assistant", "a")])
    await ledger.begin("m", "c5", owner="w1", lease=LEASE, now=NOW)
    page = await DynamoHistoryStore(stack.clients.dynamodb, stack.env["HISTORY_TABLE"]).load_page(
        "m", 27
    )
    assert [m.seq for m in page.messages] == [2, 1]
    assert page.malformed == ()


async def test_done_marks_written_together_each_make_their_command_done(
    ledger: DynamoCommandLedger,
) -> None:
    """Twelve turns' done marks through the batching ledger (BatchWriteItem on the wire):
    a redelivery of any of them is then found done."""
    ids = [f"c-batch-{i}" for i in range(12)]
    for command_id in ids:
        await ledger.begin("m", command_id, owner="w1", lease=LEASE, now=NOW)
    batching = BatchingLedger(ledger)
    try:
        await asyncio.gather(*(batching.finish("m", c, owner="w1", now=NOW) for c in ids))
    finally:
        await batching.close()
    later = NOW + timedelta(hours=1)
    claims = [await ledger.begin("m", c, owner="w2", lease=LEASE, now=later) for c in ids]
    assert {claim.state for claim in claims} == {"done"}
