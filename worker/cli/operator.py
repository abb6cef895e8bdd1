"""The operator's commands: ``worker send``, ``worker dlq inspect|redrive`` and
``worker window``.

``send`` and ``dlq`` need only ``CONVERSE_QUEUE_URL`` (the dead-letter queue is found from
its redrive policy) and boto's own endpoint, region and credentials; ``window`` reads the
worker's own settings (the history table and the window's limits).
"""

from __future__ import annotations

import argparse
import json
import os
import uuid
from datetime import UTC, datetime

from worker.adapters.sqs import SqsQueue
from worker.adapters.sqs_admin import QueueAdmin
from worker.cli import dlq
from worker.cli.runtime import aws_clients
from worker.errors import ConfigError


def converse_queue_url() -> str:
    url = os.environ.get("CONVERSE_QUEUE_URL", "")
    if not url:
        raise ConfigError("CONVERSE_QUEUE_URL: Field required")
    return url


async def run_operator_command(args: argparse.Namespace) -> int:
    if args.command == "window":
        from worker.cli.window import run_window

        return await run_window(args)
    url = converse_queue_url()
    async with aws_clients(pool_size=10) as clients:
        converse = SqsQueue(clients.sqs, url)
        if args.command == "send":
            command = {
                "type": "converse",
                "command_id": args.command_id or f"c-{uuid.uuid4().hex[:12]}",
                "conversation_id": args.conversation,
                "message": args.message,
                "sent_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
            await converse.send(
                json.dumps(command, ensure_ascii=False),
                group_id=args.conversation,
                deduplication_id=command["command_id"],
            )
            print(f"sent {command['command_id']} on {args.conversation}")
            return 0
        description = await converse.describe()
        if description.dead_letter is None:
            raise ConfigError("CONVERSE_QUEUE_URL: the queue has no RedrivePolicy")
        dead_letters = description.dead_letter
        if args.dlq_command == "inspect":
            inspection = await dlq.inspect(dead_letters)
            print("\n".join(inspection.lines(with_ids=args.ids)))
            return 0
        result = None
        if args.include_rejected and args.limit is None:
            result = await dlq.redrive_everything(
                QueueAdmin(clients.sqs), dead_letters, converse, per_second=args.rate
            )
        if result is None:
            result = await dlq.redrive(
                dead_letters,
                converse,
                include_rejected=args.include_rejected,
                per_second=args.rate,
                limit=args.limit,
            )
        how = "SQS message move task" if result.via_move_task else "receive, send, delete"
        print(f"redriven {result.sent} to the converse queue ({how})")
        if result.skipped_rejected:
            print(f"left {result.skipped_rejected} rejected (--include-rejected sends them too)")
        if result.failed:
            print(f"{result.failed} could not be moved: they stay in the dead-letter queue")
        return 0 if not result.failed else 1
