"""A turn's telemetry: its span continues the inbound X-Ray trace, its sends carry the header
onward, its log lines carry the trace id, its hooks count; ids and counts, never content."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tests.conftest import captured_logs
from tests.unit.clock import FakeClock
from worker.delivery.outcomes import Done, Failed, Rejected, Retry
from worker.logs import get_logger
from worker.memory import (
    ConverseView,
    FoldGap,
    HistoryMessage,
    Window,
    WindowLimits,
    bound_history,
)
from worker.ports import ReceivedMessage
from worker.telemetry import hooks as telemetry
from worker.telemetry import metrics as m
from worker.telemetry.hooks import Telemetry, rejection_kind
from worker.telemetry.metrics import MetricsBook
from worker.telemetry.tracing import get_tracer, outbound_trace_header
from worker.turn.commands import ConverseCommand

ROOT = "1-5759e988-bd862e3fe1be46a994272793"
PARENT = "53995c3f42cd8ad8"
INBOUND = f"Root={ROOT};Parent={PARENT};Sampled=1"
SECRET = "PRIVILEGED clause 14.2 text"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


def sdk_tracer(exporter: InMemorySpanExporter) -> trace.Tracer:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return get_tracer(provider)


def received(trace_header: str | None = INBOUND, sent_ms: int | None = None) -> ReceivedMessage:
    return ReceivedMessage(
        "m-1", "r-1", "{}", receive_count=2, trace_header=trace_header, sent_timestamp_ms=sent_ms
    )


def command() -> ConverseCommand:
    return ConverseCommand(
        type="converse", command_id="c-1", conversation_id="matter-1", message=SECRET
    )


def window_of(pairs: int) -> tuple[Window, ConverseView]:
    messages = [
        HistoryMessage(seq=i, role="user" if i % 2 else "assistant", content=f"{SECRET} {i}")
        for i in range(pairs * 2, 0, -1)
    ]
    window = bound_history(messages, WindowLimits(4000, 4, 2, 1000))
    return window, ConverseView(system=(), messages=(), left_out=())


def test_the_turn_span_is_a_consumer_child_of_the_inbound_trace(
    exporter: InMemorySpanExporter,
) -> None:
    clock = FakeClock()
    spy = Telemetry(tracer=sdk_tracer(exporter), clock=clock, queue_name="mira-converse")
    with spy.turn(received(), received_at=0.0) as turn:
        span_id = turn.span.get_span_context().span_id
        outbound = outbound_trace_header()
    [span] = exporter.get_finished_spans()
    assert span.name == "mira-converse process"
    assert span.kind is SpanKind.CONSUMER
    assert span.parent is not None and f"{span.parent.span_id:016x}" == PARENT
    assert f"{span.context.trace_id:032x}" == ROOT[2:].replace("-", "")
    assert outbound == f"Root={ROOT};Parent={span_id:016x};Sampled=1"
    assert span.attributes is not None
    assert span.attributes["messaging.message.id"] == "m-1"
    assert span.attributes["converse.receive_count"] == 2


def test_without_an_sdk_the_inbound_header_passes_on_unchanged() -> None:
    """The default: no SDK, so no span of our own, and the trace still connects."""
    with Telemetry(clock=FakeClock()).turn(received(), received_at=0.0):
        assert outbound_trace_header() == INBOUND
    assert outbound_trace_header() is None


def test_a_message_without_a_header_sends_none_when_no_sdk_is_configured() -> None:
    with Telemetry(clock=FakeClock()).turn(received(trace_header=None), received_at=0.0):
        assert outbound_trace_header() is None


def test_an_unreadable_header_starts_a_new_trace_instead(exporter: InMemorySpanExporter) -> None:
    spy = Telemetry(tracer=sdk_tracer(exporter), clock=FakeClock())
    with spy.turn(received(trace_header=f"Root={ROOT};Sampled=?"), received_at=0.0):
        pass
    [span] = exporter.get_finished_spans()
    assert span.parent is None


def test_every_log_line_of_the_turn_carries_the_trace_id_and_only_the_turn() -> None:
    log = get_logger()
    with captured_logs() as logs:
        with Telemetry(clock=FakeClock()).turn(received(), received_at=0.0):
            log.info("inside")
        log.info("after")
    assert [(e["event"], e.get("trace_id")) for e in logs] == [("inside", ROOT), ("after", None)]


def test_the_hooks_count_into_the_current_turn_and_do_nothing_outside_one(
    exporter: InMemorySpanExporter,
) -> None:
    clock = FakeClock()
    book = MetricsBook()
    spy = Telemetry(metrics=book, tracer=sdk_tracer(exporter), clock=clock)
    window, view = window_of(5)
    telemetry.prompt_forwarded(command(), window, view, None)
    telemetry.fold_requested()
    with spy.turn(received(), received_at=0.0) as turn:
        clock.now = 0.125
        telemetry.prompt_forwarded(command(), window, view, FoldGap(3, 6))
        telemetry.fold_requested()
        telemetry.payload_offloaded()
        turn.finished(Done())
    tally = book.take()
    assert tally.counts == {
        m.COMMANDS_SERVED: 1,
        m.FOLD_GAP_MESSAGES: 4,
        m.FOLD_REQUESTS_SENT: 1,
        m.PAYLOADS_OFFLOADED: 1,
    }
    assert tally.values[m.TURN_LATENCY] == [125.0]
    assert tally.values[m.WINDOW_KEPT] == [4]
    assert tally.values[m.WINDOW_DROPPED] == [6]
    [span] = exporter.get_finished_spans()
    assert span.attributes is not None
    assert span.attributes["converse.window.kept"] == 4
    assert span.attributes["converse.fold_gap"] == 4
    assert span.attributes["converse.outcome"] == "done"
    assert SECRET not in repr(dict(span.attributes))


def test_outcomes_count_rejections_by_kind_retries_and_failures(
    exporter: InMemorySpanExporter,
) -> None:
    book = MetricsBook()
    spy = Telemetry(metrics=book, tracer=sdk_tracer(exporter), clock=FakeClock())
    for outcome in (Rejected("message is blank"), Retry("throttled"), Failed("E at x"), Done()):
        with spy.turn(received(), received_at=0.0) as turn:
            turn.finished(outcome)
    tally = book.take()
    assert tally.counts == {m.COMMANDS_REJECTED: 1, m.COMMANDS_RETRIED: 1, m.COMMANDS_FAILED: 1}
    assert tally.rejected == {"blank_message": 1}
    statuses = [s.status.status_code for s in exporter.get_finished_spans()]
    assert statuses == [StatusCode.UNSET, StatusCode.UNSET, StatusCode.ERROR, StatusCode.UNSET]


def test_the_age_at_receive_comes_from_sent_timestamp() -> None:
    book = MetricsBook()
    spy = Telemetry(metrics=book, clock=FakeClock(), wall=lambda: 1_000.0)
    spy.received(received(sent_ms=998_500))
    spy.received(received(sent_ms=None))
    spy.received(received(sent_ms=1_000_100))  # a sender's clock ahead: never negative
    assert book.take().values[m.AGE_AT_RECEIVE] == [1500.0, 0.0]


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        ("body is not valid JSON (Expecting value at position 0)", "invalid_json"),
        ("body is a JSON list, not an object", "not_an_object"),
        ("invalid command: message: Field required", "invalid_command"),
        ("message is blank", "blank_message"),
        (
            "message is larger than the model's context window: ~250,001 tokens estimated, "
            "Claude Sonnet 4.5 takes 200,000",
            "message_over_context_window",
        ),
        ("the S3 pointer names an object that does not exist", "payload_missing"),
        ("the S3 pointer's object is not UTF-8 text", "payload_not_utf8"),
        ("the S3 pointer names a bucket this stage does not read: other", "payload_bucket_refused"),
        ("the S3 pointer names a bucket, but PAYLOAD_BUCKET is not set", "payload_bucket_refused"),
        ("the S3 pointer's object is over PAYLOAD_MAX_BYTES (4194304)", "payload_too_large"),
        ("something new", "other"),
    ],
)
def test_rejection_reasons_fall_into_few_kinds(reason: str, kind: str) -> None:
    assert rejection_kind(reason) == kind


def test_a_re_anchor_is_counted_by_reason_and_the_span_says_how_the_window_was_chosen(
    exporter: InMemorySpanExporter,
) -> None:
    book = MetricsBook()
    spy = Telemetry(metrics=book, tracer=sdk_tracer(exporter), clock=FakeClock())
    telemetry.window_anchored("reanchored", "overflow")  # outside a turn: nothing
    for outcome, reason in (("reanchored", "fold_moved"), ("kept", None), ("fallback", None)):
        with spy.turn(received(), received_at=0.0) as turn:
            telemetry.window_anchored(outcome, reason)
            turn.finished(Done())
    tally = book.take()
    assert tally.reanchored == {"fold_moved": 1}
    assert not tally.counts
    attributes = [dict(s.attributes or {}) for s in exporter.get_finished_spans()]
    assert [
        (a["converse.window.anchor"], a.get("converse.window.anchor_reason")) for a in attributes
    ] == [
        ("reanchored", "fold_moved"),
        ("kept", None),
        ("fallback", None),
    ]
