"""``worker bill``: the command line of :mod:`worker.cli.bill_report` (the model's bill for a
stored conversation, turn by turn, beside the sliding window's estimate). Its work is imported
when it runs, so building the parser costs ``worker health`` nothing."""

from __future__ import annotations

import argparse
from functools import partial

from worker.cli.arguments import add_conversation
from worker.cli.operator import run_operator

HELP = """\
Print the model's bill for a stored conversation, turn by turn, from the model_usage the writer
stores with each answer: when the call was made, the command it answered, the uncached input,
the cache's reads and writes by TTL (5m, 1h), the input as billed (1x, 0.1x, 1.25x, 2x), the
read the prompt expected, and each miss with its cause (expired, stage_changed_prefix,
below_minimum, ttl_downgraded, unexplained). Answers stored without a bill are listed as such.
Then the totals, beside an ESTIMATE of what the sliding window would have been billed for the
same turns (each rebuilt over the history before its question, under today's summary, priced
by the stage's cache model at the answers' times in chars/4 tokens scaled by the
conversation's calibration). Reads the history table named by HISTORY_TABLE with the worker's
settings; never prints content."""


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bill = commands.add_parser(
        "bill",
        help="the model's bill for a conversation, turn by turn (reads only)",
        description=HELP,
    )
    add_conversation(bill)
    bill.add_argument("--json", action="store_true", help="print the bill as one JSON object")
    bill.set_defaults(execute=partial(run_operator, run_bill))


async def run_bill(args: argparse.Namespace) -> int:
    import json

    from worker.adapters.dynamodb import DynamoHistoryStore
    from worker.app.runtime import aws_clients
    from worker.cli.bill_report import bill_json, bill_lines, read_bill
    from worker.settings import load_settings

    settings = load_settings()
    async with aws_clients(pool_size=2) as clients:
        store = DynamoHistoryStore(clients.dynamodb, settings.history_table)
        bill = await read_bill(store, args.conversation, settings.plan_config)
    print(json.dumps(bill_json(bill), indent=2) if args.json else "\n".join(bill_lines(bill)))
    return 0
