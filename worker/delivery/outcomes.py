"""Outcomes: what the stage decided for a message.

Each received message yields one :data:`Outcome`. ``Done`` deletes it; ``Rejected``
sends it to the dead-letter queue with the reason, then deletes it; ``Retry`` returns
it to the queue after a delay, by default a jittered backoff on its receive count. The
consumer acts on them (:mod:`worker.consumer.settling`); telemetry counts them.
"""

from __future__ import annotations

from dataclasses import dataclass


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
    ``failure`` says whether a dependency failed (the consumer then slows its polling).
    """

    error: str
    delay: float | None = None
    failure: bool = True


Outcome = Done | Rejected | Retry
