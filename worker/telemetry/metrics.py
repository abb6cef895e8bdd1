"""Metrics: what the turns did, counted per flush interval and written to stdout as
CloudWatch Embedded Metric Format (EMF), beside the JSON logs.

ECS ``awslogs``, Fluent Bit or the CloudWatch agent carry stdout to CloudWatch Logs, which
turns each EMF document into metrics: no sidecar, no API call from the worker.

What each metric is, its unit, when it is written and the dimension it is also split by
are declared in :mod:`worker.telemetry.metric_names` (rendered as
``docs/reference/metrics.md``); this module writes them as declared.

- One document per flush interval and dimension set, not one per command: counters are
  summed over the interval (the ``counter`` kind written each interval, zeros included, so
  an alarm on ``> 0`` always has data; ``counter_when_any`` only when there were any); a
  metric split by a dimension (a low-cardinality kind, never free text) is written in one
  more document per value seen.
- Distributions (latency, age, window sizes) are their raw values. The EMF specification
  allows a metric value to be a number or an array of at most 100 numbers, and nothing
  else: there is no Values/Counts form in it (AWS's own OpenTelemetry exporters write one,
  undocumented), and aws-embedded-metrics, which writes the envelope here, only writes
  arrays. So counts and percentiles stay exact: when an interval saw more than 100 values
  of a distribution, the library continues them in further documents of at most 100
  values, which carry only those distributions.
- Dimensions are ``Service`` and ``Queue`` (the converse queue's name): never a
  conversation or command id.

The envelope is written by aws-embedded-metrics (AWS's EMF library): its
:class:`MetricsContext` and :class:`LogSerializer` (validation, the ``_aws`` metadata,
splitting at 100 values and 100 metrics). Its ``MetricsLogger`` is not used: it resolves
its environment on first flush by probing the EC2 metadata endpoint and the CloudWatch
agent's socket, and the stream is injected so tests read what was written.
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol, TextIO

from aws_embedded_metrics.logger.metrics_context import MetricsContext
from aws_embedded_metrics.serializers.log_serializer import LogSerializer

from worker.logs import log_failure
from worker.telemetry.metric_names import (
    AGE_AT_RECEIVE,
    BILLS_DROPPED,
    BREAKERS_OPEN,
    BY_NAME,
    CACHE_CHECKS,
    CACHE_MISSES,
    CACHE_POINT_TTLS,
    CAUSE_DIMENSION,
    COMMANDS_FAILED,
    COMMANDS_REJECTED,
    COMMANDS_RETRIED,
    COMMANDS_SERVED,
    COUNTERS,
    DEPENDENCY_FAILING,
    DEPENDENCY_RECOVERED,
    DISTRIBUTIONS,
    DUPLICATES_SKIPPED,
    EXPECTED_CACHE_READ_TOKENS,
    FOLD_GAP_MESSAGES,
    FOLD_REQUESTS_SENT,
    LIVENESS_FAILURES,
    NAMESPACE,
    OBSERVED_BILLED_INPUT_UNITS,
    OBSERVED_CACHE_READ_TOKENS,
    PAYLOADS_OFFLOADED,
    QUEUE_DIMENSION,
    REASON_DIMENSION,
    SERVICE,
    SERVICE_DIMENSION,
    SPLIT_BY,
    TTL_DIMENSION,
    TURN_LATENCY,
    TURNS_HELD,
    WINDOW_DROPPED,
    WINDOW_KEPT,
    WINDOW_LEFT_OUT,
    WINDOW_REANCHORS,
    WINDOW_TRIMMED,
)
from worker.timing import Clock, sleep_unless

# The declaration's names are re-exported: the stage and its tests record by them.
__all__ = [
    "AGE_AT_RECEIVE",
    "BILLS_DROPPED",
    "BREAKERS_OPEN",
    "CACHE_CHECKS",
    "CACHE_MISSES",
    "CACHE_POINT_TTLS",
    "CAUSE_DIMENSION",
    "COMMANDS_FAILED",
    "COMMANDS_REJECTED",
    "COMMANDS_RETRIED",
    "COMMANDS_SERVED",
    "COUNTERS",
    "DEPENDENCY_FAILING",
    "DEPENDENCY_RECOVERED",
    "DISTRIBUTIONS",
    "DUPLICATES_SKIPPED",
    "EXPECTED_CACHE_READ_TOKENS",
    "FOLD_GAP_MESSAGES",
    "FOLD_REQUESTS_SENT",
    "LIVENESS_FAILURES",
    "MAX_HELD_DOCUMENTS",
    "NAMESPACE",
    "NO_METRICS",
    "OBSERVED_BILLED_INPUT_UNITS",
    "OBSERVED_CACHE_READ_TOKENS",
    "PAYLOADS_OFFLOADED",
    "QUEUE_DIMENSION",
    "REASON_DIMENSION",
    "SERVICE",
    "SERVICE_DIMENSION",
    "TTL_DIMENSION",
    "TURNS_HELD",
    "TURN_LATENCY",
    "WINDOW_DROPPED",
    "WINDOW_KEPT",
    "WINDOW_LEFT_OUT",
    "WINDOW_REANCHORS",
    "WINDOW_TRIMMED",
    "EmfFlusher",
    "MetricsBook",
    "NoMetrics",
    "Recorder",
    "Tally",
    "emf_documents",
]


class Recorder(Protocol):
    def count(self, name: str, value: int = 1) -> None: ...

    def observe(self, name: str, value: float) -> None: ...

    def rejected(self, kind: str) -> None:
        """One command rejected, of this kind (counted in all and by kind)."""
        ...

    def reanchored(self, reason: str) -> None:
        """The cache-aligned window moved its start, for this reason (in all and by reason)."""
        ...

    def ttl_chosen(self, ttl: str, points: int) -> None:
        """``points`` cache points of a view got this TTL (``none``: left out)."""
        ...

    def cache_missed(self, cause: str) -> None:
        """An observed answer read less than expected, for this cause (in all and by cause)."""
        ...


class NoMetrics:
    """``METRICS=off``: every record is dropped."""

    def count(self, name: str, value: int = 1) -> None:
        pass

    def observe(self, name: str, value: float) -> None:
        pass

    def rejected(self, kind: str) -> None:
        pass

    def reanchored(self, reason: str) -> None:
        pass

    def ttl_chosen(self, ttl: str, points: int) -> None:
        pass

    def cache_missed(self, cause: str) -> None:
        pass


NO_METRICS = NoMetrics()


@dataclass(frozen=True, slots=True)
class Tally:
    counts: Counter[str]
    values: Mapping[str, list[float]]
    rejected: Counter[str]
    reanchored: Counter[str] = field(default_factory=Counter)
    ttls: Counter[str] = field(default_factory=Counter)
    misses: Counter[str] = field(default_factory=Counter)


class MetricsBook:
    """What this process recorded since the last :meth:`take`: plain in-memory sums and
    lists, so recording costs a dict update on the turn's path."""

    def __init__(self) -> None:
        self._tally = _empty()

    def count(self, name: str, value: int = 1) -> None:
        self._tally.counts[name] += value

    def observe(self, name: str, value: float) -> None:
        self._tally.values[name].append(value)

    def rejected(self, kind: str) -> None:
        self._tally.counts[COMMANDS_REJECTED] += 1
        self._tally.rejected[kind] += 1

    def reanchored(self, reason: str) -> None:
        self._tally.reanchored[reason] += 1

    def ttl_chosen(self, ttl: str, points: int) -> None:
        self._tally.ttls[ttl] += points

    def cache_missed(self, cause: str) -> None:
        self._tally.misses[cause] += 1

    def take(self) -> Tally:
        """Everything recorded so far; the book starts again empty."""
        tally, self._tally = self._tally, _empty()
        return tally


