"""Turns that may still send a prompt: what lets a prompt batch wait for its peers.

The consumer starts the turns of a received batch together, and their prompts reach the
model queue's batcher as each turn's claim and Query come back. On a busy worker those
arrivals spread further than any fixed linger (each turn's own CPU is spent in between),
which cut the batch into halves and thirds; on an idle one a fixed linger only delays a
lone prompt. So the batcher is told how many turns are still on their way to a send
(:class:`worker.batching.Batcher`'s ``coming``): it waits exactly while some are (up to its
cap) and sends a lone prompt at once.

:class:`PendingSends` counts them: a turn counts from the moment the consumer hands its
message to the stage until it sends its prompt, or ends without one (a duplicate, a
command busy elsewhere, a rejection, a failure), when the batcher is nudged to look again.
The turn is known by its task's context, so neither the stage nor the consumer changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass

from worker.consumer import Stage
from worker.outcomes import Outcome
from worker.ports import MessageSender, ReceivedMessage


@dataclass(slots=True)
class _Turn:
    pending: bool = True


class PendingSends:
    """The number of turns that may still send a prompt; callable, as ``coming`` is."""

    def __init__(self) -> None:
        self._count = 0
        self._turn: ContextVar[_Turn | None] = ContextVar("pending_send", default=None)
        self._listeners: list[Callable[[], None]] = []

    def __call__(self) -> int:
        return self._count

    def on_give_up(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` when a turn ends without sending (a batcher's ``nudge``)."""
        self._listeners.append(listener)

    def stage(self, stage: Stage) -> Stage:
        """``stage`` with each turn counted from its start until it sends or ends."""
        return _CountedStage(self, stage)

    def sender(self, sender: MessageSender) -> MessageSender:
        """``sender`` that uncounts the turn sending through it, before it sends."""
        return _CountedSender(self, sender)

    def _start(self) -> _Turn:
        turn = _Turn()
        self._turn.set(turn)
        self._count += 1
        return turn

    def _sent(self) -> None:
        turn = self._turn.get()
        if turn is not None and turn.pending:
            turn.pending = False
            self._count -= 1

    def _end(self, turn: _Turn) -> None:
        if turn.pending:
            turn.pending = False
            self._count -= 1
            for listener in self._listeners:
                listener()


class _CountedStage:
    def __init__(self, pending: PendingSends, stage: Stage) -> None:
        self._pending = pending
        self._stage = stage

    async def handle(self, message: ReceivedMessage) -> Outcome:
        turn = self._pending._start()
        try:
            return await self._stage.handle(message)
        finally:
            self._pending._end(turn)

    async def renew(self, message_ids: Iterable[str]) -> list[str]:
        return await self._stage.renew(message_ids)


class _CountedSender:
    def __init__(self, pending: PendingSends, sender: MessageSender) -> None:
        self._pending = pending
        self._sender = sender

    async def send(
        self,
        body: str,
        *,
        group_id: str,
        deduplication_id: str,
        attributes: Mapping[str, str | int] | None = None,
    ) -> str:
        self._pending._sent()
        return await self._sender.send(
            body, group_id=group_id, deduplication_id=deduplication_id, attributes=attributes
        )
