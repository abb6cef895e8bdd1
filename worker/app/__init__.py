"""The composition root: one worker process wired from the settings.

Owns: :mod:`~worker.app.runtime` (the AWS clients, the stage, the consumer and the telemetry
of one process), :mod:`~worker.app.batched_turns` (a received batch's turns leaving in batch
calls), :mod:`~worker.app.resources` (the contract's queues, table and bucket, as
``worker bootstrap``, the demo, the tests and the benchmark create them).

May import anything in :mod:`worker` but the entry points; only :mod:`worker.cli` imports it.
"""
