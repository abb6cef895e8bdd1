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
import sys
import uuid
from datetime import UTC, datetime
from typing import TextIO

from worker.adapters.sqs import SqsQueue
from worker.adapters.sqs_admin import QueueAdmin
from worker.app.runtime import aws_clients
from worker.cli import dlq
from worker.errors import ConfigError


def converse_queue_url() -> str:
    url = os.environ.get("CONVERSE_QUEUE_URL", "")
    if not url:
        raise ConfigError("CONVERSE_QUEUE_URL: Field required")
    return url


def read_message(stdin: TextIO) -> str:
    """Counsel's message from stdin, as UTF-8, with one trailing line end dropped (echo and a
    heredoc add one). ValueError, naming no content, if it is not UTF-8 or is blank (the
    stage would reject a blank message)."""
    if stdin.isatty():
        print("worker: reading the message from stdin; end it with Ctrl-D", file=sys.stderr)
    raw = stdin.buffer.read() if hasattr(stdin, "buffer") else stdin.read().encode()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("the message on stdin is not UTF-8 text") from None
    for line_end in ("\r\n", "\n"):
        if text.endswith(line_end):
            text = text.removesuffix(line_end)
            break
    if not text.strip():
        raise ValueError("the message on stdin is blank: nothing to send")
    return text


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
        if result.move_task_failure:
            print(
                f"worker: the SQS message move task ended {result.move_task_failure}; "
                "what it did not move stays in the dead-letter queue",
                file=sys.stderr,
            )
            return 1
        if result.skipped_rejected:
            print(f"left {result.skipped_rejected} rejected (--include-rejected sends them too)")
        if result.failed:
            print(f"{result.failed} could not be moved: they stay in the dead-letter queue")
        return 0 if not result.failed else 1
