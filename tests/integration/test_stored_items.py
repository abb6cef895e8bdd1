"""No stored item can stop a matter: whatever the history table holds, every converse command
is either served (its prompt on the model queue) or refused at once with a reason that names
the attribute, in both window modes, and nothing raises, is retried, or leaks into the logs.

The pages are written to the moto server with PutItem/BatchWriteItem and read back by the real
stage through its real DynamoDB adapter (botocore's parser, then the stage's reader): what the
test draws is what DynamoDB would hold, never a hand-made page.
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from localaws.bedrock_cache import STAND_IN_MODEL_ID
from localaws.history_writer import message_item, state_item
from tests.conftest import captured_logs
from tests.hostile_items import TIME_EDGES, pages
from tests.integration.conftest import Stack, running_worker
from tests.stored import BROKEN_BILLS, break_bill, typed
from worker.adapters.dynamodb import DynamoHistoryStore, rfc3339
from worker.adapters.stored_attributes import ATTRIBUTES
from worker.app.runtime import build_stage
from worker.delivery.outcomes import Done, Rejected
from worker.memory import CompactionPlan
from worker.ports import FoldClaim, ReceivedMessage
from worker.turn.reading import STATE_REFUSED
from worker.turn.stage import ConverseStage

pytestmark = pytest.mark.integration

QUESTION = "What does clause 14.2 say about termination?"
STATE_ATTRIBUTES = {a.name for a in ATTRIBUTES if a.item == "state"}
#: Bounded, and the same examples on every CI run.
EXAMPLES = settings(
    max_examples=60,
    deadline=None,
    derandomize=os.environ.get("CI") == "true",
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)


class Turns:
    """One stage per window mode over the test's stack, and what a command of each did."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.stages: dict[str, ConverseStage] = {
            mode: build_stage(
                stack.clients,
                stack.settings(history_window_mode=mode, model_id=STAND_IN_MODEL_ID),
                visibility_timeout=30,
            )
            for mode in ("sliding", "cache-aligned")
        }

    async def write(self, items: list[dict[str, Any]]) -> None:
        """The items as DynamoDB takes them, in batches; an item it refuses (checked one by
        one when a batch is refused) cannot be in a real table, so it is left out."""
        dynamodb, table = self.stack.clients.dynamodb, self.stack.env["HISTORY_TABLE"]
        for start in range(0, len(items), 25):
            batch = items[start : start + 25]
            try:
                await dynamodb.batch_write_item(
                    RequestItems={table: [{"PutRequest": {"Item": item}} for item in batch]}
                )
                continue
            except dynamodb.exceptions.ClientError as exc:
                if "ValidationException" not in str(exc):
                    raise
            for item in batch:
                try:
                    await dynamodb.put_item(TableName=table, Item=item)
                except dynamodb.exceptions.ClientError as exc:
                    if "ValidationException" not in str(exc):
                        raise

    async def forget(self, conversation_id: str) -> None:
        """Delete every item of the conversation (moto's Query scans the whole table)."""
        dynamodb, table = self.stack.clients.dynamodb, self.stack.env["HISTORY_TABLE"]
        keys: list[dict[str, Any]] = []
        async for page in dynamodb.get_paginator("query").paginate(
            TableName=table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": conversation_id}},
            ProjectionExpression="pk, sk",
        ):
            keys += page.get("Items", [])
        for start in range(0, len(keys), 25):
            await dynamodb.batch_write_item(
                RequestItems={
                    table: [{"DeleteRequest": {"Key": key}} for key in keys[start : start + 25]]
                }
            )

    async def taken(self, env_name: str) -> list[dict[str, Any]]:
        """What a queue holds now (short polls: a turn's sends are done when it returns),
        each prompt checked as Converse would take it and read back from S3 if offloaded."""
        url, sqs = self.stack.env[env_name], self.stack.clients.sqs
        found: list[dict[str, Any]] = []
        while messages := (
            await sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
        ).get("Messages", []):
            for message in messages:
                found.append(await self.stack.check_prompt(message))
                await sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        return found

    async def converse(
        self, mode: str, conversation_id: str, sent_at: str | None
    ) -> tuple[Done | Rejected, list[dict[str, Any]]]:
        command = {
            "type": "converse",
            "command_id": f"c-{uuid.uuid4().hex[:12]}",
            "conversation_id": conversation_id,
            "message": QUESTION,
            **({"sent_at": sent_at} if sent_at is not None else {}),
        }
        received = ReceivedMessage(uuid.uuid4().hex, "handle", json.dumps(command))
        outcome = await self.stages[mode].handle(received)
        assert isinstance(outcome, Done | Rejected), outcome
        payloads = await self.taken("MODEL_QUEUE_URL")
        await self.taken("COMPACTION_QUEUE_URL")
        return outcome, payloads


