"""The consumer a typical user would write: boto3, one message at a time, in sequence.

receive 1 message (a long poll of the worker's ``RECEIVE_WAIT_SECONDS``) → parse → one Query
(the same newest-first page as the stage) → the stage's own plan
(:func:`worker.planning.plan_turn`) and payload → ``send_message`` → ``delete_message``.

It does the same work per command as the stage, minus the stage's reliability: no
idempotency ledger (a claim and a share of a batched done mark a command), no lease
renewal, no dead-letter handling, no fold requests.

Run as its own process with the worker's environment (``python -m
bench.contenders.naive_consumer``); SIGTERM stops it after the message in hand (at once when
idle on its long poll), SIGUSR1 writes its counts to ``BENCH_STATS_PATH``; with
``BENCH_CALL_LOG`` set it logs its calls' times there (:mod:`bench.contenders.calllog`).
"""

from __future__ import annotations

import signal
import sys

import boto3
from botocore.config import Config

from bench.contenders.callcount import CallCounter, install_snapshot_handler
from bench.contenders.calllog import call_log_from_environment, write_call_log
from worker.adapters.dynamodb import history_page, history_page_query
from worker.errors import RejectedCommand
from worker.planning import plan_turn
from worker.settings import load_settings
from worker.turn.commands import encode_body, parse_command, prompt_payload


def main() -> int:
    settings = load_settings()
    config = settings.plan_config
    retries = Config(retries={"mode": "standard", "max_attempts": 3})
    counter = CallCounter()
    sqs = counter.attach(boto3.client("sqs", config=retries))
    dynamodb = counter.attach(boto3.client("dynamodb", config=retries))
    calls = call_log_from_environment()
    if calls is not None:
        calls.attach(sqs)
        calls.attach(dynamodb)
    writer = install_snapshot_handler(counter)
    running, polling = True, False

    def stop(*_: object) -> None:
        nonlocal running
        running = False
        if polling:  # idle on its long poll: out of it now, not at the end of its wait
            raise Stopped

    signal.signal(signal.SIGTERM, stop)
    try:
        while running:
            polling = True
            # Long polls of the worker's own wait (RECEIVE_WAIT_SECONDS): a shorter one would
            # leave the queue without a poll parked once a second, for a round trip.
            response = sqs.receive_message(
                QueueUrl=settings.converse_queue_url,
                MaxNumberOfMessages=1,
                WaitTimeSeconds=settings.receive_wait_seconds,
            )
            polling = False
            for message in response.get("Messages", []):
                try:
                    command = parse_command(message["Body"])
                except RejectedCommand:
                    continue  # a typical loop leaves it for the redrive policy
                query = history_page_query(
                    settings.history_table, command.conversation_id, settings.history_page_size
                )
                page = history_page(dynamodb.query(**query))  # the stage's own parser
                plan = plan_turn(page, command.message, sent_at=command.sent_time, config=config)
                shown = (plan.summary, plan.folded_through)
                payload = prompt_payload(
                    command, plan.window, page.state, plan.view, shown=shown, cache=plan.cache
                )
                body = encode_body(payload)
                sqs.send_message(QueueUrl=settings.model_queue_url, MessageBody=body)
                sqs.delete_message(
                    QueueUrl=settings.converse_queue_url, ReceiptHandle=message["ReceiptHandle"]
                )
    except Stopped:
        pass
    finally:
        if writer is not None:
            writer.write()
        write_call_log(calls)
    return 0


class Stopped(Exception):
    """SIGTERM came while the consumer was idle on its long poll."""


if __name__ == "__main__":
    sys.exit(main())
