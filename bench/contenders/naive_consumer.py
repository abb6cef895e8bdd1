"""The consumer a typical user would write: boto3, one message at a time, in sequence.

receive 1 message → parse → one Query (the same newest-first page as the stage) → the
project's own window and payload functions → ``send_message`` → ``delete_message``.

It does the same work per command as the stage, minus the stage's reliability: no
idempotency ledger (a claim and a share of a batched done mark a command), no lease
renewal, no dead-letter handling, no fold requests.

Run as its own process with the worker's environment (``python -m
bench.contenders.naive_consumer``); SIGTERM stops it after the message in hand, SIGUSR1 writes its
counts to ``BENCH_STATS_PATH``.
"""

from __future__ import annotations

import signal
import sys
from typing import Any

import boto3
from botocore.config import Config

from bench.contenders.callcount import CallCounter, install_snapshot_handler
from worker.adapters.dynamodb import history_page, history_page_query
from worker.errors import RejectedCommand
from worker.memory import FoldState, HistoryMessage, bound_history, render_converse
from worker.settings import load_settings
from worker.turn.commands import encode_body, parse_command, prompt_payload


def load_page(
    dynamodb: Any, table: str, conversation_id: str, limit: int
) -> tuple[FoldState, tuple[HistoryMessage, ...]]:
    """The stage's Query, its answer read by the stage's own parser."""
    page = history_page(dynamodb.query(**history_page_query(table, conversation_id, limit)))
    return page.state, page.messages


def main() -> int:
    settings = load_settings()
    config = Config(retries={"mode": "standard", "max_attempts": 3})
    counter = CallCounter()
    sqs = counter.attach(boto3.client("sqs", config=config))
    dynamodb = counter.attach(boto3.client("dynamodb", config=config))
    writer = install_snapshot_handler(counter)
    running = True

    def stop(*_: object) -> None:
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, stop)
    try:
        while running:
            response = sqs.receive_message(
                QueueUrl=settings.converse_queue_url, MaxNumberOfMessages=1, WaitTimeSeconds=1
            )
            for message in response.get("Messages", []):
                try:
                    command = parse_command(message["Body"])
                except RejectedCommand:
                    continue  # a typical loop leaves it for the redrive policy
                state, history = load_page(
                    dynamodb,
                    settings.history_table,
                    command.conversation_id,
                    settings.history_page_size,
                )
                window = bound_history(history, settings.window_limits)
                view = render_converse(window, command.message, state.summary)
                body = encode_body(prompt_payload(command, window, state, view))
                sqs.send_message(QueueUrl=settings.model_queue_url, MessageBody=body)
                sqs.delete_message(
                    QueueUrl=settings.converse_queue_url, ReceiptHandle=message["ReceiptHandle"]
                )
    finally:
        if writer is not None:
            writer.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
