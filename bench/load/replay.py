"""The benchmark's conversations replayed from their first message, one exchange a turn.

Turn ``t`` of a conversation sends counsel's question ``2t - 1`` as the current message
over the history stored before it (seqs ``1 .. 2t - 2``); then the writer stores the
question and its answer (seq ``2t``). The conversations are the workload's own
(:func:`bench.load.workload.mixed_conversations`: 200 legal matters of 20-1,000
messages, the same text source).

Around the turns, everything is scripted and deterministic, so every contender sees the
same schedule whatever order the conversations run in:

- :class:`ScriptedCompactor`: each compaction request lands 1-3 turns after the turn that
  sent it (seeded per conversation and ``through``), the fold mark only moving forward;
- :func:`fold_summary`: the summary a fold writes, 1,200-2,400 characters (300-600
  estimated tokens), cut from clause-like text seeded per conversation and mark;
- :func:`pause`: the seconds between two turns of one conversation under a named model
  (:data:`PAUSE_MODELS`), seeded per conversation: what the prompt cache's TTL meets.

Each turn is decided by the stage's own code (:func:`replay_plans`): the history table in
memory (:class:`ReplayedHistory`) read by :func:`worker.turn.reading.read_turn`, each page
planned by :func:`worker.planning.plan_turn`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Coroutine, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import cache, partial
from typing import Any, TypeVar, cast

from bench.load.workload import corpus, mixed_conversations
from worker.caching.anchor import WindowAnchor
from worker.memory import (
    FoldLimits,
    FoldState,
    HistoryMessage,
    estimate_tokens,
    plan_compaction,
    trim_message,
)
from worker.planning import PlanConfig, TurnPlan, plan_turn
from worker.ports import HistoryPage
from worker.settings import Settings
from worker.turn.reading import read_turn

T = TypeVar("T")

#: The replay's clock starts here (any fixed instant: only differences matter).
START = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)

#: Pause models, by name: what each one means (the report quotes these lines).
PAUSE_MODELS: dict[str, str] = {
    "sessions": "counsel works in sessions of about 20 questions: between two questions "
    "30 s-3 min (uniform: read the answer, type the next question); one gap in 20 is a "
    "break between sessions, 1-16 h (log-uniform)",
    "brisk-sessions": "one long session: every gap 30 s-3 min (uniform), no breaks",
    "interrupted": "sessions as above, but a third of the gaps within a session are "
    "interruptions of 5-30 min (uniform: a call, a look at the contract itself)",
    "cold": "every gap 6-60 min (uniform): the 5-minute cache never survives a pause",
    "deliberate": "sessions as above, but the gaps within a session lognormal (median "
    "4 min, sigma 0.8, clipped to 20 s-60 min): a long answer read, a clause checked",
    "mixed": "each conversation draws a profile: 40% brisk (sessions: 30 s-3 min), 30% "
    "deliberate, 20% interrupted, 10% cold, each with its breaks between sessions as above",
}


def pause(rng: random.Random, model: str) -> float:
    """Seconds between two turns of one conversation under ``model``."""
    roll = rng.random()
    if model == "sessions":
        if roll < 0.05:
            return math.exp(rng.uniform(math.log(3_600), math.log(16 * 3_600)))
        return rng.uniform(30, 180)
    if model == "brisk-sessions":
        return rng.uniform(30, 180)
    if model == "interrupted":
        if roll < 0.05:
            return math.exp(rng.uniform(math.log(3_600), math.log(16 * 3_600)))
        return rng.uniform(300, 1_800) if rng.random() < 1 / 3 else rng.uniform(30, 180)
    if model == "cold":
        return rng.uniform(360, 3_600)
    if model == "deliberate":
        if roll < 0.05:
            return math.exp(rng.uniform(math.log(3_600), math.log(16 * 3_600)))
        return min(3_600.0, max(20.0, 240.0 * math.exp(rng.gauss(0.0, 0.8))))
    raise ValueError(f"unknown pause model {model!r}")


#: The ``mixed`` population's profiles and their shares.
MIXED_PROFILES: tuple[tuple[str, float], ...] = (
    ("sessions", 0.4),
    ("deliberate", 0.3),
    ("interrupted", 0.2),
    ("cold", 0.1),
)


def pace_profile(conversation_id: str, model: str, *, seed: int = 11) -> str:
    """The pause model one conversation follows: ``model`` itself, or under ``mixed`` the
    profile it draws (seeded per conversation)."""
    if model != "mixed":
        return model
    roll = random.Random(f"profile/{seed}/{conversation_id}").random()
    for profile, share in MIXED_PROFILES:
        if roll < share:
            return profile
        roll -= share
    return MIXED_PROFILES[-1][0]


def turn_times(conversation_id: str, turns: int, model: str, *, seed: int = 11) -> list[float]:
    """Seconds from the replay's start at which each turn (1..turns) is sent: the sum of
    the pauses before it, seeded per conversation (the same for every contender)."""
    rng = random.Random(f"pauses/{seed}/{conversation_id}/{model}")
    model = pace_profile(conversation_id, model, seed=seed)
    at, times = 0.0, []
    for _ in range(turns):
        at += pause(rng, model)
        times.append(at)
    return times


@dataclass(frozen=True, slots=True)
class ReplayedConversation:
    """One conversation, all its messages oldest first (seq ``i + 1`` at index ``i``)."""

    conversation_id: str
    messages: tuple[HistoryMessage, ...]

    @property
    def turns(self) -> int:
        return len(self.messages) // 2

    def question(self, turn: int) -> HistoryMessage:
        """Counsel's question of ``turn``: the command's current message."""
        return self.messages[2 * turn - 2]

    def history(self, turn: int) -> tuple[HistoryMessage, ...]:
        """What is stored when ``turn`` is sent, oldest first."""
        return self.messages[: 2 * turn - 2]

    def at(self, times: Sequence[float]) -> ReplayedConversation:
        """The same conversation, each question and answer stamped (``created_at``) with the
        time of its turn, ``times[t - 1]`` seconds into the replay for turn ``t``."""
        stamped = (replace(m, created_at=stamp(times[(m.seq - 1) // 2])) for m in self.messages)
        return ReplayedConversation(self.conversation_id, tuple(stamped))

    def cumulative_tokens(self, message_max_tokens: int) -> list[int]:
        """Estimated tokens (each message as the window would trim it) of the messages
        before seq ``s``, at index ``s - 1``; one more entry for the whole conversation."""
        out = [0]
        for message in self.messages:
            trimmed = trim_message(message.content, message_max_tokens)
            out.append(out[-1] + estimate_tokens(trimmed))
        return out


def replayed_conversations(count: int, *, seed: int = 11) -> list[ReplayedConversation]:
    """The workload's first ``count`` conversations (as :func:`mixed_conversations` builds
    them with ``seed``), to be replayed from their first message."""
    built, _ = mixed_conversations(count, seed=seed)
    return [ReplayedConversation(c.conversation_id, tuple(messages)) for c, messages in built]


@cache
def _summary_text(seed: int) -> str:
    return corpus(random.Random(f"summaries/{seed}"))


def fold_summary(conversation_id: str, folded_through: int, *, seed: int = 11) -> str:
    """The summary the scripted compactor writes when the fold reaches ``folded_through``:
    1,200-2,400 characters (300-600 estimated tokens), the same for every contender."""
    rng = random.Random(f"summary/{seed}/{conversation_id}/{folded_through}")
    text = _summary_text(seed)
    size = rng.randint(1_200, 2_400)
    start = rng.randrange(0, len(text) - size)
    return text[start : start + size].strip() or "Summary."


@dataclass
class ScriptedCompactor:
    """The compactor of one conversation: a request sent at turn ``t`` for ``through``
    lands before turn ``t + lag`` (lag 1-3, seeded per conversation and ``through``),
    folding up to ``through``; the mark only moves forward (a request already covered
    changes nothing)."""

    conversation_id: str
    seed: int = 11
    landings: dict[int, list[int]] = field(default_factory=dict)

    def lag(self, through: int) -> int:
        return random.Random(f"lag/{self.seed}/{self.conversation_id}/{through}").randint(1, 3)

    def requested(self, turn: int, through: int) -> None:
        """Record a request sent at ``turn``: it lands before turn ``turn + lag``."""
        self.landings.setdefault(turn + self.lag(through), []).append(through)

    def land(self, turn: int, folded_through: int) -> int:
        """The fold mark before ``turn``, given the mark before the last landing."""
        return max([folded_through, *self.landings.pop(turn, [])])


#: The retry period the replay's requests live under: none is ever overdue (the scripted
#: compactor answers every request).
NO_RETRY = timedelta(days=1)


@dataclass
class FoldTrack:
    """One conversation's ``state`` item as the scripted compactor and the requests move
    it: the fold mark and summary, and the newest request's ``through``."""

    compactor: ScriptedCompactor
    folded_through: int = 0
    summary: str | None = None
    requested_through: int | None = None

    def before_turn(self, turn: int) -> None:
        """Land the folds due before ``turn``."""
        folded = self.compactor.land(turn, self.folded_through)
        if folded != self.folded_through:
            self.folded_through = folded
            compactor = self.compactor
            self.summary = fold_summary(compactor.conversation_id, folded, seed=compactor.seed)

    def state(self) -> FoldState:
        return FoldState(self.folded_through, self.summary, self.requested_through, START)

    def after_turn(self, turn: int, page: HistoryPage, fold: FoldLimits) -> None:
        """Send the fold request the stage sends on ``turn`` from the ``page`` it read (its
        own trigger, :func:`plan_compaction`), if one is due: the compactor lands it later."""
        plan = plan_compaction(
            page.messages,
            page.state,
            FoldLimits(fold.fold_min_tokens, fold.window_max_messages, NO_RETRY),
            older_unread=page.older is not None,
            now=START,
        )
        if plan is not None:
            self.requested_through = plan.through
            self.compactor.requested(turn, plan.through)


