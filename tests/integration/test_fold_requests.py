"""The compaction enqueuer over the wire: sent once per stretch when due, pipelined while
earlier requests are pending, never twice for one stretch.

Where a test counts fold requests, or finds none, it first waits for the converse queue to
empty: a turn deletes its command only after its fold request went out, so the count is
final then, however fast or slow the machine."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from tests.integration.conftest import Stack, body_of, exchanges, running_worker
from worker.adapters.dynamodb import STATE_KEY

pytestmark = pytest.mark.integration


async def test_a_fold_request_is_sent_once_when_due(stack: Stack) -> None:
    # 20 unfolded exchanges of 10 tokens: 40 messages >= half of 25.
    await stack.seed("matter-f1", exchanges(20), folded_through=0)
    await stack.send_command(command_id="c-f1", conversation_id="matter-f1")
    async with running_worker(stack.settings()):
        await stack.drain("MODEL_QUEUE_URL", expect=1)
        [request] = await stack.drain("COMPACTION_QUEUE_URL", expect=1)
    assert body_of(request) == {
        "type": "compact",
        "contract": 1,
        "conversation_id": "matter-f1",
        "folded_through": 0,
        "through": 40,
        "unfolded_tokens": 26 * 10,  # as far as the page shows: state item + messages 15..40
        "command_id": "c-f1",
    }
    state = await stack.state_item("matter-f1")
    assert state["compaction_requested_through"] == {"N": "40"}
    assert "compaction_requested_at" in state


async def test_a_pending_request_is_not_repeated_on_the_next_turn(stack: Stack) -> None:
    await stack.seed("matter-f2", exchanges(20), folded_through=0)
    async with running_worker(stack.settings()):
        await stack.send_command(command_id="c-1", conversation_id="matter-f2")
        await stack.drain("MODEL_QUEUE_URL", expect=1)
        await stack.drain("COMPACTION_QUEUE_URL", expect=1)
        await stack.seed("matter-f2", [("user", "q"), ("assistant", "a")], first_seq=41)
        await stack.send_command(command_id="c-2", conversation_id="matter-f2")
        await stack.drain("MODEL_QUEUE_URL", expect=1)
        await stack.until_empty("CONVERSE_QUEUE_URL")  # every turn's fold decision is made
        assert await stack.drain("COMPACTION_QUEUE_URL") == []


async def test_a_new_request_once_the_fold_has_advanced(stack: Stack) -> None:
    await stack.seed("matter-f3", exchanges(20), folded_through=0)
    async with running_worker(stack.settings()):
        await stack.send_command(command_id="c-1", conversation_id="matter-f3")
        await stack.drain("COMPACTION_QUEUE_URL", expect=1)
        # The compactor folds through 40; twenty more exchanges arrive.
        await stack.clients.dynamodb.update_item(
            TableName=stack.env["HISTORY_TABLE"],
            Key={"pk": {"S": "matter-f3"}, "sk": {"S": STATE_KEY}},
            UpdateExpression="SET folded_through = :f, fold_summary = :s",
            ExpressionAttributeValues={":f": {"N": "40"}, ":s": {"S": "folded"}},
        )
        await stack.seed("matter-f3", exchanges(20), first_seq=41)
        await stack.send_command(command_id="c-2", conversation_id="matter-f3")
        [request] = await stack.drain("COMPACTION_QUEUE_URL", expect=1)
    assert (body_of(request)["folded_through"], body_of(request)["through"]) == (40, 80)


async def test_no_fold_request_when_none_is_due(stack: Stack) -> None:
    await stack.seed("matter-f4", exchanges(5))
    await stack.send_command(command_id="c-1", conversation_id="matter-f4")
    async with running_worker(stack.settings()):
        await stack.drain("MODEL_QUEUE_URL", expect=1)
        await stack.until_empty("CONVERSE_QUEUE_URL")  # every turn's fold decision is made
        assert await stack.drain("COMPACTION_QUEUE_URL") == []
    assert await stack.state_item("matter-f4") == {}


async def test_two_commands_for_one_conversation_at_once_yield_one_fold_request(
    stack: Stack,
) -> None:
    await stack.seed("matter-f5", exchanges(20), folded_through=0)
    await asyncio.gather(
        *(stack.send_command(command_id=f"c-{i}", conversation_id="matter-f5") for i in range(6))
    )
    async with running_worker(stack.settings(worker_concurrency=16)):
        prompts = await stack.drain("MODEL_QUEUE_URL", expect=6)
        await stack.until_empty("CONVERSE_QUEUE_URL")  # every turn's fold decision is made
        requests = await stack.drain("COMPACTION_QUEUE_URL")
    assert sorted(body_of(m)["command_id"] for m in prompts) == [f"c-{i}" for i in range(6)]
    assert len(requests) == 1


async def served_by_two_workers(stack: Stack, conversation_id: str) -> list[dict[str, Any]]:
    """Eight commands for ``conversation_id`` served by two workers at once: the fold
    requests they sent, once every turn's fold decision is made."""
    await asyncio.gather(
        *(
            stack.send_command(command_id=f"c-{i}", conversation_id=conversation_id)
            for i in range(8)
        )
    )
    settings = stack.settings(worker_concurrency=4)
    async with running_worker(settings), running_worker(settings):
        await stack.drain("MODEL_QUEUE_URL", expect=8)
        await stack.until_empty("CONVERSE_QUEUE_URL")
        return await stack.drain("COMPACTION_QUEUE_URL")


