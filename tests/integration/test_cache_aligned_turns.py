"""The cache-aligned mode through the real worker, turn after turn, with a scripted compactor.

Three conversations grow one exchange a turn for 24 turns, served by one in-process worker
(``HISTORY_WINDOW_MODE=cache-aligned``, ``HISTORY_CACHE_TTL=adaptive``). Each turn the test
sends the three commands (with ``sent_at`` in virtual time: one conversation brisk, one
deliberate, one that pauses for 10-50 minutes), takes the prompts, waits until the worker
is done with every command (deleted: its fold request and its anchor write come before the
delete), then plays the compactor (each request is folded 1-3 turns after it left:
``folded_through`` and a new ``fold_summary``, only forward) and the writer (counsel's
question, stamped ``created_at`` with its ``sent_at``, and a scripted answer). Nothing waits
on the wall clock: each step waits for the event before it.

On every payload: Converse accepts it (botocore and the service's rules, by ``check_prompt``),
its last block is the current message, the window is a suffix of the stored history that
holds the floor, and either keeps the budget with nothing unfolded left out or is the
sliding window (a fallback). Across consecutive turns that keep the anchor (no fold landed,
no overflow), the previous view up to its history cache point is, block for block, the start
of the next (and the prompt-cache model reads it). The summary shown is the one in force
(fold-lagged): a snapshot the ``state`` item holds beside the anchor, everything after its
mark in the window; a fold landing keeps a fitting anchor. Each view's cache points carry
the TTLs the log line names, never increasing along the prompt (Converse's rule, checked
with a ``ttl``-aware botocore model). The anchor on the ``state`` item is the
one the turn's ``clerk.converse_window_anchor`` line names, and the worker's own calls show
what it costs: one Query a turn, and one UpdateItem of the ``state`` item per turn that
stores an anchor or claims a fold request, never two (the anchor rides the claim).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import worker.app.runtime as runtime
from localaws.bedrock_cache import STAND_IN_MODEL_ID
from tests.conftest import captured_logs
from tests.integration.conftest import Stack, running_worker
from worker.adapters.dynamodb import STATE_KEY, message_key, rfc3339
from worker.adapters.stored_items import read_state
from worker.caching.anchor import WindowAnchor
from worker.caching.bill_model import CacheRules, PromptCache, price_turn
from worker.memory import HistoryMessage, bound_history, estimate_tokens
from worker.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TURNS = 24
START = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
#: Seconds between questions, by conversation: brisk, deliberate, and away for a while.
PACES = {"brief": (40, 150), "long": (400, 1500), "paste": (600, 3000)}
ANCHOR_EVENT = "clerk.converse_window_anchor"
WORDS = ("the", "parties", "agree", "clause", "notice", "term", "breach", "remedy", "liability")


def text(rng: random.Random, label: str, tokens: int) -> str:
    """About ``tokens`` estimated tokens of legal-sounding words, opening on ``label``."""
    words = [label]
    while sum(len(w) + 1 for w in words) < 4 * tokens:
        words.append(rng.choice(WORDS))
    return " ".join(words)


@dataclass
class Conversation:
    conversation_id: str
    rng: random.Random
    messages: list[HistoryMessage] = field(default_factory=list)
    folded_through: int = 0
    landings: dict[int, list[int]] = field(default_factory=dict)
    cache: PromptCache = field(default_factory=PromptCache)
    previous: dict[str, Any] | None = None  # the last turn's payload
    previous_outcome: str | None = None
    prefixes_checked: int = 0
    outcomes: list[str] = field(default_factory=list)
    summaries: dict[int, str] = field(default_factory=dict)
    at: datetime = START  # the conversation's virtual clock: when the question was sent
    ttls: Counter[str] = field(default_factory=Counter)
    lagged_turns: int = 0

    def next_question_time(self) -> datetime:
        low, high = PACES[self.conversation_id.rsplit("-", 1)[-1]]
        self.at += timedelta(seconds=self.rng.randint(low, high))
        return self.at

    def question(self, turn: int) -> str:
        paste = self.conversation_id.endswith("paste") and turn in (9, 17)
        return text(self.rng, f"q{turn}", 3500 if paste else self.rng.randint(20, 80))

    def answer(self, turn: int) -> str:
        return text(self.rng, f"a{turn}", self.rng.randint(150, 600))


async def receive(stack: Stack, env_name: str, count: int | None) -> list[dict[str, Any]]:
    """``count`` messages (or, with None, what is there), deleted; prompts checked as
    Converse would check them."""
    url = stack.env[env_name]
    payloads: list[dict[str, Any]] = []
    async with asyncio.timeout(120):
        while count is None or len(payloads) < count:
            response = await stack.clients.sqs.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0 if count is None else 1
            )
            messages = response.get("Messages", [])
            if not messages and count is None:
                break
            for message in messages:
                if env_name == "MODEL_QUEUE_URL":
                    payloads.append(await stack.check_prompt(message))
                else:
                    payloads.append(json.loads(message["Body"]))
                await stack.clients.sqs.delete_message(
                    QueueUrl=url, ReceiptHandle=message["ReceiptHandle"]
                )
    return payloads


async def fold(stack: Stack, c: Conversation, turn: int) -> None:
    """The compactor: requests due this turn are folded, the mark only moving forward."""
    through = max(c.landings.pop(turn, [0]))
    if through <= c.folded_through:
        return
    summary = text(c.rng, f"Summary through {through}.", 500)
    c.summaries[through] = summary
    await stack.clients.dynamodb.update_item(
        TableName=stack.env["HISTORY_TABLE"],
        Key={"pk": {"S": c.conversation_id}, "sk": {"S": STATE_KEY}},
        UpdateExpression="SET folded_through = :f, fold_summary = :s",
        ConditionExpression="attribute_not_exists(folded_through) OR folded_through < :f",
        ExpressionAttributeValues={":f": {"N": str(through)}, ":s": {"S": summary}},
    )
    c.folded_through = through


async def append(stack: Stack, c: Conversation, question: str, answer: str) -> None:
    """The writer: counsel's question and its answer, as the next two seqs."""
    for role, content in (("user", question), ("assistant", answer)):
        c.messages.append(HistoryMessage(len(c.messages) + 1, role, content, created_at=c.at))  # type: ignore[arg-type]
    await stack.put_items(
        [
            {
                "pk": {"S": c.conversation_id},
                "sk": {"S": message_key(m.seq)},
                "seq": {"N": str(m.seq)},
                "role": {"S": m.role},
                "content": {"S": m.content},
                "created_at": {"S": rfc3339(m.created_at or START)},
            }
            for m in c.messages[-2:]
        ]
    )


