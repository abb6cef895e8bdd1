"""``worker window``: the command line of :mod:`worker.cli.window_report` (what the next turn
would send for a stored conversation). Its work is imported when it runs, so building the
parser costs ``worker health`` nothing."""

from __future__ import annotations

import argparse
from functools import partial

from worker.cli.arguments import add_conversation
from worker.cli.operator import run_operator

HELP = """\
Print what the next turn would send for a stored conversation, without sending or writing
anything: each kept message (seq, role, estimated tokens, trimmed or not), what was dropped,
the fold mark, any fold gap, the messages the Converse view leaves out, and in the
cache-aligned mode the stored anchor and whether the turn would keep it, re-anchor (and
why) or fall back. Then what the prompt-cache model (Claude Sonnet 4's rules on Bedrock:
1,024-token minimum, 5-minute TTL) expects the turn to read from the cache, write and bill,
ASSUMING the previous turn's prompt is cached: it is rebuilt as the same mode's window over
the history before the newest question, with that question as its current message, sent
60 s before, under today's summary (if the stored anchor was chosen under another fold mark,
the summary changed since, and nothing is assumed cached). Reads the history table named by
HISTORY_TABLE with the worker's settings; no content unless --show-content."""


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    window = commands.add_parser(
        "window",
        help="what the next turn would send for a conversation (reads only)",
        description=HELP,
    )
    add_conversation(window)
    window.add_argument(
        "--mode",
        choices=("sliding", "cache-aligned"),
        help="the window's mode (default: HISTORY_WINDOW_MODE)",
    )
    window.add_argument(
        "--show-content", action="store_true", help="print each message's text and the summary"
    )
    window.add_argument(
        "--system-prompt-tokens",
        type=int,
        default=0,
        help="the model stage's own system prompt, placed first (default 0)",
    )
    window.set_defaults(execute=partial(run_operator, run_window))


async def run_window(args: argparse.Namespace) -> int:
    from worker.adapters.dynamodb import DynamoHistoryStore
    from worker.app.runtime import aws_clients
    from worker.caching.bill_model import CacheRules
    from worker.cli.window_report import describe_next_turn
    from worker.settings import load_settings

    overrides = {"history_window_mode": args.mode} if args.mode else {}
    settings = load_settings(**overrides)
    async with aws_clients(pool_size=2) as clients:
        store = DynamoHistoryStore(clients.dynamodb, settings.history_table)
        lines = await describe_next_turn(
            store,
            args.conversation,
            settings,
            show_content=args.show_content,
            rules=CacheRules(system_prompt_tokens=max(0, args.system_prompt_tokens)),
        )
    print("\n".join(lines))
    return 0
