"""The converse stage's turn: read the history, plan (:func:`worker.planning.plan_turn`), log
the plan, send the prompt, then write what follows it: the ledger's done mark, a fold request
when one is due, the window's anchor when it moved.

Each received message yields an :data:`Outcome`; the consumer acts on it (delete,
dead-letter, or return to the queue with a delay). Nothing here deletes or logs content. A
command whose message alone cannot fit the model's context window is rejected before
anything else is read or written.

Idempotency: before forwarding, the command is claimed in the ledger (a conditional
write keyed on ``command_id``). A command already done is deleted without a second
forward; one in progress under a live lease is left for later; one whose lease expired
is taken over. The ledger keeps the message's digest with the id, so an id that comes
back with another message is rejected, never deleted as a duplicate. The one residual
window, a crash after the send and before the record is marked done, is closed by a FIFO
model queue (deduplication id = command id).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from structlog.contextvars import bound_contextvars

from worker.caching.anchor import WindowAnchor
from worker.delivery.outcomes import Done, Outcome, Rejected, Retry, retry_for
from worker.errors import RejectedCommand, RetryableError
from worker.logs import get_logger
from worker.planning import TurnPlan, plan_turn
from worker.ports import (
    CommandHold,
    CommandLedger,
    FoldClaims,
    HistoryPage,
    HistoryStore,
    MessageDigest,
    MessageSender,
    ObjectStore,
    ReceivedMessage,
    WindowAnchors,
)
from worker.settings import Settings
from worker.telemetry import hooks as telemetry
from worker.timing import REQUEST_WRITE_PASSES, discard, yield_passes
from worker.turn.commands import ConverseCommand, encode_body, parse_command, prompt_payload
from worker.turn.payloads import resolve_body
from worker.turn.plan_log import log_observed, log_plan
from worker.turn.reading import read_turn
from worker.turn.writing import (
    AnchorRidingClaims,
    fold_request_sender,
    maybe_enqueue_compaction,
    store_anchor,
)

log = get_logger()

#: Pauses between tries to mark a forwarded command done (about 16 s in all).
FINISH_RETRY_DELAYS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
#: The rejection of a command whose id the ledger holds for another message.
REUSED_ID = "command_id reused for a different message"


class History(HistoryStore, FoldClaims, WindowAnchors, Protocol):
    """The history table as the stage uses it: read a page, claim a fold request, store the
    cache-aligned window's anchor (that mode only)."""


@dataclass(frozen=True, slots=True)
class Prompt:
    """A turn's plan and the prompt payload it makes, encoded: ready to send."""

    plan: TurnPlan
    body: str


@dataclass(frozen=True, slots=True)
class Forwarded:
    """What a forwarded turn leaves to do after the prompt: the page it read (the fold
    request is planned from it) and the anchor to store, if the window re-anchored."""

    page: HistoryPage
    anchor_to_write: WindowAnchor | None = None


