"""The entry points: ``worker run`` (the consumer), ``worker bootstrap`` (create the
resources), ``worker health``, ``worker send``, ``worker dlq``, ``worker window``,
``worker bill`` and ``worker erase``.

Owns: the command line, one small module per command (:mod:`~worker.cli.run`,
:mod:`~worker.cli.bootstrap`, :mod:`~worker.cli.send`, :mod:`~worker.cli.health`,
:mod:`~worker.cli.dlq`, :mod:`~worker.cli.window`, :mod:`~worker.cli.bill`,
:mod:`~worker.cli.erase`), each with its ``add_parser`` and the function that runs it; what
they run where it is more than a few lines (the DLQ operations, the window report, the bill
report, the erasure and its dead-letter scan); and this module, which assembles
the parser and dispatches. The demo that ``make run`` runs plays the other stages too, so it
lives with them in ``localaws`` (``python -m localaws.demo``), outside the package.

May import anything in :mod:`worker`; nothing in :mod:`worker` imports it (checked by
import-linter). A command imports what it needs when it runs, so building the parser, and
``worker health``, stay cheap.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from worker.cli import bill, bootstrap, dlq, erase, health, run, send, window
from worker.errors import ConfigError

EXIT_CONFIG = 2


def build_parser() -> argparse.ArgumentParser:
    """The ``worker`` command line; each command's parser sets ``execute``, its function."""
    parser = argparse.ArgumentParser(prog="worker", description="Mira's converse stage.")
    commands = parser.add_subparsers(dest="command", required=True)
    run.add_parser(commands)
    bootstrap.add_parser(commands)
    send.add_parser(commands)
    health.add_parser(commands)
    dlq.add_parser(commands)
    window.add_parser(commands)
    bill.add_parser(commands)
    erase.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    execute: Callable[[argparse.Namespace], int] = args.execute
    try:
        return execute(args)
    except ConfigError as exc:
        print(f"worker: {exc}", file=sys.stderr)
        return EXIT_CONFIG


if __name__ == "__main__":
    sys.exit(main())
