"""What the worker tells its operators: metrics, traces across the queues, liveness, and a
turn's telemetry (one span, ``trace_id`` on every log line, the turn's counters).

Owns: :mod:`~worker.telemetry.metrics` (EMF) and :mod:`~worker.telemetry.metric_names` (every
metric declared once), :mod:`~worker.telemetry.tracing` (the X-Ray
propagator), :mod:`~worker.telemetry.liveness` and :mod:`~worker.telemetry.probe` (the liveness
file and ``worker health``), :mod:`~worker.telemetry.hooks` (the hooks the turn reports into).

May import: :mod:`worker.delivery` (it counts outcomes) and the foundation modules
(errors, ports, logs, timing, memory). Never the turn, the consumer, the adapters or the
entry points. Importing this package imports none of its modules: ``worker health`` stays
cheap.
"""
