"""The command ledger on DynamoDB, in the stage's own table: who forwards a command, and
whether it is done."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.conftest import captured_logs
from tests.integration.conftest import Stack, body_of, exchanges, running_worker
from worker.adapters.ledger import DynamoCommandLedger
from worker.delivery.done_marks import BatchingLedger
from worker.ports import CommandHold, DoneMark, MessageDigest
from worker.turn.stage import REUSED_ID

pytestmark = pytest.mark.integration

NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
LEASE = timedelta(seconds=60)
QUESTION = "PRIVILEGED: what does clause 14.2 say about termination?"


def hold(command_id: str, owner: str) -> CommandHold:
    """Conversation ``m``'s command ``command_id`` as ``owner`` holds it."""
    return CommandHold("m", command_id, owner)


@pytest.fixture
def ledger(stack: Stack) -> DynamoCommandLedger:
    return DynamoCommandLedger(stack.clients.dynamodb, stack.env["LEDGER_TABLE"])


async def test_a_new_command_is_started_and_a_second_claim_finds_it_busy(
    ledger: DynamoCommandLedger,
) -> None:
    first = await ledger.begin(hold("c1", "w1"), lease=LEASE, now=NOW, message=QUESTION)
    second = await ledger.begin(
        hold("c1", "w2"), lease=LEASE, now=NOW + timedelta(seconds=5), message=QUESTION
    )
    assert first.state == "started"
    assert second.state == "busy"
    assert second.lease_until == NOW + LEASE


async def test_an_expired_lease_is_taken_over_and_the_old_owner_loses_it(
    ledger: DynamoCommandLedger,
) -> None:
    await ledger.begin(hold("c2", "w1"), lease=LEASE, now=NOW, message=QUESTION)
    later = NOW + LEASE + timedelta(seconds=1)
    taken = await ledger.begin(hold("c2", "w2"), lease=LEASE, now=later, message=QUESTION)
    assert taken.state == "started"
    assert not await ledger.renew(hold("c2", "w1"), lease=LEASE, now=later)
    assert await ledger.renew(hold("c2", "w2"), lease=LEASE, now=later)


async def test_a_turn_run_again_takes_its_own_live_claim_and_no_one_elses(
    ledger: DynamoCommandLedger,
) -> None:
    """A turn held through a brownout runs again under the same owner (this worker, this
    delivery) after its abandon failed: its own live lease is its own (issue 25)."""
    await ledger.begin(hold("c9", "w1/m9/1"), lease=LEASE, now=NOW, message=QUESTION)
    soon = NOW + timedelta(seconds=5)
    assert (
        await ledger.begin(hold("c9", "w1/m9/1"), lease=LEASE, now=soon, message=QUESTION)
    ).state == "started"
    assert (
        await ledger.begin(hold("c9", "w2/m9/2"), lease=LEASE, now=soon, message=QUESTION)
    ).state == "busy"
    await ledger.finish(DoneMark("m", "c9", "w1/m9/1", soon, None))
    assert (
        await ledger.begin(hold("c9", "w1/m9/1"), lease=LEASE, now=soon, message=QUESTION)
    ).state == "done"


async def test_a_done_command_stays_done(ledger: DynamoCommandLedger, stack: Stack) -> None:
    claim = await ledger.begin(hold("c3", "w1"), lease=LEASE, now=NOW, message=QUESTION)
    await ledger.finish(DoneMark("m", "c3", "w1", NOW, claim.digest))
    far_later = NOW + timedelta(days=1)
    assert (
        await ledger.begin(hold("c3", "w2"), lease=LEASE, now=far_later, message=QUESTION)
    ).state == "done"
    item = await command_record(stack, "m", "c3")
    assert item["status"] == {"S": "done"}
    assert stored_digest(item).matches(QUESTION)  # a later delivery is still told apart
    assert "message_sha256" not in item  # no unsalted digest at rest
    assert int(item["expires_at"]["N"]) >= int((NOW + timedelta(days=14)).timestamp())


def unkeyed_digests(text: str) -> set[str]:
    """Every digest of ``text`` anyone can compute without a key: each hash hashlib has, in
    hex and base64, of its UTF-8 bytes."""
    data = text.encode("utf-8")
    found = set()
    for name in sorted(hashlib.algorithms_guaranteed):
        digest = hashlib.new(name, data)
        raw = digest.digest(32) if name.startswith("shake") else digest.digest()
        found |= {raw.hex(), base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()}
    return found