def blocks_before_the_history_point(payload: dict[str, Any]) -> list[tuple[int, str, str]]:
    """The text blocks of ``messages`` before the last cache point: (message, role, text)."""
    blocks: list[tuple[int, str, str]] = []
    before = 0
    for i, message in enumerate(payload["converse"]["messages"]):
        for block in message["content"]:
            if "cachePoint" in block:
                before = len(blocks)
            else:
                blocks.append((i, message["role"], block["text"]))
    return blocks[:before]


def text_blocks(payload: dict[str, Any]) -> list[tuple[int, str, str]]:
    return [
        (i, message["role"], block["text"])
        for i, message in enumerate(payload["converse"]["messages"])
        for block in message["content"]
        if "text" in block
    ]


def check_window(c: Conversation, payload: dict[str, Any], event: dict[str, Any]) -> None:
    """The floor, the budget, nothing unfolded left out; or, on a fallback, the sliding window."""
    limits = Settings.at_defaults().window_limits
    seqs = [m["seq"] for m in payload["history"]]
    stored = len(c.messages)
    assert seqs == list(range(stored - len(seqs) + 1, stored + 1))  # a suffix of the history
    assert len(seqs) >= min(limits.floor_messages, stored)  # the floor
    window = payload["window"]
    assert window["estimated_tokens"] == sum(
        estimate_tokens(m["content"]) for m in payload["history"]
    )
    if event["outcome"] == "fallback":
        sliding = bound_history(reversed(c.messages), limits)
        assert seqs == [m.seq for m in sliding.messages]
        return
    assert window["kept"] <= limits.max_messages
    assert window["estimated_tokens"] <= limits.max_tokens
    if seqs:
        # Nothing the summary shown has not absorbed is out (its mark may lag the newest).
        assert seqs[0] <= event["summary_folded_through"] + 1 <= c.folded_through + 1
        assert payload["history"][0]["role"] == "user" or seqs[0] == 1  # an exchange's start
        assert seqs[0] == event["anchor_seq"]


