"""The fold gap, measured on the real ``worker run`` process while the fold lags.

Sixteen conversations (four profiles of message sizes x compactor lags 0-3) grow one
exchange a turn for 40 turns, all in one worker process, turn ``t`` of every
conversation together: the test sends the sixteen commands, waits for the prompts and
for the worker to finish each turn, then plays the writer (it appends counsel's
question and an answer) and the compactor (it serves each request ``lag`` turns late,
folding from the current mark up to ``through``, only forward).

At every turn the gap is the messages after ``folded_through`` that are not in the
payload's window: each such turn must log ``clerk.converse_history_fold_gap`` for
exactly those seqs, and no two requests of a conversation may cover the same stretch.
The process must agree turn for turn with the model of :mod:`localaws.fold_model` (the
worker's own pure functions fed as the stage feeds them), whose figures at lags 1, 3
and 5 are in docs/BENCHMARKS.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from localaws import fold_model
from localaws.history_writer import message_item
from tests.integration.conftest import Stack
from worker.adapters.dynamodb import STATE_KEY

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LAGS = (0, 1, 2, 3)
TURNS = fold_model.TURNS  # >= 36
#: The gap, in message-turns, that one request at a time leaves on the paste-heavy
#: conversation at a lag of 3 turns (the rule the pipelined trigger replaced; CHANGELOG.md).
SINGLE_REQUEST_GAP = 40
GAP_EVENT = "clerk.converse_history_fold_gap"


@dataclass
class Conversation:
    conversation_id: str
    profile: str
    lag: int
    messages: list[Any]
    compactor: fold_model.Compactor
    folded_through: int = 0
    seen: list[fold_model.Turn] = field(default_factory=list)


@dataclass
class WorkerLogs:
    """The worker's JSON lines, read as they come, by (conversation id, command id)."""

    events: dict[tuple[str, str], list[dict[str, Any]]] = field(
        default_factory=lambda: defaultdict(list)
    )

    async def read(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                key = (event.get("conversation_id", ""), event.get("command_id", ""))
                self.events[key].append(event)


@contextlib.asynccontextmanager
async def worker_process(stack: Stack, logs: WorkerLogs) -> AsyncIterator[None]:
    # Room for both receive batches of a turn at once; no request is overdue in the run.
    process = await stack.worker_process(
        "run", WORKER_CONCURRENCY="20", COMPACTION_RETRY_SECONDS="3600", LOG_FORMAT="json"
    )
    assert process.stdout is not None and process.stderr is not None
    reader = asyncio.create_task(logs.read(process.stdout))
    errors = asyncio.create_task(process.stderr.read())
    try:
        yield
    finally:
        process.terminate()
        async with asyncio.timeout(30):
            await process.wait()
            await reader
    assert process.returncode == 0, (await errors).decode(errors="replace")[-2000:]


async def receive_all(stack: Stack, env_name: str, count: int | None) -> list[dict[str, Any]]:
    """Receive and delete (in batches) ``count`` messages, or, with None, what is there."""
    url = stack.env[env_name]
    bodies: list[dict[str, Any]] = []
    async with asyncio.timeout(60):
        while count is None or len(bodies) < count:
            # Short polls: a parked long poll on moto wakes 0.5-1 s after a message arrives.
            response = await stack.clients.sqs.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0
            )
            messages = response.get("Messages", [])
            if not messages and count is None:
                break
            if not messages:
                await asyncio.sleep(0.05)
            if messages:
                await stack.clients.sqs.delete_message_batch(
                    QueueUrl=url,
                    Entries=[
                        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                        for i, m in enumerate(messages)
                    ],
                )
            bodies += [json.loads(m["Body"]) for m in messages]
    return bodies


async def serve_folds(stack: Stack, conversations: list[Conversation], turn: int) -> None:
    """The compactor: requests due by this turn are folded, the mark only moving forward."""
    for c in conversations:
        folded = c.compactor.serve(turn, c.folded_through)
        if folded == c.folded_through:
            continue
        await stack.clients.dynamodb.update_item(
            TableName=stack.env["HISTORY_TABLE"],
            Key={"pk": {"S": c.conversation_id}, "sk": {"S": STATE_KEY}},
            UpdateExpression="SET folded_through = :f, fold_summary = :s",
            ConditionExpression="attribute_not_exists(folded_through) OR folded_through < :f",
            ExpressionAttributeValues={
                ":f": {"N": str(folded)},
                ":s": {"S": f"fold through {folded}"},
            },
        )
        c.folded_through = folded