@pytest.fixture
def turns(stack: Stack) -> Turns:
    return Turns(stack)


def _strings(items: list[dict[str, Any]]) -> set[str]:
    """Every stored string (``S`` and ``SS`` values, the keys aside) long enough to be told
    apart in a log line."""
    found: set[str] = set()

    def walk(value: object) -> None:
        if isinstance(value, dict):
            for kind, member in value.items():
                if kind == "S" and isinstance(member, str):
                    found.add(member)
                elif kind == "SS" and isinstance(member, list):
                    found.update(member)
                else:
                    walk(member)
        elif isinstance(value, list):
            for member in value:
                walk(member)

    for item in items:
        walk({name: value for name, value in item.items() if name not in ("pk", "sk")})
    return {text for text in found if len(text) >= 12}


@given(data=st.data())
@EXAMPLES
async def test_any_stored_page_serves_the_command_or_refuses_it_naming_the_attribute(
    turns: Turns, data: st.DataObject
) -> None:
    """GIVEN a conversation whose items hold anything DynamoDB can store, WHEN a converse
    command comes for it, in either window mode, THEN the stage sends its prompt (Converse
    will take it, and its message is the command's) or refuses it at once with a reason naming
    a ``state`` attribute; nothing raises or is retried, and no stored text reaches the logs."""
    conversation_id = f"matter-{uuid.uuid4().hex[:12]}"
    items = data.draw(pages(conversation_id), label="items")
    sent_at = data.draw(
        st.one_of(st.none(), st.just("2026-11-30T10:00:00Z"), st.sampled_from(TIME_EDGES)),
        label="sent_at",
    )
    await turns.write(items)
    try:
        with captured_logs() as logs:
            for mode in ("sliding", "cache-aligned"):
                outcome, payloads = await turns.converse(mode, conversation_id, sent_at)
                if isinstance(outcome, Rejected):
                    assert outcome.reason.startswith(STATE_REFUSED + ": "), outcome.reason
                    named = outcome.reason.removeprefix(STATE_REFUSED + ": ").split(":")[0]
                    assert named in STATE_ATTRIBUTES
                    assert payloads == []
                else:
                    [payload] = payloads
                    assert payload["message"] == QUESTION
                    assert payload["conversation_id"] == conversation_id
        leaked = [text for text in _strings(items) if text in repr(logs)]
        assert leaked == []
    finally:
        await turns.forget(conversation_id)


