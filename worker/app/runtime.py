"""Wiring: aioboto3 clients, adapters, the stage and the consumer, for one worker process."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import aioboto3
from aiobotocore.config import AioConfig
from opentelemetry.trace import TracerProvider

from worker.adapters.dynamodb import DynamoHistoryStore
from worker.adapters.ledger import DynamoCommandLedger
from worker.adapters.legacy_ledger import LegacyRecords
from worker.adapters.probes import TableProbe
from worker.adapters.s3 import S3ObjectStore
from worker.adapters.sqs import QueueDescription, SqsQueue
from worker.app.batched_turns import batched_turns
from worker.app.startup import resource_checks, run_checks, settle_heap
from worker.consumer.loop import Consumer
from worker.logs import get_logger
from worker.ports import CommandLedger, MessageSender
from worker.settings import Settings
from worker.telemetry.hooks import Telemetry
from worker.telemetry.liveness import HealthFile, Liveness
from worker.telemetry.metrics import (
    LIVENESS_FAILURES,
    NO_METRICS,
    QUEUE_DIMENSION,
    SERVICE,
    SERVICE_DIMENSION,
    EmfFlusher,
    MetricsBook,
)
from worker.telemetry.tracing import get_tracer
from worker.timing import LoopClock
from worker.turn.payloads import OffloadingSender, PayloadKind
from worker.turn.stage import ConverseStage, History

if TYPE_CHECKING:  # the stubs are a dev dependency: nothing of them runs
    from types_aiobotocore_dynamodb import DynamoDBClient
    from types_aiobotocore_s3 import S3Client
    from types_aiobotocore_sqs import SQSClient

log = get_logger()


#: botocore's retries, for every call but the receive: standard mode (adaptive's client-side
#: rate limiter would also delay the lease extensions and deletes, which share the client),
#: four attempts in all. Spelled ``total_max_attempts``, which counts the first attempt:
#: botocore reads ``max_attempts`` as retries (docs/RELIABILITY.md, "botocore's retries").
RETRIES = {"mode": "standard", "total_max_attempts": 4}
#: The receive's: one attempt. A failed receive is backed off by the receive loop, and a
#: retried long poll could outlive the stop's "wait + 2 s" bound.
RECEIVE_RETRIES = {"mode": "standard", "total_max_attempts": 1}
#: The start-up checks': one attempt each, and short timeouts, so that several attempts fit
#: in STARTUP_TIMEOUT_SECONDS (:mod:`worker.app.startup` retries them).
CHECKING = AioConfig(
    retries={"mode": "standard", "total_max_attempts": 1},
    connect_timeout=2,
    read_timeout=5,
    max_pool_connections=10,
)


@dataclass(frozen=True, slots=True)
class Clients:
    sqs: SQSClient
    dynamodb: DynamoDBClient
    s3: S3Client
    #: The converse queue's receives (no retries); the ``sqs`` client if None.
    sqs_receive: SQSClient | None = None
    #: The start-up checks' clients (``CHECKING``); these clients themselves if None.
    checking: Clients | None = None


@asynccontextmanager
async def aws_clients(pool_size: int = 50) -> AsyncIterator[Clients]:
    """One client per service for the whole process (endpoint and region from boto's env).

    botocore's client-side parameter validation is off: every request here is built by
    the adapters' builders, typed with the stubs' TypedDicts (mypy strict checks each), and
    the services validate it again anyway; a refusal from either side ends the same way
    (``StoreUnavailable``, retried). Validation walks each request against the service
    model on the worker's CPU, on every call of every command: a measurable share of the
    worker's own CPU per command, not noise (the figures and the command that measures
    them: docs/benchmarks/defaults.md, "Client-side parameter validation").
    """
    config = AioConfig(
        max_pool_connections=pool_size,
        retries=RETRIES,
        connect_timeout=5,
        read_timeout=30,  # above the 20 s long poll
        parameter_validation=False,
    )
    session = aioboto3.Session()
    async with AsyncExitStack() as stack:
        receive = config.merge(AioConfig(retries=RECEIVE_RETRIES, max_pool_connections=10))
        checking = config.merge(CHECKING)

        async def client(service: Literal["sqs", "dynamodb", "s3"], config: AioConfig) -> Any:
            return await stack.enter_async_context(session.client(service, config=config))

        yield Clients(
            sqs=await client("sqs", config),
            dynamodb=await client("dynamodb", config),
            s3=await client("s3", config),
            sqs_receive=await client("sqs", receive),
            checking=Clients(
                sqs=await client("sqs", checking),
                dynamodb=await client("dynamodb", checking),
                s3=await client("s3", checking),
            ),
        )


def offloading(
    queue: MessageSender, clients: Clients, settings: Settings, kind: PayloadKind
) -> OffloadingSender:
    """``queue`` with bodies over the inline limit moved to the payload bucket, filed as
    ``kind``."""
    return OffloadingSender(
        queue,
        S3ObjectStore(clients.s3),
        bucket=settings.payload_bucket,
        inline_max_bytes=settings.payload_inline_max_bytes,
        kind=kind,
    )


def command_ledger(dynamodb: DynamoDBClient, settings: Settings) -> DynamoCommandLedger:
    """The ledger in LEDGER_TABLE; with LEDGER_LEGACY_READS, reading the previous release's
    records in the history table too."""
    legacy = (
        LegacyRecords(dynamodb, settings.history_table) if settings.ledger_legacy_reads else None
    )
    return DynamoCommandLedger(dynamodb, settings.ledger_table, legacy=legacy)


def build_stage(
    clients: Clients,
    settings: Settings,
    *,
    visibility_timeout: int,
    model_queue: MessageSender | None = None,
    ledger: CommandLedger | None = None,
    history: History | None = None,
) -> ConverseStage:
    """The stage over the real adapters; command leases last one visibility timeout."""
    return ConverseStage(
        history=history or DynamoHistoryStore(clients.dynamodb, settings.history_table),
        ledger=ledger or command_ledger(clients.dynamodb, settings),
        model_queue=offloading(
            model_queue or SqsQueue(clients.sqs, settings.model_queue_url),
            clients,
            settings,
            PayloadKind.PROMPT,
        ),
        compaction_queue=offloading(
            SqsQueue(clients.sqs, settings.compaction_queue_url),
            clients,
            settings,
            PayloadKind.FOLD,
        ),
        objects=S3ObjectStore(clients.s3),
        settings=settings,
        lease=timedelta(seconds=visibility_timeout),
    )


@dataclass(frozen=True, slots=True)
class Operations:
    telemetry: Telemetry
    liveness: Liveness


def queue_name(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


@asynccontextmanager
async def operating(
    settings: Settings, tracer_provider: TracerProvider | None = None
) -> AsyncIterator[Operations]:
    """The liveness file and the metrics flusher, for as long as the block runs; leaving it
    writes the last metrics (a worker that scales in loses no counts) and removes the file."""
    clock = LoopClock()
    liveness = Liveness(clock, settings.health_max_silence_seconds)
    queue = queue_name(settings.converse_queue_url)
    done = asyncio.Event()
    tasks = []
    if settings.health_file:
        writer = HealthFile(Path(settings.health_file), liveness, clock=clock)
        tasks.append(asyncio.create_task(writer.run(done), name="health-file"))
    book = MetricsBook() if settings.metrics == "emf" else None
    telemetry = Telemetry(
        metrics=book or NO_METRICS,
        tracer=get_tracer(tracer_provider),
        clock=clock,
        queue_name=queue,
    )

    def sample(book: MetricsBook) -> None:  # the states each interval writes as it ends
        book.count(LIVENESS_FAILURES, int(bool(liveness.failing())))
        telemetry.sample(book)

    if book is not None:
        flusher = EmfFlusher(
            book,
            dimensions={SERVICE_DIMENSION: SERVICE, QUEUE_DIMENSION: queue},
            interval=settings.metrics_flush_seconds,
            clock=clock,
            before_flush=sample,
        )
        tasks.append(asyncio.create_task(flusher.run(done), name="metrics-flush"))
    try:
        yield Operations(telemetry, liveness)
    finally:
        done.set()
        await asyncio.gather(*tasks)


async def checked_resources(
    clients: Clients, settings: Settings, stopping: asyncio.Event
) -> QueueDescription | None:
    """Every resource the stage uses checked (:mod:`worker.app.startup`): the converse queue's
    description, None if stopped first; raises ConfigError naming what it may not use."""
    checking = clients.checking or clients
    checks = resource_checks(settings, sqs=checking.sqs, dynamodb=checking.dynamodb, s3=checking.s3)
    results = await run_checks(
        checks, bound=settings.startup_timeout_seconds, stopping=stopping, clock=LoopClock()
    )
    if results is None:
        return None
    description = results[0]
    assert isinstance(description, QueueDescription)  # the converse queue's check comes first
    return description


async def run_worker(
    settings: Settings, stopping: asyncio.Event, *, tracer_provider: TracerProvider | None = None
) -> None:
    """Run one consumer until ``stopping`` is set; raises ConfigError on a bad deployment.
    Spans go to ``tracer_provider``, or to the global one (a no-op unless an SDK set it)."""
    async with (
        aws_clients(pool_size=max(10, settings.worker_concurrency + 10)) as clients,
        operating(settings, tracer_provider) as ops,
    ):
        if settings.model_id is not None and settings.known_model is None:
            log.warning(
                "clerk.converse_model_unknown",
                model_id=settings.model_id,
                min_tokens=settings.cache_min_tokens,
                offers_1h=settings.cache_offers_1h,
                context_tokens=settings.model_context_tokens,
            )
        description = await checked_resources(clients, settings, stopping)
        if description is None or description.dead_letter is None:
            return
        converse = SqsQueue(
            clients.sqs, settings.converse_queue_url, receive_client=clients.sqs_receive
        )
        dead_letter = SqsQueue(clients.sqs, description.dead_letter.url)
        visibility = description.visibility_timeout
        # Prompts from concurrent turns leave in SendMessageBatch calls, their done marks in
        # BatchWriteItem calls.
        batched = batched_turns(
            clients.sqs,
            command_ledger(clients.dynamodb, settings),
            model_queue_url=settings.model_queue_url,
        )
        stage = build_stage(
            clients,
            settings,
            visibility_timeout=visibility,
            model_queue=batched.model_queue,
            ledger=batched.ledger,
        )
        consumer = Consumer(
            source=batched.source(converse),
            stage=batched.stage(stage),
            dead_letters=offloading(dead_letter, clients, settings, PayloadKind.DEAD_LETTER),
            policy=settings.consumer_policy(
                visibility_timeout=visibility, max_receive_count=description.max_receive_count
            ),
            telemetry=ops.telemetry,
            liveness=ops.liveness,
            probes={"dynamodb": TableProbe(clients.dynamodb, settings.history_table)},
        )
        settle_heap()
        try:
            await consumer.run(stopping)
        finally:
            await batched.close()
