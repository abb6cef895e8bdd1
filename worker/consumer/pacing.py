"""How the consumer paces itself: the knobs :class:`~worker.settings.Settings` gives it, the
backoffs it derives from them, and how long a stop may take.

The arithmetic of a stop (docs/RELIABILITY.md): after SIGTERM the receive under way is let
return (within ``RECEIVE_WAIT_SECONDS``, plus a margin for the reply) and in-flight work gets
``SHUTDOWN_GRACE_SECONDS``, both at once; then a few final calls release what is left and
flush the deletes. The platform's kill must come after all of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from worker.timing import Backoff, Jitter, equal_jitter

#: After a failed receive, before the next.
RECEIVE_BACKOFF = Backoff(base=0.5, cap=20.0)
#: Before each receive while handled messages keep failing: short, but enough that an
#: outage does not cycle every queued message through its receive count.
FAILURE_PAUSE = Backoff(base=0.25, cap=5.0)
#: How long a finished message's delete may wait for those of the messages still in hand
#: (it leaves at once when none are): long enough that the deletes of turns finishing in
#: several groups still leave in tens. It holds no slot (the turn is over), but a delete left
#: waiting lands on the next lone command's path, so it waits only for deletes to come.
DELETE_LINGER_SECONDS = 0.2
#: On stop, the receive under way gets its long-poll wait plus this to bring back what it
#: holds. SQS ends a poll at its WaitTimeSeconds, so past this no poll of ours is parked.
RECEIVE_RETURN_MARGIN_SECONDS = 2.0
#: Allowed for the final calls of a stop (release, delete flush): milliseconds on a healthy
#: endpoint; this covers a slow connect (5 s timeout) retried.
FINAL_CALLS_SECONDS = 20.0


@dataclass(frozen=True, slots=True)
class ConsumerPolicy:
    """The consumer's knobs, without defaults: ``Settings.consumer_policy`` builds it (the
    defaults live there) with the converse queue's visibility timeout read at start-up."""

    concurrency: int
    wait_seconds: int
    grace_seconds: float
    visibility_timeout: int
    retry_base_seconds: float
    retry_max_seconds: float
    lease_max_seconds: float
    #: The receives after which SQS dead-letters a message (None: not known). On that last
    #: receive a failed turn is dead-lettered by the consumer itself, with its reason.
    max_receive_count: int | None = None

    def last_receive(self, receive_count: int) -> bool:
        """Whether a message received ``receive_count`` times will not be delivered again."""
        return self.max_receive_count is not None and receive_count >= self.max_receive_count

    @property
    def beat_seconds(self) -> float:
        """The lease heartbeat's period: a third of the visibility timeout."""
        return max(1.0, self.visibility_timeout / 3)

    def retry_delay(self, receive_count: int, jitter: Jitter = equal_jitter) -> int:
        """Seconds a failed message stays away: exponential in its receive count, jittered."""
        backoff = Backoff(base=self.retry_base_seconds, cap=self.retry_max_seconds)
        return max(1, round(backoff.delay(receive_count, jitter)))

    @property
    def stop_seconds(self) -> float:
        """The longest a stop takes before its final calls: the receive under way and the
        in-flight work are waited for at the same time."""
        return max(self.wait_seconds + RECEIVE_RETURN_MARGIN_SECONDS, self.grace_seconds)

    @property
    def kill_after_seconds(self) -> int:
        """The shortest stop timeout a platform may give this worker (ECS ``stopTimeout``,
        Kubernetes ``terminationGracePeriodSeconds``)."""
        return math.ceil(self.stop_seconds + FINAL_CALLS_SECONDS)
