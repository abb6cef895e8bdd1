"""The telemetry path of a turn, timed alone (part 7's second measurement).

Each turn calls what the consumer and the stage call around a real turn: the age at
receive, the log context the consumer binds, the turn's span (continuing an inbound
``AWSTraceHeader`` when the configuration sends them), the prompt's send header, the
stage's window counts, a fold request one turn in eight, the outcome; and the EMF book is
flushed (to memory) every 1,000 turns. The figure is CPU time per turn (process time, so
an SDK's span-processing thread counts), the best of several runs.

``none`` is the same loop without any of it (only the log context the consumer binds
anyway): ``off`` minus ``none`` is what the telemetry code costs when switched off.
"""

from __future__ import annotations

import io
import time
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from structlog.contextvars import bound_contextvars

from bench.contenders.traced_worker import DroppingExporter
from bench.load.workload import stage_prompt
from worker.delivery.outcomes import Done
from worker.memory import FoldState, HistoryMessage
from worker.ports import HistoryPage, ReceivedMessage
from worker.telemetry import hooks as hooks
from worker.telemetry.hooks import Telemetry
from worker.telemetry.metrics import (
    NO_METRICS,
    QUEUE_DIMENSION,
    SERVICE_DIMENSION,
    EmfFlusher,
    MetricsBook,
)
from worker.telemetry.tracing import get_tracer, outbound_trace_header
from worker.turn.commands import ConverseCommand

HEADER = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"


class _Monotonic:
    """All the turn's telemetry reads of a clock (no event loop needed)."""

    monotonic = staticmethod(time.monotonic)


def time_path(config: str, *, turns: int = 5_000, repeats: int = 5) -> float:
    """µs of CPU per turn for ``config`` (``none``, ``off``, ``on`` or ``sdk``)."""
    clock: Any = _Monotonic()
    book = MetricsBook() if config in ("on", "sdk") else None
    provider = None
    if config == "sdk":
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(DroppingExporter()))
    spy = Telemetry(
        metrics=book or NO_METRICS, tracer=get_tracer(provider), clock=clock, queue_name="q"
    )
    flusher = (
        EmfFlusher(
            book,
            dimensions={SERVICE_DIMENSION: "s", QUEUE_DIMENSION: "q"},
            interval=60,
            clock=clock,
            out=io.StringIO(),
        )
        if book is not None
        else None
    )
    header = HEADER if config in ("on", "sdk") else None
    message = ReceivedMessage(
        "m", "r", "{}", trace_header=header, sent_timestamp_ms=int(time.time() * 1000)
    )
    command = ConverseCommand(
        type="converse", command_id="c", conversation_id="matter", message="question?"
    )
    page = HistoryPage(
        FoldState(34, "summary"),
        tuple(
            HistoryMessage(seq, "user" if seq % 2 else "assistant", "clause text " * 40)
            for seq in range(60, 34, -1)
        ),
    )
    plan, _ = stage_prompt(command, page)
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        for i in range(turns):
            with bound_contextvars(message_id="m", receive_count=1):
                if config == "none":
                    continue
                spy.received(message)
                with spy.turn(message, clock.monotonic()) as turn:
                    outbound_trace_header()
                    hooks.prompt_forwarded(command, plan.window, plan.view, None)
                    if i % 8 == 0:
                        outbound_trace_header()
                        hooks.fold_requested()
                    turn.finished(Done())
            if flusher is not None and i % 1000 == 999:
                flusher.flush()
        best = min(best, (time.process_time() - started) / turns)
    if provider is not None:
        provider.shutdown()
    return best * 1e6
