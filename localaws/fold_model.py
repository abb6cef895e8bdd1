"""The fold-gap model: the converse stage's window and fold trigger, fed as the stage feeds
them, while a scripted compactor lags.

A conversation grows one exchange a turn: the stage reads one page of
``HISTORY_WINDOW_MAX_MESSAGES + 2`` items (the state item first) and sends the prompt and,
if due, a compaction request; a writer appends counsel's question and the answer; a
compactor serves each request ``lag`` turns later, folding from the state's current mark up
to the request's ``through``, only forward. The model is the worker's own pure functions
(the window, the trigger, the gap): ``tests/integration/test_fold_gap.py`` checks the real
``worker run`` process agrees with it turn for turn, and ``bench/parts/fold_gap.py``
measures it (profiles, rules, lags: its docstring). Kept here, below both, so the test
does not import the benchmark.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from worker.memory import (
    CompactionPlan,
    FoldLimits,
    FoldState,
    HistoryMessage,
    bound_history,
    estimate_tokens,
    fold_gap,
    plan_compaction,
)
from worker.settings import Settings

PROFILES = ("tiny", "medium", "mixed", "paste-heavy")
#: The request rules the fold-gap table reports: the contract's (:data:`PLANNERS` adds proposals).
RULES = ("pipelined",)
TURNS = 40
SEED = 12
NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)

Planner = Callable[..., CompactionPlan | None]

_CLAUSES = (
    "the Supplier shall deliver Goods in accordance with clause 14.2 and Schedule 3 "
    "notwithstanding any provision to the contrary liability aggregate cap indemnify "
    "hold harmless termination for material breach cure period thirty days notice in "
    "writing governing law England and Wales confidential information force majeure"
)
_WORDS = tuple(_CLAUSES.split(" "))


def text(rng: random.Random, chars: int) -> str:
    """Clause-like words, exactly ``chars`` characters."""
    words: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(_WORDS)
        words.append(word)
        size += len(word) + 1
    return " ".join(words)[:chars].rstrip() or "x"


def _size(rng: random.Random, profile: str, role: str) -> int:
    tiny = (10, 80) if role == "user" else (20, 240)
    medium = (100, 600) if role == "user" else (300, 2_000)
    if profile == "tiny":
        return rng.randint(*tiny)
    if profile == "medium":
        return rng.randint(*medium)
    if profile == "mixed":
        roll = rng.random()
        if roll < 0.45:
            return rng.randint(*tiny)
        return rng.randint(*medium) if roll < 0.9 else rng.randint(3_000, 12_000)
    if profile == "paste-heavy":
        return rng.randint(4_000, 20_000) if rng.random() < 0.3 else rng.randint(*medium)
    raise ValueError(f"unknown profile {profile!r}")


def conversation(profile: str, turns: int = TURNS, seed: int = SEED) -> list[HistoryMessage]:
    """The ``turns`` exchanges of a profile, oldest first: turn ``t``'s question is seq
    ``2t - 1`` (the command's message) and its answer seq ``2t``."""
    rng = random.Random(f"{profile}/{seed}")
    messages = []
    for seq in range(1, 2 * turns + 1):
        role = "user" if seq % 2 else "assistant"
        messages.append(HistoryMessage(seq, role, text(rng, _size(rng, profile, role))))
    return messages


def _proposal(
    fires: Callable[[int, int, int], bool],
) -> Planner:
    """The contract's rule, plus one more reason to send when a new answer follows the
    newest request: ``fires(stretch after the newest request, unfolded tail, room)``, room
    being what this turn's window kept when it had to drop anything, else its cap."""

    def plan(
        newest_first: Sequence[HistoryMessage],
        state: FoldState,
        limits: FoldLimits,
        *,
        older_unread: bool,
        now: datetime,
    ) -> CompactionPlan | None:
        due = plan_compaction(newest_first, state, limits, older_unread=older_unread, now=now)
        through = next((m.seq for m in newest_first if m.role == "assistant"), None)
        newest_request = max(state.folded_through, state.requested_through or 0)
        if due is not None or through is None or through <= newest_request:
            return due
        window_limits = Settings.at_defaults().window_limits
        window = bound_history(newest_first, window_limits)
        room = window.kept if window.dropped else window_limits.max_messages
        stretch = sum(1 for m in newest_first if m.seq > newest_request)
        if not fires(stretch, through - state.folded_through, room):
            return None
        folded = state.folded_through
        return CompactionPlan(
            folded_through=folded,
            through=through,
            unfolded_tokens=sum(
                estimate_tokens(m.content) for m in newest_first if folded < m.seq <= through
            ),
        )

    return plan


PLANNERS: dict[str, Planner] = {
    "pipelined": plan_compaction,
    # Proposals, not the contract (docs/FOLD.md, "What is left, and what would close it"):
    # the count trigger follows the room the window really has (pastes shrink it to its
    # floor) instead of its cap;
    "kept-half": _proposal(lambda stretch, tail, room: stretch >= max(2, room // 2)),
    # a request for every new exchange once the unfolded tail is over half that room.
    "window-half": _proposal(lambda stretch, tail, room: 2 * tail > room),
}


@dataclass(frozen=True, slots=True)
class Turn:
    """What one turn saw and did."""

    turn: int
    folded_through: int
    oldest_kept: int | None
    gap: tuple[int, int] | None  # first and last seq held by neither window nor fold
    request: tuple[int, int] | None  # (folded_through, through) of the request it sent

    @property
    def gap_messages(self) -> int:
        return 0 if self.gap is None else self.gap[1] - self.gap[0] + 1


@dataclass
class Compactor:
    """Serves each request ``lag`` turns after it was sent: fold up to its ``through``,
    from the current mark, only forward (a request already covered is a no-op)."""

    lag: int
    due: dict[int, list[int]] = field(default_factory=dict)

    def received(self, turn: int, through: int) -> None:
        self.due.setdefault(turn + 1 + self.lag, []).append(through)

    def serve(self, turn: int, folded_through: int) -> int:
        return max([folded_through, *self.due.pop(turn, [])])


def simulate(
    messages: Sequence[HistoryMessage],
    lag: int,
    rule: str = "pipelined",
    settings: Settings | None = None,
) -> list[Turn]:
    """Grow ``messages`` one exchange a turn through the model of the stage."""
    settings = settings or Settings.at_defaults()
    window_limits, fold_limits = settings.window_limits, settings.fold_limits
    planner = PLANNERS[rule]
    compactor = Compactor(lag)
    state = FoldState()
    state_item = False  # written by the first claim or fold
    turns: list[Turn] = []
    for turn in range(1, len(messages) // 2 + 1):
        folded = compactor.serve(turn, state.folded_through)
        if folded != state.folded_through:
            state = FoldState(
                folded_through=folded,
                summary=f"fold through {folded}",
                requested_through=state.requested_through,
                requested_at=state.requested_at,
                request_version=state.request_version,
            )
            state_item = True
        stored = messages[: 2 * (turn - 1)]
        room = settings.history_page_size - state_item
        page = tuple(reversed(stored[-room:])) if room else ()
        window = bound_history(page, window_limits)
        gap = fold_gap(window, state.folded_through)
        plan = planner(page, state, fold_limits, older_unread=len(stored) > len(page), now=NOW)
        if plan is not None:
            compactor.received(turn, plan.through)
            state = FoldState(
                folded_through=state.folded_through,
                summary=state.summary,
                requested_through=plan.through,
                requested_at=NOW,
                request_version=state.request_version + 1,
            )
            state_item = True
        turns.append(
            Turn(
                turn=turn,
                folded_through=folded,
                oldest_kept=window.oldest_seq,
                gap=None if gap is None else (gap.first_seq, gap.last_seq),
                request=None if plan is None else (plan.folded_through, plan.through),
            )
        )
    return turns


@dataclass(frozen=True, slots=True)
class Summary:
    gap_message_turns: int
    turns_with_gap: int
    largest_gap: int
    requests: int

    @staticmethod
    def of(turns: Sequence[Turn]) -> Summary:
        gaps = [t.gap_messages for t in turns]
        return Summary(
            gap_message_turns=sum(gaps),
            turns_with_gap=sum(1 for g in gaps if g),
            largest_gap=max(gaps, default=0),
            requests=sum(1 for t in turns if t.request is not None),
        )
