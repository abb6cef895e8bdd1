"""A turn's telemetry: one span continuing the inbound trace, ``trace_id`` on every log line
of the turn, and the turn's metrics.

The consumer opens :meth:`Telemetry.turn` around each message it handles. The stage, the
payload offloader and the consumer's outcome report into the turn current in their task
through this module's functions (a contextvar, as structlog's bound ids are), each beside
the log line that says the same thing; outside a turn (the stage's unit tests, the
operator's commands) they do nothing. Spans and metrics carry ids and counts, never content.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Protocol

from opentelemetry import trace
from opentelemetry.context import Context
from structlog.contextvars import bind_contextvars, reset_contextvars

from worker.caching.models import OVER_CONTEXT_WINDOW
from worker.delivery.outcomes import Failed, Outcome, Rejected, Retry
from worker.ports import ReceivedMessage
from worker.telemetry import metrics as m
from worker.telemetry.metrics import NO_METRICS, Recorder
from worker.telemetry.tracing import (
    get_tracer,
    inbound_context,
    pin_outbound_trace_header,
    unpin,
    xray_trace_id,
)
from worker.timing import Clock, LoopClock

if TYPE_CHECKING:
    from worker.caching.diagnosis import CacheCheck
    from worker.memory import ConverseView, FoldGap, Window


class CommandIds(Protocol):
    """What telemetry reads of a command: its ids, never its message (the turn's
    ``ConverseCommand`` is one; telemetry sits below the turn and does not import it)."""

    @property
    def conversation_id(self) -> str: ...

    @property
    def command_id(self) -> str: ...


#: The rejection reasons the stage gives, by prefix, as the few kinds a dimension may take.
REJECTION_KINDS: tuple[tuple[str, str], ...] = (
    ("body is not valid JSON", "invalid_json"),
    ("body is a JSON ", "not_an_object"),
    ("invalid command", "invalid_command"),
    ("message is blank", "blank_message"),
    (OVER_CONTEXT_WINDOW, "message_over_context_window"),
    ("the S3 pointer names an object that does not exist", "payload_missing"),
    ("the S3 pointer's object is not UTF-8", "payload_not_utf8"),
    ("the S3 pointer names a bucket", "payload_bucket_refused"),
    ("the S3 pointer's object is over PAYLOAD_MAX_BYTES", "payload_too_large"),
    ("the S3 pointer's object is encrypted under a KMS key", "payload_key_refused"),
    ("the conversation's stored state is malformed", "stored_state_malformed"),
)


def rejection_kind(reason: str) -> str:
    return next((kind for prefix, kind in REJECTION_KINDS if reason.startswith(prefix)), "other")


class Turn:
    """One message being handled: what the hooks below record goes to its metrics and span."""

    __slots__ = ("_clock", "_metrics", "_received_at", "span")

    def __init__(
        self, metrics: Recorder, span: trace.Span, clock: Clock, received_at: float
    ) -> None:
        self._metrics = metrics
        self.span = span
        self._clock = clock
        self._received_at = received_at

    def prompt_forwarded(
        self, command: CommandIds, window: Window, view: ConverseView, gap: FoldGap | None
    ) -> None:
        metrics = self._metrics
        metrics.count(m.COMMANDS_SERVED)
        latency = (self._clock.monotonic() - self._received_at) * 1000
        metrics.observe(m.TURN_LATENCY, round(latency, 1))  # 0.1 ms: shorter lines, enough
        metrics.observe(m.WINDOW_KEPT, window.kept)
        metrics.observe(m.WINDOW_DROPPED, window.dropped)
        metrics.observe(m.WINDOW_TRIMMED, window.trimmed)
        metrics.observe(m.WINDOW_LEFT_OUT, len(view.left_out))
        if gap is not None:
            metrics.count(m.FOLD_GAP_MESSAGES, gap.count)
        if self.span.is_recording():
            self.span.set_attributes(
                {
                    "converse.conversation_id": command.conversation_id,
                    "converse.command_id": command.command_id,
                    "converse.window.kept": window.kept,
                    "converse.window.dropped": window.dropped,
                    "converse.window.trimmed": window.trimmed,
                    "converse.window.left_out": len(view.left_out),
                    "converse.window.estimated_tokens": window.estimated_tokens,
                    "converse.fold_gap": gap.count if gap is not None else 0,
                }
            )

    def window_anchored(self, outcome: str, reason: str | None) -> None:
        """The cache-aligned window's choice: a re-anchor is counted, by reason; the span
        says which it was."""
        if outcome == "reanchored":
            self._metrics.reanchored(reason or "unknown")
        if self.span.is_recording():
            self.span.set_attribute("converse.window.anchor", outcome)
            if reason is not None:
                self.span.set_attribute("converse.window.anchor_reason", reason)

    def ttls_chosen(self, counts: dict[str, int]) -> None:
        """The view's cache points by the TTL chosen; the span says which."""
        for ttl, points in counts.items():
            self._metrics.ttl_chosen(ttl, points)
        if self.span.is_recording():
            for ttl, points in counts.items():
                self.span.set_attribute(f"converse.cache_points.{ttl}", points)

    def cache_observed(self, check: CacheCheck) -> None:
        """The newest observed answer checked: its billed input, the read expected and made,
        and a miss by cause; the span says the cause."""
        metrics = self._metrics
        metrics.count(m.CACHE_CHECKS)
        metrics.observe(m.OBSERVED_BILLED_INPUT_UNITS, round(check.billed_units, 1))
        metrics.observe(m.EXPECTED_CACHE_READ_TOKENS, check.expected_read_tokens)
        metrics.observe(m.OBSERVED_CACHE_READ_TOKENS, check.read_tokens)
        if check.cause is not None:
            metrics.cache_missed(check.cause)
        if self.span.is_recording():
            self.span.set_attribute("converse.cache.miss_cause", check.cause or "none")

    def held(self) -> None:
        """The turn failed on a dependency judged failing and is held, not returned."""
        self.mark(m.TURNS_HELD, "converse.held")

    def mark(self, metric: str, attribute: str) -> None:
        """One more of ``metric``; the span says it happened."""
        self._metrics.count(metric)
        if self.span.is_recording():
            self.span.set_attribute(attribute, True)

    def finished(self, outcome: Outcome) -> None:
        """The stage's outcome: counted, and named on the span."""
        if isinstance(outcome, Rejected):
            kind = rejection_kind(outcome.reason)
            self._metrics.rejected(kind)
            self._outcome("rejected", kind)
        elif isinstance(outcome, Retry):
            self._metrics.count(m.COMMANDS_RETRIED)
            self._outcome("retry", None)
        elif isinstance(outcome, Failed):
            self._metrics.count(m.COMMANDS_FAILED)
            self._outcome("failed", None)
        else:
            self._outcome("done", None)

    def bills_dropped(self, count: int) -> None:
        """Stored bills dropped whole as malformed."""
        self._metrics.count(m.BILLS_DROPPED, count)

    def _outcome(self, name: str, kind: str | None) -> None:
        span = self.span
        if not span.is_recording():
            return
        span.set_attribute("converse.outcome", name)
        if kind is not None:
            span.set_attribute("converse.rejection_kind", kind)
        if name == "failed":  # by type in the logs; the span only says it failed
            span.set_status(trace.StatusCode.ERROR)


