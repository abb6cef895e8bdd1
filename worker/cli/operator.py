"""What the operator's commands (``worker send``, ``worker dlq``, ``worker window``) share:
the converse queue's URL, and running a command's coroutine with a store's failure reported
in one line.

``send`` and ``dlq`` need only ``CONVERSE_QUEUE_URL`` (the dead-letter queue is found from
its redrive policy) and boto's own endpoint, region and credentials; ``window`` reads the
worker's own settings (the history table and the window's limits). Imports nothing heavy:
the commands' parsers import it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from worker.errors import ConfigError, StoreUnavailable

#: An operator command's work: the parsed arguments in, the exit code out.
OperatorCommand = Callable[[argparse.Namespace], Coroutine[Any, Any, int]]


def converse_queue_url() -> str:
    url = os.environ.get("CONVERSE_QUEUE_URL", "")
    if not url:
        raise ConfigError("CONVERSE_QUEUE_URL: Field required")
    return url


def run_operator(command: OperatorCommand, args: argparse.Namespace) -> int:
    """Run ``command``; a store that failed is one line on stderr and exit 1."""
    import asyncio  # here: building the parser should not pay for it

    try:
        return asyncio.run(command(args))
    except StoreUnavailable as exc:  # names the operation and code, never content
        print(f"worker: {exc}", file=sys.stderr)
        return 1
