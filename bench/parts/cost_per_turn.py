"""Part 2: what a turn costs as the conversation grows, from 10 to 100,000 messages.

All conversations live in ONE table on dynalite (a real DynamoDB implementation, whose
Query cost does not grow with the table as moto's does).

- Through the real worker (``worker run`` in its own process, its calls counted): one
  command at a time, round-robin over the lengths; per turn, the items its Query read
  (``Count`` and ``ScannedCount``, from the responses), the read capacity it consumed
  (``ReturnConsumedCapacity=TOTAL`` added by the benchmark's counter), and the latency
  from the command's send to its payload's arrival on the model queue (SQS's
  ``SentTimestamp``).
- The same history step timed in the benchmark's own process, side by side:
  ours = the stage's read and plan (one Query, ``Limit = max_messages + 2``, newest first,
  then :func:`worker.planning.plan_turn`); the usual
  alternative = read the whole conversation (a paginated Query, as a message-history
  class that loads every message does) + LangChain's ``trim_messages`` with the same
  4,000-token budget.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

from bench.contenders import contenders
from bench.contenders.callcount import CallCounter
from bench.load.traffic import Drain, draining
from bench.load.workload import (
    Conversation,
    TextSource,
    build_conversation,
    command_to,
    message_items,
    put_items,
    state_item,
)
from bench.parts.latency import percentile
from bench.parts.runs import TABLE, WORK_DIR, queues
from bench.servers.servers import Servers
from worker.adapters.dynamodb import DynamoHistoryStore, history_page, history_page_query
from worker.planning import plan_turn
from worker.settings import Settings
from worker.turn.reading import read_turn

Say = Callable[[str], None]
LENGTHS = (10, 100, 1_000, 10_000, 100_000)


async def seed_lengths(
    dynamodb: Any, table: str, lengths: Sequence[int], *, seed: int = 23, say: Say
) -> list[Conversation]:
    rng = random.Random(seed)
    text = TextSource(rng)
    conversations = []
    for length in lengths:
        started = time.perf_counter()
        conversation, messages = build_conversation(f"length-{length}", length, text)
        items = message_items(conversation.conversation_id, messages)
        items.append(state_item(conversation))
        await put_items(dynamodb, table, items)
        conversations.append(conversation)
        say(f"  seeded a {length:,}-message conversation in {time.perf_counter() - started:.1f} s")
    return conversations


async def ours(dynamodb: Any, table: str, conversation_id: str, settings: Settings) -> int:
    """The stage's history step: its read and its plan; returns messages kept."""
    decide = partial(plan_turn, message="Next?", sent_at=None, config=settings.plan_config)
    store = DynamoHistoryStore(dynamodb, table)
    page_size = settings.history_page_size
    return (await read_turn(store, conversation_id, page_size=page_size, plan=decide)).window.kept


async def load_all_and_trim(
    dynamodb: Any, table: str, conversation_id: str, max_tokens: int
) -> int:
    """The usual alternative: every message of the conversation, then ``trim_messages``."""
    from langchain_core.messages import AIMessage, HumanMessage, trim_messages
    from langchain_core.messages.utils import count_tokens_approximately

    # The stage's own key range (state item and messages), read whole, oldest first.
    request: dict[str, Any] = history_page_query(table, conversation_id, limit=1)
    del request["Limit"]
    request["ScanIndexForward"] = True
    history = []
    while True:
        response = await dynamodb.query(**request)
        for message in history_page(response).messages:  # the stage's own item parser
            history.append(
                HumanMessage(message.content)
                if message.role == "user"
                else AIMessage(message.content)
            )
        if "LastEvaluatedKey" not in response:
            break
        request["ExclusiveStartKey"] = response["LastEvaluatedKey"]
    kept = trim_messages(
        history,
        strategy="last",
        token_counter=count_tokens_approximately,
        max_tokens=max_tokens,
        start_on="human",
    )
    return len(kept)