async def test_no_unsalted_digest_of_a_message_is_stored(
    ledger: DynamoCommandLedger, stack: Stack
) -> None:
    """GIVEN one question claimed and forwarded under two ids, THEN neither record, claimed
    or done, holds the question or any digest of it one could compute without the record's
    salt (a short question would be found by hashing guesses), and the two records' digests
    and salts differ: no table of digests made once finds a question in any record."""
    digests = {}
    for command_id in ("c-salt-1", "c-salt-2"):
        claim = await ledger.begin(hold(command_id, "w1"), lease=LEASE, now=NOW, message=QUESTION)
        claimed = await command_record(stack, "m", command_id)
        await ledger.finish(DoneMark("m", command_id, "w1", NOW, claim.digest))
        done = await command_record(stack, "m", command_id)
        for record in (claimed, done):
            stored = {value.get("S", value.get("N", "")) for value in record.values()}
            assert not stored & unkeyed_digests(QUESTION)
            assert not any(QUESTION in value for value in stored)
            assert stored_digest(record).matches(QUESTION)
        digests[command_id] = stored_digest(done)
    first, second = digests.values()
    assert first.salt != second.salt and first.value != second.value


async def test_an_abandoned_lease_can_be_taken_at_once(ledger: DynamoCommandLedger) -> None:
    await ledger.begin(hold("c4", "w1"), lease=LEASE, now=NOW, message=QUESTION)
    await ledger.abandon(hold("c4", "w1"))
    assert (
        await ledger.begin(hold("c4", "w2"), lease=LEASE, now=NOW, message=QUESTION)
    ).state == "started"


async def test_command_records_live_in_the_ledger_table_never_in_the_history(
    ledger: DynamoCommandLedger, stack: Stack
) -> None:
    await stack.seed("m", [("user", "q"), ("assistant", "a")])
    await ledger.begin(hold("c5", "w1"), lease=LEASE, now=NOW, message=QUESTION)
    history = await stack.clients.dynamodb.scan(TableName=stack.env["HISTORY_TABLE"])
    assert sorted(item["sk"]["S"] for item in history["Items"]) == [
        "msg#000000000001",
        "msg#000000000002",
    ]
    assert (await command_record(stack, "m", "c5"))["status"] == {"S": "in_progress"}


async def test_done_marks_written_together_each_make_their_command_done(
    ledger: DynamoCommandLedger,
) -> None:
    """Twelve turns' done marks through the batching ledger (BatchWriteItem on the wire):
    a redelivery of any of them is then found done."""
    ids = [f"c-batch-{i}" for i in range(12)]
    digests = {
        c: (await ledger.begin(hold(c, "w1"), lease=LEASE, now=NOW, message=QUESTION)).digest
        for c in ids
    }
    batching = BatchingLedger(ledger)
    try:
        await asyncio.gather(
            *(batching.finish(DoneMark("m", c, "w1", NOW, digests[c])) for c in ids)
        )
    finally:
        await batching.close()
    later = NOW + timedelta(hours=1)
    claims = [
        await ledger.begin(hold(c, "w2"), lease=LEASE, now=later, message=QUESTION) for c in ids
    ]
    assert {claim.state for claim in claims} == {"done"}


async def test_an_expired_lease_on_another_message_is_refused_as_reused_not_taken_over(
    ledger: DynamoCommandLedger, stack: Stack
) -> None:
    """The takeover's condition holds the digest: the id's first message keeps its record."""
    await ledger.begin(hold("c6", "w1"), lease=LEASE, now=NOW, message=QUESTION)
    later = NOW + LEASE + timedelta(seconds=1)
    assert (
        await ledger.begin(hold("c6", "w2"), lease=LEASE, now=later, message="And clause 15?")
    ).state == "reused"
    item = await command_record(stack, "m", "c6")
    assert item["owner"] == {"S": "w1"} and stored_digest(item).matches(QUESTION)
    assert await ledger.renew(hold("c6", "w1"), lease=LEASE, now=later)


async def test_an_expired_lease_on_a_record_without_a_digest_is_taken_over(
    ledger: DynamoCommandLedger, stack: Stack
) -> None:
    await put_records(stack, [old_record("m", "c7", "in_progress", lease_until=NOW)])
    later = NOW + timedelta(seconds=1)
    taken = await ledger.begin(hold("c7", "w2"), lease=LEASE, now=later, message=QUESTION)
    assert (taken.state, taken.digest) == ("started", None)
    assert (await command_record(stack, "m", "c7"))["owner"] == {"S": "w2"}


# The real worker over the ledger: a redelivery, an id reused, a record of the old shape.


def command(command_id: str, message: str = QUESTION) -> str:
    return json.dumps(
        {
            "type": "converse",
            "command_id": command_id,
            "conversation_id": "matter-l",
            "message": message,
        }
    )


