"""Outcomes: what the stage decided for a message.

Each received message yields one :data:`Outcome`. ``Done`` deletes it; ``Rejected``
sends it to the dead-letter queue with the reason, then deletes it; ``Retry`` returns
it to the queue after a delay, by default a jittered backoff on its receive count;
``Failed`` (a defect) does the same. On a message's last receive, a failed ``Retry`` or a
``Failed`` is dead-lettered with its error instead of leaving SQS to move it without one.
The consumer acts on them (:mod:`worker.consumer.settling`); telemetry counts them.
"""

from __future__ import annotations

from dataclasses import dataclass

from worker.errors import RetryableError, StoreUnavailable

#: The dead letter's attributes: why the stage rejected it (never servable), or why its last
#: try failed (servable once the cause is fixed: a redrive sends it back), and its message id.
REJECTION_REASON = "RejectionReason"
LAST_FAILURE = "LastFailure"
DEAD_LETTERED_ID = "RejectedMessageId"


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


@dataclass(frozen=True, slots=True)
class Failed:
    """The turn raised what no rule of the stage expects: a defect, in the code or in how it
    met this command's data, never a dependency's outage. ``error`` names the exception's
    type and where it was raised, never its text (which can quote stored values). The
    message returns to the queue with the usual backoff, and nothing else slows down; on its
    last receive it is dead-lettered with ``error`` as its reason."""

    error: str


def retry_for(exc: RetryableError) -> Retry:
    """The outcome of a turn that failed with ``exc``: its text, service and kind."""
    if isinstance(exc, StoreUnavailable):
        return Retry(str(exc), service=exc.service, kind=exc.kind)
    return Retry(str(exc))


Outcome = Done | Rejected | Retry | Failed
