"""The benchmark's conversations replayed from their first message, one exchange a turn.

Turn ``t`` of a conversation sends counsel's question ``2t - 1`` as the current message
over the history stored before it (seqs ``1 .. 2t - 2``); then the writer stores the
question and its answer (seq ``2t``). The conversations are the workload's own
(:func:`bench.load.workload.mixed_conversations`: 200 legal matters of 20-1,000
messages, the same text source).

Around the turns, everything is scripted and deterministic, so every contender (and the
real worker in either mode, and the pure model of it) sees the same schedule whatever
order the conversations run in:

- :class:`ScriptedCompactor`: each compaction request lands 1-3 turns after the turn that
  sent it (seeded per conversation and ``through``), the fold mark only moving forward;
- :func:`fold_summary`: the summary a fold writes, 1,200-2,400 characters (300-600
  estimated tokens), cut from clause-like text seeded per conversation and mark;
- :func:`pause`: the seconds between two turns of one conversation under a named model
  (:data:`PAUSE_MODELS`), seeded per conversation: what the prompt cache's TTL meets.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache

from bench.load.workload import corpus, mixed_conversations
from worker.memory import (
    CompactionPlan,
    FoldLimits,
    FoldState,
    HistoryMessage,
    WindowLimits,
    estimate_tokens,
    plan_compaction,
    trim_message,
)

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
    # cache_sim's models (issue 19's first estimate), kept as they were:
    "brisk": "20 s-4 min (uniform), always within the 5-minute TTL",
    "typical": "75% 20 s-4 min, 15% 4-15 min, 10% 20 min-4 h (uniform in each band)",
    "slow": "60% 1-10 min, 40% 10 min-2 h (uniform in each band)",
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
    if model == "brisk":  # always within the 5-minute TTL
        return rng.uniform(20, 240)
    if model == "typical":  # reading an answer and typing; now and then away
        if roll < 0.75:
            return rng.uniform(20, 240)
        return rng.uniform(240, 900) if roll < 0.9 else rng.uniform(1_200, 14_400)
    if model == "slow":  # long reviews between questions
        return rng.uniform(60, 600) if roll < 0.6 else rng.uniform(600, 7_200)
    raise ValueError(f"unknown pause model {model!r}")


#: The ``mixed`` population's profiles and their shares (issue 24's study).
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

    def exchange(self, turn: int) -> tuple[HistoryMessage, ...]:
        """What the writer stores after ``turn``: its question and the answer."""
        return self.messages[2 * turn - 2 : 2 * turn]

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

    def requested(self, turn: int, through: int) -> int:
        """Record a request sent at ``turn``; returns the turn it lands before."""
        lands = turn + self.lag(through)
        self.landings.setdefault(lands, []).append(through)
        return lands

    def land(self, turn: int, folded_through: int) -> int:
        """The fold mark before ``turn``, given the mark before the last landing."""
        return max([folded_through, *self.landings.pop(turn, [])])

    def pending(self) -> Iterator[int]:
        """Turns with a landing still to come."""
        return iter(sorted(self.landings))


#: The retry period the replay's requests live under: none is ever overdue (the scripted
#: compactor answers every request; the worker runs with the same setting).
NO_RETRY = timedelta(days=1)


@dataclass
class FoldTrack:
    """One conversation's ``state`` item as the scripted compactor and the requests move
    it: the fold mark and summary, and the newest request's ``through``."""

    compactor: ScriptedCompactor
    folded_through: int = 0
    summary: str | None = None
    requested_through: int | None = None

    def before_turn(self, turn: int) -> bool:
        """Land the folds due before ``turn``; True when the mark moved."""
        folded = self.compactor.land(turn, self.folded_through)
        if folded == self.folded_through:
            return False
        self.folded_through = folded
        compactor = self.compactor
        self.summary = fold_summary(compactor.conversation_id, folded, seed=compactor.seed)
        return True

    def state(self) -> FoldState:
        return FoldState(self.folded_through, self.summary, self.requested_through, START)

    def due(
        self, history: Sequence[HistoryMessage], limits: WindowLimits, fold: FoldLimits
    ) -> CompactionPlan | None:
        """The request the stage sends on this turn, from the page it reads (the newest
        ``max_messages + 1`` messages), or None."""
        page = tuple(reversed(history[-(limits.max_messages + 1) :]))
        return plan_compaction(
            page,
            self.state(),
            FoldLimits(fold.fold_min_tokens, fold.window_max_messages, NO_RETRY),
            older_unread=len(history) > len(page),
            now=START,
        )

    def requested(self, turn: int, through: int) -> int:
        """A request for ``through`` went out at ``turn``; returns the turn it lands before."""
        self.requested_through = through
        return self.compactor.requested(turn, through)
