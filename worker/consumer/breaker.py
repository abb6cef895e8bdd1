"""The health of one dependency every turn needs, as a pure state machine (a breaker).

Every turn needs DynamoDB (claim, Query) and the model queue's send. When one of them fails
for everyone, a turn's failure is not the command's fault: returned with the receive-count
backoff, every command would walk towards the dead-letter queue in ~40 s. So the consumer
(:mod:`worker.consumer.outages`) keeps one :class:`Breaker` per dependency:

::

    closed ──threshold consecutive failed turns──▶ open ──probe due──▶ trial
      ▲                                             ▲                    │
      └─────────────── a success (any turn, the trial, a probe) ◀────────┤
                                                    └──── trial failed ◀─┘

- ``closed``: the consumer receives as usual; a failed turn is returned with its backoff
  (a command's own failures still reach the dead-letter queue).
- ``open``: no receives (a message not received keeps its receive count); the turns that
  failed are held, their leases kept alive. ``probe_at`` says when to try again: a
  jittered exponential backoff (:data:`PROBE_BACKOFF`), so a fleet does not hammer a
  recovering table in step.
- ``trial``: one held turn runs again (or, with none held, a cheap call of the consumer's
  own): a success closes the breaker and everything resumes, a failure opens it again with
  the next, longer, probe delay. A trial that never reports back fails after
  :data:`TRIAL_MAX_SECONDS`.

Values only: each method returns the next state.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from worker.timing import Backoff, Jitter

State = Literal["closed", "open", "trial"]

#: Consecutive failed turns (each after botocore's own retries) that open the breaker:
#: a command's own failure is one turn; a dependency down fails every turn at once.
FAILURE_THRESHOLD = 3
#: Between probes while open: 1 s, 2 s, 4 s … up to 20 s, each jittered within its upper
#: half. Recovery is seen within 20 s; a worker's probes to a failing service are at most
#: one per 10 s once the backoff has climbed.
PROBE_BACKOFF = Backoff(base=1.0, cap=20.0)
#: A trial that has not reported back by then counts as failed.
TRIAL_MAX_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class Breaker:
    state: State = "closed"
    #: Consecutive failed turns while closed.
    failures: int = 0
    #: Probes (trials) failed since the breaker opened.
    probes: int = 0
    #: When it opened, when the next probe is due (open), when the trial began (trial).
    opened_at: float = 0.0
    probe_at: float = 0.0
    trial_at: float = 0.0
    #: The last failure's kind (``throttled``, ``server``, ``connection``, ``refused``).
    kind: str = ""

    @property
    def failing(self) -> bool:
        """Open or trying: the dependency is judged down."""
        return self.state != "closed"

    def failed(self, now: float, kind: str, jitter: Jitter) -> Breaker:
        """A turn (or the trial, or a probe) failed on this dependency at ``now``."""
        if self.state == "closed":
            if self.failures + 1 < FAILURE_THRESHOLD:
                return replace(self, failures=self.failures + 1, kind=kind)
            return Breaker(
                "open",
                failures=self.failures + 1,
                opened_at=now,
                probe_at=now + PROBE_BACKOFF.delay(1, jitter),
                kind=kind,
            )
        if self.state == "trial":
            probes = self.probes + 1
            delay = PROBE_BACKOFF.delay(probes + 1, jitter)
            return replace(self, state="open", probes=probes, probe_at=now + delay, kind=kind)
        return replace(self, kind=kind)  # open: a turn begun before it opened, failing late

    def succeeded(self) -> Breaker:
        """A call to this dependency succeeded: it is healthy."""
        return Breaker()

    def due(self, now: float) -> bool:
        """Open and its next probe is due."""
        return self.state == "open" and now >= self.probe_at

    def trying(self, now: float) -> Breaker:
        """The probe is under way."""
        return replace(self, state="trial", trial_at=now)

    def overdue(self, now: float) -> bool:
        """A trial that should have reported back by now."""
        return self.state == "trial" and now - self.trial_at >= TRIAL_MAX_SECONDS

    def wait(self, now: float) -> float:
        """Seconds until something is due: the probe (open), the trial's bound (trial)."""
        if self.state == "open":
            return max(0.0, self.probe_at - now)
        if self.state == "trial":
            return max(0.0, self.trial_at + TRIAL_MAX_SECONDS - now)
        return float("inf")