async def write_exchange(stack: Stack, conversations: list[Conversation], turn: int) -> None:
    """The writer: counsel's question (the command's message) and its answer."""
    items = [
        message_item(c.conversation_id, m.seq, m.role, m.content)
        for c in conversations
        for m in c.messages[2 * turn - 2 : 2 * turn]
    ]
    await stack.put_items(items)


def observed_turn(
    c: Conversation, turn: int, prompt: dict[str, Any], requests: list[dict[str, Any]]
) -> fold_model.Turn:
    seqs = [m["seq"] for m in prompt["history"]]
    if turn > 1:  # the window is a contiguous suffix of what was stored
        assert seqs == list(range(seqs[0], 2 * turn - 1))
    memory = prompt["memory"]
    assert (memory["folded_through"] if memory else 0) == c.folded_through
    oldest = seqs[0] if seqs else None
    gap = (c.folded_through + 1, oldest - 1) if oldest and oldest - 1 > c.folded_through else None
    assert len(requests) <= 1
    request = (requests[0]["folded_through"], requests[0]["through"]) if requests else None
    return fold_model.Turn(turn, c.folded_through, oldest, gap, request)


async def test_the_fold_gap_while_the_compactor_lags(stack: Stack) -> None:
    conversations = [
        Conversation(
            conversation_id=f"gap-{profile}-lag{lag}",
            profile=profile,
            lag=lag,
            messages=fold_model.conversation(profile, TURNS),
            compactor=fold_model.Compactor(lag),
        )
        for profile in fold_model.PROFILES
        for lag in LAGS
    ]
    by_id = {c.conversation_id: c for c in conversations}
    logs = WorkerLogs()
    async with worker_process(stack, logs):
        for turn in range(1, TURNS + 1):
            await serve_folds(stack, conversations, turn)
            for batch in (conversations[:10], conversations[10:]):
                await stack.clients.sqs.send_message_batch(
                    QueueUrl=stack.env["CONVERSE_QUEUE_URL"],
                    Entries=[
                        {
                            "Id": str(i),
                            "MessageBody": json.dumps(
                                {
                                    "type": "converse",
                                    "command_id": f"t{turn}",
                                    "conversation_id": c.conversation_id,
                                    "message": c.messages[2 * turn - 2].content,
                                }
                            ),
                        }
                        for i, c in enumerate(batch)
                    ],
                )
            prompts = await receive_all(stack, "MODEL_QUEUE_URL", len(conversations))
            await stack.until_empty("CONVERSE_QUEUE_URL", within=60)
            requests = await receive_all(stack, "COMPACTION_QUEUE_URL", None)
            for prompt in prompts:
                c = by_id[prompt["conversation_id"]]
                mine = [r for r in requests if r["conversation_id"] == c.conversation_id]
                seen = observed_turn(c, turn, prompt, mine)
                c.seen.append(seen)
                if seen.request is not None:
                    c.compactor.received(turn, seen.request[1])
            await write_exchange(stack, conversations, turn)

    gaps: dict[tuple[str, int], int] = {}
    for c in conversations:
        # The real process agrees with the model, turn for turn.
        assert c.seen == fold_model.simulate(c.messages, c.lag), c.conversation_id
        # Each gap is logged, for exactly its seqs; a turn without one logs none.
        for seen in c.seen:
            logged = logs.events[(c.conversation_id, f"t{seen.turn}")]
            warned = [
                (e["first_seq"], e["last_seq"], e["unfolded_dropped"])
                for e in logged
                if e["event"] == GAP_EVENT
            ]
            expected = [] if seen.gap is None else [(*seen.gap, seen.gap_messages)]
            assert warned == expected, (c.conversation_id, seen)
            assert any(e["event"] == "clerk.converse_prompt_forwarded" for e in logged)
        # No two requests cover the same stretch: each `through` above every earlier one.
        throughs = [seen.request[1] for seen in c.seen if seen.request is not None]
        assert throughs == sorted(set(throughs)), c.conversation_id
        gaps[c.profile, c.lag] = fold_model.Summary.of(c.seen).gap_message_turns

    for profile in fold_model.PROFILES:
        assert gaps[profile, 0] == gaps[profile, 1] == 0, profile
    assert all(gaps["tiny", lag] == 0 for lag in LAGS)
    assert all(gaps[profile, lag] <= 4 for profile in ("medium", "mixed") for lag in LAGS)
    # Pastes with the fold three turns late: not none, but at most half the 40 message-turns
    # that a rule of one request in flight leaves on the same conversation (docs/FOLD.md).
    assert gaps["paste-heavy", 3] <= SINGLE_REQUEST_GAP // 2