async def time_history_steps(
    dynamodb: Any,
    table: str,
    conversations: Sequence[Conversation],
    *,
    ours_samples: int,
    all_samples: Callable[[int], int],
    say: Say,
) -> dict[int, dict[str, Any]]:
    """Both history steps on each conversation, timed in this process, calls counted."""
    settings = Settings.at_defaults()
    limits = settings.window_limits
    results: dict[int, dict[str, Any]] = {}
    for conversation in conversations:
        row: dict[str, Any] = {}
        conversation_id = conversation.conversation_id

        async def our_step(client: Any, conversation_id: str = conversation_id) -> int:
            return await ours(client, table, conversation_id, settings)

        async def their_step(client: Any, conversation_id: str = conversation_id) -> int:
            return await load_all_and_trim(client, table, conversation_id, limits.max_tokens)

        for name, samples, step in (
            ("ours", ours_samples, our_step),
            ("load_all_trim", all_samples(conversation.length), their_step),
        ):
            counter = CallCounter(consumed_capacity=True)
            timings = []
            kept = 0
            with counter.attached(dynamodb) as counted:
                await step(counted)  # warm-up, not counted below
                counter.reset()
                for _ in range(samples):
                    started = time.perf_counter()
                    kept = await step(counted)
                    timings.append(time.perf_counter() - started)
            row[name] = {
                "samples": samples,
                "median_ms": 1000 * statistics.median(timings),
                "queries_per_turn": counter.calls_matching("dynamodb.Query") / samples,
                "items_per_turn": counter.query_items / samples,
                "capacity_per_turn": counter.query_capacity / samples,
                "kept": kept,
            }
        results[conversation.length] = row
        say(
            f"  {conversation.length:>7,} messages: ours {row['ours']['median_ms']:.1f} ms, "
            f"{row['ours']['items_per_turn']:.0f} items; load-all + trim_messages "
            f"{row['load_all_trim']['median_ms']:,.1f} ms, "
            f"{row['load_all_trim']['items_per_turn']:,.0f} items"
        )
    return results


async def worker_turns(
    sqs: Any,
    converse_url: str,
    drain: Drain,
    conversations: Sequence[Conversation],
    *,
    turns: int,
    text: TextSource,
    say: Say,
    warmed_up: Callable[[], Awaitable[Any]],
) -> dict[int, list[float]]:
    """``turns`` commands per conversation, one at a time, round-robin; latency per turn."""
    latencies: dict[int, list[float]] = {c.length: [] for c in conversations}
    number = 0
    for round_number in range(-1, turns):  # round -1 warms the worker up, uncounted
        for conversation in conversations:
            number += 1
            command = command_to(conversation, f"cost-{number:05d}", text.question())
            sent = time.time()
            await sqs.send_message(QueueUrl=converse_url, MessageBody=command.body)
            if not await drain.wait_for([command.command_id], within=30):
                raise RuntimeError(f"turn {command.command_id} did not arrive within 30 s")
            arrival = drain.arrivals[command.command_id]
            if round_number >= 0:
                latencies[conversation.length].append(arrival.arrived_ms - sent * 1000)
        if round_number < 0:
            await warmed_up()
        elif round_number == 0 or (round_number + 1) % 5 == 0:
            say(f"  worker turns: round {round_number + 1}/{turns}")
        await asyncio.sleep(0)
    return latencies


async def run(
    clients: Any,
    servers: Servers,
    text: TextSource,
    *,
    lengths: Sequence[int],
    turns: int,
    ours_samples: int,
    all_samples: Callable[[int], int],
    say: Say,
) -> dict[str, Any]:
    """The part: the conversations seeded, both history steps timed, the worker's turns."""
    say("part 2: cost per turn vs conversation length")
    conversations = await seed_lengths(clients.dynamodb, TABLE, lengths, say=say)
    steps = await time_history_steps(
        clients.dynamodb,
        TABLE,
        conversations,
        ours_samples=ours_samples,
        all_samples=all_samples,
        say=say,
    )
    env, child = await queues(clients, servers, "cost", BENCH_CONSUMED_CAPACITY="1")
    worker = contenders.worker(child, WORK_DIR, "cost-worker")
    warm: dict[str, Any] = {}

    async def warmed_up() -> None:
        warm.update(await worker.snapshot())

    async with draining(clients.sqs, env["MODEL_QUEUE_URL"], tasks=1) as drain:
        worker.start()
        try:
            latencies = await worker_turns(
                clients.sqs,
                env["CONVERSE_QUEUE_URL"],
                drain,
                conversations,
                turns=turns,
                text=text,
                say=say,
                warmed_up=warmed_up,
            )
            stats = await worker.snapshot()
        finally:
            await worker.stop()
    rows = []
    for conversation in conversations:
        pk = conversation.conversation_id
        queries = stats["queries_by_pk"].get(pk, [])[len(warm["queries_by_pk"].get(pk, [])) :]
        ordered = sorted(latencies[conversation.length])
        per_query = max(1, len(queries))
        rows.append(
            {
                "messages": conversation.length,
                "worker": {
                    "turns": len(ordered),
                    "queries_per_turn": len(queries) / max(1, len(ordered)),
                    "items_per_turn": sum(q[0] for q in queries) / per_query,
                    "scanned_per_turn": sum(q[1] for q in queries) / per_query,
                    "capacity_per_turn": sum(q[2] for q in queries) / per_query,
                    "latency_p50_ms": percentile(ordered, 50),
                    "latency_p95_ms": percentile(ordered, 95),
                },
                **steps[conversation.length],
            }
        )
    return {"rows": rows, "worker_exit_code": worker.process.returncode if worker.process else None}
