"""The benchmark's data: legal-matter conversations, their fold state, converse commands.

Everything is generated from a seed, so every run (and every contender in one run) sees
the same conversations and the same commands.

- Messages alternate counsel's questions (60-400 characters) and Mira's answers
  (120-2,400), with the odd pasted clause or contract from counsel (3 %, 6-30 KB, which
  the window trims); text is clause-like prose with the characters legal text has
  (section signs, curly quotes, accented names), not repeated ``x``.
- The fold has absorbed all but the last few exchanges, so a turn finds a summary and
  a short unfolded tail: a fold is not due on every turn. ``fold_due`` conversations
  are the exception: their tail has grown past the trigger, so their first turn claims
  and sends one compaction request (then it is pending).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from localaws.history_writer import message_item, write_items
from localaws.history_writer import state_item as history_state_item
from worker.memory import FoldLimits, FoldState, HistoryMessage, Role, WindowLimits
from worker.memory.fold import plan_compaction
from worker.planning import TurnPlan, plan_turn
from worker.ports import HistoryPage
from worker.settings import Settings
from worker.turn.commands import ConverseCommand, encode_body, parse_command, prompt_payload

_CLAUSES = (
    "the Buyer shall Seller may terminate this Agreement upon written notice to other party "
    "within thirty (30) days of breach provided that such breach is not remedied clause § "
    "14.2 indemnify hold harmless against all losses liabilities damages costs expenses "
    "including reasonable attorneys’ fees arising out of or in connection with "
    "“Confidential Information” means any information disclosed by Müller GmbH to Société "
    "Générale in respect of the Transaction governing law England and Wales exclusive "
    "jurisdiction courts of London force majeure event beyond reasonable control "
    "notwithstanding anything to the contrary herein limitation of liability aggregate "
    "shall not exceed fees paid in the twelve (12) months preceding claim warranty "
    "representation as at Closing Date assignment without prior written consent not to be "
    "unreasonably withheld"
)
_WORDS = tuple(_CLAUSES.split(" "))


def corpus(rng: random.Random, chars: int = 200_000) -> str:
    """Clause-like text to cut messages from."""
    words: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(_WORDS)
        if rng.random() < 0.06:
            word += "." if rng.random() < 0.7 else ";\n"
        words.append(word)
        size += len(word) + 1
    return " ".join(words)


@dataclass(frozen=True, slots=True)
class Conversation:
    conversation_id: str
    length: int  # stored messages, seq 1..length
    newest: tuple[HistoryMessage, ...]  # the newest messages, newest first (the page)
    state: FoldState
    fold_due: bool = False

    @property
    def page(self) -> HistoryPage:
        """What the stage's first read of this conversation returns."""
        older = f"{self.length - len(self.newest)}" if self.length > len(self.newest) else None
        return HistoryPage(self.state, self.newest, older=older)


class TextSource:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.text = corpus(rng)

    def cut(self, size: int) -> str:
        start = self.rng.randrange(0, len(self.text) - size)
        return self.text[start : start + size].strip() or "Clause 1."

    def question(self) -> str:
        return self.cut(self.rng.randint(60, 400)).rstrip(".;") + "?"

    def message(self, seq: int) -> HistoryMessage:
        rng = self.rng
        if seq % 2:  # counsel
            if rng.random() < 0.03:
                return HistoryMessage(seq, "user", self.cut(rng.randint(6_000, 30_000)))
            return HistoryMessage(seq, "user", self.question())
        return HistoryMessage(seq, "assistant", self.cut(rng.choice((120, 400, 1_600, 2_400))))


#: Part 1's synthetic history lengths.
SYNTHETIC_LENGTHS = (100, 1_000, 10_000, 100_000)


def synthetic_history(length: int, seed: int = 7) -> list[HistoryMessage]:
    """Newest first, part 1's synthetic mix: 200-character questions, answers of 120-2,400
    characters, and now and then (3 %) a pasted 30,000-character contract."""
    rng = random.Random(seed)
    messages = []
    for seq in range(length, 0, -1):
        role: Role = "user" if seq % 2 else "assistant"
        size = rng.choice((120, 400, 1_600, 2_400)) if role == "assistant" else 200
        if rng.random() < 0.03:
            size = 30_000
        messages.append(HistoryMessage(seq=seq, role=role, content="x" * size))
    return messages


def page_size(limits: WindowLimits) -> int:
    """Messages the worker's one Query can return (Limit = max_messages + 2, one is state)."""
    return limits.max_messages + 1


