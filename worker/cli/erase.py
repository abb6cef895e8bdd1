"""``worker erase --conversation ID``: the command line of
:mod:`worker.cli.erase_operations` (remove every copy the stage made of a conversation). Its
work is imported when it runs, so building the parser costs ``worker health`` nothing."""

from __future__ import annotations

import argparse
import sys
from functools import partial

from worker.cli.arguments import add_conversation
from worker.cli.operator import run_operator

HELP = """\
Remove every copy the stage made of one conversation: its command records (LEDGER_TABLE),
the stage's attributes of its state item in HISTORY_TABLE (the fold request mark, the
window's anchor and summary snapshot; never the writer's fold or any message), the payload
objects the stage wrote for it (PAYLOAD_BUCKET, under its prefix), and its dead letters in
the converse queue's dead-letter queue (with the stage's objects their pointers name); every
other dead letter is put back as it was. Prints counts per kind, never content. Safe to run
again: a second run removes what a turn in flight wrote meanwhile, then nothing. Exits 1
when a dead letter could not be read or a removal was refused: run it again. Reads the
worker's settings; the rights it needs: docs/RETENTION.md."""


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    erase = commands.add_parser(
        "erase",
        help="remove every copy the stage made of a conversation (counts only, never content)",
        description=HELP,
    )
    add_conversation(erase)
    erase.add_argument(
        "--dry-run", action="store_true", help="count what a run would remove; remove nothing"
    )
    erase.add_argument("--json", action="store_true", help="print the counts as one JSON object")
    erase.set_defaults(execute=partial(run_operator, run_erase))


async def run_erase(args: argparse.Namespace) -> int:
    import json

    from worker.app.runtime import aws_clients
    from worker.cli.erase_operations import erase, stores_of
    from worker.settings import load_settings

    settings = load_settings()
    async with aws_clients(pool_size=20) as clients:
        stores = await stores_of(clients, settings)
        erasure = await erase(stores, args.conversation, dry_run=args.dry_run)
    if args.json:
        print(json.dumps(erasure.counts()))
    else:
        print("\n".join(erasure.lines()))
    if not erasure.looked_at_everything:
        print(
            "worker: the erasure may be incomplete (a dead letter not read, or a removal "
            "refused): run it again",
            file=sys.stderr,
        )
        return 1
    return 0
