"""Traces across the queues: the OpenTelemetry API with the AWS X-Ray propagator.

SQS carries the X-Ray trace header as the ``AWSTraceHeader`` system attribute
(``Root=1-…;Parent=…;Sampled=…``). A turn continues the inbound one: its span is a child
of the header's Parent, in the header's Root; every message the turn sends carries a header
of the same Root with the turn's span as Parent.

Only the OpenTelemetry API is used here. Without an SDK (the default) its tracer records
nothing and costs next to nothing: the turn's "span" is the inbound context itself, so the
outbound header passes the inbound one on unchanged and the trace stays connected through
this stage. An SDK configured in the process (``opentelemetry-instrument``, the ADOT
distro, or code) makes the turn a real span, exported wherever that SDK sends spans.
"""

from __future__ import annotations

from contextvars import ContextVar, Token

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.propagators.aws import AwsXRayPropagator

#: The propagator's carrier key; on SQS the same value travels as ``AWSTraceHeader``.
_CARRIER_KEY = "X-Amzn-Trace-Id"
_PROPAGATOR = AwsXRayPropagator()
INSTRUMENTATION_NAME = "mira.converse_stage"
#: The header of the turn under way, formatted once for all its sends (a 1-tuple: a turn
#: outside any trace pins None).
_PINNED: ContextVar[tuple[str | None] | None] = ContextVar("converse_outbound_trace_header")


def get_tracer(provider: trace.TracerProvider | None = None) -> trace.Tracer | None:
    """The stage's tracer: from ``provider``, else from the global one; None when no SDK is
    set up by now (SDKs are set up at process start, before the worker runs), so a turn
    can skip span machinery that would record nothing."""
    if provider is None and isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return None
    return trace.get_tracer(INSTRUMENTATION_NAME, tracer_provider=provider)


def inbound_context(trace_header: str | None) -> Context | None:
    """The remote parent an ``AWSTraceHeader`` names; None without a header. A header the
    propagator cannot read (no Parent, a Sampled flag other than 0 or 1) gives an empty
    context: the turn then starts its own trace."""
    if not trace_header:
        return None
    context: Context = _PROPAGATOR.extract({_CARRIER_KEY: trace_header})
    return context


def outbound_trace_header() -> str | None:
    """The ``AWSTraceHeader`` a message sent now should carry: the current span's Root and
    id; None outside any trace."""
    pinned = _PINNED.get(None)
    if pinned is not None:
        return pinned[0]
    return header_of(None)


def header_of(context: Context | None) -> str | None:
    """The header that continues the span current in ``context`` (None: the current one)."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=context)
    return carrier.get(_CARRIER_KEY)


def pin_outbound_trace_header(context: Context | None) -> Token[tuple[str | None] | None]:
    """Format ``context``'s header once: every send until :func:`unpin` carries it."""
    return _PINNED.set((header_of(context),))


def unpin(token: Token[tuple[str | None] | None]) -> None:
    _PINNED.reset(token)


def xray_trace_id(span_context: trace.SpanContext) -> str | None:
    """The trace id as X-Ray writes it (``1-5759e988-bd862e3fe1be46a994272793``), the form
    the X-Ray console and ``AWSTraceHeader`` use; None for an invalid context."""
    if not span_context.is_valid:
        return None
    hex_id = f"{span_context.trace_id:032x}"
    return f"1-{hex_id[:8]}-{hex_id[8:]}"