def build_conversation(
    conversation_id: str,
    length: int,
    text: TextSource,
    *,
    fold_due: bool = False,
    limits: WindowLimits | None = None,
    fold_limits: FoldLimits | None = None,
) -> tuple[Conversation, list[HistoryMessage]]:
    """A conversation of ``length`` messages ending with an answer; returns it and all of
    its messages oldest first (for seeding)."""
    limits = limits or Settings.at_defaults().window_limits
    fold_limits = fold_limits or Settings.at_defaults().fold_limits
    length = max(2, length - length % 2)  # ends with an answer: the command is the next question
    messages = [text.message(seq) for seq in range(1, length + 1)]
    newest = tuple(reversed(messages[-page_size(limits) :]))
    now = datetime.now(UTC)
    older_unread = length > len(newest)  # the worker's page: the state item and 26 messages
    summary = text.cut(1_500)
    if fold_due:
        folded = max(0, length - 2 * fold_limits.window_max_messages // 2 - 2)
        state = FoldState(folded_through=folded, summary=summary if folded else None)
    else:
        # All but the last exchanges folded: the largest even tail under the triggers.
        state = FoldState(folded_through=length, summary=summary)
        for tail in (8, 6, 4, 2):
            candidate = FoldState(folded_through=max(0, length - tail), summary=summary)
            if (
                plan_compaction(newest, candidate, fold_limits, older_unread=older_unread, now=now)
                is None
            ):
                state = candidate
                break
    due = (
        plan_compaction(newest, state, fold_limits, older_unread=older_unread, now=now) is not None
    )
    conversation = Conversation(conversation_id, length, newest, state, fold_due=due)
    return conversation, messages


#: When the benchmark's seeded messages were written (``created_at``).
SEEDED_AT = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def message_items(conversation_id: str, messages: Sequence[HistoryMessage]) -> list[Any]:
    """The messages as the worker's one history writer lays them out."""
    return [
        message_item(conversation_id, m.seq, m.role, m.content, created_at=SEEDED_AT)
        for m in messages
    ]


def state_item(conversation: Conversation) -> Any:
    return history_state_item(
        conversation.conversation_id,
        folded_through=conversation.state.folded_through,
        summary=conversation.state.summary,
    )


async def put_items(dynamodb: Any, table: str, items: list[Any], parallel: int = 6) -> None:
    """The worker's one history writer (25 items a call, unprocessed items sent again),
    ``parallel`` calls at once."""
    await write_items(dynamodb, table, items, parallel=parallel)


async def seed(
    dynamodb: Any,
    table: str,
    conversations: Sequence[tuple[Conversation, list[HistoryMessage]]],
) -> int:
    """Write every message and state item; returns the number of items written."""
    items: list[dict[str, Any]] = []
    for conversation, messages in conversations:
        items.extend(message_items(conversation.conversation_id, messages))
        items.append(state_item(conversation))
    await put_items(dynamodb, table, items)
    return len(items)


def mixed_conversations(
    count: int, *, seed: int = 11, fold_due_every: int = 8, prefix: str = "matter"
) -> tuple[list[tuple[Conversation, list[HistoryMessage]]], TextSource]:
    """``count`` conversations, lengths log-uniform from 20 to 1,000 messages; one in
    ``fold_due_every`` has a fold due."""
    rng = random.Random(seed)
    text = TextSource(rng)
    built = []
    for i in range(count):
        length = round(math.exp(rng.uniform(math.log(20), math.log(1_000))))
        built.append(
            build_conversation(
                f"{prefix}-{i:04d}", length, text, fold_due=i % fold_due_every == fold_due_every - 1
            )
        )
    return built, text


@dataclass(frozen=True, slots=True)
class Command:
    command_id: str
    conversation_id: str
    body: str


def command_to(conversation: Conversation, command_id: str, message: str, **fields: str) -> Command:
    """A converse command to ``conversation``, as a producer sends it."""
    body = {
        "type": "converse",
        "command_id": command_id,
        "conversation_id": conversation.conversation_id,
        "message": message,
        **fields,
    }
    return Command(command_id, conversation.conversation_id, json.dumps(body, ensure_ascii=False))


def make_commands(
    run: str, conversations: Sequence[Conversation], count: int, text: TextSource, *, seed: int = 5
) -> list[Command]:
    """``count`` converse commands, each to a conversation chosen at random."""
    rng = random.Random(seed)
    return [
        command_to(rng.choice(conversations), f"{run}-{i:06d}", text.question(),
                   sent_at="2026-11-30T09:00:00Z")
        for i in range(count)
    ]  # fmt: skip


def stage_prompt(command: ConverseCommand, page: HistoryPage) -> tuple[TurnPlan, dict[str, Any]]:
    """The stage's plan for ``command`` over ``page`` at its default settings, and the prompt
    payload it sends."""
    config = Settings.at_defaults().plan_config
    plan = plan_turn(page, command.message, sent_at=command.sent_time, config=config)
    shown = (plan.summary, plan.folded_through)
    return plan, prompt_payload(
        command, plan.window, page.state, plan.view, shown=shown, cache=plan.cache
    )


def expected_payload(command: Command, conversation: Conversation) -> str:
    """The prompt body the stage sends for ``command`` (what the replay sends as is)."""
    return encode_body(stage_prompt(parse_command(command.body), conversation.page)[1])


def fold_through(conversation: Conversation, limits: FoldLimits | None = None) -> int:
    """The ``through`` of the compaction request a turn on this conversation would claim
    (as seeded, nothing pending), or 0 when none is due."""
    plan = plan_compaction(
        conversation.newest,
        conversation.state,
        limits or Settings.at_defaults().fold_limits,
        older_unread=conversation.length > len(conversation.newest),
        now=datetime.now(UTC),
    )
    return plan.through if plan is not None else 0
