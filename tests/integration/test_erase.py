"""``worker erase`` on the local stack: a conversation served through every path that leaves a
copy is erased, every other conversation's copies and everything other stages own stay, and a
second run removes nothing; a turn racing an erase leaves only what the next run removes."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Unpack

import pytest

from tests.integration.conftest import Stack, exchanges, running_worker
from worker.adapters.dynamodb import STAGE_STATE_ATTRIBUTES, DynamoHistoryStore
from worker.adapters.sqs import SqsQueue
from worker.app.runtime import build_stage, command_ledger
from worker.cli.erase_operations import erase as erase_conversation
from worker.cli.erase_operations import stores_of
from worker.delivery.outcomes import Done
from worker.delivery.pointers import parse_pointer, pointer_body
from worker.ports import (
    CommandClaim,
    CommandHold,
    CommandLedger,
    ForwardingLedger,
    HistoryPage,
    MessageSender,
    ReceivedMessage,
    SendOptions,
)
from worker.settings import Settings
from worker.turn.payloads import conversation_prefix

pytestmark = pytest.mark.integration

A, B = "matter-erased", "matter-kept"
SECRET = "PRIVILEGED"
#: The contract's cache-aligned mode needs a model whose minimum it knows.
MODEL_ID = "anthropic.claude-sonnet-4-5-20250929-v1:0"
#: Small enough that every prompt of these histories, and a long dead letter, go through S3.
INLINE_MAX = 2_000


@dataclass(frozen=True)
class Copies:
    """What the stage keeps of one conversation, as read straight from the stores."""

    records: tuple[str, ...]
    state: dict[str, Any]
    objects: tuple[str, ...]
    dead_letters: int

    @property
    def empty(self) -> bool:
        return not (self.records or self.state or self.objects or self.dead_letters)


async def copies_of(stack: Stack, conversation: str, dead_letters: Counter[str | None]) -> Copies:
    records = await stack.clients.dynamodb.query(
        TableName=stack.env["LEDGER_TABLE"],
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": conversation}},
        ConsistentRead=True,
    )
    state = await stack.state_item(conversation)
    listed = await stack.clients.s3.list_objects_v2(
        Bucket=stack.env["PAYLOAD_BUCKET"], Prefix=conversation_prefix(conversation)
    )
    return Copies(
        records=tuple(sorted(item["sk"]["S"] for item in records["Items"])),
        state={k: v for k, v in state.items() if k in STAGE_STATE_ATTRIBUTES},
        objects=tuple(sorted(entry["Key"] for entry in listed.get("Contents", []))),
        dead_letters=dead_letters[conversation],
    )


async def read_object(stack: Stack, bucket: str, key: str) -> str:
    stored = await stack.clients.s3.get_object(Bucket=bucket, Key=key)
    async with stored["Body"] as stream:
        return (await stream.read()).decode("utf-8")


async def dead_letters_by_conversation(stack: Stack) -> Counter[str | None]:
    """Every dead letter's conversation (its body, or the object its pointer names, read as
    JSON), each message received once and released again."""
    url = await stack.dead_letter_url()
    found: Counter[str | None] = Counter()
    held = []
    while response := (
        await stack.clients.sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0, VisibilityTimeout=60
        )
    ).get("Messages", []):
        for message in response:
            body = message["Body"]
            while (pointer := parse_pointer(body, {})) is not None:
                body = await read_object(stack, *pointer)
            try:
                named = json.loads(body).get("conversation_id")
            except (ValueError, AttributeError):
                named = None
            found[named] += 1
            held.append(message["ReceiptHandle"])
    for handle in held:
        await stack.clients.sqs.change_message_visibility(
            QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=0
        )
    return found


def command(conversation: str, command_id: str, message: str) -> dict[str, Any]:
    return {"conversation_id": conversation, "command_id": command_id, "message": message}


async def erase(stack: Stack, *args: str) -> dict[str, Any]:
    output = await stack.cli_output("erase", "--conversation", A, "--json", *args)
    return dict(json.loads(output))


REMOVED = ("command_records", "state_attributes", "dead_letters")


def removed(counts: dict[str, Any]) -> dict[str, int]:
    return {
        **{name: counts[name] for name in REMOVED},
        "payload_objects": sum(counts["payload_objects"].values()),
    }


async def test_erase_removes_every_copy_of_one_conversation_and_nothing_else(
    stack: Stack,
) -> None:
    """GIVEN two conversations served through every path that leaves a copy (a prompt
    offloaded to S3, a fold requested, the cache-aligned window's summary snapshot, rejected
    commands dead-lettered inline, offloaded and as a producer's pointer), and a dead letter
    of no conversation, WHEN ``worker erase`` runs for one, THEN none of the stage's copies of
    it remain, every copy of the other does, the history's messages, the writer's fold and
    the producer's object stay, a dry run before it counts what it removed and removes
    nothing, and a second run removes nothing and says so in counts alone."""
    for conversation in (A, B):
        await stack.seed(
            conversation,
            exchanges(15, chars=100),
            folded_through=6,
            summary=f"{SECRET} fold summary of {conversation}",
        )
    producer_key = f"producers/{uuid.uuid4()}"
    bucket = stack.env["PAYLOAD_BUCKET"]
    blank_behind_a_pointer = {"type": "converse", **command(A, "c-a3", "   ")}
    await stack.clients.s3.put_object(
        Bucket=bucket, Key=producer_key, Body=json.dumps(blank_behind_a_pointer).encode()
    )
    settings = stack.settings(
        history_window_mode="cache-aligned",
        model_id=MODEL_ID,
        payload_inline_max_bytes=INLINE_MAX,
    )
    async with running_worker(settings):
        for conversation, first in ((A, "c-a1"), (B, "c-b1")):
            await stack.send_command(**command(conversation, first, f"{SECRET} question"))
        await stack.drain("MODEL_QUEUE_URL", expect=2)
        long = f"{SECRET} another question ".ljust(3 * INLINE_MAX, "x")
        await stack.send_command(**command(A, "c-a1", long))  # an id reused: offloaded
        await stack.send_command(**command(A, "c-a2", " "))  # blank: inline
        await stack.send_raw(pointer_body(bucket, producer_key))  # blank, behind a pointer
        await stack.send_command(**command(B, "c-b1", long))
        await stack.send_command(**command(B, "c-b2", " "))
        await stack.send_raw("not a command")
        await stack.until_empty("CONVERSE_QUEUE_URL")
    letters = await dead_letters_by_conversation(stack)
    assert letters == Counter({A: 3, B: 2, None: 1})
    before = {c: await copies_of(stack, c, letters) for c in (A, B)}
    for kept in before.values():
        assert kept.records and kept.dead_letters
        assert {"window_summary", "compaction_requested_through"} <= set(kept.state)
        assert {key.split("/")[2] for key in kept.objects} == {"prompt", "dead-letter"}

    dry = await erase(stack, "--dry-run")
    assert await copies_of(stack, A, await dead_letters_by_conversation(stack)) == before[A]
    first = await erase(stack)
    second = await stack.cli_output("erase", "--conversation", A)

    assert removed(dry) == removed(first)
    assert removed(first) == {
        "command_records": len(before[A].records),
        "state_attributes": len(before[A].state),
        "dead_letters": 3,
        "payload_objects": len(before[A].objects),
    }
    assert first["complete"] and first["dead_letters_kept"] == 3
    for kind in ("command records", "state attributes", "payload objects", "dead letters"):
        assert f"\n       0  {kind}" in second  # the report is counts: no id, no content
    assert SECRET not in second and A not in second and "matter" not in second
    letters = await dead_letters_by_conversation(stack)
    assert letters == Counter({B: 2, None: 1})
    assert (await copies_of(stack, A, letters)).empty
    assert await copies_of(stack, B, letters) == before[B]
    state = await stack.state_item(A)
    assert state["fold_summary"] == {"S": f"{SECRET} fold summary of {A}"}
    assert state["folded_through"] == {"N": "6"}
    history = await stack.clients.dynamodb.query(
        TableName=stack.env["HISTORY_TABLE"],
        KeyConditionExpression="pk = :pk AND begins_with(sk, :msg)",
        ExpressionAttributeValues={":pk": {"S": A}, ":msg": {"S": "msg#"}},
        Select="COUNT",
    )
    assert history["Count"] == 30
    assert await read_object(stack, bucket, producer_key)  # the producer's, not the stage's


# An erase racing a turn of the same conversation.


class HeldLedger(ForwardingLedger):
    """The real ledger; the claim of ``command_id`` waits, once made, for ``released``."""

    def __init__(self, inner: CommandLedger, command_id: str) -> None:
        super().__init__(inner)
        self.command_id = command_id
        self.reached = asyncio.Event()
        self.released = asyncio.Event()

    async def begin(
        self, hold: CommandHold, *, lease: timedelta, now: datetime, message: str
    ) -> CommandClaim:
        claim = await super().begin(hold, lease=lease, now=now, message=message)
        if hold.command_id == self.command_id:
            self.reached.set()
            await self.released.wait()
        return claim


class HeldHistory(DynamoHistoryStore):
    """The real history table; once ``armed``, the next page read waits for ``released``
    before it is made."""

    def __init__(self, client: Any, table: str) -> None:
        super().__init__(client, table)
        self.armed = False
        self.reached = asyncio.Event()
        self.released = asyncio.Event()

    async def load_page(
        self, conversation_id: str, limit: int, *, older_than: str | None = None
    ) -> HistoryPage:
        if self.armed:
            self.armed = False
            self.reached.set()
            await self.released.wait()
        return await super().load_page(conversation_id, limit, older_than=older_than)


class HeldSends:
    """The real model queue; the prompt of ``command_id`` (offloaded already) waits for
    ``released`` before it is sent."""

    def __init__(self, inner: MessageSender, command_id: str) -> None:
        self.inner = inner
        self.command_id = command_id
        self.reached = asyncio.Event()
        self.released = asyncio.Event()

    async def send(self, body: str, **options: Unpack[SendOptions]) -> str:
        if options["deduplication_id"] == self.command_id:
            self.reached.set()
            await self.released.wait()
        return await self.inner.send(body, **options)


def received(conversation: str, command_id: str) -> ReceivedMessage:
    body = json.dumps({"type": "converse", **command(conversation, command_id, f"{SECRET} q")})
    return ReceivedMessage(f"m-{command_id}", f"r-{command_id}", body)


async def erase_in_process(stack: Stack, settings: Settings) -> dict[str, int]:
    stores = await stores_of(stack.clients, settings)
    return removed((await erase_conversation(stores, A, dry_run=False)).counts())


@pytest.mark.parametrize(
    "held", ["before its read", "after its claim", "after its offload, before its send"]
)
async def test_a_turn_racing_an_erase_leaves_only_what_the_next_run_removes(
    stack: Stack, held: str
) -> None:
    """GIVEN a conversation served once (record, prompt object, fold mark, anchor and summary
    snapshot stored) and a second turn of it held at a point of its walk (its history is read
    beside its claim: held after its claim, it has read), WHEN an erase runs there and the
    turn is then let go, THEN what the turn wrote after the erase read its part (its done
    mark, its offloaded prompt, a new fold mark, anchor and snapshot) lies where the erase
    looks: a second run removes it all, and a third removes nothing."""
    await stack.seed(A, exchanges(15, chars=100), folded_through=6, summary=f"{SECRET} summary")
    settings = stack.settings(
        history_window_mode="cache-aligned", model_id=MODEL_ID, payload_inline_max_bytes=INLINE_MAX
    )
    model_queue = SqsQueue(stack.clients.sqs, settings.model_queue_url)
    ledger: CommandLedger = command_ledger(stack.clients.dynamodb, settings)
    history = HeldHistory(stack.clients.dynamodb, settings.history_table)
    gate: HeldHistory | HeldLedger | HeldSends
    if held == "before its read":
        gate = history
    elif held == "after its claim":
        gate = ledger = HeldLedger(ledger, "c-2")
    else:
        gate = HeldSends(model_queue, "c-2")
    stage = build_stage(
        stack.clients,
        settings,
        visibility_timeout=60,
        ledger=ledger,
        model_queue=gate if isinstance(gate, HeldSends) else model_queue,
        history=history,
    )
    assert await stage.handle(received(A, "c-1")) == Done()
    history.armed = gate is history
    letters: Counter[str | None] = Counter()
    assert (await copies_of(stack, A, letters)).state.keys() >= {"window_summary"}

    turn = asyncio.create_task(stage.handle(received(A, "c-2")))
    await asyncio.wait_for(gate.reached.wait(), timeout=60)
    during = await erase_in_process(stack, settings)
    gate.released.set()
    assert await asyncio.wait_for(turn, timeout=60) == Done()
    left = await copies_of(stack, A, letters)
    second = await erase_in_process(stack, settings)
    third = await erase_in_process(stack, settings)

    assert during["command_records"] == 2 and during["state_attributes"] > 0
    assert left.records == ("cmd#c-2",)  # the done mark, written after the erase read
    if held == "before its read":  # it read the state after the erase: anchors anew
        assert {"window_summary", "compaction_requested_through"} <= set(left.state)
        assert [key.split("/")[2] for key in left.objects] == ["prompt"]
    assert second == {
        "command_records": 1,
        "state_attributes": len(left.state),
        "dead_letters": 0,
        "payload_objects": len(left.objects),
    }
    assert third == dict.fromkeys(second, 0)
    assert (await copies_of(stack, A, letters)).empty
