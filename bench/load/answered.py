"""The replay's turns answered: each prompt the stage plans is sent to the model stage's
stand-in, and its answer is stored with its bill, so the next turn reads what it paid.

:func:`answered_turns` is :func:`bench.load.replay.replay_plans` with the loop closed through
the history table's layout (``docs/CONTRACT.md``, "The bill, observed"). Turn ``t``:

1. the scripted compactor lands its folds, the stage reads its page and plans
   (:func:`worker.turn.reading.read_turn`, :func:`worker.planning.plan_turn`), the anchor and
   the fold request are written as in the replay;
2. the prompt payload is the stage's own (:func:`worker.turn.commands.prompt_payload`, with
   the plan's ``cache``), for a command carrying the turn's ``sent_at``;
3. a :class:`localaws.model_stage.ModelStage` answers it :func:`answer_delay` seconds later
   with the workload's own answer (seq ``2t``), priced by the prompt-cache stand-in;
4. the answer item is laid out by :func:`localaws.model_stage.answer_item` as ``writer``
   stores it (None: without its ``model_usage``, as an older writer stores it) and stored;
   the pages read after it carry ``usage`` parsed from the stored items by the stage's own
   reader, :func:`worker.adapters.stored_bills.read_bill` (a bill it refuses is dropped
   whole, as the stage drops it).

Also here: the model stage's system prompt (:data:`SYSTEM_PROMPT`, 300 tokens, and the one
it changes to mid-conversation, :func:`changed_system_prompt`), and :func:`request_tokens`,
the estimated and real tokens before each block of a request, which the stand-in knows and
the bill does not say.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from functools import partial
from typing import Any

from bench.load.replay import (
    FoldTrack,
    ReplayedConversation,
    ReplayedHistory,
    ScriptedCompactor,
    finished,
    stamp,
)
from localaws.model_prefix import sized_prefix
from localaws.model_stage import (
    CONTRACT_WRITER,
    BillWriter,
    Item,
    ModelAnswer,
    ModelStage,
    answer_item,
    rfc3339,
)
from worker.adapters.stored_bills import read_bill
from worker.caching.bills import ModelUsage
from worker.memory import estimate_tokens
from worker.planning import PlanConfig, TurnPlan, plan_turn
from worker.ports import HistoryPage
from worker.settings import Settings
from worker.turn.commands import ConverseCommand, prompt_payload
from worker.turn.reading import read_turn

#: The model stage's own system prompt: 300 tokens (``chars / 4``), placed before the view with
#: a cache point of its own.
SYSTEM_PROMPT = sized_prefix(300).system_prompt


def changed_system_prompt(prompt: str) -> str:
    """The prompt the model stage changes to in the middle of a conversation (deviation
    "system prompt changed"): one sentence more, the rest the same."""
    return prompt.replace("Never invent", "State the governing law when it is known. Never invent")


CHANGED_SYSTEM_PROMPT = changed_system_prompt(SYSTEM_PROMPT)


def answer_delay(conversation_id: str, turn: int, *, seed: int = 11) -> int:
    """Seconds between a command's ``sent_at`` and its model call: 2-8, seeded per turn."""
    return random.Random(f"answer/{seed}/{conversation_id}/{turn}").randint(2, 8)


def command_id(conversation_id: str, turn: int) -> str:
    return f"{conversation_id}-t{turn:04d}"


def command_for(conversation: ReplayedConversation, turn: int, times: Sequence[float]) -> str:
    """The converse command of ``turn`` as its producer sends it (JSON), ``sent_at`` the
    turn's time."""
    return ConverseCommand(
        type="converse",
        command_id=command_id(conversation.conversation_id, turn),
        conversation_id=conversation.conversation_id,
        message=conversation.question(turn).content,
        sent_at=rfc3339(stamp(times[turn - 1])),
    ).model_dump_json()


@dataclass
class AnsweredHistory(ReplayedHistory):
    """:class:`ReplayedHistory` with the answer items as the writer stored them: each page's
    ``usage`` holds the bills the stage's own reader parses from its answers' items (each
    item parsed once, when it is stored: it never changes after)."""

    answers: dict[int, Item] = field(default_factory=dict)
    bills: dict[int, ModelUsage] = field(default_factory=dict)

    def store_answer(self, seq: int, item: Item) -> None:
        self.answers[seq] = item
        bill = read_bill(item.get("model_usage"), seq)
        if isinstance(bill, ModelUsage):
            self.bills[seq] = bill

    async def load_page(
        self, conversation_id: str, limit: int, *, older_than: str | None = None
    ) -> HistoryPage:
        page = await super().load_page(conversation_id, limit, older_than=older_than)
        bills = tuple(
            self.bills[m.seq]
            for m in page.messages
            if m.role == "assistant" and m.seq in self.bills
        )
        return replace(page, usage=bills)