class ConverseStage:
    def __init__(
        self,
        *,
        history: History,
        ledger: CommandLedger,
        model_queue: MessageSender,
        compaction_queue: MessageSender,
        objects: ObjectStore,
        settings: Settings,
        lease: timedelta,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._history = history
        self._ledger = ledger
        self._model_queue = model_queue
        self._compaction_queue = compaction_queue
        self._objects = objects
        self._settings = settings
        self._plan_config = settings.plan_config
        self._context_window = settings.context_window
        self._lease = lease
        self._clock = clock
        self._sleep = sleep
        self._worker_id = uuid.uuid4().hex[:12]
        #: The command each in-flight message holds, by message id: the leases to renew.
        self._active: dict[str, CommandHold] = {}

    async def handle(self, message: ReceivedMessage) -> Outcome:
        try:
            command = parse_command(
                await resolve_body(message, self._objects, self._settings.inbound_payloads)
            )
        except RejectedCommand as exc:
            return Rejected(exc.reason)
        except RetryableError as exc:
            log.warning("clerk.converse_command_retry", error=str(exc))
            return retry_for(exc)
        # The current message is never trimmed: one that cannot fit the model is refused
        # before the ledger claims it or the history is read.
        window = self._context_window
        if window is not None and (refusal := window.refusal(command.message)) is not None:
            return Rejected(refusal)
        with bound_contextvars(
            conversation_id=command.conversation_id, command_id=command.command_id
        ):
            owner = f"{self._worker_id}/{message.message_id}/{message.receive_count}"
            try:
                return await self._handle(message, command, owner)
            except RejectedCommand as exc:  # what the history table holds refuses it
                return Rejected(exc.reason)
            except RetryableError as exc:
                log.warning("clerk.converse_command_retry", error=str(exc))
                return retry_for(exc)

    async def _handle(
        self, message: ReceivedMessage, command: ConverseCommand, owner: str
    ) -> Outcome:
        ledger = self._ledger
        hold = CommandHold(command.conversation_id, command.command_id, owner)
        # The history is read while the ledger answers the claim; the prompt leaves only
        # once the claim is the turn's. The Query's request is on its way before the claim's
        # is built: the turn needs its answer for more (the plan, the payload). A read that
        # is not needed (the claim refused) is cancelled: it writes nothing.
        reading = asyncio.create_task(self.read(command))
        try:
            await yield_passes(REQUEST_WRITE_PASSES)
            claim = await ledger.begin(
                hold, lease=self._lease, now=self._clock(), message=command.message
            )
        except BaseException:
            await discard(reading)
            raise
        if claim.state != "started":
            await discard(reading)
        if claim.state == "reused":  # a new question under an old id: never a redelivery
            return Rejected(REUSED_ID)
        if claim.state == "done":
            log.info("clerk.converse_command_duplicate")
            telemetry.duplicate_skipped()
            return Done()
        if claim.state == "busy":
            remaining = (claim.lease_until or self._clock()) - self._clock()
            log.info("clerk.converse_command_in_progress_elsewhere")
            return Retry(
                "in progress elsewhere",
                delay=max(1.0, remaining.total_seconds() + 1),
                failure=False,
            )

        self._active[message.message_id] = hold
        try:
            forwarded = await self.send(command, await reading)
        except BaseException:
            await discard(reading)  # cancelled with the turn, or failed
            self._active.pop(message.message_id, None)
            with contextlib.suppress(RetryableError):  # else the lease runs out by itself
                await ledger.abandon(hold)
            raise
        try:
            await self._finish(hold, claim.digest)
        finally:
            self._active.pop(message.message_id, None)
        await self.request_fold(command, forwarded.page, anchor=forwarded.anchor_to_write)
        return Done()

    async def _finish(self, hold: CommandHold, digest: MessageDigest | None) -> None:
        """Mark the command done, trying through a short outage (the message's lease is
        kept alive meanwhile). The prompt is out, so a failure never means a retry: that
        would forward it twice. If every try fails, the message is still deleted, and only
        a duplicate delivery after the lease could be forwarded again (RELIABILITY.md)."""
        for delay in (*FINISH_RETRY_DELAYS, None):
            try:
                await self._ledger.finish(hold.done(self._clock(), digest))
            except RetryableError as exc:
                if delay is None:
                    log.warning("clerk.converse_command_finish_failed", error=str(exc))
                    return
                await self._sleep(delay)
                continue
            return

    async def renew(self, message_ids: Iterable[str]) -> list[str]:
        """Renew the command leases of these in-flight messages; returns the ids that lost it."""
        lost = []
        for message_id in message_ids:
            hold = self._active.get(message_id)
            if hold is None:
                continue
            try:
                held = await self._ledger.renew(hold, lease=self._lease, now=self._clock())
            except RetryableError as exc:
                log.warning("clerk.converse_lease_renew_failed", error=str(exc))
                continue
            if not held:
                lost.append(message_id)
        return lost

    async def forward(self, command: ConverseCommand) -> Forwarded:
        """Read the history (one page but in rare cases), plan the turn, send the prompt
        payload, log the plan; returns the page read and the anchor to store."""
        return await self.send(command, await self.read(command))

    async def read(self, command: ConverseCommand) -> Prompt:
        """The turn's plan over the history read, and its prompt payload encoded: reads only,
        nothing is written or logged."""
        # The pace is read from the command's sent_at; the receive time only without a usable one.
        sent_at = command.sent_time or self._clock()
        config = self._plan_config
        plan = await read_turn(
            self._history,
            command.conversation_id,
            page_size=self._settings.history_page_size,
            plan=lambda page: plan_turn(page, command.message, sent_at=sent_at, config=config),
        )
        shown = (plan.summary, plan.folded_through)
        payload = prompt_payload(
            command, plan.window, plan.page.state, plan.view, shown=shown, cache=plan.cache
        )
        return Prompt(plan, encode_body(payload))

    async def send(self, command: ConverseCommand, prompt: Prompt) -> Forwarded:
        """Send the prompt payload, then log the plan (sent or not); returns the page read and
        the anchor to store."""
        plan, body = prompt.plan, prompt.body
        if (defect := command.sent_at_defect) is not None:
            log.warning("clerk.converse_sent_at_ignored", reason=defect)
        try:
            await self._model_queue.send(
                body, group_id=command.conversation_id, deduplication_id=command.command_id
            )
        finally:  # what the plan found is said once the prompt is on its way, not before
            log_plan(plan)
            telemetry.bills_dropped(len(plan.page.bills_dropped))
            if plan.aligned is not None:
                telemetry.window_anchored(plan.aligned.outcome, plan.aligned.reason)
            if plan.ttls is not None:
                telemetry.ttls_chosen(plan.ttls.counts)
        # The newest answer's bill is checked once: by the turn whose prompt went out.
        log_observed(plan)
        if plan.observed.check is not None:
            telemetry.cache_observed(plan.observed.check)
        window = plan.window
        log.info(
            "clerk.converse_prompt_forwarded",
            kept=window.kept,
            estimated_tokens=window.estimated_tokens,
            body_bytes=len(body.encode("utf-8", "surrogatepass")),
        )
        telemetry.prompt_forwarded(command, window, plan.view, plan.gap)
        return Forwarded(plan.page, plan.anchor_to_write)

    async def request_fold(
        self, command: ConverseCommand, page: HistoryPage, *, anchor: WindowAnchor | None = None
    ) -> None:
        """Ask for a fold if one is due, and store the window's new ``anchor`` if given: in
        the claim's write when the turn claims, else in one of its own. A failure of either
        waits for the next turn."""
        now = self._clock()
        riding = AnchorRidingClaims(self._history, anchor) if anchor is not None else None
        try:
            plan = await maybe_enqueue_compaction(
                command.conversation_id,
                page.messages,
                page.state,
                older_unread=page.older is not None,
                limits=self._settings.fold_limits,
                claims=riding or self._history,
                send=fold_request_sender(self._compaction_queue, command, claimed_at=now),
                now=now,
            )
        except RetryableError as exc:
            log.warning("clerk.converse_compaction_request_failed", error=str(exc))
            plan = None
        if riding is not None and not riding.carried:  # no claim won: a write of its own
            await store_anchor(self._history, command.conversation_id, riding.anchor)
        if plan is not None:
            telemetry.fold_requested()
            log.info(
                "clerk.converse_compaction_requested",
                folded_through=plan.folded_through,
                through=plan.through,
                unfolded_tokens=plan.unfolded_tokens,
            )