def stamp(seconds: float) -> datetime:
    """A turn's time as a stored message and a command carry it: whole seconds."""
    return START + timedelta(seconds=int(seconds))


@dataclass
class ReplayedHistory:
    """One replayed conversation's history table in memory, as the stage reads it (a
    :class:`worker.ports.HistoryStore`): on the newest page the ``state`` item (the fold
    track's mark and summary, and the anchor last written), then the stored messages newest
    first, ``limit`` items a page."""

    messages: tuple[HistoryMessage, ...]  # the whole conversation, oldest first
    track: FoldTrack
    stored: int = 0  # seqs 1..stored are stored
    anchor: WindowAnchor | None = None

    async def load_page(
        self, conversation_id: str, limit: int, *, older_than: str | None = None
    ) -> HistoryPage:
        newest = self.stored if older_than is None else int(older_than) - 1
        oldest = max(0, newest - (limit - 1 if older_than is None else limit))
        return HistoryPage(
            state=self.track.state() if older_than is None else FoldState(),
            messages=tuple(reversed(self.messages[oldest:newest])),
            older=str(oldest + 1) if oldest else None,
            anchor=self.anchor if older_than is None else None,
        )


def finished(coroutine: Coroutine[Any, Any, T]) -> T:
    """The result of a coroutine that never waits (it reads only :class:`ReplayedHistory`),
    run without an event loop."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return cast("T", done.value)
    coroutine.close()
    raise RuntimeError("the coroutine waited for something")


def replay_plans(
    conversation: ReplayedConversation,
    config: PlanConfig,
    times: Sequence[float],
    *,
    settings: Settings,
    seed: int = 11,
) -> Iterator[TurnPlan]:
    """Every turn of ``conversation`` as the stage decides it under ``config``, turn ``t``
    sent ``times[t - 1]`` seconds into the replay: the stage's read (:func:`read_turn`: the
    newest page, older ones while the plan needs them), its plan (:func:`plan_turn`), the
    anchor it writes and the fold request it sends. The messages are stored as
    ``conversation`` holds them (:meth:`ReplayedConversation.at` stamps them)."""
    cid = conversation.conversation_id
    history = ReplayedHistory(conversation.messages, FoldTrack(ScriptedCompactor(cid, seed)))
    for turn in range(1, conversation.turns + 1):
        history.track.before_turn(turn)
        history.stored = 2 * turn - 2
        decide = partial(
            plan_turn,
            message=conversation.question(turn).content,
            sent_at=stamp(times[turn - 1]),
            config=config,
        )
        plan = finished(read_turn(history, cid, page_size=settings.history_page_size, plan=decide))
        history.anchor = plan.anchor_to_write or history.anchor
        history.track.after_turn(turn, plan.page, settings.fold_limits)
        yield plan
