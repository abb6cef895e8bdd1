"""The bill, observed, through the real worker: a few of part 10's conversations sent to a
``worker run`` process (``HISTORY_WINDOW_MODE=cache-aligned``) against a moto server, the
loop closed as a model stage and its writer close it, then compared with the in-memory
replay of the same turns (:func:`bench.load.answered.answered_turns`).

Turn ``t`` of every conversation together, as ``tests/integration/test_fold_gap.py`` drives
the worker: the scripted compactor lands its folds on the ``state`` item; each conversation's
command goes out with its ``sent_at``; the prompts are taken off the model queue and, once
the converse queue is empty (every turn settled: its fold request and anchor written), the
fold requests off the compaction queue; each prompt is answered by the prompt-cache stand-in
(:class:`localaws.model_stage.ModelStage`, the same one for the whole run), and the question
and the answer item (:func:`localaws.model_stage.answer_item`, with ``model_usage``) are
stored with :func:`localaws.model_stage.put_answer`'s item.

The worker's payloads, the stand-in's bills and the miss causes the worker logged
(``clerk.converse_cache_observed``) are compared with the replay's, turn by turn.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

from bench.contenders import contenders
from bench.load.answered import (
    SYSTEM_PROMPT,
    answer_delay,
    answered_turns,
    billed_units,
    command_for,
)
from bench.load.replay import (
    ReplayedConversation,
    ScriptedCompactor,
    fold_summary,
    pace_profile,
    stamp,
    turn_times,
)
from bench.parts.runs import WORK_DIR
from bench.servers.servers import create_bench_resources, local_servers, pointed_at
from localaws.bedrock_cache import STAND_IN_MODEL_ID
from localaws.history_writer import message_item
from localaws.model_stage import ModelStage, answer_item
from worker.adapters.dynamodb import STATE_KEY
from worker.settings import Settings

#: (conversations, turns): the full run's and the quick run's.
FULL = (5, 20)
QUICK = (2, 10)
SEED = 11
PACE = "mixed"
TABLE = "observed-history"
PROFILES_WANTED = ("sessions", "deliberate", "interrupted", "cold")


def chosen(conversations: Sequence[ReplayedConversation], count: int, turns: int) -> list[int]:
    """The first ``count`` conversations with at least ``turns`` turns, taken in turn from
    each pace profile of the mixed population, so that every pace is met."""
    by_profile: dict[str, list[int]] = {p: [] for p in PROFILES_WANTED}
    for index, conversation in enumerate(conversations):
        if conversation.turns >= turns:
            profile = pace_profile(conversation.conversation_id, PACE, seed=SEED)
            by_profile[profile].append(index)
    picked: list[int] = []
    while len(picked) < count and any(by_profile.values()):
        for profile in PROFILES_WANTED:
            if by_profile[profile] and len(picked) < count:
                picked.append(by_profile[profile].pop(0))
    return sorted(picked)


def model_stage() -> ModelStage:
    return ModelStage(system_prompt=SYSTEM_PROMPT, own_cache_point=True)


class Stack:
    """The run's queues and table, through this process's clients."""

    def __init__(self, clients: Any, env: dict[str, str]) -> None:
        self.clients, self.env = clients, env

    async def depth(self, name: str) -> int:
        response = await self.clients.sqs.get_queue_attributes(
            QueueUrl=self.env[name],
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )
        return sum(int(v) for v in response["Attributes"].values())

    async def until_empty(self, name: str, within: float = 120.0) -> None:
        async with asyncio.timeout(within):
            while await self.depth(name):  # noqa: ASYNC110 - polling the server, no event to wait on
                await asyncio.sleep(0.05)

    async def receive(self, name: str, count: int | None) -> list[dict[str, Any]]:
        """Receive and delete ``count`` messages (None: what is there), short polls."""
        url, bodies = self.env[name], []
        async with asyncio.timeout(120):
            while count is None or len(bodies) < count:
                response = await self.clients.sqs.receive_message(
                    QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0
                )
                messages = response.get("Messages", [])
                if not messages:
                    if count is None:
                        break
                    await asyncio.sleep(0.05)
                    continue
                await self.clients.sqs.delete_message_batch(
                    QueueUrl=url,
                    Entries=[
                        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                        for i, m in enumerate(messages)
                    ],
                )
                for message in messages:
                    body = json.loads(message["Body"])
                    if not isinstance(body, dict):
                        raise RuntimeError("a payload went to S3: raise PAYLOAD_INLINE_MAX_BYTES")
                    bodies.append(body)
        return bodies

    async def put(self, item: dict[str, Any]) -> None:
        await self.clients.dynamodb.put_item(TableName=self.env["HISTORY_TABLE"], Item=item)

    async def land(self, conversation_id: str, folded: int) -> None:
        """The compactor's write: the fold mark and its summary, only forward."""
        await self.clients.dynamodb.update_item(
            TableName=self.env["HISTORY_TABLE"],
            Key={"pk": {"S": conversation_id}, "sk": {"S": STATE_KEY}},
            UpdateExpression="SET folded_through = :f, fold_summary = :s",
            ConditionExpression="attribute_not_exists(folded_through) OR folded_through < :f",
            ExpressionAttributeValues={
                ":f": {"N": str(folded)},
                ":s": {"S": fold_summary(conversation_id, folded, seed=SEED)},
            },
        )


