"""``worker dlq inspect|redrive``: the command line of the converse queue's dead-letter
queue. The operations themselves are :mod:`worker.cli.dlq_operations` (which imports the SQS adapter
and asyncio), imported when the command runs, so building the parser costs ``worker health``
nothing."""

from __future__ import annotations

import argparse
import sys
from functools import partial

from worker.cli.arguments import MAX_RATE, MIN_RATE, positive_count, redrive_rate
from worker.cli.operator import converse_queue_url, run_operator
from worker.errors import ConfigError


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dlq = commands.add_parser("dlq", help="the converse queue's dead-letter queue")
    dlq_commands = dlq.add_subparsers(dest="dlq_command", required=True)
    inspect = dlq_commands.add_parser(
        "inspect", help="counts by reason and age, and the time each has left; never bodies"
    )
    inspect.add_argument(
        "--ids", action="store_true", help="list each message id too, with its time left"
    )
    redrive = dlq_commands.add_parser("redrive", help="send retry-exhausted commands back")
    redrive.add_argument(
        "--include-rejected", action="store_true", help="also messages the stage rejected"
    )
    redrive.add_argument(
        "--rate",
        type=redrive_rate,
        default=10,
        help=f"messages a second, {MIN_RATE} to {MAX_RATE} (default 10)",
    )
    redrive.add_argument("--limit", type=positive_count, help="stop after this many")
    dlq.set_defaults(execute=partial(run_operator, dead_letter_command))


async def dead_letter_command(args: argparse.Namespace) -> int:
    from worker.adapters.sqs import SqsQueue
    from worker.adapters.sqs_admin import QueueAdmin
    from worker.app.runtime import aws_clients
    from worker.cli import dlq_operations as dlq

    url = converse_queue_url()
    async with aws_clients(pool_size=10) as clients:
        converse = SqsQueue(clients.sqs, url)
        description = await converse.describe()
        if description.dead_letter is None:
            raise ConfigError("CONVERSE_QUEUE_URL: the queue has no RedrivePolicy")
        dead_letters = description.dead_letter
        if args.dlq_command == "inspect":
            retention = await QueueAdmin(clients.sqs).retention_seconds(dead_letters.url)
            inspection = await dlq.inspect(dead_letters, retention_seconds=retention)
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
