"""The SQS consumer: the receive loop, the leases it keeps up, settling each message by its
outcome, and the cohorts that let a received batch's turns leave in batch calls.

Owns: :mod:`~worker.consumer.loop` (poll, hand to the stage, stop cleanly),
:mod:`~worker.consumer.leases` (visibility kept up while a turn works),
:mod:`~worker.consumer.settling` (delete, dead-letter, retry),
:mod:`~worker.consumer.cohorts` (how many turns of a batch are still on their way).

May import: :mod:`worker.delivery`, :mod:`worker.telemetry` and the foundation modules. Never
the turn (it sees a ``Stage`` port), the adapters, or the entry points.
"""