# --- the cases found in review, each through the real worker ---------------------------------

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def good_bill(seq: int) -> dict[str, Any]:
    """A bill as the model stage's writer stores it for the answer at ``seq``."""
    return typed(
        {
            "inputTokens": 40,
            "outputTokens": 200,
            "cacheReadInputTokens": 900 * (seq // 2 - 1),
            "cacheWriteInputTokens": 900,
            "cacheDetails": [{"ttl": "1h", "inputTokens": 300}, {"ttl": "5m", "inputTokens": 600}],
            "answered_at": rfc3339(T0 + timedelta(minutes=seq)),
            "command_id": f"c-{seq // 2}",
            "expected": {
                "prompt_tokens": 900 * (seq // 2),
                "expected_read_tokens": 900 * (seq // 2 - 1),
                "points": [{"ttl": "1h", "prefix_tokens": 900 * (seq // 2) - 10}],
            },
        }
    )


def billed_conversation(conversation_id: str, exchanges: int) -> list[dict[str, Any]]:
    items = []
    for turn in range(1, exchanges + 1):
        asked = T0 + timedelta(minutes=2 * turn - 1)
        items.append(message_item(conversation_id, 2 * turn - 1, "user", f"q{turn} " * 80, asked))
        answer = message_item(conversation_id, 2 * turn, "assistant", f"a{turn} " * 800, asked)
        answer["model_usage"] = good_bill(2 * turn)
        items.append(answer)
    return items


@pytest.mark.parametrize("mode", ["sliding", "cache-aligned"])
@pytest.mark.parametrize("how", BROKEN_BILLS)
async def test_a_bill_stored_slightly_wrong_is_dropped_and_every_turn_served(
    stack: Stack, mode: str, how: str
) -> None:
    """GIVEN the writer stored one answer's bill slightly wrong, WHEN counsel asks twice more,
    THEN both prompts go out, the bill is dropped with its seq and reason each turn, and
    nothing reaches the dead-letter queue."""
    items = billed_conversation("matter-bad-bill", 3)
    break_bill(items[3], how)  # the answer at seq 4
    await stack.put_items(items)
    with captured_logs() as logs:
        async with running_worker(
            stack.settings(history_window_mode=mode, model_id=STAND_IN_MODEL_ID)
        ):
            for turn in (4, 5):
                await stack.send_command(
                    command_id=f"c-{turn}",
                    conversation_id="matter-bad-bill",
                    sent_at=rfc3339(T0 + timedelta(minutes=2 * turn)),
                )
                [prompt] = await stack.drain("MODEL_QUEUE_URL", expect=1)
                assert prompt["ResolvedPayload"]["command_id"] == f"c-{turn}"
            await stack.until_empty("CONVERSE_QUEUE_URL")
    dropped = [e for e in logs if e["event"] == "clerk.converse_bill_dropped"]
    assert [(e["seq"], e["command_id"]) for e in dropped] == [(4, "c-4"), (4, "c-5")]
    assert await stack.depth(await stack.dead_letter_url()) == 0


@pytest.mark.parametrize("mode", ["sliding", "cache-aligned"])
async def test_a_sent_at_in_year_9999_is_served_on_a_conversation_with_bills(
    stack: Stack, mode: str
) -> None:
    await stack.put_items(billed_conversation("matter-9999", 3))
    with captured_logs() as logs:
        async with running_worker(
            stack.settings(history_window_mode=mode, model_id=STAND_IN_MODEL_ID)
        ):
            await stack.send_command(
                command_id="c-9999", conversation_id="matter-9999", sent_at="9999-12-31T23:59:45Z"
            )
            [prompt] = await stack.drain("MODEL_QUEUE_URL", expect=1)
    assert prompt["ResolvedPayload"]["command_id"] == "c-9999"
    [ignored] = [e for e in logs if e["event"] == "clerk.converse_sent_at_ignored"]
    assert ignored["reason"] == "outside 2000 to 2100"


@pytest.mark.parametrize("mode", ["sliding", "cache-aligned"])
async def test_a_malformed_fold_mark_refuses_the_command_at_once_naming_the_attribute(
    stack: Stack, mode: str
) -> None:
    """GIVEN the compactor stored ``folded_through`` as a string, THEN the command goes to the
    dead-letter queue on its first receive with the reason naming the attribute (no retries:
    a retry would read the same item), and no prompt is sent."""
    state = state_item("matter-bad-state", summary="The matter so far.")
    state["folded_through"] = {"S": "120"}
    await stack.put_items([*billed_conversation("matter-bad-state", 2), state])
    async with running_worker(stack.settings(history_window_mode=mode, model_id=STAND_IN_MODEL_ID)):
        await stack.send_command(command_id="c-refused", conversation_id="matter-bad-state")
        [dead] = await stack.drain(await stack.dead_letter_url(), expect=1)
    reason = dead["MessageAttributes"]["RejectionReason"]["StringValue"]
    assert reason == f"{STATE_REFUSED}: folded_through: a string, not a number"
    assert json.loads(dead["Body"])["command_id"] == "c-refused"
    assert await stack.drain("MODEL_QUEUE_URL") == []


@pytest.mark.parametrize(
    "stored", [{"S": "three"}, {"N": "2.5"}, {"N": "-4"}, {"L": [{"N": "3"}]}, {"BOOL": True}]
)
async def test_a_claim_over_an_unreadable_request_version_sticks_for_exactly_one_worker(
    stack: Stack, stored: dict[str, Any]
) -> None:
    """GIVEN an operator's hand left ``compaction_request_version`` unreadable, WHEN two
    workers that read the same state both claim, THEN exactly one wins, and its write leaves a
    readable version that the next claim counts from."""
    state = state_item("matter-version", folded_through=0)
    state["compaction_request_version"] = stored
    await stack.put_items([state])
    store = DynamoHistoryStore(stack.clients.dynamodb, stack.env["HISTORY_TABLE"])
    seen = (await store.load_page("matter-version", 5)).state
    assert seen.unreadable_version is not None
    plan = CompactionPlan(folded_through=0, through=12, unfolded_tokens=2_400)
    claim = FoldClaim("matter-version", plan, seen=seen, claimed_at=T0)
    claims = [await store.claim_compaction(claim) for _ in "ab"]
    assert claims == [True, False]
    after = (await store.load_page("matter-version", 5)).state
    assert (after.request_version, after.requested_through, after.unreadable_version) == (
        1,
        12,
        None,
    )
