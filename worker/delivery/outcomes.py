"""Outcomes: what the stage decided for a message.

Each received message yields one :data:`Outcome`. ``Done`` deletes it; ``Rejected``
sends it to the dead-letter queue with the reason, then deletes it; ``Retry`` returns
it to the queue after a delay, by default a jittered backoff on its receive count. The
consumer acts on them (:mod:`worker.consumer.settling`); telemetry counts them.
"""

from __future__ import annotations

from dataclasses import dataclass

from worker.errors import RetryableError, StoreUnavailable


@dataclass(frozen=True, slots=True)
class Done:
    """Served (or served before): delete the command."""


@dataclass(frozen=True, slots=True)
class Rejected:
    """Never servable: dead-letter it with the reason, then delete it."""

    reason: str


@dataclass(frozen=True, slots=True)
class Retry:
    """Not served this time: return it to the queue.

    ``delay`` is how long it should stay invisible (None: back off by receive count);
    ``failure`` says whether a dependency failed (the consumer then slows its polling);
    ``service`` and ``kind``, which AWS service failed and how, when known (the consumer
    judges each dependency's health from them, :mod:`worker.consumer.breaker`).
    """

    error: str
    delay: float | None = None
    failure: bool = True
    service: str | None = None
    kind: str | None = None


def retry_for(exc: RetryableError) -> Retry:
    """The outcome of a turn that failed with ``exc``: its text, service and kind."""
    if isinstance(exc, StoreUnavailable):
        return Retry(str(exc), service=exc.service, kind=exc.kind)
    return Retry(str(exc))


Outcome = Done | Rejected | Retry