async def drive(
    stack: Stack, conversations: Sequence[ReplayedConversation], turns: int
) -> dict[str, list[tuple[dict[str, Any], dict[str, Any]]]]:
    """Every conversation's first ``turns`` turns through the worker: {conversation id:
    [(payload, usage), …]}."""
    stage = model_stage()
    times = {
        c.conversation_id: turn_times(c.conversation_id, c.turns, PACE, seed=SEED)
        for c in conversations
    }
    compactors = {
        c.conversation_id: ScriptedCompactor(c.conversation_id, SEED) for c in conversations
    }
    folded = dict.fromkeys(times, 0)
    seen: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {cid: [] for cid in times}
    by_id = {c.conversation_id: c for c in conversations}
    for turn in range(1, turns + 1):
        for cid, compactor in compactors.items():
            landed = compactor.land(turn, folded[cid])
            if landed != folded[cid]:
                await stack.land(cid, landed)
                folded[cid] = landed
        for c in conversations:
            body = command_for(c, turn, times[c.conversation_id])
            await stack.clients.sqs.send_message(
                QueueUrl=stack.env["CONVERSE_QUEUE_URL"], MessageBody=body
            )
        prompts = await stack.receive("MODEL_QUEUE_URL", len(conversations))
        await stack.until_empty("CONVERSE_QUEUE_URL")
        for request in await stack.receive("COMPACTION_QUEUE_URL", None):
            compactors[request["conversation_id"]].requested(turn, request["through"])
        for payload in sorted(prompts, key=lambda p: p["conversation_id"]):
            cid = payload["conversation_id"]
            c, sent = by_id[cid], stamp(times[cid][turn - 1])
            at = sent + timedelta(seconds=answer_delay(cid, turn, seed=SEED))
            answer = stage.answer(payload, at=at, content=c.messages[2 * turn - 1].content)
            question = c.question(turn)
            await stack.put(dict(message_item(cid, question.seq, "user", question.content, sent)))
            await stack.put(answer_item(payload, answer, seq=2 * turn, created_at=sent))
            seen[cid].append((payload, answer.usage))
    return seen


def worker_causes(log: str) -> dict[str, str | None]:
    """The miss cause the worker logged for each answer it checked, by the answer's command."""
    causes: dict[str, str | None] = {}
    for line in log.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") == "clerk.converse_cache_observed":
            causes[event["answer_command_id"]] = event["cause"]
    return causes


