"""The receive loop: poll, hand each message to the stage, act on its outcome, stop cleanly.

- Back pressure: it asks SQS for no more messages than it has free slots, and while
  work is in flight it waits until a whole batch fits (ten, or the concurrency if lower):
  a slot freed one at a time would otherwise be refilled by a ReceiveMessage of one.
- Leases (:mod:`worker.consumer.leases`) keep the visibility of the messages in hand; outcomes
  (:mod:`worker.consumer.settling`) delete, dead-letter or return them.
- Failures: a failed receive is logged and backed off; while handled messages keep failing
  on a dependency, polling slows too, so an outage does not burn receive counts towards the
  dead-letter queue. A turn that raises something unexpected (a defect) is logged by type
  and place, never content, and comes back alone: the others are not slowed.
- Outages (:mod:`worker.consumer.outages`): while a dependency every turn needs fails for
  everyone, nothing is received, the turns that failed on it are held (leases kept) and run
  again once a probe succeeds; the loop keeps beating while it probes.
- Liveness and telemetry: the worker is running once :meth:`Consumer.run` begins (``worker
  health`` fails until then); the loop and the lease heartbeat beat a :class:`Liveness` each
  time round (``worker health`` reads it); each message is handled inside a
  :meth:`Telemetry.turn` (its span, trace id and counts).
- Stop: a long poll under way is never cancelled. Cancelled on the client, it would stay
  parked on the server and take the next message sent, which would then stay invisible
  for a whole visibility timeout. It is let return (SQS ends it within its wait), and
  what it brings is released at once (visibility 0). Meanwhile in-flight work gets
  ``grace_seconds`` to finish; what it abandons is released; deletes are flushed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Protocol

from structlog.contextvars import bound_contextvars

from worker.consumer.leases import Leases
from worker.consumer.outages import Outages, Probe
from worker.consumer.pacing import (
    FAILURE_PAUSE,
    RECEIVE_BACKOFF,
    RECEIVE_RETURN_MARGIN_SECONDS,
    ConsumerPolicy,
)
from worker.consumer.settling import Outcomes
from worker.delivery.batching import MAX_BATCH
from worker.delivery.outcomes import Done, Failed, Outcome, Retry
from worker.logs import get_logger, log_failure, raised_at
from worker.ports import MessageSender, MessageSource, ReceivedMessage
from worker.telemetry.hooks import Telemetry
from worker.telemetry.liveness import Liveness
from worker.telemetry.probe import LEASE_HEARTBEAT, RECEIVE_LOOP
from worker.timing import (
    REQUEST_WRITE_PASSES,
    Clock,
    Jitter,
    LoopClock,
    equal_jitter,
    first_done,
    sleep_unless,
    wait_all_within,
    yield_passes,
)

log = get_logger()


class Stage(Protocol):
    async def handle(self, message: ReceivedMessage) -> Outcome: ...

    async def renew(self, message_ids: Iterable[str]) -> list[str]: ...


class Consumer:
    def __init__(
        self,
        *,
        source: MessageSource,
        stage: Stage,
        dead_letters: MessageSender,
        policy: ConsumerPolicy,
        clock: Clock | None = None,
        jitter: Jitter = equal_jitter,
        telemetry: Telemetry | None = None,
        liveness: Liveness | None = None,
        probes: Mapping[str, Probe] | None = None,
    ) -> None:
        self._source = source
        self._stage = stage
        self._policy = policy
        self._clock = clock = clock or LoopClock()
        self._jitter = jitter
        self._telemetry = telemetry or Telemetry(clock=clock)
        self._liveness = liveness or Liveness(clock, max_silence=float("inf"))
        self._liveness.heartbeat_every(policy.beat_seconds)
        self._leases = Leases(source=source, renew=stage.renew, policy=policy, clock=clock)
        self._outcomes = Outcomes(
            source=source,
            dead_letters=dead_letters,
            leases=self._leases,
            policy=policy,
            clock=clock,
            jitter=jitter,
            # A delete waits for those of the messages still in hand, and only for them.
            coming=lambda: len(self._in_flight),
        )
        self._outages = Outages(
            clock=clock, jitter=jitter, probes=probes, on_change=self._telemetry.dependency
        )
        self._stopping = asyncio.Event()
        self._in_flight: dict[asyncio.Task[None], ReceivedMessage] = {}
        #: Messages one receive asks for when the worker is busy: a full batch.
        self._batch = min(MAX_BATCH, policy.concurrency)
        self._failure_streak = 0
        #: A receive still under way when the stop came, and when to stop waiting for it.
        self._poll: asyncio.Future[list[ReceivedMessage]] | None = None
        self._poll_deadline = 0.0

    async def run(self, stopping: asyncio.Event) -> None:
        """Consume until ``stopping`` is set, then stop as the module says and return."""
        policy = self._policy
        self._stopping = stopping
        self._liveness.running()
        heartbeat_done = asyncio.Event()
        heartbeat = asyncio.create_task(
            self._leases.heartbeat(heartbeat_done, lambda: self._liveness.beat(LEASE_HEARTBEAT)),
            name="lease-heartbeat",
        )
        log.info(
            "clerk.converse_worker_started",
            concurrency=policy.concurrency,
            visibility_timeout=policy.visibility_timeout,
            stop_seconds=policy.stop_seconds,
        )
        try:
            await self._consume(stopping)
        finally:
            await asyncio.gather(self._settle_poll(), self._drain())
            heartbeat_done.set()
            await heartbeat
            await self._outcomes.close()
            log.info("clerk.converse_worker_stopped")

    async def _consume(self, stopping: asyncio.Event) -> None:
        receive_failures = 0
        while not stopping.is_set():
            self._liveness.beat(RECEIVE_LOOP)  # each time round: at least once per long poll
            if self._outages.failing():  # no receives: probe, within PROBE_STEP_SECONDS
                await self._outages.probe(stopping)
                continue
            if self._policy.concurrency - len(self._in_flight) < self._batch and self._in_flight:
                await first_done(*self._in_flight, self._outages.changed(), event=stopping)
                continue
            if self._failure_streak:  # once per receive, not per slot freed
                pause = FAILURE_PAUSE.delay(self._failure_streak, self._jitter)
                if await sleep_unless(self._clock, stopping, pause):
                    return
            free = self._policy.concurrency - len(self._in_flight)
            try:
                messages = await self._receive(min(MAX_BATCH, free), stopping)
            except Exception as exc:
                receive_failures += 1
                delay = RECEIVE_BACKOFF.delay(receive_failures, self._jitter)
                log_failure("clerk.converse_receive_failed", exc, retry_in=delay)
                await sleep_unless(self._clock, stopping, delay)
                continue
            receive_failures = 0
            for message in messages:
                self._start(message)
            if messages:
                # The turns just started send their first requests (the Query, then the
                # claim) before the next poll's request is built: not behind its CPU.
                await yield_passes(2 * REQUEST_WRITE_PASSES + 1)

    async def _receive(self, max_messages: int, stopping: asyncio.Event) -> list[ReceivedMessage]:
        """One long poll. If the stop comes first, the poll is handed to the stop, which lets
        it return and releases what it brings; the loop gets nothing."""
        started = self._clock.monotonic()
        poll = asyncio.ensure_future(self._source.receive(max_messages, self._policy.wait_seconds))
        try:
            await first_done(poll, event=stopping)
        except BaseException:
            self._hand_over(poll, started)
            raise
        if stopping.is_set():
            self._hand_over(poll, started)
            return []
        return poll.result()

    def _hand_over(self, poll: asyncio.Future[list[ReceivedMessage]], started: float) -> None:
        self._poll = poll
        self._poll_deadline = started + self._policy.wait_seconds + RECEIVE_RETURN_MARGIN_SECONDS

    async def _settle_poll(self) -> None:
        """Wait for the poll under way at the stop, then release what it brought."""
        poll, self._poll = self._poll, None
        if poll is None:
            return
        within = self._poll_deadline - self._clock.monotonic()
        if await wait_all_within(self._clock, {poll}, within):
            # Past its wait and margin SQS has ended the poll: nothing can be parked now.
            poll.cancel()
            await asyncio.wait({poll})
            log.warning("clerk.converse_receive_abandoned", waited=self._policy.wait_seconds)
            return
        if poll.cancelled():
            return
        if (exc := poll.exception()) is not None:
            log_failure("clerk.converse_receive_failed", exc)
            return
        await self._leases.release(poll.result())

    def _start(self, message: ReceivedMessage) -> None:
        self._leases.hold(message)
        self._telemetry.received(message)
        task = asyncio.create_task(self._process(message, self._clock.monotonic()))
        self._in_flight[task] = message
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        message = self._in_flight.pop(task, None)
        if message is not None:
            self._leases.drop(message.message_id)
            self._outcomes.nudge()  # one fewer delete to wait for

    async def _process(self, message: ReceivedMessage, received_at: float) -> None:
        with (
            bound_contextvars(message_id=message.message_id, receive_count=message.receive_count),
            self._telemetry.turn(message, received_at) as turn,
        ):
            started = self._clock.monotonic()
            outcome = await self._handle(message)
            # A dependency failing for everyone: hold the message (its lease kept) and run
            # the turn again once it recovers, instead of spending a receive on it.
            while (dependency := self._outages.judge(outcome, started)) is not None:
                turn.held()
                if not await self._outages.hold(dependency, self._stopping):
                    turn.finished(outcome)
                    await self._leases.release([message])
                    return
                started = self._clock.monotonic()
                outcome = await self._handle(message)
            turn.finished(outcome)
            if isinstance(outcome, Done):
                self._failure_streak = 0
            elif isinstance(outcome, Retry) and outcome.failure:
                self._failure_streak += 1
            try:
                await self._outcomes.act(message, outcome)
            except Exception as exc:
                log_failure("clerk.converse_outcome_failed", exc)

    async def _handle(self, message: ReceivedMessage) -> Outcome:
        """The stage's outcome; :class:`Failed` for a defect, logged by its type and where it
        was raised (never its text). A defect is this command's alone: it neither slows the
        polling nor counts against a dependency."""
        try:
            return await self._stage.handle(message)
        except Exception as exc:
            where = raised_at(exc)
            log.error("clerk.converse_command_failed", error_type=type(exc).__name__, where=where)
            return Failed(f"{type(exc).__name__} at {where}")

    async def _drain(self) -> None:
        if not self._in_flight:
            return
        log.info("clerk.converse_worker_draining", in_flight=len(self._in_flight))
        unfinished = await wait_all_within(
            self._clock, set(self._in_flight), self._policy.grace_seconds
        )
        if not unfinished:
            return
        abandoned = [message for task, message in self._in_flight.items() if task in unfinished]
        for task in unfinished:
            task.cancel()
        await asyncio.wait(unfinished)
        log.warning("clerk.converse_drain_timed_out", unfinished=len(unfinished))
        await self._leases.release(abandoned)
