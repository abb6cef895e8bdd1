"""The SQS consumer: the receive loop, the leases it keeps up, settling each message by its
outcome, the cohorts that let a received batch's turns leave in batch calls, and the
pacing and brownout policy it runs by.

Owns: :mod:`~worker.consumer.loop` (poll, hand to the stage, stop cleanly),
:mod:`~worker.consumer.leases` (visibility kept up while a turn works),
:mod:`~worker.consumer.settling` (delete, dead-letter, retry),
:mod:`~worker.consumer.cohorts` (how many turns of a batch are still on their way),
:mod:`~worker.consumer.outages` and :mod:`~worker.consumer.breaker` (a dependency's
brownout: receive less, never dead-letter a valid command for it),
:mod:`~worker.consumer.pacing` (the consumer's knobs and delays).

May import: :mod:`worker.delivery`, :mod:`worker.telemetry` and the foundation modules. Never
the turn (it sees a ``Stage`` port), the settings, the adapters, the composition root or the
entry points.
"""