async def through_worker(
    conversations: Sequence[ReplayedConversation],
    turns: int,
    servers: Any,
    *,
    environ: Mapping[str, str] | None = None,
    beside: Callable[[Stack], Awaitable[None]] | None = None,
) -> tuple[dict[str, list[tuple[dict[str, Any], dict[str, Any]]]], str]:
    """The conversations' turns through a ``worker run`` process (with ``environ`` added to
    its environment), ``beside`` running meanwhile; what :func:`drive` saw, and its output."""
    from worker.app.runtime import aws_clients

    async with aws_clients(pool_size=16) as clients:
        env = await create_bench_resources(clients, "observed", TABLE)
        child = servers.child_environ(
            **env,
            HISTORY_WINDOW_MODE="cache-aligned",
            MODEL_ID=STAND_IN_MODEL_ID,  # the stand-in's model: 1,024 tokens, 1h
            RECEIVE_WAIT_SECONDS="1",
            COMPACTION_RETRY_SECONDS="3600",
            LOG_FORMAT="json",
            **(environ or {}),
        )
        # ``worker run`` itself: the calls are not counted here.
        process = contenders.Contender(
            "observed-worker",
            [sys.executable, "-m", "worker.cli", "run"],
            child,
            WORK_DIR / "observed-worker.stats.json",
            WORK_DIR / "observed-worker.log",
        )
        process.start()
        stack = Stack(clients, env)
        watch = asyncio.create_task(beside(stack)) if beside is not None else None
        try:
            seen = await drive(stack, conversations, turns)
        except Exception as exc:
            raise RuntimeError(f"the worker's run failed\n{process.log_tail()}") from exc
        finally:
            await process.stop()
            if watch is not None:
                watch.cancel()
                await asyncio.gather(watch, return_exceptions=True)
        return seen, process.log_path.read_text(errors="replace")


def measure(
    conversations: Sequence[ReplayedConversation],
    shape: tuple[int, int],
    *,
    settings: Settings,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """``shape`` = (conversations, turns) through the worker, against the replay."""
    count, turns = shape
    picked = [conversations[i] for i in chosen(conversations, count, turns)]
    cut = [ReplayedConversation(c.conversation_id, c.messages[: 2 * turns]) for c in picked]
    started = time.monotonic()
    with local_servers(dynalite=False) as servers, pointed_at(servers):
        seen, log = asyncio.run(through_worker(cut, turns, servers))
    took = time.monotonic() - started
    causes = worker_causes(log)
    config = replace(settings.plan_config, cache_aligned=True, cache_ttl="adaptive")
    rows = []
    for c in cut:
        times = turn_times(c.conversation_id, c.turns, PACE, seed=SEED)
        replayed = list(
            answered_turns(c.at(times), config, times, settings=settings, stage=model_stage(),
                           seed=SEED)
        )  # fmt: skip
        real = seen[c.conversation_id]
        payloads = sum(p == r.payload for (p, _), r in zip(real, replayed, strict=True))
        bills = sum(u == r.answer.usage for (_, u), r in zip(real, replayed, strict=True))
        checked = {
            replayed[i - 1].payload["command_id"]: replayed[i].plan.observed.check
            for i in range(1, len(replayed))
            if replayed[i].plan.observed.check is not None
        }
        same_causes = sum(causes.get(command) == check.cause for command, check in checked.items())
        differ = [r.turn for (p, _), r in zip(real, replayed, strict=True) if p != r.payload]
        rows.append({
            "conversation_id": c.conversation_id,
            "pace": pace_profile(c.conversation_id, PACE, seed=SEED),
            "turns": len(real),
            "first_different_payload": differ[0] if differ else None,
            "same_payloads": payloads,
            "same_bills": bills,
            "checks": len(checked),
            "same_causes": same_causes,
            "worker_billed": sum(billed_units(u) for _, u in real),
            "replay_billed": sum(billed_units(r.answer.usage) for r in replayed),
        })  # fmt: skip
    say(f"part 10: the worker's run took {took:.0f} s")
    return {"conversations": count, "turns": turns, "seconds": took, "rows": rows}