def _empty() -> Tally:
    return Tally(Counter(), defaultdict(list), Counter())


def emf_documents(tally: Tally, dimensions: Mapping[str, str], timestamp: datetime) -> list[str]:
    """The EMF documents (one JSON object each) of one interval."""
    context = _context(dimensions, timestamp)
    for name, unit in COUNTERS.items():
        context.put_metric(name, tally.counts.get(name, 0), unit)
    for name, metric in BY_NAME.items():  # the counters written only when there were any
        if metric.kind == "counter_when_any" and metric.per is None and tally.counts.get(name):
            context.put_metric(name, tally.counts[name], metric.unit)
    for name, unit in DISTRIBUTIONS.items():
        values = tally.values.get(name)
        if not values:
            continue
        # The library validates one value per call, a cost paid on every value of every
        # interval (docs/benchmarks/defaults.md); ours are all computed the same way, so
        # the first is validated and the rest checked finite in bulk.
        if not all(map(math.isfinite, values)):
            raise ValueError(f"{name}: a value is not finite")
        context.put_metric(name, values[0], unit)
        context.metrics[name].values.extend(values[1:])
    # Recorded by the book's own methods (rejected, reanchored, …), each metric by value.
    by_value = {
        COMMANDS_REJECTED: tally.rejected,
        WINDOW_REANCHORS: tally.reanchored,
        CACHE_MISSES: tally.misses,
        CACHE_POINT_TTLS: tally.ttls,
    }
    for name, counts in by_value.items():
        metric = BY_NAME[name]
        if metric.kind == "counter_when_any" and metric.total and counts:
            context.put_metric(name, sum(counts.values()), metric.unit)
    documents = LogSerializer.serialize(context)
    for name, counts in by_value.items():
        dimension, unit = SPLIT_BY[name].name, BY_NAME[name].unit
        for value, count in sorted(counts.items()):
            one = _context({**dimensions, dimension: value}, timestamp)
            one.put_metric(name, count, unit)
            documents += LogSerializer.serialize(one)
    return documents


