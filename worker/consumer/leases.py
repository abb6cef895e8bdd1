"""Leases: the visibility of the messages a worker holds, kept up while it works on them.

While a message is handled its visibility is extended, one ``ChangeMessageVisibilityBatch``
per beat for every ten messages that would otherwise expire before the next beat, up to
``lease_max_seconds`` in all, and the command leases that go with them are renewed. A
receipt handle SQS no longer knows is dropped. A message the worker will not finish is
released (visibility 0), so another worker has it at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from worker.consumer.pacing import ConsumerPolicy
from worker.delivery.batching import MAX_BATCH
from worker.logs import get_logger, log_failure
from worker.ports import DeleteFailure, MessageSource, ReceivedMessage
from worker.timing import Clock, sleep_unless

log = get_logger()

#: Codes with which SQS says a receipt handle is no longer this worker's to extend.
STALE_RECEIPT_CODES = frozenset(
    {"ReceiptHandleIsInvalid", "MessageNotInflight", "InvalidParameterValue"}
)

#: Renews the command leases of these messages; returns the ids whose lease was lost.
Renew = Callable[[Iterable[str]], Awaitable[list[str]]]


@dataclass(slots=True)
class Lease:
    message: ReceivedMessage
    received_at: float
    visible_until: float
    capped: bool = False


class Leases:
    def __init__(
        self, *, source: MessageSource, renew: Renew, policy: ConsumerPolicy, clock: Clock
    ) -> None:
        self._source = source
        self._renew = renew
        self._policy = policy
        self._clock = clock
        self._held: dict[str, Lease] = {}

    def hold(self, message: ReceivedMessage) -> None:
        """Start the lease of a message just received."""
        now = self._clock.monotonic()
        self._held[message.message_id] = Lease(
            message, received_at=now, visible_until=now + self._policy.visibility_timeout
        )

    def drop(self, message_id: str) -> None:
        self._held.pop(message_id, None)

    async def heartbeat(
        self, done: asyncio.Event, on_beat: Callable[[], None] = lambda: None
    ) -> None:
        """Beat every ``beat_seconds`` until ``done`` is set, calling ``on_beat`` after each
        (the liveness signal). A beat that fails is logged by type and the next one comes on
        time: the heartbeat itself never ends on an error."""
        while not await sleep_unless(self._clock, done, self._policy.beat_seconds):
            try:
                await self.beat()
            except Exception as exc:
                log_failure("clerk.converse_heartbeat_failed", exc)
            on_beat()

    async def beat(self) -> None:
        """Extend every held message that would expire before the next beat, and renew the
        command leases of those SQS extended."""
        policy = self._policy
        now = self._clock.monotonic()
        due = []
        for lease in list(self._held.values()):
            if lease.visible_until - now > 2 * policy.beat_seconds:
                continue
            if now - lease.received_at + policy.visibility_timeout > policy.lease_max_seconds:
                if not lease.capped:
                    lease.capped = True
                    log.warning(
                        "clerk.converse_lease_cap_reached",
                        message_id=lease.message.message_id,
                        lease_max_seconds=policy.lease_max_seconds,
                    )
                continue
            due.append(lease)
        extended = await self.set_visibility(
            [lease.message for lease in due],
            policy.visibility_timeout,
            "clerk.converse_lease_extend_failed",
        )
        for lease in due:
            if lease.message.message_id in extended:
                lease.visible_until = now + policy.visibility_timeout
        if extended:
            for message_id in await self._renew(extended):
                log.warning("clerk.converse_command_lease_lost", message_id=message_id)

    async def release(self, messages: Sequence[ReceivedMessage]) -> None:
        """Make messages this worker will not finish visible again at once."""
        released = await self.set_visibility(messages, 0, "clerk.converse_release_failed")
        if released:
            log.info("clerk.converse_messages_released", count=len(released))

    async def set_visibility(
        self, messages: Sequence[ReceivedMessage], seconds: int, failure_event: str
    ) -> list[str]:
        """Change visibility in batches of ten; returns the ids SQS accepted, in order. A
        failed call is logged and skipped; stale receipt handles are dropped, not retried."""
        accepted: list[str] = []
        for start in range(0, len(messages), MAX_BATCH):
            batch = messages[start : start + MAX_BATCH]
            try:
                failures = await self._source.change_visibility_batch(batch, seconds)
            except Exception as exc:
                log_failure(failure_event, exc, count=len(batch))
                continue
            log_refused(failure_event, failures)
            refused = {failure.message_id for failure in failures}
            for failure in failures:
                if failure.code in STALE_RECEIPT_CODES:
                    self.drop(failure.message_id)
            accepted.extend(m.message_id for m in batch if m.message_id not in refused)
        return accepted


def log_refused(event: str, failures: Iterable[DeleteFailure]) -> None:
    """One event per entry SQS refused in a batch call: checked, never assumed away."""
    for failure in failures:
        log.warning(event, message_id=failure.message_id, code=failure.code)