def check_ttls(c: Conversation, payload: dict[str, Any], event: dict[str, Any]) -> None:
    """The view's points carry the TTLs the log line names (a dropped point is absent),
    never increasing along the prompt, at most 3."""
    converse = payload["converse"]
    blocks = [*converse["system"], *(b for m in converse["messages"] for b in m["content"])]
    points = [b["cachePoint"]["ttl"] for b in blocks if "cachePoint" in b]
    assert points == [t for t in event["ttls"] if t != "none"]
    assert len(event["ttls"]) <= 3
    assert "5m" not in points or "1h" not in points[points.index("5m") :]
    c.ttls.update(event["ttls"])


def check_prefix(
    c: Conversation, payload: dict[str, Any], event: dict[str, Any], turn: int
) -> None:
    """A kept anchor: the last prompt up to its history point starts this one, and the cache
    model reads it (when it reaches the 1,024-token minimum)."""
    rules = CacheRules()
    cost, c.cache = price_turn(
        c.cache,
        payload["converse"]["system"],
        payload["converse"]["messages"],
        at=60.0 * turn,
        rules=rules,
    )
    previous = c.previous
    if event["outcome"] != "kept" or previous is None or c.previous_outcome == "fallback":
        return
    # The same summary text (its point's TTL may change: that is no byte of the prefix).
    assert [b for b in payload["converse"]["system"] if "text" in b] == [
        b for b in previous["converse"]["system"] if "text" in b
    ]
    prefix = blocks_before_the_history_point(previous)
    if not prefix:  # the first turn: no history, no history cache point
        return
    assert text_blocks(payload)[: len(prefix)] == prefix
    summary = sum(estimate_tokens(b["text"]) for b in payload["converse"]["system"] if "text" in b)
    cacheable = summary + sum(estimate_tokens(t) for _, _, t in prefix)
    if cacheable >= rules.min_prefix_tokens:
        assert cost.read >= cacheable
    c.prefixes_checked += 1