_TURN: ContextVar[Turn | None] = ContextVar("converse_turn", default=None)


class Telemetry:
    """The consumer's side: a turn per message, and the age of each message at receive."""

    def __init__(
        self,
        *,
        metrics: Recorder = NO_METRICS,
        tracer: trace.Tracer | None = None,
        clock: Clock | None = None,
        wall: Callable[[], float] = time.time,
        queue_name: str = "converse",
    ) -> None:
        self._metrics = metrics
        self._tracer = tracer if tracer is not None else get_tracer()
        self._clock = clock or LoopClock()
        self._wall = wall
        self._queue_name = queue_name
        self._span_name = f"{queue_name} process"
        self._failing: set[str] = set()

    def dependency(self, name: str, failing: bool) -> None:
        """A dependency every turn needs was judged failing (True) or recovered (False)."""
        self._metrics.count(m.DEPENDENCY_FAILING if failing else m.DEPENDENCY_RECOVERED)
        (self._failing.add if failing else self._failing.discard)(name)

    def sample(self, book: Recorder) -> None:
        """At each interval's end: the breakers open now (``BreakersOpen``)."""
        book.count(m.BREAKERS_OPEN, len(self._failing))

    def received(self, message: ReceivedMessage) -> None:
        if message.sent_timestamp_ms is not None:
            age = self._wall() * 1000 - message.sent_timestamp_ms
            self._metrics.observe(m.AGE_AT_RECEIVE, max(0, round(age)))  # SQS stamps in ms

    @contextmanager
    def turn(self, message: ReceivedMessage, received_at: float) -> Iterator[Turn]:
        """The span of one turn, current while the message is handled; its trace id bound
        to every log line meanwhile."""
        parent = inbound_context(message.trace_header)
        if self._tracer is None:
            # No SDK: no span would be recorded (the API's no-op tracer hands back the
            # inbound context's span). Skip its machinery; the inbound context is the turn's.
            span = trace.get_current_span(parent) if parent is not None else trace.INVALID_SPAN
            with self._within(span, parent, received_at) as turn:
                yield turn
            return
        attributes: dict[str, str | int] = {
            "messaging.system": "aws_sqs",
            "messaging.operation.type": "process",
            "messaging.destination.name": self._queue_name,
            "messaging.message.id": message.message_id,
            "converse.receive_count": message.receive_count,
        }
        with (
            self._tracer.start_as_current_span(
                self._span_name,
                context=parent,
                kind=trace.SpanKind.CONSUMER,
                attributes=attributes,
                record_exception=False,  # an exception's text may quote a request
                set_status_on_exception=False,
            ) as span,
            self._within(span, None, received_at) as turn,
        ):
            yield turn

    @contextmanager
    def _within(
        self, span: trace.Span, context: Context | None, received_at: float
    ) -> Iterator[Turn]:
        """The turn current, the header its sends carry formatted once, its trace id bound."""
        turn = Turn(self._metrics, span, self._clock, received_at)
        token = _TURN.set(turn)
        pinned = pin_outbound_trace_header(context)
        trace_id = xray_trace_id(span.get_span_context())
        bound = bind_contextvars(trace_id=trace_id) if trace_id else None
        try:
            yield turn
        finally:
            if bound is not None:
                reset_contextvars(**bound)
            unpin(pinned)
            _TURN.reset(token)


