"""The turns of each received batch, and how many are still on their way to a batch call.

The consumer starts the turns of a received batch (a *cohort*) together, and their prompts
reach the model queue's batcher as each turn's claim and Query come back. On a busy worker
those arrivals spread further than any fixed linger (each turn's CPU runs in between),
which cut a cohort's prompts into halves and thirds, and its done marks and deletes after
them; on an idle one a fixed linger only delays a lone prompt. So the batchers are told
how many turns they can still expect (:class:`worker.delivery.batching.Batcher`'s ``coming``):

- :meth:`Cohorts.sends_coming`: the turns still before their send, in the cohorts that
  have begun sending. A prompt batch waits exactly for the rest of its cohort (and any
  other cohort already sending), up to its cap, and a lone prompt leaves at once. A
  cohort that has not begun sending is not waited for: batches do not chain from one
  cohort to the next.
- :meth:`Cohorts.marks_coming`: the same for done marks, so a cohort's marks leave in one
  write even when its prompts left in two.

Waiting for the rest of a cohort costs the worker no throughput: the consumer receives a
new batch only once a whole batch of slots is free, so it waits for the cohort anyway.

A turn counts from the moment the consumer hands its message to the stage until it sends
(marks), or ends without (a duplicate, a command busy elsewhere, a rejection, a failure),
when the batcher waiting for it is nudged. The turn is known by its task's context, and
its cohort by its message id, so neither the stage nor the consumer changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Unpack

from worker.consumer.loop import Stage
from worker.delivery.outcomes import Outcome
from worker.ports import (
    CommandLedger,
    DeleteFailure,
    DoneMark,
    ForwardingLedger,
    MessageSender,
    MessageSource,
    ReceivedMessage,
    SendOptions,
)


@dataclass(slots=True)
class _Cohort:
    turns: int = 0  # started and not ended
    before_send: int = 0
    before_mark: int = 0
    sending: bool = False  # a member has sent
    marking: bool = False  # a member has marked


@dataclass(slots=True)
class _Turn:
    cohort: _Cohort
    sent: bool = False
    marked: bool = False


class Cohorts:
    """Where the turns of each cohort are; messages received but never started (released
    at a stop) are forgotten with the process."""

    def __init__(self) -> None:
        self._by_message: dict[str, _Cohort] = {}
        self._cohorts: list[_Cohort] = []
        self._turn: ContextVar[_Turn | None] = ContextVar("cohort_turn", default=None)
        self._nudge_sends: list[Callable[[], None]] = []
        self._nudge_marks: list[Callable[[], None]] = []

    def sends_coming(self) -> int:
        return sum(c.before_send for c in self._cohorts if c.sending)

    def marks_coming(self) -> int:
        return sum(c.before_mark for c in self._cohorts if c.marking)

    def on_give_up(
        self, *, sends: Callable[[], None], marks: Callable[[], None] | None = None
    ) -> None:
        """Call these when a turn ends without sending, or without marking (a nudge)."""
        self._nudge_sends.append(sends)
        if marks is not None:
            self._nudge_marks.append(marks)

    def source(self, source: MessageSource) -> MessageSource:
        """``source`` whose receives form cohorts."""
        return _CohortSource(self, source)

    def stage(self, stage: Stage) -> Stage:
        """``stage`` with each turn counted from its start until it ends."""
        return _CountedStage(self, stage)

    def sender(self, sender: MessageSender) -> MessageSender:
        """``sender`` that counts the turn sending through it as sent, before it sends."""
        return _CountedSender(self, sender)

    def ledger(self, ledger: CommandLedger) -> CommandLedger:
        """``ledger`` that counts the turn marking done through it as marked."""
        return _CountedLedger(self, ledger)

    def received(self, messages: Sequence[ReceivedMessage]) -> None:
        cohort = _Cohort()
        for message in messages:
            self._by_message[message.message_id] = cohort

    def start(self, message_id: str) -> _Turn:
        cohort = self._by_message.get(message_id) or _Cohort()
        if not cohort.turns:
            self._cohorts.append(cohort)
        cohort.turns += 1
        cohort.before_send += 1
        cohort.before_mark += 1
        turn = _Turn(cohort)
        self._turn.set(turn)
        return turn

    def sent(self) -> None:
        turn = self._turn.get()
        if turn is not None and not turn.sent:
            turn.sent, turn.cohort.sending = True, True
            turn.cohort.before_send -= 1

    def marked(self) -> None:
        turn = self._turn.get()
        if turn is not None and not turn.marked:
            turn.marked, turn.cohort.marking = True, True
            turn.cohort.before_mark -= 1

    def end(self, message_id: str, turn: _Turn) -> None:
        cohort = turn.cohort
        if not turn.sent:
            turn.sent = True
            cohort.before_send -= 1
            _call(self._nudge_sends)
        if not turn.marked:
            turn.marked = True
            cohort.before_mark -= 1
            _call(self._nudge_marks)
        self._by_message.pop(message_id, None)
        cohort.turns -= 1
        if not cohort.turns:
            self._cohorts.remove(cohort)


def _call(listeners: Iterable[Callable[[], None]]) -> None:
    for listener in listeners:
        listener()


class _CohortSource:
    def __init__(self, cohorts: Cohorts, source: MessageSource) -> None:
        self._cohorts = cohorts
        self._source = source

    async def receive(self, max_messages: int, wait_seconds: int) -> list[ReceivedMessage]:
        messages = await self._source.receive(max_messages, wait_seconds)
        self._cohorts.received(messages)
        return messages

    async def delete_batch(self, messages: Sequence[ReceivedMessage]) -> list[DeleteFailure]:
        return await self._source.delete_batch(messages)

    async def change_visibility_batch(
        self, messages: Sequence[ReceivedMessage], timeout_seconds: int
    ) -> list[DeleteFailure]:
        return await self._source.change_visibility_batch(messages, timeout_seconds)


class _CountedStage:
    def __init__(self, cohorts: Cohorts, stage: Stage) -> None:
        self._cohorts = cohorts
        self._stage = stage

    async def handle(self, message: ReceivedMessage) -> Outcome:
        turn = self._cohorts.start(message.message_id)
        try:
            return await self._stage.handle(message)
        finally:
            self._cohorts.end(message.message_id, turn)

    async def renew(self, message_ids: Iterable[str]) -> list[str]:
        return await self._stage.renew(message_ids)


class _CountedSender:
    def __init__(self, cohorts: Cohorts, sender: MessageSender) -> None:
        self._cohorts = cohorts
        self._sender = sender

    async def send(self, body: str, **options: Unpack[SendOptions]) -> str:
        self._cohorts.sent()
        return await self._sender.send(body, **options)


class _CountedLedger(ForwardingLedger):
    def __init__(self, cohorts: Cohorts, ledger: CommandLedger) -> None:
        super().__init__(ledger)
        self._cohorts = cohorts

    async def finish(self, mark: DoneMark) -> None:
        self._cohorts.marked()
        await super().finish(mark)