async def test_two_workers_racing_on_one_conversation_send_one_request(stack: Stack) -> None:
    await stack.seed("matter-f6", exchanges(20), folded_through=0)
    requests = await served_by_two_workers(stack, "matter-f6")
    assert len(requests) == 1


async def test_a_further_request_leaves_while_one_is_pending(stack: Stack) -> None:
    """GIVEN a request through 40 that the compactor has not served, WHEN twelve more
    messages arrive, THEN a request for the new stretch leaves (through 52), folding from
    the fold's current mark; the state records it as the newest request."""
    await stack.seed("matter-f7", exchanges(20), folded_through=0)
    async with running_worker(stack.settings()):
        await stack.send_command(command_id="c-1", conversation_id="matter-f7")
        [first] = await stack.drain("COMPACTION_QUEUE_URL", expect=1)
        await stack.seed("matter-f7", exchanges(6), first_seq=41)
        await stack.send_command(command_id="c-2", conversation_id="matter-f7")
        [second] = await stack.drain("COMPACTION_QUEUE_URL", expect=1)
    assert (body_of(first)["folded_through"], body_of(first)["through"]) == (0, 40)
    assert (body_of(second)["folded_through"], body_of(second)["through"]) == (0, 52)
    state = await stack.state_item("matter-f7")
    assert state["compaction_requested_through"] == {"N": "52"}
    assert state["compaction_request_version"] == {"N": "2"}


async def test_an_overdue_request_stamped_in_another_offset_is_sent_again(stack: Stack) -> None:
    """The pending rule is decided once, on times: a request stamped six minutes ago in
    +01:00 is overdue (the retry period is five). The claim used to compare the stamps as
    strings ("10:..+01:00" sorts after "09:..Z"), refused, and the request was never sent
    again."""
    await stack.seed("matter-f8", exchanges(20))
    stamped = (datetime.now(UTC) - timedelta(minutes=6)).astimezone(timezone(timedelta(hours=1)))
    await stack.put_items(
        [
            {
                "pk": {"S": "matter-f8"},
                "sk": {"S": STATE_KEY},
                "folded_through": {"N": "0"},
                "compaction_requested_through": {"N": "40"},
                "compaction_requested_at": {"S": stamped.isoformat(timespec="seconds")},
            }
        ]
    )
    await stack.send_command(command_id="c-1", conversation_id="matter-f8")
    async with running_worker(stack.settings(compaction_retry_seconds=300)):
        [request] = await stack.drain("COMPACTION_QUEUE_URL", expect=1)
    assert (body_of(request)["folded_through"], body_of(request)["through"]) == (0, 40)


async def test_a_malformed_first_message_does_not_make_a_short_conversation_ask_for_a_fold(
    stack: Stack,
) -> None:
    """Three stored messages, the first malformed: the page read is the whole conversation,
    so its oldest readable seq being 2 does not mean the tail runs past it."""
    await stack.seed("matter-f9", [("user", "q"), ("assistant", "a"), ("user", "q")])
    await stack.clients.dynamodb.update_item(
        TableName=stack.env["HISTORY_TABLE"],
        Key={"pk": {"S": "matter-f9"}, "sk": {"S": "msg#000000000001"}},
        UpdateExpression="REMOVE #role",
        ExpressionAttributeNames={"#role": "role"},
    )
    await stack.send_command(command_id="c-1", conversation_id="matter-f9")
    async with running_worker(stack.settings()):
        [prompt] = await stack.drain("MODEL_QUEUE_URL", expect=1)
        await stack.until_empty("CONVERSE_QUEUE_URL")  # every turn's fold decision is made
        assert await stack.drain("COMPACTION_QUEUE_URL") == []
    assert [m["seq"] for m in body_of(prompt)["history"]] == [2, 3]


async def test_two_workers_racing_while_a_request_is_pending_send_one_for_the_new_stretch(
    stack: Stack,
) -> None:
    """GIVEN a pending request through 40 and twelve newer messages, WHEN eight commands
    for the conversation reach two workers at once, THEN one request leaves, through 52."""
    await stack.seed("matter-f10", exchanges(26), folded_through=0)
    await stack.clients.dynamodb.update_item(
        TableName=stack.env["HISTORY_TABLE"],
        Key={"pk": {"S": "matter-f10"}, "sk": {"S": STATE_KEY}},
        UpdateExpression="SET compaction_requested_through = :t, compaction_requested_at = :at",
        ExpressionAttributeValues={
            ":t": {"N": "40"},
            ":at": {"S": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")},
        },
    )
    requests = await served_by_two_workers(stack, "matter-f10")
    assert [body_of(r)["through"] for r in requests] == [52]
