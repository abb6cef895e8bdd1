"""``worker bootstrap``: create the contract's queues, table and bucket on the configured
endpoint where they are missing (:mod:`worker.app.resources` defines them), and print the
``NAME=value`` lines that point the worker at them."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from worker.app.resources import Resources


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    boot = commands.add_parser(
        "bootstrap", help="create the queues, table and bucket on the configured endpoint"
    )
    boot.add_argument("--prefix", default="mira", help="resource name prefix (default: mira)")
    boot.add_argument("--fifo-model-queue", action="store_true", help="make the model queue FIFO")
    boot.set_defaults(execute=run_bootstrap)


def run_bootstrap(args: argparse.Namespace) -> int:
    import asyncio

    from worker.app.resources import Resources

    resources = Resources(prefix=args.prefix, fifo_model_queue=args.fifo_model_queue)
    for name, value in asyncio.run(create(resources)).items():
        print(f"{name}={value}")
    return 0


async def create(resources: Resources) -> dict[str, str]:
    """Create what is missing; returns the settings naming each resource."""
    from worker.app.resources import create_resources
    from worker.app.runtime import aws_clients

    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    async with aws_clients() as clients:
        return await create_resources(
            clients.sqs, clients.dynamodb, clients.s3, resources, region=region
        )
