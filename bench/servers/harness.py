"""The local AWS the benchmarks run against: a moto server on 127.0.0.1 (SQS, S3 and, by
default, DynamoDB), optionally dynalite for DynamoDB, the contract's resources created
by ``worker bootstrap``'s own code, and the real worker running in the same event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import structlog

from bench.servers.servers import LocalDynamoDB
from localaws.dynalite import running_dynalite
from localaws.endpoints import REGION, aws_environ
from localaws.moto import threaded_moto
from worker.app.resources import Resources, create_resources
from worker.app.runtime import Clients, aws_clients, run_worker
from worker.settings import Settings


@dataclass
class LocalAws:
    moto: str
    dynamodb: str

    def environ(self) -> dict[str, str]:
        return aws_environ(self.moto, dynamodb=self.dynamodb)


def quiet_worker_logs() -> None:
    """Only the worker's warnings: a benchmark prints its own progress."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


@contextlib.contextmanager
def local_aws(*, dynalite: bool = False) -> Iterator[LocalAws]:
    """moto (and dynalite) on loopback, with this process's AWS variables pointing there."""
    quiet_worker_logs()
    saved = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    try:
        with threaded_moto() as moto, contextlib.ExitStack() as stack:
            dynamodb = stack.enter_context(running_dynalite()) if dynalite else moto
            aws = LocalAws(moto=moto, dynamodb=dynamodb)
            for name in saved:
                del os.environ[name]
            os.environ.update(aws.environ())
            yield aws
    finally:
        for name in [k for k in os.environ if k.startswith("AWS_")]:
            del os.environ[name]
        os.environ.update(saved)


async def bootstrap(clients: Clients, resources: Resources) -> dict[str, str]:
    dynamodb = clients.dynamodb
    if os.environ.get("AWS_ENDPOINT_URL_DYNAMODB"):  # dynalite: no UpdateTimeToLive there
        dynamodb = LocalDynamoDB(dynamodb)
    return await create_resources(clients.sqs, dynamodb, clients.s3, resources, region=REGION)


def settings_for(env: dict[str, str], **overrides: Any) -> Settings:
    values: dict[str, Any] = {name.lower(): value for name, value in env.items()}
    values.update(receive_wait_seconds=1, shutdown_grace_seconds=5.0)
    values.update(overrides)
    return Settings(**values)


@contextlib.asynccontextmanager
async def worker_running(settings: Settings) -> AsyncIterator[None]:
    stopping = asyncio.Event()
    task = asyncio.create_task(run_worker(settings, stopping))
    try:
        yield
    finally:
        stopping.set()
        await asyncio.wait_for(task, 60)


@contextlib.asynccontextmanager
async def clients() -> AsyncIterator[Clients]:
    async with aws_clients(pool_size=64) as opened:
        yield opened
