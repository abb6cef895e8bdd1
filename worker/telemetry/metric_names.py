"""Every metric the stage writes, declared once: its name, unit, when it is written, the
dimension it is also split by (with the values that dimension takes), and what it means.

A declaration, not a recorder: nothing here records or writes, and it imports nothing of
:mod:`worker`. :mod:`worker.telemetry.metrics` writes the metrics as the declaration says
(its ``COUNTERS`` and ``DISTRIBUTIONS`` are derived from it), ``docs/reference/metrics.md``
is rendered from it, and a test checks it against the source: every metric the code records
is declared here, every declared one is recorded, and each dimension's values are the ones
the code gives.

Every metric carries the dimensions ``Service`` and ``Queue`` (the converse queue's name),
never a conversation or command id.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

NAMESPACE = "Mira/ConverseStage"
SERVICE = "converse-stage"
SERVICE_DIMENSION = "Service"
QUEUE_DIMENSION = "Queue"
REASON_DIMENSION = "Reason"
TTL_DIMENSION = "Ttl"
CAUSE_DIMENSION = "Cause"

COMMANDS_SERVED = "CommandsServed"
COMMANDS_REJECTED = "CommandsRejected"
COMMANDS_RETRIED = "CommandsRetried"
COMMANDS_FAILED = "CommandsFailed"
BILLS_DROPPED = "BillsDropped"
DUPLICATES_SKIPPED = "DuplicatesSkipped"
FOLD_GAP_MESSAGES = "FoldGapMessages"
FOLD_REQUESTS_SENT = "FoldRequestsSent"
PAYLOADS_OFFLOADED = "PayloadsOffloaded"
LIVENESS_FAILURES = "LivenessFailures"
DEPENDENCY_FAILING = "DependencyFailing"
DEPENDENCY_RECOVERED = "DependencyRecovered"
BREAKERS_OPEN = "BreakersOpen"
TURNS_HELD = "TurnsHeld"
CACHE_CHECKS = "CacheChecks"
WINDOW_REANCHORS = "WindowReanchors"
CACHE_POINT_TTLS = "CachePointTtls"
CACHE_MISSES = "CacheMisses"
TURN_LATENCY = "TurnLatency"
AGE_AT_RECEIVE = "AgeAtReceive"
WINDOW_KEPT = "WindowKept"
WINDOW_DROPPED = "WindowDropped"
WINDOW_TRIMMED = "WindowTrimmed"
WINDOW_LEFT_OUT = "WindowLeftOut"
OBSERVED_BILLED_INPUT_UNITS = "ObservedBilledInputUnits"
EXPECTED_CACHE_READ_TOKENS = "ExpectedCacheReadTokens"
OBSERVED_CACHE_READ_TOKENS = "ObservedCacheReadTokens"

Unit = Literal["Count", "Milliseconds", "None"]
#: ``counter``: summed over each interval and written every interval, zeros included, so an
#: alarm on ``> 0`` always has data while a worker runs. ``counter_when_any``: summed, and
#: written only in the intervals that had any. ``distribution``: one raw value per event,
#: written in the intervals that had any.
Kind = Literal["counter", "counter_when_any", "distribution"]


@dataclass(frozen=True, slots=True)
class Dimension:
    """A dimension beyond ``Service`` and ``Queue``, and the closed set of values it takes:
    low-cardinality kinds, never free text."""

    name: str
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Metric:
    """One metric. ``per``: also written per this dimension, one document per value seen in
    the interval; ``total``: written in all too (False: only per ``per``)."""

    name: str
    unit: Unit
    kind: Kind
    meaning: str
    per: Dimension | None = None
    total: bool = True


#: Counters first, in the order an interval's document lists them, then the counters written
#: when there are any, then the distributions.
METRICS: tuple[Metric, ...] = (
    Metric(
        COMMANDS_SERVED, "Count", "counter", "Commands whose prompt was sent to the model queue."
    ),
    Metric(
        COMMANDS_REJECTED,
        "Count",
        "counter",
        "Commands rejected as invalid and sent to the dead-letter queue; per `Reason`, by "
        "the kind of rejection (never its text).",
        per=Dimension(
            REASON_DIMENSION,
            (
                "invalid_json",
                "not_an_object",
                "invalid_command",
                "blank_message",
                "message_over_context_window",
                "payload_missing",
                "payload_not_utf8",
                "payload_bucket_refused",
                "payload_too_large",
                "payload_key_refused",
                "stored_state_malformed",
                "other",
            ),
        ),
    ),
    Metric(
        COMMANDS_RETRIED,
        "Count",
        "counter",
        "Commands returned to the queue: a passing failure or another worker's live lease.",
    ),
    Metric(
        COMMANDS_FAILED,
        "Count",
        "counter",
        "Turns that raised an unexpected exception (a defect, `clerk.converse_command_failed`): "
        "returned to the queue alone, without slowing the others, and dead-lettered with the "
        "failure's type and place on their last receive.",
    ),
    Metric(
        DUPLICATES_SKIPPED,
        "Count",
        "counter",
        "Commands delivered again after they were served: deleted, not forwarded.",
    ),
    Metric(
        FOLD_GAP_MESSAGES,
        "Count",
        "counter",
        "Unfolded messages that fell outside the window: the counts of the "
        "`clerk.converse_history_fold_gap` warnings, summed.",
    ),
    Metric(FOLD_REQUESTS_SENT, "Count", "counter", "Compaction requests sent."),
    Metric(
        PAYLOADS_OFFLOADED,
        "Count",
        "counter",
        "Bodies over the inline limit moved to PAYLOAD_BUCKET behind a pointer: prompts, "
        "fold requests and dead letters.",
    ),
    Metric(
        LIVENESS_FAILURES,
        "Count",
        "counter",
        "1 for an interval in which a loop of this worker was silent past its bound, else 0 "
        '(docs/DEPLOY.md, "Probes"). Every running worker writes it every interval, so its '
        "absence means no worker is alive to report.",
    ),
    Metric(
        DEPENDENCY_FAILING,
        "Count",
        "counter",
        "A dependency every turn needs (DynamoDB, the model queue's sends) judged failing: the "
        "worker holds what it has and receives nothing until it recovers "
        '(docs/RELIABILITY.md, "Brownouts").',
    ),
    Metric(
        DEPENDENCY_RECOVERED,
        "Count",
        "counter",
        "A dependency judged failing judged recovered: the worker receives again.",
    ),
    Metric(
        BREAKERS_OPEN,
        "Count",
        "counter",
        "The dependencies this worker judges failing at the end of the interval (0, 1 or 2): "
        "its breakers' state, sampled as `LivenessFailures` is. Their `Maximum` over the "
        "workers is 0 when no worker holds its receives.",
    ),
    Metric(
        TURNS_HELD,
        "Count",
        "counter",
        "Turns that failed on a dependency judged failing and were held: the message kept "
        "invisible with its lease, no receive spent on it, the turn run again once a probe "
        "succeeds (counted at each hold).",
    ),
    Metric(
        CACHE_CHECKS,
        "Count",
        "counter",
        "Turns that found the model's bill stored with the newest answer (`model_usage`) and "
        "checked it against its prompt's `cache` expectation "
        '(docs/CACHE.md, "The bill, observed"); the denominator of the share of misses.',
    ),
    Metric(
        BILLS_DROPPED,
        "Count",
        "counter_when_any",
        "Stored bills (`model_usage`) dropped whole as malformed (`clerk.converse_bill_dropped`): "
        "their turns went on as if those answers had no bill (docs/reference/stored-items.md).",
    ),
    Metric(
        WINDOW_REANCHORS,
        "Count",
        "counter_when_any",
        "The cache-aligned mode: turns whose window moved its start, and why "
        '(docs/CACHE.md, "Seeing it"). The sliding mode never writes it.',
        per=Dimension(
            REASON_DIMENSION, ("first_turn", "fold_moved", "overflow", "invalid", "cold")
        ),
    ),
    Metric(
        CACHE_POINT_TTLS,
        "Count",
        "counter_when_any",
        "The cache-aligned mode: the view's cache points by the lifetime chosen for them "
        "(`none`: the point was left out).",
        per=Dimension(TTL_DIMENSION, ("5m", "1h", "none")),
        total=False,
    ),
    Metric(
        CACHE_MISSES,
        "Count",
        "counter_when_any",
        "Checks whose cache read fell short of what the prompt expected, by the cause found "
        '(docs/CACHE.md, "The bill, observed").',
        per=Dimension(
            CAUSE_DIMENSION,
            ("expired", "stage_changed_prefix", "below_minimum", "ttl_downgraded", "unexplained"),
        ),
    ),
    Metric(
        TURN_LATENCY,
        "Milliseconds",
        "distribution",
        "Per served command: from receiving the command to its prompt sent.",
    ),
    Metric(
        AGE_AT_RECEIVE,
        "Milliseconds",
        "distribution",
        "Per command received: from SQS accepting it (`SentTimestamp`) to the worker receiving it.",
    ),
    Metric(
        WINDOW_KEPT,
        "Count",
        "distribution",
        "Per served command: the history messages the window kept.",
    ),
    Metric(
        WINDOW_DROPPED,
        "Count",
        "distribution",
        "Per served command: the history messages the window dropped.",
    ),
    Metric(
        WINDOW_TRIMMED,
        "Count",
        "distribution",
        "Per served command: the kept messages the window trimmed.",
    ),
    Metric(
        WINDOW_LEFT_OUT,
        "Count",
        "distribution",
        "Per served command: the kept messages with no block in the Converse view "
        "(`clerk.converse_messages_left_out`).",
    ),
    Metric(
        OBSERVED_BILLED_INPUT_UNITS,
        "None",
        "distribution",
        "Per check: the answer's input as billed, in uncached-token units (uncached 1x, read "
        "0.1x, written 1.25x at `5m` and 2x at `1h`).",
    ),
    Metric(
        EXPECTED_CACHE_READ_TOKENS,
        "Count",
        "distribution",
        "Per check: the cache read the prompt expected, in tokens (calibrated to the model's).",
    ),
    Metric(
        OBSERVED_CACHE_READ_TOKENS,
        "Count",
        "distribution",
        "Per check: the cache read the answer's bill shows, in tokens.",
    ),
)

#: Each declared metric by its name.
BY_NAME: Mapping[str, Metric] = MappingProxyType({metric.name: metric for metric in METRICS})
#: The metrics also written per a dimension, and that dimension.
SPLIT_BY: Mapping[str, Dimension] = MappingProxyType(
    {metric.name: metric.per for metric in METRICS if metric.per is not None}
)
#: Summed over each interval and written every interval: each counter's unit.
COUNTERS: Mapping[str, str] = MappingProxyType(
    {metric.name: metric.unit for metric in METRICS if metric.kind == "counter"}
)
#: One value per event, written when the interval has any: each distribution's unit.
DISTRIBUTIONS: Mapping[str, str] = MappingProxyType(
    {metric.name: metric.unit for metric in METRICS if metric.kind == "distribution"}
)
