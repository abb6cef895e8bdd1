"""The ceiling: the stage's AWS calls replayed with precomputed payloads and no stage logic.

Each of ``--lanes`` lanes loops: ReceiveMessage (up to ``--batch``) → UpdateItem ledger
begin for each → Query for each → SendMessageBatch of the precomputed prompt bodies →
one BatchWriteItem of the ledger's done records → (a compaction claim UpdateItem and
SendMessage for a conversation whose fold is due, once) → DeleteMessageBatch. The requests are the
stage's own (same expressions, same attributes, same client configuration from
``worker.cli.runtime.aws_clients``); the answers are parsed by botocore and ignored. What is
left out is the stage itself: command validation, the window, payload encoding, the
consumer's bookkeeping and logging. ``lanes × batch`` commands are in flight at most,
as many as the worker's ``WORKER_CONCURRENCY``.

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
from worker.adapters.dynamodb import history_page_query
from worker.cli.runtime import aws_clients
from worker.settings import load_settings


def _epoch(moment: datetime) -> str:
    return str(int(moment.timestamp()))


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


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
    table = settings.history_table
    converse = settings.converse_queue_url

    async with aws_clients(pool_size=max(10, args.lanes * args.batch + 10)) as clients:
        sqs = counter.attach(clients.sqs)
        dynamodb = counter.attach(clients.dynamodb)

        def key(conversation_id: str, command_id: str) -> dict[str, Any]:
            return {"pk": {"S": conversation_id}, "sk": {"S": "cmd#" + command_id}}

        async def begin(conversation_id: str, command_id: str, owner: str) -> bool:
            """The claim; False when another lane holds it (moto delivered a message twice)."""
            now = datetime.now(UTC)
            try:
                await claim_command(conversation_id, command_id, owner, now)
            except dynamodb.exceptions.ConditionalCheckFailedException:
                return False
            return True

        async def claim_command(
            conversation_id: str, command_id: str, owner: str, now: datetime
        ) -> None:
            await dynamodb.update_item(
                TableName=table,
                Key=key(conversation_id, command_id),
                UpdateExpression="SET #status = :in_progress, lease_until = :until, "
                "#owner = :owner, expires_at = :ttl, "
                "attempts = if_not_exists(attempts, :zero) + :one",
                ConditionExpression="attribute_not_exists(pk) OR "
                "(#status = :in_progress AND lease_until < :now)",
                ExpressionAttributeNames={"#status": "status", "#owner": "owner"},
                ExpressionAttributeValues={
                    ":in_progress": {"S": "in_progress"},
                    ":until": {"N": _epoch(now + timedelta(seconds=60))},
                    ":owner": {"S": owner},
                    ":ttl": {"N": _epoch(now + timedelta(days=15))},
                    ":zero": {"N": "0"},
                    ":one": {"N": "1"},
                    ":now": {"N": _epoch(now)},
                },
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )

        async def query(conversation_id: str) -> None:
            await dynamodb.query(
                **history_page_query(table, conversation_id, settings.history_page_size)
            )

        async def finish(work: list[tuple[Any, ...]], owner: str) -> None:
            """The done marks of the batch: the ledger's BatchWriteItem of done records."""
            now = datetime.now(UTC)
            await dynamodb.batch_write_item(
                RequestItems={
                    table: [
                        {
                            "PutRequest": {
                                "Item": {
                                    **key(w[1], w[0]),
                                    "status": {"S": "done"},
                                    "owner": {"S": owner},
                                    "done_at": {"S": _stamp(now)},
                                    "expires_at": {"N": _epoch(now + timedelta(days=15))},
                                }
                            }
                        }
                        for w in work
                    ]
                }
            )

        async def compact(conversation_id: str, command_id: str, through: int) -> None:
            now = datetime.now(UTC)
            try:
                await claim(conversation_id, through, now)
            except dynamodb.exceptions.ConditionalCheckFailedException:
                return
            await sqs.send_message(
                QueueUrl=settings.compaction_queue_url,
                MessageBody=json.dumps(
                    {
                        "type": "compact",
                        "conversation_id": conversation_id,
                        "command_id": command_id,
                    }
                ),
            )

        async def claim(conversation_id: str, through: int, now: datetime) -> None:
            await dynamodb.update_item(
                TableName=table,
                Key={"pk": {"S": conversation_id}, "sk": {"S": "state"}},
                # The worker's first claim on a seeded state: no request mark yet.
                UpdateExpression="SET compaction_requested_through = :through, "
                "compaction_requested_at = :now, compaction_request_version = :claimed",
                ConditionExpression="attribute_not_exists(compaction_request_version)",
                ExpressionAttributeValues={
                    ":through": {"N": str(through)},
                    ":now": {"S": _stamp(now)},
                    ":claimed": {"N": "1"},
                },
            )

        async def lane(number: int) -> None:
            while not stopping.is_set():
                response = await sqs.receive_message(
                    QueueUrl=converse,
                    MaxNumberOfMessages=args.batch,
                    WaitTimeSeconds=1,
                    MessageSystemAttributeNames=["ApproximateReceiveCount"],
                    MessageAttributeNames=["All"],
                )
                messages = response.get("Messages", [])
                if not messages:
                    continue
                work = []
                for message in messages:
                    command_id = json.loads(message["Body"])["command_id"]
                    conversation_id, body, through = payloads[command_id]
                    work.append((command_id, conversation_id, body, through, message))
                owner = f"replay/{number}"
                claims = await asyncio.gather(*(begin(w[1], w[0], owner) for w in work))
                copies = [w for w, claimed in zip(work, claims, strict=True) if not claimed]
                work = [w for w, claimed in zip(work, claims, strict=True) if claimed]
                if copies:  # the lane that claimed it serves it; this copy just goes
                    await sqs.delete_message_batch(
                        QueueUrl=converse,
                        Entries=[
                            {"Id": str(i), "ReceiptHandle": w[4]["ReceiptHandle"]}
                            for i, w in enumerate(copies)
                        ],
                    )
                if not work:
                    continue
                await asyncio.gather(*(query(w[1]) for w in work))
                await sqs.send_message_batch(
                    QueueUrl=settings.model_queue_url,
                    Entries=[{"Id": str(i), "MessageBody": w[2]} for i, w in enumerate(work)],
                )
                await finish(work, owner)
                due = [w for w in work if w[3] and w[1] not in claimed]
                claimed.update(w[1] for w in due)
                await asyncio.gather(*(compact(w[1], w[0], w[3]) for w in due))
                await sqs.delete_message_batch(
                    QueueUrl=converse,
                    Entries=[
                        {"Id": str(i), "ReceiptHandle": w[4]["ReceiptHandle"]}
                        for i, w in enumerate(work)
                    ],
                )

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