# -- the hooks: each reports into the current turn, if any -----------------------------------


def prompt_forwarded(
    command: CommandIds, window: Window, view: ConverseView, gap: FoldGap | None
) -> None:
    if (turn := _TURN.get()) is not None:
        turn.prompt_forwarded(command, window, view, gap)


def window_anchored(outcome: str, reason: str | None) -> None:
    if (turn := _TURN.get()) is not None:
        turn.window_anchored(outcome, reason)


def ttls_chosen(counts: dict[str, int]) -> None:
    if (turn := _TURN.get()) is not None:
        turn.ttls_chosen(counts)


def cache_observed(check: CacheCheck) -> None:
    if (turn := _TURN.get()) is not None:
        turn.cache_observed(check)


def bills_dropped(count: int) -> None:
    if (turn := _TURN.get()) is not None and count:
        turn.bills_dropped(count)


def duplicate_skipped() -> None:
    if (turn := _TURN.get()) is not None:
        turn.mark(m.DUPLICATES_SKIPPED, "converse.duplicate")


def fold_requested() -> None:
    if (turn := _TURN.get()) is not None:
        turn.mark(m.FOLD_REQUESTS_SENT, "converse.fold_requested")


def payload_offloaded() -> None:
    if (turn := _TURN.get()) is not None:
        turn.mark(m.PAYLOADS_OFFLOADED, "converse.payload_offloaded")
