"""Metrics: what the turns did, counted per flush interval and written to stdout as
CloudWatch Embedded Metric Format (EMF), beside the JSON logs.

ECS ``awslogs``, Fluent Bit or the CloudWatch agent carry stdout to CloudWatch Logs, which
turns each EMF document into metrics: no sidecar, no API call from the worker.

- One document per flush interval and dimension set, not one per command: counters are
  summed over the interval (every counter is written each interval, zeros included, so an
  alarm on ``> 0`` always has data); ``CommandsRejected`` is also written per ``Reason``
  (a low-cardinality kind, never the reason's text) in one more document per kind seen.
  ``WindowReanchors`` (the cache-aligned window moved its start) is written in the
  intervals that had any, in all and per ``Reason`` (``first_turn``, ``fold_moved``,
  ``overflow``, ``invalid``) the same way: the default mode never writes it.
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
from worker.timing import Clock, sleep_unless

NAMESPACE = "Mira/ConverseStage"
SERVICE = "converse-stage"
SERVICE_DIMENSION = "Service"
QUEUE_DIMENSION = "Queue"
REASON_DIMENSION = "Reason"

COMMANDS_SERVED = "CommandsServed"
COMMANDS_REJECTED = "CommandsRejected"
COMMANDS_RETRIED = "CommandsRetried"
DUPLICATES_SKIPPED = "DuplicatesSkipped"
FOLD_GAP_MESSAGES = "FoldGapMessages"
FOLD_REQUESTS_SENT = "FoldRequestsSent"
PAYLOADS_OFFLOADED = "PayloadsOffloaded"
LIVENESS_FAILURES = "LivenessFailures"
#: A dependency every turn needs judged failing, and recovered (worker.consumer.outages).
DEPENDENCY_FAILING = "DependencyFailing"
DEPENDENCY_RECOVERED = "DependencyRecovered"
TURN_LATENCY = "TurnLatency"
AGE_AT_RECEIVE = "AgeAtReceive"
WINDOW_KEPT = "WindowKept"
WINDOW_DROPPED = "WindowDropped"
WINDOW_TRIMMED = "WindowTrimmed"
WINDOW_LEFT_OUT = "WindowLeftOut"
#: The cache-aligned mode only: written when the interval had any (not in COUNTERS, which
#: every interval writes), in all and per Reason.
WINDOW_REANCHORS = "WindowReanchors"
#: The cache-aligned mode only: the view's cache points by the TTL chosen (``5m``, ``1h``,
#: ``none``: left out), per Ttl, written when the interval had any.
CACHE_POINT_TTLS = "CachePointTtls"
TTL_DIMENSION = "Ttl"
#: The bill, observed (an answer's ``model_usage`` checked on the next turn): the checks
#: made (every interval, for the share of misses), and the misses, in all and per Cause
#: (written when the interval had any).
CACHE_CHECKS = "CacheChecks"
CACHE_MISSES = "CacheMisses"
CAUSE_DIMENSION = "Cause"
#: Per check: the answer's input as billed (uncached 1x, read 0.1x, written 1.25x or 2x),
#: and the cache read it was expected to make (calibrated) and made, in tokens.
OBSERVED_BILLED_INPUT_UNITS = "ObservedBilledInputUnits"
EXPECTED_CACHE_READ_TOKENS = "ExpectedCacheReadTokens"
OBSERVED_CACHE_READ_TOKENS = "ObservedCacheReadTokens"

#: Summed over each interval, written every interval.
COUNTERS: Mapping[str, str] = {
    COMMANDS_SERVED: "Count",
    COMMANDS_REJECTED: "Count",
    COMMANDS_RETRIED: "Count",
    DUPLICATES_SKIPPED: "Count",
    FOLD_GAP_MESSAGES: "Count",
    FOLD_REQUESTS_SENT: "Count",
    PAYLOADS_OFFLOADED: "Count",
    LIVENESS_FAILURES: "Count",
    DEPENDENCY_FAILING: "Count",
    DEPENDENCY_RECOVERED: "Count",
    CACHE_CHECKS: "Count",
}
#: One value per event, written when the interval has any.
DISTRIBUTIONS: Mapping[str, str] = {
    TURN_LATENCY: "Milliseconds",
    AGE_AT_RECEIVE: "Milliseconds",
    WINDOW_KEPT: "Count",
    WINDOW_DROPPED: "Count",
    WINDOW_TRIMMED: "Count",
    WINDOW_LEFT_OUT: "Count",
    OBSERVED_BILLED_INPUT_UNITS: "None",
    EXPECTED_CACHE_READ_TOKENS: "Count",
    OBSERVED_CACHE_READ_TOKENS: "Count",
}


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
    if tally.reanchored:
        context.put_metric(WINDOW_REANCHORS, sum(tally.reanchored.values()), "Count")
    if tally.misses:
        context.put_metric(CACHE_MISSES, sum(tally.misses.values()), "Count")
    documents = LogSerializer.serialize(context)
    by_dimension = [
        (COMMANDS_REJECTED, REASON_DIMENSION, tally.rejected),
        (WINDOW_REANCHORS, REASON_DIMENSION, tally.reanchored),
        (CACHE_MISSES, CAUSE_DIMENSION, tally.misses),
    ]
    for metric, dimension, counts in by_dimension:
        for reason, count in sorted(counts.items()):
            one = _context({**dimensions, dimension: reason}, timestamp)
            one.put_metric(metric, count, "Count")
            documents += LogSerializer.serialize(one)
    for ttl, count in sorted(tally.ttls.items()):
        one = _context({**dimensions, TTL_DIMENSION: ttl}, timestamp)
        one.put_metric(CACHE_POINT_TTLS, count, "Count")
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
