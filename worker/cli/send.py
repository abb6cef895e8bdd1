"""``worker send``: send one converse command to ``CONVERSE_QUEUE_URL``, the message read
from stdin so that privileged text stays out of shell history and ``ps``."""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from datetime import UTC, datetime
from typing import TextIO

from worker.cli.arguments import add_conversation
from worker.cli.operator import converse_queue_url, run_operator

EXIT_USAGE = 2  # as argparse exits on a bad argument


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    send = commands.add_parser(
        "send",
        help="send one converse command to CONVERSE_QUEUE_URL (the message read from stdin)",
        description="Send one converse command to CONVERSE_QUEUE_URL. The message is read "
        "from stdin, so privileged text stays out of shell history and ps: "
        "`worker send --conversation matter-1187 < question.txt`, or type it and end with "
        "Ctrl-D. One trailing newline is dropped.",
    )
    add_conversation(send)
    send.add_argument("--command-id", help="the idempotency key (default: a new UUID)")
    send.add_argument(
        "message",
        nargs="?",
        default="-",
        help="'-' or absent (the default): read the message from stdin; a message given "
        "here is visible in shell history and ps, kept only for older scripts",
    )
    send.set_defaults(execute=run_send)


def run_send(args: argparse.Namespace) -> int:
    if args.message == "-":
        try:
            args.message = read_message(sys.stdin)
        except ValueError as exc:
            print(f"worker: {exc}", file=sys.stderr)
            return EXIT_USAGE
    return run_operator(send_command, args)


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


async def send_command(args: argparse.Namespace) -> int:
    from worker.adapters.sqs import SqsQueue
    from worker.app.runtime import aws_clients

    url = converse_queue_url()
    async with aws_clients(pool_size=10) as clients:
        converse = SqsQueue(clients.sqs, url)
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