def old_record(
    conversation_id: str, command_id: str, status: str, *, lease_until: datetime = NOW
) -> dict[str, Any]:
    """A command record as written before records kept the message's digest."""
    return {
        "pk": {"S": conversation_id},
        "sk": {"S": f"cmd#{command_id}"},
        "status": {"S": status},
        "owner": {"S": "earlier/m-0/1"},
        "lease_until": {"N": str(int(lease_until.timestamp()))},
        "expires_at": {"N": str(int((NOW + timedelta(days=15)).timestamp()))},
    }


def stored_digest(item: dict[str, Any]) -> MessageDigest:
    return MessageDigest(item["digest_salt"]["S"], item["message_digest"]["S"])


async def put_records(stack: Stack, records: list[dict[str, Any]]) -> None:
    for record in records:
        await stack.clients.dynamodb.put_item(TableName=stack.env["LEDGER_TABLE"], Item=record)


async def command_record(stack: Stack, conversation_id: str, command_id: str) -> dict[str, Any]:
    response = await stack.clients.dynamodb.get_item(
        TableName=stack.env["LEDGER_TABLE"],
        Key={"pk": {"S": conversation_id}, "sk": {"S": f"cmd#{command_id}"}},
        ConsistentRead=True,
    )
    return dict(response["Item"])


async def test_the_same_command_twice_is_forwarded_once_and_the_second_is_a_duplicate(
    stack: Stack,
) -> None:
    await stack.seed("matter-l", exchanges(2))
    with captured_logs() as logs:
        async with running_worker(stack.settings()):
            await stack.send_raw(command("c-twice"))
            [prompt] = await stack.drain("MODEL_QUEUE_URL", expect=1)
            await stack.send_raw(command("c-twice"))
            await stack.until_empty("CONVERSE_QUEUE_URL")
        again = await stack.drain("MODEL_QUEUE_URL")
    assert body_of(prompt)["command_id"] == "c-twice"
    assert again == []
    assert [e["command_id"] for e in logs if e["event"] == "clerk.converse_command_duplicate"] == [
        "c-twice"
    ]
    assert stored_digest(await command_record(stack, "matter-l", "c-twice")).matches(QUESTION)
    assert await stack.depth(await stack.dead_letter_url()) == 0


async def test_an_id_reused_for_another_message_goes_to_the_dead_letter_queue_with_the_reason(
    stack: Stack,
) -> None:
    """GIVEN a command forwarded, WHEN a producer sends a new question under the same id,
    THEN the new one is rejected (dead-letter queue, ``RejectionReason``, the warning with
    ids and reason only), never deleted as a duplicate, and the first stays forwarded once."""
    await stack.seed("matter-l", exchanges(2))
    with captured_logs() as logs:
        async with running_worker(stack.settings()):
            await stack.send_raw(command("c-reused"))
            [prompt] = await stack.drain("MODEL_QUEUE_URL", expect=1)
            await stack.send_raw(command("c-reused", "PRIVILEGED: and clause 15?"))
            [dead] = await stack.drain(await stack.dead_letter_url(), expect=1)
            await stack.until_empty("CONVERSE_QUEUE_URL")
        again = await stack.drain("MODEL_QUEUE_URL")
    assert body_of(prompt)["message"] == QUESTION
    assert again == []
    assert body_of(dead)["message"] == "PRIVILEGED: and clause 15?"
    assert dead["MessageAttributes"]["RejectionReason"]["StringValue"] == REUSED_ID
    assert REUSED_ID == "command_id reused for a different message"
    [rejected] = [e for e in logs if e["event"] == "clerk.converse_command_rejected"]
    assert (rejected["log_level"], rejected["reason"]) == ("warning", REUSED_ID)
    assert [e for e in logs if e["event"] == "clerk.converse_command_duplicate"] == []
    assert "PRIVILEGED" not in repr(logs)
    # The record is still the first message's: a redelivery of it stays a duplicate.
    assert stored_digest(await command_record(stack, "matter-l", "c-reused")).matches(QUESTION)


async def test_a_record_without_a_digest_answers_the_command_as_a_duplicate(
    stack: Stack,
) -> None:
    """A ``done`` record written before records kept a digest cannot be compared: the
    command is deleted as a duplicate, nothing forwarded, nothing dead-lettered."""
    await stack.seed("matter-l", exchanges(2))
    await put_records(stack, [old_record("matter-l", "c-old", "done")])
    with captured_logs() as logs:
        async with running_worker(stack.settings()):
            await stack.send_raw(command("c-old", "PRIVILEGED: any question at all"))
            await stack.until_empty("CONVERSE_QUEUE_URL")
        forwarded = await stack.drain("MODEL_QUEUE_URL")
    assert forwarded == []
    assert [e["command_id"] for e in logs if e["event"] == "clerk.converse_command_duplicate"] == [
        "c-old"
    ]
    assert await stack.depth(await stack.dead_letter_url()) == 0
