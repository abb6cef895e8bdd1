"""Outages: the consumer's side of a dependency every turn needs failing for everyone.

One :class:`~worker.consumer.breaker.Breaker` per dependency (DynamoDB, the model queue's
sends), judged from the turns' outcomes (:meth:`Outages.judge`). While one is failing:

- the receive loop receives nothing (a message not received keeps its receive count) and
  instead runs :meth:`Outages.probe`, which waits for the next probe and runs it;
- a turn that failed on it is held (:meth:`Outages.hold`): its message stays invisible
  (the lease heartbeat keeps extending it) and the turn runs again once the dependency
  recovers. Released, the message would be received again, by this worker or another, and
  each receive walks it towards the dead-letter queue; held, it spends none.
- the probe is one held turn run again (the real calls, at no receive's cost), or, when
  none is held, a cheap call of the consumer's own (``probes``: a Query, a
  GetQueueAttributes);
- a success closes the breaker: every held turn runs again and receiving resumes at full
  concurrency.

S3 is not a dependency here: only pointer commands and large prompts use it, and a refused
object (a 403) is that command's own failure.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable, Mapping

from worker.consumer.breaker import Breaker
from worker.delivery.outcomes import Done, Outcome, Retry
from worker.logs import get_logger
from worker.timing import Clock, Jitter, first_done

log = get_logger()

#: The dependencies of every turn, in the order a turn calls them: a turn that failed on
#: the model queue's send got its claim and Query through, so DynamoDB answered.
DEPENDENCIES = ("dynamodb", "model_queue")
#: The dependency a failed turn's AWS service names: a turn's only SQS call that can fail
#: it is the prompt's send (a failed fold request is logged and left for the next turn).
BY_SERVICE: Mapping[str, str] = {"dynamodb": "dynamodb", "sqs": "model_queue"}
#: The longest the receive loop waits in one :meth:`Outages.probe`: it beats between.
PROBE_STEP_SECONDS = 5.0

#: A cheap call to a dependency of the consumer's own; raises if it failed.
Probe = Callable[[], Awaitable[None]]
#: Called with (dependency, failing) when a dependency is judged failing or recovered.
OnChange = Callable[[str, bool], None]


class Outages:
    def __init__(
        self,
        *,
        clock: Clock,
        jitter: Jitter,
        probes: Mapping[str, Probe] | None = None,
        on_change: OnChange = lambda dependency, failing: None,
    ) -> None:
        self._clock = clock
        self._jitter = jitter
        self._probes = dict(probes or {})
        self._on_change = on_change
        self._breakers = dict.fromkeys(DEPENDENCIES, Breaker())
        self._held: dict[str, deque[asyncio.Future[None]]] = {d: deque() for d in DEPENDENCIES}
        self._changed: asyncio.Future[None] | None = None

    def failing(self) -> list[str]:
        """The dependencies judged down now."""
        return [d for d, breaker in self._breakers.items() if breaker.failing]

    def breaker(self, dependency: str) -> Breaker:
        return self._breakers[dependency]

    def changed(self) -> asyncio.Future[None]:
        """A future done at the next change of any breaker (never cancelled by it)."""
        if self._changed is None or self._changed.done():
            self._changed = asyncio.get_running_loop().create_future()
        return self._changed

    def judge(self, outcome: Outcome | None, started_at: float | None = None) -> str | None:
        """Record what a turn's outcome says of the dependencies; returns the failing one
        the turn should be held for, or None (act on the outcome as usual). A success of a
        turn that began (``started_at``) before a breaker opened says nothing of now: its
        calls may have been answered before (a done mark that failed still ends Done)."""
        if isinstance(outcome, Done):
            for dependency in DEPENDENCIES:
                self._succeed(dependency, started_at)
            return None
        if not isinstance(outcome, Retry):
            return None
        if not outcome.failure:  # in progress elsewhere: the claim was answered
            self._succeed(DEPENDENCIES[0], started_at)
            return None
        found = BY_SERVICE.get(outcome.service or "")
        if found is None:
            return None
        dependency = found
        for earlier in DEPENDENCIES[: DEPENDENCIES.index(dependency)]:
            self._succeed(earlier, started_at)
        self._fail(dependency, outcome.kind or "unknown")
        return dependency if self._breakers[dependency].failing else None

    async def hold(self, dependency: str, stopping: asyncio.Event) -> bool:
        """Wait while ``dependency`` is failing, until this turn is picked as the probe or
        the dependency recovers: True, run the turn again. False if the stop came first."""
        if self._breakers[dependency].failing:
            go: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._held[dependency].append(go)
            try:
                await first_done(go, event=stopping)
            finally:
                if not go.done():
                    go.cancel()  # skipped when a probe is picked
        return not stopping.is_set()

    async def probe(self, stopping: asyncio.Event) -> None:
        """One step of the receive loop while a dependency fails: wait for the next probe
        (at most :data:`PROBE_STEP_SECONDS`, less if a breaker changes or the stop comes),
        or run it if it is due."""
        now = self._clock.monotonic()
        for dependency, breaker in self._breakers.items():
            if breaker.overdue(now):  # the trial turn never reported back
                self._fail(dependency, breaker.kind)
        due = [d for d, breaker in self._breakers.items() if breaker.due(now)]
        if not due:
            wait = min(breaker.wait(now) for breaker in self._breakers.values())
            with contextlib.suppress(TimeoutError):
                async with self._clock.timeout(min(wait, PROBE_STEP_SECONDS)):
                    await first_done(self.changed(), event=stopping)
            return
        dependency = due[0]
        self._set(dependency, self._breakers[dependency].trying(now))
        held = self._held[dependency]
        while held:
            go = held.popleft()
            if not go.done():
                go.set_result(None)  # the turn runs again and reports through judge()
                return
        await self._call_probe(dependency)

    async def _call_probe(self, dependency: str) -> None:
        probe = self._probes.get(dependency)
        if probe is None:  # nothing to try with: let the next turns be the trial
            self._succeed(dependency)
            return
        try:
            await probe()
        except Exception as exc:
            self._fail(dependency, str(getattr(exc, "kind", None) or type(exc).__name__))
        else:
            self._succeed(dependency)

    def _succeed(self, dependency: str, started_at: float | None = None) -> None:
        breaker = self._breakers[dependency]
        if breaker.failing and started_at is not None and started_at < breaker.opened_at:
            return
        if breaker != Breaker():
            self._set(dependency, breaker.succeeded())

    def _fail(self, dependency: str, kind: str) -> None:
        now = self._clock.monotonic()
        self._set(dependency, self._breakers[dependency].failed(now, kind, self._jitter))

    def _set(self, dependency: str, breaker: Breaker) -> None:
        before = self._breakers[dependency]
        self._breakers[dependency] = breaker
        now = self._clock.monotonic()
        if breaker.state == "open" and before.state != "open":
            probe_in = round(breaker.probe_at - now, 1)
            if before.state == "closed":
                log.warning(
                    "clerk.converse_dependency_failing",
                    dependency=dependency,
                    kind=breaker.kind,
                    failures=breaker.failures,
                    probe_in=probe_in,
                )
            else:
                log.info(
                    "clerk.converse_dependency_probe_failed",
                    dependency=dependency,
                    kind=breaker.kind,
                    probes=breaker.probes,
                    probe_in=probe_in,
                )
        if before.failing and not breaker.failing:
            log.info(
                "clerk.converse_dependency_recovered",
                dependency=dependency,
                failing_seconds=round(now - before.opened_at, 1),
                probes=before.probes,
                held=len(self._held[dependency]),
            )
            held = self._held[dependency]
            while held:
                go = held.popleft()
                if not go.done():
                    go.set_result(None)
        if before.failing != breaker.failing:
            self._on_change(dependency, breaker.failing)
        if self._changed is not None and not self._changed.done() and before != breaker:
            self._changed.set_result(None)