@dataclass(frozen=True, slots=True)
class AnsweredTurn:
    """One turn: the plan, the payload sent, the model stage's answer, the item stored."""

    turn: int
    plan: TurnPlan
    payload: dict[str, Any]
    answer: ModelAnswer
    item: Item


def answered_turns(
    conversation: ReplayedConversation,
    config: PlanConfig,
    times: Sequence[float],
    *,
    settings: Settings,
    stage: ModelStage,
    writer: BillWriter | None = CONTRACT_WRITER,
    seed: int = 11,
) -> Iterator[AnsweredTurn]:
    """Every turn of ``conversation`` (stamped with ``times``) planned by the stage under
    ``config`` over what the turns before it stored, answered by ``stage``, each answer
    stored as ``writer`` stores it (None: without its bill)."""
    cid = conversation.conversation_id
    history = AnsweredHistory(conversation.messages, FoldTrack(ScriptedCompactor(cid, seed)))
    for turn in range(1, conversation.turns + 1):
        history.track.before_turn(turn)
        history.stored = 2 * turn - 2
        command = ConverseCommand.model_validate_json(command_for(conversation, turn, times))
        decide = partial(
            plan_turn, message=command.message, sent_at=command.sent_time, config=config
        )
        plan = finished(read_turn(history, cid, page_size=settings.history_page_size, plan=decide))
        history.anchor = plan.anchor_to_write or history.anchor
        history.track.after_turn(turn, plan.page, settings.fold_limits)
        payload = prompt_payload(
            command,
            plan.window,
            plan.page.state,
            plan.view,
            shown=(plan.summary, plan.folded_through),
            cache=plan.cache,
        )
        sent = stamp(times[turn - 1])
        at = sent + timedelta(seconds=answer_delay(cid, turn, seed=seed))
        answer = stage.answer(payload, at=at, content=conversation.messages[2 * turn - 1].content)
        item = answer_item(payload, answer, seq=2 * turn, created_at=sent,
                           writer=writer or CONTRACT_WRITER)  # fmt: skip
        if writer is None:
            item = {name: value for name, value in item.items() if name != "model_usage"}
        history.store_answer(2 * turn, item)
        yield AnsweredTurn(turn, plan, payload, answer, item)


@dataclass(frozen=True, slots=True)
class RequestTokens:
    """A request's tokens before each of the view's block boundaries (0 = before its first
    block): ``estimated`` as the stage counts the view alone, ``real`` as the stand-in counts
    the whole request (the model stage's own prefix included); and at each cache point of
    the view, in order, the boundary it sits at."""

    estimated: tuple[int, ...]
    real: tuple[int, ...]
    points: tuple[int, ...]

    def boundary_of(self, estimated: int) -> int | None:
        """The boundary before which the view holds ``estimated`` tokens (None: none)."""
        boundary = self.floor_of(estimated)
        return boundary if self.estimated[boundary] == estimated else None

    def floor_of(self, estimated: int) -> int:
        """The last boundary before which the view holds at most ``estimated`` tokens."""
        return bisect.bisect_right(self.estimated, estimated) - 1


def request_tokens(
    view: Mapping[str, Any], prefix_tokens: int, count: Callable[[str], int]
) -> RequestTokens:
    """The estimated and real (``count``) tokens before each boundary of ``view``'s blocks
    (its ``system``, then its messages'), the model stage's ``prefix_tokens`` before them."""
    estimated, real, points = [0], [prefix_tokens], []
    blocks = [*view["system"], *(b for m in view["messages"] for b in m["content"])]
    for block in blocks:
        if "cachePoint" in block:
            points.append(len(estimated) - 1)
            continue
        estimated.append(estimated[-1] + estimate_tokens(block["text"]))
        real.append(real[-1] + count(block["text"]))
    return RequestTokens(tuple(estimated), tuple(real), tuple(points))


def billed_units(usage: Mapping[str, Any]) -> float:
    """Converse's ``usage`` priced as billed, in uncached-input units: uncached 1x, read 0.1x,
    written 1.25x for 5 minutes and 2x for an hour (``cacheDetails``)."""
    written = {"5m": 0, "1h": 0}
    for detail in usage.get("cacheDetails", []):
        written[detail["ttl"]] += detail["inputTokens"]
    return (
        usage["inputTokens"]
        + 0.1 * usage.get("cacheReadInputTokens", 0)
        + 1.25 * written["5m"]
        + 2.0 * written["1h"]
    )
