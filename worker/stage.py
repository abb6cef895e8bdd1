"""The converse stage's turn: command in, one Query, the window, the prompt out, maybe a fold.

Each received message yields an :data:`Outcome`; the consumer acts on it (delete,
dead-letter, or leave for a retry). Nothing here deletes or logs content.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from structlog.contextvars import bound_contextvars

from worker.commands import ConverseCommand, encode_body, parse_command, prompt_payload
from worker.errors import RejectedCommand, RetryableError
from worker.logs import get_logger
from worker.memory import bound_history, fold_gap
from worker.memory.compaction import maybe_enqueue_compaction
from worker.ports import FoldClaims, HistoryStore, MessageSender, ReceivedMessage
from worker.settings import Settings

log = get_logger()


@dataclass(frozen=True, slots=True)
class Done:
    """Served: the prompt payload was sent; delete the command."""


@dataclass(frozen=True, slots=True)
class Rejected:
    """Never servable: dead-letter it with the reason, then delete it."""

    reason: str


@dataclass(frozen=True, slots=True)
class Retry:
    """Not served this time: leave it to come back."""

    error: str


Outcome = Done | Rejected | Retry


class History(HistoryStore, FoldClaims, Protocol):
    """The history table as the stage uses it: read a page, claim a fold request."""


class ConverseStage:
    def __init__(
        self,
        *,
        history: History,
        model_queue: MessageSender,
        compaction_queue: MessageSender,
        settings: Settings,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._history = history
        self._model_queue = model_queue
        self._compaction_queue = compaction_queue
        self._settings = settings
        self._clock = clock

    async def handle(self, message: ReceivedMessage) -> Outcome:
        try:
            command = parse_command(message.body)
        except RejectedCommand as exc:
            return Rejected(exc.reason)
        with bound_contextvars(
            conversation_id=command.conversation_id, command_id=command.command_id
        ):
            try:
                await self.serve(command)
            except RetryableError as exc:
                log.warning("clerk.converse_command_retry", error=str(exc))
                return Retry(str(exc))
        return Done()

    async def serve(self, command: ConverseCommand) -> None:
        """Load one page, bound it, forward the prompt, then ask for a fold if one is due."""
        settings = self._settings
        page = await self._history.load_page(command.conversation_id, settings.history_page_size)
        if page.malformed:
            log.warning(
                "clerk.converse_history_entries_dropped",
                count=len(page.malformed),
                reasons=dict(Counter(page.malformed)),
            )
        window = bound_history(page.messages, settings.window_limits)
        if window.dropped:
            log.info(
                "clerk.converse_history_window_bounded",
                dropped=window.dropped,
                kept=window.kept,
                trimmed=window.trimmed,
                estimated_tokens=window.estimated_tokens,
                floor_overrode_budget=window.floor_overrode_budget,
            )
        gap = fold_gap(window, page.state.folded_through)
        if gap is not None:
            log.warning(
                "clerk.converse_history_fold_gap",
                unfolded_dropped=gap.count,
                first_seq=gap.first_seq,
                last_seq=gap.last_seq,
            )

        body = encode_body(prompt_payload(command, window, page.state))
        await self._model_queue.send(
            body, group_id=command.conversation_id, deduplication_id=command.command_id
        )
        log.info(
            "clerk.converse_prompt_forwarded",
            kept=window.kept,
            estimated_tokens=window.estimated_tokens,
            body_bytes=len(body.encode("utf-8", "surrogatepass")),
        )

        try:
            plan = await maybe_enqueue_compaction(
                command,
                page.messages,
                page.state,
                limits=settings.fold_limits,
                claims=self._history,
                queue=self._compaction_queue,
                now=self._clock(),
            )
        except RetryableError as exc:
            # The prompt is out; the next turn re-plans the fold, so this is not worth a retry.
            log.warning("clerk.converse_compaction_request_failed", error=str(exc))
            return
        if plan is not None:
            log.info(
                "clerk.converse_compaction_requested",
                folded_through=plan.folded_through,
                through=plan.through,
                unfolded_tokens=plan.unfolded_tokens,
            )
