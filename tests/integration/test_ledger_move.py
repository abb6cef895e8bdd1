"""The ledger's move out of the history table, for commands in flight across the deploy:
the previous release kept its command records in the history table; this one keeps them in
``LEDGER_TABLE`` and, with ``LEDGER_LEGACY_READS``, reads the old ones too. Nothing is lost
and nothing doubled (docs/DEPLOY.md, "Moving the ledger out of the history table").

The previous release is played from its record format as that release wrote it: ``cmd#<id>``
items in the history table with ``status``, ``owner``, ``lease_until`` and ``message_sha256``.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import pytest

from tests.integration.conftest import Stack, body_of, exchanges, running_worker
from worker.turn.stage import REUSED_ID

pytestmark = pytest.mark.integration

CONVERSATION = "matter-move"
QUESTION = "PRIVILEGED: may the buyer terminate under clause 14.2?"


def command(command_id: str, message: str = QUESTION) -> str:
    return json.dumps(
        {
            "type": "converse",
            "command_id": command_id,
            "conversation_id": CONVERSATION,
            "message": message,
        }
    )


def previous_release_record(
    command_id: str, status: str, *, lease_until: int, message: str = QUESTION
) -> dict[str, Any]:
    """A command record as the previous release wrote it, in the history table."""
    return {
        "pk": {"S": CONVERSATION},
        "sk": {"S": f"cmd#{command_id}"},
        "status": {"S": status},
        "owner": {"S": "previous-release/m-0/1"},
        "lease_until": {"N": str(lease_until)},
        "message_sha256": {"S": hashlib.sha256(message.encode("utf-8")).hexdigest()},
        "expires_at": {"N": str(int(time.time()) + 15 * 86_400)},
    }


async def history_items(stack: Stack) -> list[dict[str, Any]]:
    items = (await stack.clients.dynamodb.scan(TableName=stack.env["HISTORY_TABLE"]))["Items"]
    return sorted(items, key=lambda item: item["sk"]["S"])


async def test_commands_in_flight_across_the_move_are_neither_lost_nor_doubled(
    stack: Stack,
) -> None:
    """GIVEN the previous release's records: c-done forwarded, c-held under a live lease,
    c-expired under a lease that ran out, c-reused forwarded for another message; and
    c-new it never saw. WHEN the new release serves their deliveries with
    LEDGER_LEGACY_READS, THEN c-held, c-expired and c-new are forwarded once each (c-held
    only after its lease ran out), c-done is not forwarded again, c-reused is dead-lettered
    with its reason; later redeliveries forward nothing more; the history table is as the
    previous release left it."""
    await stack.seed(CONVERSATION, exchanges(2))
    now = int(time.time())
    held_until = now + 3
    await stack.put_items(
        [
            previous_release_record("c-done", "done", lease_until=now - 60),
            previous_release_record("c-held", "in_progress", lease_until=held_until),
            previous_release_record("c-expired", "in_progress", lease_until=now - 1),
            previous_release_record(
                "c-reused", "done", lease_until=now - 60, message="PRIVILEGED: another"
            ),
        ]
    )
    before = await history_items(stack)
    async with running_worker(stack.settings(ledger_legacy_reads=True)):
        for command_id in ("c-done", "c-held", "c-expired", "c-reused", "c-new"):
            await stack.send_raw(command(command_id))
        prompts = await stack.drain("MODEL_QUEUE_URL", expect=3)
        [dead] = await stack.drain(await stack.dead_letter_url(), expect=1)
        await stack.until_empty("CONVERSE_QUEUE_URL")
        # Redeliveries after the move: the new ledger answers them alone.
        for command_id in ("c-done", "c-held", "c-new"):
            await stack.send_raw(command(command_id))
        await stack.until_empty("CONVERSE_QUEUE_URL")
    again = await stack.drain("MODEL_QUEUE_URL")
    assert sorted(body_of(p)["command_id"] for p in prompts) == ["c-expired", "c-held", "c-new"]
    assert again == []
    [held] = [p for p in prompts if body_of(p)["command_id"] == "c-held"]
    assert int(held["Attributes"]["SentTimestamp"]) >= held_until * 1000
    assert dead["MessageAttributes"]["RejectionReason"]["StringValue"] == REUSED_ID
    assert await history_items(stack) == before
    ledger = (await stack.clients.dynamodb.scan(TableName=stack.env["LEDGER_TABLE"]))["Items"]
    statuses = {item["sk"]["S"]: item["status"]["S"] for item in ledger}
    assert statuses == {
        "cmd#c-done": "done",
        "cmd#c-held": "done",
        "cmd#c-expired": "done",
        "cmd#c-new": "done",
        "cmd#c-reused": "in_progress",
    }


async def test_without_legacy_reads_a_command_the_previous_release_forwarded_goes_again(
    stack: Stack,
) -> None:
    """Why the setting exists: without it the new ledger cannot know c-done was forwarded."""
    await stack.seed(CONVERSATION, exchanges(2))
    await stack.put_items(
        [previous_release_record("c-done", "done", lease_until=int(time.time()) - 60)]
    )
    async with running_worker(stack.settings()):
        await stack.send_raw(command("c-done"))
        [prompt] = await stack.drain("MODEL_QUEUE_URL", expect=1)
        await stack.until_empty("CONVERSE_QUEUE_URL")
    assert body_of(prompt)["command_id"] == "c-done"
