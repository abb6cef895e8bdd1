"""``worker run``: consume converse commands until SIGTERM or SIGINT, then drain and exit 0."""

from __future__ import annotations

import argparse


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = commands.add_parser("run", help="consume converse commands until SIGTERM/SIGINT")
    run.set_defaults(execute=run_consumer)


def run_consumer(args: argparse.Namespace) -> int:
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
