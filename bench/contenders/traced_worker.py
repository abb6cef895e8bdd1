"""The benchmark's worker (:mod:`bench.contenders.worker_process`) with an OpenTelemetry SDK in the
process, as ``opentelemetry-instrument`` or the ADOT distro would install one: a
TracerProvider with a BatchSpanProcessor. Spans go to an exporter that drops them, so what
is measured is the worker making and processing its spans, not a collector's network.
Run: ``python -m bench.contenders.traced_worker`` with the worker's environment.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult


class DroppingExporter(SpanExporter):
    def __init__(self) -> None:
        self.exported = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.exported += len(spans)
        return SpanExportResult.SUCCESS


def main() -> int:
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(DroppingExporter()))
    trace.set_tracer_provider(provider)
    from bench.contenders import worker_process

    try:
        return worker_process.main()
    finally:
        provider.shutdown()


if __name__ == "__main__":
    sys.exit(main())