def _context(dimensions: Mapping[str, str], timestamp: datetime) -> MetricsContext:
    context = MetricsContext(NAMESPACE, {}, [dict(dimensions)], {})
    context.set_timestamp(timestamp)
    return context


#: Documents a flusher keeps while stdout refuses them: about a day of one-minute
#: intervals with a few rejection kinds each.
MAX_HELD_DOCUMENTS = 5_000


class EmfFlusher:
    """Writes the book's interval every ``interval`` seconds, and once more when stopped:
    a worker that scales in loses no counts."""

    def __init__(
        self,
        book: MetricsBook,
        *,
        dimensions: Mapping[str, str],
        interval: float,
        clock: Clock,
        wall: Callable[[], float] = time.time,
        out: TextIO | None = None,
        before_flush: Callable[[MetricsBook], None] = lambda _: None,
    ) -> None:
        self._book = book
        self._dimensions = dict(dimensions)
        self._interval = interval
        self._clock = clock
        self._wall = wall
        self._out = out
        self._before_flush = before_flush
        self._started = wall()
        self._held: list[str] = []

    async def run(self, done: asyncio.Event) -> None:
        """Flush every interval until ``done`` is set, then flush what is left."""
        while not await sleep_unless(self._clock, done, self._interval):
            self.flush()
        self.flush()

    def flush(self) -> None:
        """Write the interval now ending, stamped with its start. A failure is logged by
        type; the loop and the turns never see it. Documents that could not be written
        (stdout refused them) are held and written first at the next flush, up to
        ``MAX_HELD_DOCUMENTS``; beyond that the oldest go, and the log says how many."""
        try:
            self._before_flush(self._book)
            started, self._started = self._started, self._wall()
            self._held += emf_documents(
                self._book.take(), self._dimensions, datetime.fromtimestamp(started, UTC)
            )
        except Exception as exc:
            log_failure("clerk.converse_metrics_flush_failed", exc)
        if not self._held:
            return
        try:
            out = self._out or sys.stdout
            out.write("".join(f"{document}\n" for document in self._held))
            out.flush()
        except Exception as exc:
            over = len(self._held) - MAX_HELD_DOCUMENTS
            if over > 0:
                del self._held[:over]
            log_failure(
                "clerk.converse_metrics_flush_failed",
                exc,
                held_documents=len(self._held),
                dropped_documents=max(over, 0),
            )
        else:
            self._held.clear()
