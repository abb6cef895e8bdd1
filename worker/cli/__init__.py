"""The entry points: ``worker run`` (the consumer), ``worker bootstrap`` (create the
resources), ``worker demo``, ``worker health``, ``worker send``, ``worker dlq`` and
``worker window``.

Owns: the command line (this module), the wiring of one worker process
(:mod:`~worker.app.runtime`, :mod:`~worker.app.batched_turns`), the operator's and the DLQ
commands, the demo and its console, and the contract's resources (:mod:`~worker.app.resources`).

May import anything in :mod:`worker`; nothing in :mod:`worker` imports it (checked by
import-linter). Subcommands import what they need when they run, so ``worker health`` stays
cheap.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from worker.cli.arguments import MAX_RATE, MIN_RATE, positive_count, redrive_rate
from worker.errors import ConfigError, StoreUnavailable

if TYPE_CHECKING:
    from worker.app.resources import Resources

EXIT_CONFIG = 2
EXIT_USAGE = 2  # as argparse exits on a bad argument
EXIT_UNHEALTHY = 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="worker", description="Mira's converse stage.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("run", help="consume converse commands until SIGTERM/SIGINT")
    boot = commands.add_parser(
        "bootstrap", help="create the queues, table and bucket on the configured endpoint"
    )
    boot.add_argument("--prefix", default="mira", help="resource name prefix (default: mira)")
    boot.add_argument("--fifo-model-queue", action="store_true", help="make the model queue FIFO")
    demo = commands.add_parser("demo", help="the stage on a local moto server, with a demo matter")
    demo.add_argument("--once", action="store_true", help="stop after the first prompt and fold")
    send = commands.add_parser(
        "send",
        help="send one converse command to CONVERSE_QUEUE_URL (the message read from stdin)",
        description="Send one converse command to CONVERSE_QUEUE_URL. The message is read "
        "from stdin, so privileged text stays out of shell history and ps: "
        "`worker send --conversation matter-1187 < question.txt`, or type it and end with "
        "Ctrl-D. One trailing newline is dropped.",
    )
    send.add_argument("--conversation", required=True, help="the conversation (matter) id")
    send.add_argument("--command-id", help="the idempotency key (default: a new UUID)")
    send.add_argument(
        "message",
        nargs="?",
        default="-",
        help="'-' or absent (the default): read the message from stdin; a message given "
        "here is visible in shell history and ps, kept only for older scripts",
    )
    health = commands.add_parser(
        "health", help="exit 0 if a running worker's loops beat within their bounds (probe)"
    )
    health.add_argument("--file", help="the health file (default: HEALTH_FILE, or its default)")
    dlq = commands.add_parser("dlq", help="the converse queue's dead-letter queue")
    dlq_commands = dlq.add_subparsers(dest="dlq_command", required=True)
    inspect = dlq_commands.add_parser("inspect", help="counts by reason and age; never bodies")
    inspect.add_argument("--ids", action="store_true", help="list each message id too")
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
    from worker.cli.window import add_parser as add_window_parser

    add_window_parser(commands)
    args = parser.parse_args(argv)

    try:
        if args.command == "run":
            return _run()
        if args.command == "health":
            return _health(args.file)
        import asyncio  # here: the probe above should not pay for it

        if args.command == "bootstrap":
            from worker.app.resources import Resources

            resources = Resources(prefix=args.prefix, fifo_model_queue=args.fifo_model_queue)
            for name, value in asyncio.run(_bootstrap(resources)).items():
                print(f"{name}={value}")
            return 0
        if args.command in ("send", "dlq", "window"):
            from worker.cli.operator import read_message, run_operator_command

            if args.command == "send" and args.message == "-":
                try:
                    args.message = read_message(sys.stdin)
                except ValueError as exc:
                    print(f"worker: {exc}", file=sys.stderr)
                    return EXIT_USAGE

            try:
                return asyncio.run(run_operator_command(args))
            except StoreUnavailable as exc:  # names the operation and code, never content
                print(f"worker: {exc}", file=sys.stderr)
                return 1
        from worker.cli.demo import run_demo

        return run_demo(once=args.once)
    except ConfigError as exc:
        print(f"worker: {exc}", file=sys.stderr)
        return EXIT_CONFIG


def _run() -> int:
    import signal

    # First, before the slow imports (aioboto3, the settings): a stop at any moment of
    # start-up ends the worker with 0, as a stop of a running one does.
    stop_requested: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, frame: stop_requested.append(number))

    import asyncio

    from worker.logs import configure_logging
    from worker.settings import load_settings

    settings = load_settings()
    configure_logging(settings.log_format)

    async def consume() -> None:
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stopping.set)
        if stop_requested:
            stopping.set()
        from worker.app.runtime import run_worker

        await run_worker(settings, stopping)

    asyncio.run(consume())
    return 0


def _health(path: str | None) -> int:
    """The liveness probe: reads only the health file, so it needs none of the settings (and
    imports next to nothing: it runs every 30 s on the worker's CPU)."""
    from worker.telemetry.probe import DEFAULT_HEALTH_FILE, check

    healthy, line = check(
        Path(path or os.environ.get("HEALTH_FILE") or DEFAULT_HEALTH_FILE), time.time()
    )
    print(line, file=sys.stdout if healthy else sys.stderr)
    return 0 if healthy else EXIT_UNHEALTHY


async def _bootstrap(resources: Resources) -> dict[str, str]:
    from worker.app.resources import create_resources
    from worker.app.runtime import aws_clients

    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    async with aws_clients() as clients:
        return await create_resources(
            clients.sqs, clients.dynamodb, clients.s3, resources, region=region
        )


if __name__ == "__main__":
    sys.exit(main())