@pytest.fixture
def worker_calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """The in-process worker's DynamoDB calls (retries not counted): ``Operation`` and, for
    a single-item call, ``Operation sk-kind`` (``state``, ``cmd#``)."""
    calls: Counter[str] = Counter()
    original = runtime.aws_clients

    def count(params: dict[str, Any], event_name: str, **_: Any) -> None:
        operation = event_name.rsplit(".", 1)[-1]
        calls[operation] += 1
        sk = str(params.get("Key", {}).get("sk", {}).get("S", ""))
        if sk:
            calls[f"{operation} {'state' if sk == STATE_KEY else sk.split('#')[0] + '#'}"] += 1

    @contextlib.asynccontextmanager
    async def counted(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async with original(*args, **kwargs) as clients:
            clients.dynamodb.meta.events.register("before-parameter-build.dynamodb", count)
            yield clients

    monkeypatch.setattr(runtime, "aws_clients", counted)
    return calls


async def test_a_conversation_through_the_real_worker_keeps_its_prompt_prefix(
    stack: Stack, worker_calls: Counter[str], reliability_report: dict[str, Any]
) -> None:
    conversations = [
        Conversation(f"matter-aligned-{name}", random.Random(seed))
        for seed, name in enumerate(("brief", "long", "paste"), start=1)
    ]
    by_id = {c.conversation_id: c for c in conversations}
    settings = stack.settings(
        history_window_mode="cache-aligned",
        model_id=STAND_IN_MODEL_ID,
        compaction_retry_seconds=3600,
    )
    assert settings.history_cache_ttl == "adaptive"
    with captured_logs() as logs:
        async with running_worker(settings):
            for turn in range(1, TURNS + 1):
                questions = {}
                for c in conversations:
                    await fold(stack, c, turn)
                    questions[c.conversation_id] = c.question(turn)
                    await stack.send_command(
                        command_id=f"t{turn}",
                        conversation_id=c.conversation_id,
                        message=questions[c.conversation_id],
                        sent_at=rfc3339(c.next_question_time()),
                    )
                prompts = await receive(stack, "MODEL_QUEUE_URL", len(conversations))
                await stack.until_empty("CONVERSE_QUEUE_URL", within=120)
                for request in await receive(stack, "COMPACTION_QUEUE_URL", None):
                    c = by_id[request["conversation_id"]]
                    c.landings.setdefault(turn + c.rng.randint(1, 3), []).append(request["through"])
                for payload in prompts:
                    c = by_id[payload["conversation_id"]]
                    [event] = [
                        e
                        for e in logs
                        if e["event"] == ANCHOR_EVENT
                        and (e["conversation_id"], e["command_id"])
                        == (c.conversation_id, f"t{turn}")
                    ]
                    c.outcomes.append(f"{event['outcome']}:{event['reason']}")
                    assert payload["message"] == questions[c.conversation_id]
                    memory = payload["memory"]
                    shown = event["summary_folded_through"]
                    assert (memory["folded_through"] if memory else 0) == shown
                    if memory:  # the summary in force: the one written at its mark
                        assert memory["summary"] == c.summaries[shown]
                    assert event["summary_behind"] == c.folded_through - shown
                    c.lagged_turns += event["outcome"] == "kept" and shown < c.folded_through
                    check_window(c, payload, event)
                    check_ttls(c, payload, event)
                    check_prefix(c, payload, event, turn)
                    # The anchor stored is the one the log line names (a fallback keeps the
                    # stored one: it writes nothing).
                    state = await stack.state_item(c.conversation_id)
                    stored = read_state(state).anchor
                    if event["outcome"] == "fallback":
                        expected = event["stored_seq"], event["stored_folded_through"]
                    else:
                        expected = event["anchor_seq"], event["anchor_folded_through"]
                    assert stored == (WindowAnchor(*expected) if expected[0] is not None else None)
                    if stored is not None:  # its snapshot: the summary in force, at its mark
                        assert stored.snapshot is not None
                        assert stored.snapshot.folded_through == stored.folded_through
                    assert event["write"] == (
                        event["outcome"] == "reanchored"
                        and (event["anchor_seq"], event["anchor_folded_through"])
                        != (event["stored_seq"], event["stored_folded_through"])
                    )
                    c.previous, c.previous_outcome = payload, event["outcome"]
                    await append(stack, c, questions[c.conversation_id], c.answer(turn))

    assert stack.prompts_checked == TURNS * len(conversations)
    turns = TURNS * len(conversations)
    anchored = [e for e in logs if e["event"] == ANCHOR_EVENT]
    writing = {(e["conversation_id"], e["command_id"]) for e in anchored if e["write"]}
    claiming = {
        (e["conversation_id"], e["command_id"])
        for e in logs
        if e["event"] == "clerk.converse_compaction_requested"
    }
    assert worker_calls["Query"] == turns  # one Query a turn
    # One UpdateItem of the state item per turn that writes an anchor or claims, not two.
    assert worker_calls["UpdateItem state"] == len(writing | claiming)
    assert writing & claiming  # the case was met: an anchor rode a claim
    reliability_report["cache-aligned turns (integration)"] = {
        "turns": turns,
        "anchor writes per turn": round(len(writing) / turns, 3),
        "of them riding a fold claim": round(len(writing & claiming) / turns, 3),
        "extra UpdateItem per turn": round(len(writing - claiming) / turns, 3),
    }
    outcomes = {o for c in conversations for o in c.outcomes}
    # The run reaches every case the rule has (else the checks above could be vacuous): a
    # fold landing kept a fitting anchor and its summary, an overflow took the newest.
    assert {"reanchored:first_turn", "kept:None", "reanchored:overflow"} <= outcomes
    assert sum(c.lagged_turns for c in conversations) > 0
    # The pace chose: 5m for the brisk conversation, 1h somewhere for the slower ones.
    assert by_id["matter-aligned-brief"].ttls["5m"] > 0
    assert by_id["matter-aligned-long"].ttls["1h"] + by_id["matter-aligned-paste"].ttls["1h"] > 0
    assert sum(c.prefixes_checked for c in conversations) >= TURNS
    for c in conversations:
        assert c.outcomes[0] == "reanchored:first_turn"
    assert not any("q1 " in json.dumps(e) for e in logs)  # no content in any line
