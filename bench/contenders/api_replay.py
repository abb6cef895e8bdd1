"""The ceiling: the stage's AWS calls replayed with precomputed payloads and no stage logic.

Each of ``--lanes`` lanes loops: ReceiveMessage (up to ``--batch``) → UpdateItem ledger
begin for each → Query for each → SendMessageBatch of the precomputed prompt bodies →
one BatchWriteItem of the ledger's done records → (a compaction claim UpdateItem and
SendMessage for a conversation whose fold is due, once) → DeleteMessageBatch. The requests are the
stage's own: made by the worker's adapters themselves (the ledger, the history store, the
queues) over the client configuration of ``worker.app.runtime.aws_clients``, so they cannot
drift from what the stage sends; the answers are parsed as the adapters parse them and
ignored. What is left out is the stage itself: command validation, the window, payload
encoding, the consumer's bookkeeping (leases, cohorts, batching) and logging. ``lanes ×
batch`` commands are in flight at most, as many as the worker's ``WORKER_CONCURRENCY``.

Run as its own process with the worker's environment plus ``--payloads FILE`` (JSON:
command id → [conversation id, prompt body, the fold's ``through`` if one is due, else 0]).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.contenders.callcount import CallCounter, install_snapshot_handler
from worker.adapters.dynamodb import DynamoHistoryStore
from worker.adapters.ledger import DynamoCommandLedger
from worker.adapters.sqs import OutboundMessage, SqsQueue
from worker.app.runtime import aws_clients
from worker.memory import CompactionPlan, FoldState
from worker.ports import CommandHold, DoneMark, FoldClaim, ReceivedMessage
from worker.settings import load_settings
from worker.turn.commands import ConverseCommand, compaction_request, encode_body

#: The command lease a claim takes: the converse queue's visibility timeout in the benchmark.
LEASE = timedelta(seconds=60)


async def replay(args: argparse.Namespace, payloads: dict[str, list[Any]]) -> None:
    settings = load_settings()
    counter = CallCounter()
    writer = install_snapshot_handler(counter)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    if writer is not None:
        loop.add_signal_handler(signal.SIGUSR1, writer.write)
    claimed: set[str] = set()

    async with aws_clients(pool_size=max(10, args.lanes * args.batch + 10)) as clients:
        # The worker's own adapters over counted clients: every request is built by the
        # stage's code, so the replay cannot drift from what the stage sends.
        sqs = counter.attach(clients.sqs)
        dynamodb = counter.attach(clients.dynamodb)
        converse = SqsQueue(sqs, settings.converse_queue_url)
        model_queue = SqsQueue(sqs, settings.model_queue_url)
        compaction_queue = SqsQueue(sqs, settings.compaction_queue_url)
        history = DynamoHistoryStore(dynamodb, settings.history_table)
        ledger = DynamoCommandLedger(dynamodb, settings.ledger_table)

        async def compact(conversation_id: str, command_id: str, through: int) -> None:
            """The worker's first claim on a seeded state (no request mark yet), then the
            request; a lost claim sends nothing."""
            plan = CompactionPlan(folded_through=0, through=through, unfolded_tokens=0)
            now = datetime.now(UTC)
            claim = FoldClaim(conversation_id, plan, seen=FoldState(), claimed_at=now)
            if not await history.claim_compaction(claim):
                return
            command = ConverseCommand(
                type="converse", command_id=command_id, conversation_id=conversation_id, message="-"
            )
            await compaction_queue.send(
                encode_body(compaction_request(command, plan)),
                group_id=conversation_id,
                deduplication_id=f"compact:{conversation_id}:{through}",
            )

        async def lane(number: int) -> None:
            owner = f"replay/{number}"
            while not stopping.is_set():
                messages = await converse.receive(args.batch, 1)
                if not messages:
                    continue
                work: list[tuple[str, str, str, int, ReceivedMessage]] = []
                questions: dict[str, str] = {}
                for message in messages:
                    command = json.loads(message.body)
                    command_id = command["command_id"]
                    questions[command_id] = command["message"]
                    conversation_id, body, through = payloads[command_id]
                    work.append((command_id, conversation_id, body, through, message))
                now = datetime.now(UTC)
                claims = await asyncio.gather(
                    *(
                        ledger.begin(
                            CommandHold(w[1], w[0], owner),
                            lease=LEASE,
                            now=now,
                            message=questions[w[0]],
                        )
                        for w in work
                    )
                )
                # A copy moto delivered twice: the lane that claimed it serves it; this one goes.
                copies = [w[4] for w, c in zip(work, claims, strict=True) if c.state != "started"]
                digests = {w[0]: c.digest for w, c in zip(work, claims, strict=True)}
                work = [w for w, c in zip(work, claims, strict=True) if c.state == "started"]
                if copies:
                    await converse.delete_batch(copies)
                if not work:
                    continue
                await asyncio.gather(
                    *(history.load_page(w[1], settings.history_page_size) for w in work)
                )
                await model_queue.send_batch(
                    [OutboundMessage(w[2], group_id=w[1], deduplication_id=w[0]) for w in work]
                )
                now = datetime.now(UTC)
                await ledger.finish_batch(
                    [DoneMark(w[1], w[0], owner, now, digests[w[0]]) for w in work]
                )
                due = [w for w in work if w[3] and w[1] not in claimed]
                claimed.update(w[1] for w in due)
                await asyncio.gather(*(compact(w[1], w[0], w[3]) for w in due))
                await converse.delete_batch([w[4] for w in work])

        tasks = [asyncio.create_task(lane(n)) for n in range(args.lanes)]
        await stopping.wait()
        await asyncio.gather(*tasks)
    if writer is not None:
        writer.write()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--payloads", required=True)
    parser.add_argument("--lanes", type=int, default=2)
    parser.add_argument("--batch", type=int, default=10)
    args = parser.parse_args()
    with open(args.payloads, encoding="utf-8") as source:
        payloads: dict[str, list[Any]] = json.load(source)
    asyncio.run(replay(args, payloads))
    return 0


if __name__ == "__main__":
    sys.exit(main())
