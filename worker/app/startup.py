"""Start only when able: before it receives anything, the worker checks every resource it
uses, side by side, within ``STARTUP_TIMEOUT_SECONDS``.

Each :class:`Check` names its resource by the setting that names it, and proves with the
calls of :mod:`worker.adapters.reachability` (the converse queue: its RedrivePolicy and its
dead-letter queue) that the resource is there and that the role may use it. A passing failure
(throttling, 5xx, a connection error) is tried again with a jittered backoff; a refusal (a
queue, table or bucket that does not exist, a denied action, refused credentials) ends the
start-up at once; so does the end of the bound. Either way :class:`ConfigError` says, in one
line, which resources and why; ``worker run`` prints it and exits 2. ``worker health`` fails
for as long as the checks run (:mod:`worker.telemetry.liveness`), and a stop ends them at once.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, TypeVar

from worker.adapters.reachability import (
    check_bucket,
    check_history_table,
    check_ledger_table,
    check_queue,
    refusal,
)
from worker.adapters.sqs import QueueDescription, SqsQueue, dead_letter_target, max_receive_count
from worker.errors import ConfigError, StoreUnavailable
from worker.logs import get_logger
from worker.settings import Settings
from worker.timing import Backoff, Clock, Jitter, equal_jitter

if TYPE_CHECKING:  # the stubs are a dev dependency: nothing of them runs
    from types_aiobotocore_dynamodb import DynamoDBClient
    from types_aiobotocore_s3 import S3Client
    from types_aiobotocore_sqs import SQSClient

log = get_logger()

#: Between the attempts of one check: 0.5 s, 1 s, 2 s, then 4 s, each drawn in its upper half.
STARTUP_BACKOFF = Backoff(base=0.5, cap=4.0)
CONVERSE = "CONVERSE_QUEUE_URL"

C = TypeVar("C")


@dataclass(frozen=True, slots=True)
class Check:
    """One resource: the setting that names it, its value, and the call that checks it (which
    raises :class:`StoreUnavailable` when it fails, :class:`ConfigError` for a line of its own)."""

    setting: str
    resource: str
    call: Callable[[], Awaitable[object]]

    @property
    def label(self) -> str:
        return f"{self.setting} ({self.resource})"


async def run_checks(
    checks: Sequence[Check],
    *,
    bound: float,
    stopping: asyncio.Event,
    clock: Clock,
    jitter: Jitter = equal_jitter,
) -> list[object] | None:
    """Every check side by side; their results in order once all passed, None if stopped first.

    Raises :class:`ConfigError` at the first refusal (the other checks cancelled), naming each
    check refused by then; or once ``bound`` seconds have passed, naming each check still
    unanswered and its last failure.
    """
    progress = [_Progress() for _ in checks]
    tasks = [
        asyncio.create_task(
            _until_answered(check, seen, clock, jitter), name=f"check:{check.setting}"
        )
        for check, seen in zip(checks, progress, strict=True)
    ]
    stopped: asyncio.Future[object] = asyncio.ensure_future(stopping.wait())
    try:
        async with clock.timeout(bound):
            pending: set[asyncio.Future[object]] = set(tasks)
            while pending and not stopping.is_set():
                _, pending = await asyncio.wait(
                    pending | {stopped}, return_when=asyncio.FIRST_COMPLETED
                )
                pending.discard(stopped)
                _raise_refusals(tasks)
    except TimeoutError:
        raise ConfigError(_unanswered(checks, progress, bound)) from None
    finally:
        for future in (*tasks, stopped):
            future.cancel()
        await asyncio.gather(*tasks, stopped, return_exceptions=True)
    if stopping.is_set():
        return None
    return [task.result() for task in tasks]


@dataclass(slots=True)
class _Progress:
    attempts: int = 0
    last: StoreUnavailable | None = None
    passed: bool = False


async def _until_answered(check: Check, seen: _Progress, clock: Clock, jitter: Jitter) -> object:
    fields = {"setting": check.setting, "resource": check.resource}
    while True:
        seen.attempts += 1
        try:
            result = await check.call()
        except ConfigError as exc:
            log.error("clerk.converse_resource_refused", **fields, reason=str(exc))
            raise
        except StoreUnavailable as exc:
            if exc.kind == "refused":
                reason = refusal(exc)
                log.error("clerk.converse_resource_refused", **fields, reason=reason)
                raise ConfigError(f"{check.label}: {reason}") from None
            seen.last = exc
            delay = STARTUP_BACKOFF.delay(seen.attempts, jitter)
            log.warning(
                "clerk.converse_resource_check_failed",
                **fields,
                error=str(exc),
                retry_in=round(delay, 3),
            )
            await clock.sleep(delay)
            continue
        seen.passed = True
        log.info("clerk.converse_resource_checked", **fields, attempts=seen.attempts)
        return result


def _raise_refusals(tasks: Sequence[asyncio.Task[object]]) -> None:
    """Raise what the checks that ended by now raised: their refusals in one line, or a
    defect as it is."""
    failed = [task.exception() for task in tasks if task.done() and not task.cancelled()]
    errors = [exc for exc in failed if exc is not None]
    for exc in errors:
        if not isinstance(exc, ConfigError):
            raise exc
    if errors:
        raise ConfigError("; ".join(str(exc) for exc in errors))


def _unanswered(checks: Sequence[Check], progress: Sequence[_Progress], bound: float) -> str:
    parts = []
    for check, seen in zip(checks, progress, strict=True):
        if seen.passed:
            continue
        error = str(seen.last) if seen.last is not None else "no answer yet"
        log.error(
            "clerk.converse_resource_unanswered",
            setting=check.setting,
            resource=check.resource,
            error=error,
            attempts=seen.attempts,
        )
        parts.append(f"{check.label}: {error}")
    return (
        f"not every resource answered within STARTUP_TIMEOUT_SECONDS ({bound:g} s): "
        + "; ".join(parts)
    )


async def converse_queue(queue: SqsQueue, settings: Settings) -> QueueDescription:
    """The converse queue's visibility timeout and dead-letter queue, or :class:`ConfigError`
    when it has none, or when the visibility leaves no room for the shutdown grace period."""
    visibility, policy = await queue.redrive()
    if not policy:
        raise ConfigError(
            f"{CONVERSE}: the queue has no RedrivePolicy, so rejected commands would have "
            "nowhere to go; give it a dead-letter queue"
        )
    if settings.shutdown_grace_seconds >= visibility:
        raise ConfigError(
            f"SHUTDOWN_GRACE_SECONDS ({settings.shutdown_grace_seconds:g}) must be below "
            f"the converse queue's VisibilityTimeout ({visibility}): "
            "work still draining must not be delivered to another worker"
        )
    account, name = dead_letter_target(policy)
    try:
        dead_letter = await queue.dead_letter_queue(account, name)
    except StoreUnavailable as exc:
        if exc.kind != "refused":
            raise
        raise ConfigError(
            f"{CONVERSE} ({queue.url}): its dead-letter queue {name} (account {account}): "
            f"{refusal(exc)}"
        ) from None
    return QueueDescription(
        visibility_timeout=visibility,
        dead_letter=dead_letter,
        max_receive_count=max_receive_count(policy),
    )


def resource_checks(
    settings: Settings, *, sqs: SQSClient, dynamodb: DynamoDBClient, s3: S3Client
) -> list[Check]:
    """A check of every resource the settings name: the converse queue first (its result is
    its :class:`QueueDescription`), then the send queues, the tables and the buckets."""
    converse = SqsQueue(sqs, settings.converse_queue_url)
    checks = [
        Check(CONVERSE, converse.url, lambda: converse_queue(converse, settings)),
        _calling("MODEL_QUEUE_URL", settings.model_queue_url, check_queue, sqs),
        _calling("COMPACTION_QUEUE_URL", settings.compaction_queue_url, check_queue, sqs),
        _calling("HISTORY_TABLE", settings.history_table, check_history_table, dynamodb),
        _calling("LEDGER_TABLE", settings.ledger_table, check_ledger_table, dynamodb),
    ]
    buckets = {}
    if settings.payload_bucket:
        buckets[settings.payload_bucket] = "PAYLOAD_BUCKET"
    for bucket in settings.payload_read_buckets:
        buckets.setdefault(bucket, "PAYLOAD_READ_BUCKETS")
    checks += [_calling(setting, bucket, check_bucket, s3) for bucket, setting in buckets.items()]
    return checks


def _calling(
    setting: str, resource: str, check: Callable[[C, str], Awaitable[None]], client: C
) -> Check:
    """The check of ``resource`` that ``check`` makes with ``client``."""
    return Check(setting, resource, partial(check, client, resource))


def settle_heap() -> None:
    """Collect once, then take what start-up built (modules, clients and their service
    models: some 70,000 objects) out of the collector's sight for the life of the process
    (``gc.freeze``). A full collection stops every turn on the loop while it runs: over that
    heap one takes 50 to 75 ms (the benchmark's worker, at start-up: ``gc_long_pauses`` in its
    stats), and it comes again whenever the objects kept since have grown by a quarter of
    the heap; frozen, it walks only those."""
    gc.collect()
    gc.freeze()
