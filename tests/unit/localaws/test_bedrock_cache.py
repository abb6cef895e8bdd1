"""The Bedrock prompt-cache stand-in: Bedrock's documented cache rules, one table case each,
its deviations, the ``usage`` it returns checked against botocore 1.44.5's response shape,
and the answer item it writes read back by the stage's own reader.

Requests here are spelled by hand (the rules are Bedrock's, not the stage's); the model
stage's cases send payloads the stage's own code builds. With chars/4, ``words(n)`` is
exactly ``n`` tokens.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.model import ListShape, Shape, StructureShape
from botocore.validate import ParamValidator
from hypothesis import given
from hypothesis import strategies as st
from moto import mock_aws

from localaws.bedrock_cache import (
    MIN_PREFIX_TOKENS,
    STAND_IN_MODEL_ID,
    CacheConfig,
    CacheRequestRefused,
    PromptCache,
    TokenizerUnavailable,
    chars_over_4,
    chars_per_token,
    claude_tokenizer,
    converse_response,
)
from localaws.endpoints import DUMMY_CLIENT_ARGS
from localaws.fold_model import text as clause_text
from localaws.model_stage import (
    ModelAnswer,
    ModelStage,
    SystemPromptChange,
    answer_item,
    put_answer,
    put_answer_async,
)
from tests.converse_rules import SERVICE
from worker.adapters.dynamodb import history_page
from worker.caching.models import known_model
from worker.memory import (
    FoldState,
    HistoryMessage,
    WindowLimits,
    bound_history,
    render_converse,
)
from worker.memory.converse import with_cache_ttls
from worker.turn.commands import ConverseCommand, prompt_payload

FIVE_MINUTES, ONE_HOUR = 300.0, 3600.0
MIN = MIN_PREFIX_TOKENS["claude-sonnet-4"]


def words(tokens: int, seed: str = "clause") -> str:
    """Exactly ``tokens`` chars/4 tokens of text; ``seed`` makes texts of one size differ."""
    return ((seed + " ") * (4 * tokens))[: 4 * tokens]


def point(ttl: str | None = None) -> dict[str, Any]:
    return {"cachePoint": {"type": "default", **({"ttl": ttl} if ttl else {})}}


def user(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def text(tokens: int, seed: str = "clause") -> dict[str, Any]:
    return {"text": words(tokens, seed)}


def send(
    cache: PromptCache,
    at: float,
    system: Sequence[dict[str, Any]],
    *messages: dict[str, Any],
) -> dict[str, Any]:
    return cache.converse(system=system, messages=messages, at=at).usage


def cached(usage: Mapping[str, Any]) -> tuple[int, int, int]:
    """(read, written, uncached)."""
    return usage["cacheReadInputTokens"], usage["cacheWriteInputTokens"], usage["inputTokens"]


# A 1,100-token system prompt with a point after it, then a 50-token question.
SYSTEM = [text(1_100), point()]
QUESTION = user(text(50, "question"))


# --- the documented rules, one case each ----------------------------------------------------


def test_a_first_call_writes_the_prefix_before_its_point_and_bills_the_rest_uncached() -> None:
    usage = send(PromptCache(), 0, SYSTEM, QUESTION)
    assert cached(usage) == (0, 1_100, 50)
    assert usage["cacheDetails"] == [{"ttl": "5m", "inputTokens": 1_100}]
    assert usage["totalTokens"] == 1_150


def test_a_second_call_within_the_ttl_reads_the_prefix() -> None:
    cache = PromptCache()
    send(cache, 0, SYSTEM, QUESTION)
    usage = send(cache, FIVE_MINUTES - 1, SYSTEM, user(text(70, "another")))
    assert cached(usage) == (1_100, 0, 70)
    assert usage["cacheDetails"] == []


def test_at_its_ttl_an_entry_is_gone_and_the_prefix_is_written_again() -> None:
    cache = PromptCache()
    send(cache, 0, SYSTEM, QUESTION)
    assert cached(send(cache, FIVE_MINUTES, SYSTEM, QUESTION)) == (0, 1_100, 50)


def test_a_read_renews_the_entry_it_read() -> None:
    cache = PromptCache()
    send(cache, 0, SYSTEM, QUESTION)
    send(cache, 200, SYSTEM, QUESTION)  # read: alive until 500, not 300
    assert cached(send(cache, 450, SYSTEM, QUESTION))[0] == 1_100


def test_a_read_renews_for_the_ttl_the_entry_was_written_with_not_the_one_asked() -> None:
    cache = PromptCache()
    send(cache, 0, SYSTEM, QUESTION)  # written 5m
    one_hour = [text(1_100), point("1h")]
    assert cached(send(cache, 200, one_hour, QUESTION))[0] == 1_100  # renewed for 5m
    assert cached(send(cache, 200 + FIVE_MINUTES, one_hour, QUESTION)) == (0, 1_100, 50)


def test_a_read_renews_only_the_entry_it_read_not_a_shorter_one_of_the_same_request() -> None:
    """The stand-in's reading where the docs are silent: the system prompt's entry is not
    renewed by a read of the longer history entry."""
    cache = PromptCache()
    history = [text(300, "history"), point()]
    send(cache, 0, SYSTEM, user(*history), {"role": "assistant", "content": [text(10)]}, QUESTION)
    send(cache, 200, SYSTEM, user(*history), {"role": "assistant", "content": [text(10)]}, QUESTION)
    # The history changed: only the system prompt's entry could match, and it died at 300.
    assert cached(send(cache, 400, SYSTEM, user(text(300, "changed"), point()))) == (0, 1_400, 0)


@pytest.mark.parametrize(("model", "least"), sorted(MIN_PREFIX_TOKENS.items()))
def test_a_point_caches_only_a_prefix_of_at_least_the_models_minimum(
    model: str, least: int
) -> None:
    config = CacheConfig(min_prefix_tokens=least)
    below = send(PromptCache(config), 0, [text(least - 1), point()], QUESTION)
    assert cached(below) == (0, 0, least - 1 + 50)
    assert below["cacheDetails"] == []
    at = send(PromptCache(config), 0, [text(least), point()], QUESTION)
    assert cached(at) == (0, least, 50)


def test_the_minimum_counts_the_whole_prefix_not_the_tokens_since_the_previous_point() -> None:
    usage = send(PromptCache(), 0, [text(1_100), point(), text(10, "summary"), point()], QUESTION)
    assert cached(usage) == (0, 1_110, 50)


@pytest.mark.parametrize(("added", "read"), [(19, 1_100 + 19 * 5), (20, 0)])
def test_a_hit_is_found_at_most_20_block_positions_back_counting_the_point_itself(
    added: int, read: int
) -> None:
    cache = PromptCache()
    first = [text(1_100), *(text(5, f"b{i}") for i in range(19))]
    send(cache, 0, [], user(*first, point()))  # written at 20 blocks
    later = [*first, *(text(5, f"n{i}") for i in range(added))]
    usage = send(cache, 60, [], user(*later, point()))
    assert usage["cacheReadInputTokens"] == read


def test_the_longest_prefix_alive_is_read_and_each_point_after_it_writes() -> None:
    cache = PromptCache()
    history = [text(400, "history"), point()]
    send(cache, 0, SYSTEM, user(*history))
    usage = send(cache, 60, SYSTEM, user(*history, text(200, "new"), point(), text(50, "q")))
    assert cached(usage) == (1_500, 200, 50)


def test_mixed_ttls_report_the_1h_writes_before_the_5m_ones() -> None:
    cache = PromptCache()
    system = [text(1_100), point("1h")]
    usage = send(cache, 0, system, user(text(300, "history"), point("5m"), text(50, "q")))
    assert usage["cacheDetails"] == [
        {"ttl": "1h", "inputTokens": 1_100},
        {"ttl": "5m", "inputTokens": 300},
    ]
    # Ten minutes on: the 5m entry is gone, the 1h one is read.
    usage = send(cache, 600, system, user(text(300, "history"), point("5m"), text(50, "q")))
    assert cached(usage) == (1_100, 300, 50)
    assert usage["cacheDetails"] == [{"ttl": "5m", "inputTokens": 300}]


@pytest.mark.parametrize(
    "ttls",
    [["5m", "1h"], [None, "1h"], ["1h", "5m", "1h"]],
    ids=["5m-1h", "default-1h", "1h-5m-1h"],
)
def test_a_point_with_a_longer_ttl_than_one_before_it_is_refused(ttls: list[str | None]) -> None:
    blocks = [block for i, ttl in enumerate(ttls) for block in (text(400, f"s{i}"), point(ttl))]
    with pytest.raises(CacheRequestRefused, match="longer ttl"):
        send(PromptCache(), 0, blocks, QUESTION)


def test_ttls_that_never_grow_are_accepted() -> None:
    ttls = ["1h", "1h", "5m", None]
    blocks = [b for i, ttl in enumerate(ttls) for b in (text(1_100, f"s{i}"), point(ttl))]
    usage = send(PromptCache(), 0, blocks, QUESTION)
    assert usage["cacheDetails"] == [
        {"ttl": "1h", "inputTokens": 2_200},
        {"ttl": "5m", "inputTokens": 2_200},
    ]


def test_more_than_4_points_are_refused_and_leave_the_cache_as_it_was() -> None:
    cache = PromptCache()
    four = [b for i in range(4) for b in (text(400, f"s{i}"), point())]
    assert cached(send(cache, 0, four, QUESTION)) == (0, 1_600, 50)
    with pytest.raises(CacheRequestRefused, match="5 cache points"):
        send(cache, 10, [*four, text(10), point()], QUESTION)
    assert cached(send(cache, 20, four, QUESTION)) == (1_600, 0, 50)


@pytest.mark.parametrize(
    ("cache_point", "refusal"),
    [({"type": "default", "ttl": "10m"}, "ttl must be"), ({"type": "ephemeral"}, "type must be")],
)
def test_a_point_of_an_unknown_ttl_or_type_is_refused(
    cache_point: dict[str, str], refusal: str
) -> None:
    with pytest.raises(CacheRequestRefused, match=refusal):
        send(PromptCache(), 0, [text(1_100), {"cachePoint": cache_point}], QUESTION)


def test_a_request_without_a_point_gets_no_cache_members() -> None:
    usage = send(PromptCache(), 0, [text(1_100)], QUESTION)
    assert usage == {"inputTokens": 1_150, "outputTokens": 0, "totalTokens": 1_150}


def test_the_prefix_is_matched_by_content_role_and_message_start() -> None:
    """The same texts split into other messages are another prefix: a miss."""
    cache = PromptCache()
    first = {"role": "assistant", "content": [text(10, "a")]}
    send(cache, 0, [], user(text(1_100), text(20, "x"), point()), first, QUESTION)
    split = [user(text(1_100)), {"role": "assistant", "content": [text(20, "x"), point()]}]
    assert cached(send(cache, 10, [], *split, QUESTION))[0] == 0


def test_tools_come_first_so_a_changed_tool_is_a_miss_for_the_system_prompt_after_it() -> None:
    def tool(description: str) -> dict[str, Any]:
        return {"toolSpec": {"name": "search", "description": description}}

    cache = PromptCache()
    first = cache.converse(system=SYSTEM, messages=[QUESTION], at=0, tools=[tool("Clauses.")])
    assert first.usage["cacheWriteInputTokens"] > 1_100  # the tool is in the prefix
    same = cache.converse(system=SYSTEM, messages=[QUESTION], at=10, tools=[tool("Clauses.")])
    assert same.usage["cacheReadInputTokens"] == first.usage["cacheWriteInputTokens"]
    other = cache.converse(system=SYSTEM, messages=[QUESTION], at=20, tools=[tool("Cases.")])
    assert other.usage["cacheReadInputTokens"] == 0


def test_time_is_given_and_never_goes_back() -> None:
    cache = PromptCache()
    send(cache, 100, SYSTEM, QUESTION)
    with pytest.raises(ValueError, match="time went back"):
        send(cache, 99, SYSTEM, QUESTION)
    moment = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    cache = PromptCache()
    cache.converse(system=SYSTEM, messages=[QUESTION], at=moment)
    later = cache.converse(system=SYSTEM, messages=[QUESTION], at=moment + timedelta(minutes=4))
    assert later.usage["cacheReadInputTokens"] == 1_100


@given(
    st.lists(
        st.tuples(
            st.floats(min_value=0, max_value=2 * ONE_HOUR),
            st.integers(min_value=0, max_value=3),
            st.sampled_from(["1h", "5m", None]),
            st.booleans(),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_every_input_token_is_billed_once_as_read_written_or_uncached(
    turns: list[tuple[float, int, str | None, bool]],
) -> None:
    cache, now, history = PromptCache(), 0.0, [text(900, "system")]
    for gap, grow, ttl, mark in turns:
        now += gap
        history += [text(120, f"t{now}-{i}") for i in range(grow)]
        system = [text(200, "prompt"), point("1h")]
        blocks = [*history, *([point(ttl)] if mark else []), text(30, "q")]
        usage = send(cache, now, system, user(*blocks))
        prompt = 200 + 900 + 120 * (len(history) - 1) + 30
        assert usage["inputTokens"] + sum(cached(usage)[:2]) == prompt
        assert all(v >= 0 for v in cached(usage))
        assert (
            sum(d["inputTokens"] for d in usage["cacheDetails"]) == usage["cacheWriteInputTokens"]
        )
        assert [d["ttl"] for d in usage["cacheDetails"]] in ([], ["1h"], ["5m"], ["1h", "5m"])


# --- the deviations -----------------------------------------------------------------------


def test_1h_honoured_as_5m_writes_and_reports_5m_entries() -> None:
    system = [text(1_100), point("1h")]
    honest = PromptCache()
    send(honest, 0, system, QUESTION)
    assert cached(send(honest, 30 * 60, system, QUESTION))[0] == 1_100
    downgrading = PromptCache(CacheConfig(honour_1h=False))
    first = downgrading.converse(system=system, messages=[QUESTION], at=0)
    assert first.usage["cacheDetails"] == [{"ttl": "5m", "inputTokens": 1_100}]
    assert first.downgraded
    assert cached(send(downgrading, FIVE_MINUTES, system, QUESTION)) == (0, 1_100, 50)


def test_an_evicted_entry_is_gone_before_its_ttl_and_the_outcome_says_so() -> None:
    always = PromptCache(CacheConfig(evict_share=1.0))
    send(always, 0, SYSTEM, QUESTION)
    missed = always.converse(system=SYSTEM, messages=[QUESTION], at=FIVE_MINUTES - 0.001)
    assert cached(missed.usage) == (0, 1_100, 50)
    assert missed.evicted
    never = PromptCache(CacheConfig(evict_share=0.0))
    send(never, 0, SYSTEM, QUESTION)
    hit = never.converse(system=SYSTEM, messages=[QUESTION], at=FIVE_MINUTES - 0.001)
    assert cached(hit.usage)[0] == 1_100 and not hit.evicted


def evicted_conversations(seed: int, share: float = 0.5) -> list[bool]:
    evicted = []
    for n in range(200):
        cache = PromptCache(CacheConfig(evict_share=share, seed=seed), name=f"matter-{n}")
        send(cache, 0, SYSTEM, QUESTION)
        evicted.append(cache.converse(system=SYSTEM, messages=[QUESTION], at=299.999).evicted)
    return evicted


def test_a_share_of_entries_is_evicted_early_the_same_ones_for_the_same_seed() -> None:
    first = evicted_conversations(seed=7)
    assert 0.35 < sum(first) / len(first) < 0.65
    assert evicted_conversations(seed=7) == first
    assert evicted_conversations(seed=8) != first


@pytest.mark.parametrize(
    ("tokenizer", "chars", "written"),
    [
        (chars_over_4, 4_400, 1_100),
        # Fewer tokens than chars/4 (the public Claude tokenizer on legal English): a
        # prefix the stage counts at 1,100 holds 941, under the minimum: nothing is cached.
        (chars_per_token(4.68), 4_400, 0),
        # More tokens than chars/4: a prefix the stage counts at 950 reaches the minimum.
        (chars_per_token(3.5), 3_800, 1_086),
    ],
    ids=["chars/4", "chars/4.68", "chars/3.5"],
)
def test_another_tokenizer_moves_the_minimum_in_either_direction(
    tokenizer: Any, chars: int, written: int
) -> None:
    cache = PromptCache(CacheConfig(count_tokens=tokenizer))
    usage = send(cache, 0, [{"text": ("clause " * chars)[:chars]}, point()], QUESTION)
    assert usage["cacheWriteInputTokens"] == written
    assert chars_over_4("x" * 4_401) == 1_101


def test_the_public_claude_tokenizer_counts_real_tokens() -> None:
    """Runs where ``tokenizers`` and the ``tokenizer.json`` of ``anthropic`` 0.37.1 are
    installed (or ``$CLAUDE_TOKENIZER_JSON`` names the file); neither is a dependency."""
    try:
        count = claude_tokenizer()
    except TokenizerUnavailable as exc:
        pytest.skip(f"the public Claude tokenizer is not here: {exc}")
    assert count("hello world") == 2
    legal = clause_text(random.Random(1), 4_400)
    assert chars_over_4(legal) == 1_100 and count(legal) < MIN
    usage = send(
        PromptCache(CacheConfig(count_tokens=count)), 0, [{"text": legal}, point()], QUESTION
    )
    assert usage["cacheWriteInputTokens"] == 0


def test_without_tokenizers_or_its_file_the_claude_tokenizer_says_what_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CLAUDE_TOKENIZER_JSON", str(tmp_path / "absent.json"))
    with pytest.raises(TokenizerUnavailable, match=r"tokenizers|tokenizer\.json"):
        claude_tokenizer()


# --- the model stage: its own system prompt, then the payload the stage built --------------

LIMITS = WindowLimits(
    max_tokens=20_000, max_messages=25, floor_messages=10, message_max_tokens=2_000
)
CONVERSATION = "matter-1187"
SUMMARY = words(1_000, "summary")
T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def payload(
    turn: int,
    *,
    ttls: tuple[str | None, ...] | None = None,
    cache: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The stage's prompt payload for ``turn`` (1 = the first question) of a conversation
    with a summary: its window, its cache-aligned view (TTLs when given), and ``cache``."""
    history = [
        HistoryMessage(
            seq=seq, role="user" if seq % 2 else "assistant", content=words(80, f"m{seq}")
        )
        for seq in range(1, 2 * turn - 1)
    ]
    window = bound_history(reversed(history), LIMITS)
    question = words(30, f"question{turn}")
    view = render_converse(window, question, SUMMARY, cache_history=bool(history))
    if ttls is not None:
        view = with_cache_ttls(view, ttls)  # type: ignore[arg-type]
    command = ConverseCommand(
        type="converse", command_id=f"c-{turn}", conversation_id=CONVERSATION, message=question
    )
    made = prompt_payload(command, window, FoldState(summary=SUMMARY), view)
    if cache is not None:
        made["cache"] = cache
    return made


def prompt_tokens(system_prompt: str, made: Mapping[str, Any]) -> int:
    view = made["converse"]
    blocks = [*view["system"], *(b for m in view["messages"] for b in m["content"])]
    return chars_over_4(system_prompt) + sum(chars_over_4(b["text"]) for b in blocks if "text" in b)


def test_the_model_stage_sends_its_own_system_prompt_first_then_the_view_as_is() -> None:
    stage = ModelStage(system_prompt=words(100, "prompt"))
    made = payload(3)
    answer = stage.answer(made, at=T0, content=words(25, "answer"))
    question = chars_over_4(made["message"])
    assert cached(answer.usage) == (
        0,
        prompt_tokens(words(100, "prompt"), made) - question,
        question,
    )
    assert answer.usage["outputTokens"] == 25
    assert answer.usage["totalTokens"] == prompt_tokens(words(100, "prompt"), made) + 25
    assert answer.answered_at == T0
    # The next turn reads the previous turn's prefix: own prompt, summary, its history.
    later = stage.answer(payload(4), at=T0 + timedelta(minutes=2))
    assert (
        later.usage["cacheReadInputTokens"] == prompt_tokens(words(100, "prompt"), made) - question
    )


def test_each_conversation_has_a_cache_of_its_own() -> None:
    stage = ModelStage()
    stage.answer(payload(2), at=T0)
    other = {**payload(2), "conversation_id": "matter-2"}
    assert stage.answer(other, at=T0 + timedelta(seconds=5)).usage["cacheReadInputTokens"] == 0


@pytest.mark.parametrize(
    "change",
    [
        SystemPromptChange(text="A new house prompt.", at_call=3),
        SystemPromptChange(text="A new house prompt.", at=T0 + timedelta(minutes=2)),
    ],
    ids=["at-call", "at-time"],
)
def test_a_system_prompt_changed_mid_conversation_misses_once_then_reads_again(
    change: SystemPromptChange,
) -> None:
    stage = ModelStage(system_prompt_change=change)
    answers = [
        stage.answer(payload(turn), at=T0 + timedelta(minutes=turn - 1)) for turn in (1, 2, 3, 4)
    ]
    reads = [a.usage["cacheReadInputTokens"] for a in answers]
    assert reads[1] > 0 and reads[2] == 0 and reads[3] > 0
    assert [a.system_prompt_changed for a in answers] == [False, False, True, False]


@pytest.mark.parametrize(
    ("ttls", "details"),
    [
        (("1h", "5m"), [{"ttl": "1h", "inputTokens": 2_100}, {"ttl": "5m", "inputTokens": 160}]),
        (("5m", "5m"), [{"ttl": "5m", "inputTokens": 2_260}]),
    ],
    ids=["view-1h", "view-5m"],
)
def test_the_stages_own_point_is_1h_when_any_point_of_the_view_is(
    ttls: tuple[str, str], details: list[dict[str, Any]]
) -> None:
    """Own prompt 1,100 tokens, summary 1,000, history 160: a 5m point of its own before
    the view's 1h one would be refused."""
    stage = ModelStage(system_prompt=words(1_100, "prompt"), own_cache_point=True)
    assert stage.answer(payload(2, ttls=ttls), at=T0).usage["cacheDetails"] == details


# --- the usage's shape: botocore 1.44.5's bedrock-runtime model ---------------------------

CONVERSE_RESPONSE = SERVICE.operation_model("Converse").output_shape
TOKEN_USAGE = CONVERSE_RESPONSE.members["usage"]


def shape_errors(value: Any, shape: Shape, where: str) -> list[str]:
    """What in ``value`` the response shape does not allow: unknown or missing members, a
    union with other than one member, wrong types, a string outside its enum, a number
    under its ``min``. (botocore validates inputs only; a response is walked here.)"""
    kind = shape.type_name
    if isinstance(shape, StructureShape):
        if not isinstance(value, Mapping):
            return [f"{where}: not a structure"]
        errors = [f"{where}.{name}: unknown member" for name in value if name not in shape.members]
        errors += [f"{where}.{n}: missing" for n in shape.required_members if n not in value]
        if shape.is_tagged_union and len(value) != 1:
            errors.append(f"{where}: a union holds exactly one member")
        for name, member in value.items():
            if name in shape.members:
                errors += shape_errors(member, shape.members[name], f"{where}.{name}")
        return errors
    if isinstance(shape, ListShape):
        if not isinstance(value, list):
            return [f"{where}: not a list"]
        return [
            e for i, v in enumerate(value) for e in shape_errors(v, shape.member, f"{where}[{i}]")
        ]
    if kind == "string":
        if not isinstance(value, str):
            return [f"{where}: not a string"]
        return (
            [f"{where}: {value!r} not in {shape.enum}"]
            if shape.enum and value not in shape.enum
            else []
        )
    if kind in ("integer", "long"):
        if not isinstance(value, int) or isinstance(value, bool):
            return [f"{where}: not an integer"]
        least = shape.metadata.get("min")
        return [f"{where}: under {least}"] if least is not None and value < least else []
    return [f"{where}: this check does not know {kind} shapes"]


def usages() -> list[dict[str, Any]]:
    """A usage of every form the stand-in returns: no point, a write, a read, 1h and 5m
    writes together, a 1h point written as 5m."""
    cache, mixed = PromptCache(), [text(1_100), point("1h")]
    history = user(text(300), point(), text(40, "q"))
    return [
        send(PromptCache(), 0, [text(1_100)], QUESTION),
        send(cache, 0, SYSTEM, QUESTION),
        send(cache, 60, SYSTEM, QUESTION),
        send(PromptCache(), 0, mixed, history),
        send(PromptCache(CacheConfig(honour_1h=False)), 0, mixed, history),
    ]


@pytest.mark.parametrize(
    "usage", usages(), ids=["no-point", "write", "read", "mixed", "downgraded"]
)
def test_the_usage_has_the_shape_of_botocores_token_usage(usage: dict[str, Any]) -> None:
    assert shape_errors(usage, TOKEN_USAGE, "usage") == []
    response = converse_response(usage, "Clause 14.2 allows termination.", latency_ms=812)
    assert shape_errors(response, CONVERSE_RESPONSE, "response") == []


def test_the_cache_details_are_sorted_as_the_model_documents_them() -> None:
    assert "1h before 5m" in TOKEN_USAGE.members["cacheDetails"].documentation
    assert [d["ttl"] for d in usages()[3]["cacheDetails"]] == ["1h", "5m"]


@pytest.mark.parametrize(
    ("broken", "error"),
    [
        ({"cacheCreationInputTokens": 1}, "usage.cacheCreationInputTokens: unknown member"),
        ({"cacheDetails": [{"ttl": "10m", "inputTokens": 1}]}, "'10m' not in"),
        ({"cacheDetails": [{"ttl": "5m"}]}, "usage.cacheDetails[0].inputTokens: missing"),
        ({"cacheDetails": {"ttl": "5m", "inputTokens": 1}}, "usage.cacheDetails: not a list"),
        ({"cacheReadInputTokens": -1}, "usage.cacheReadInputTokens: under 0"),
        ({"inputTokens": "12"}, "usage.inputTokens: not an integer"),
    ],
)
def test_the_shape_check_finds_what_the_model_does_not_allow(
    broken: dict[str, Any], error: str
) -> None:
    usage = {**usages()[3], **broken}
    assert any(error in found for found in shape_errors(usage, TOKEN_USAGE, "usage"))


def test_the_shape_check_finds_a_required_member_missing() -> None:
    without_total = {k: v for k, v in usages()[3].items() if k != "totalTokens"}
    assert shape_errors(without_total, TOKEN_USAGE, "usage") == ["usage.totalTokens: missing"]


# --- the answer item and its bill ---------------------------------------------------------

EXPECTED = {
    "prompt_tokens": 2_290,
    "expected_read_tokens": 2_100,
    "points": [{"ttl": "1h", "prefix_tokens": 1_000}, {"ttl": "5m", "prefix_tokens": 1_160}],
}


def answered(made: Mapping[str, Any]) -> ModelAnswer:
    return ModelStage().answer(made, at=T0 + timedelta(seconds=42.9), content="Clause 14.2 …")


def test_the_answer_item_carries_the_bill_as_returned_and_what_the_stage_expected() -> None:
    made = payload(2, ttls=("1h", "5m"), cache=EXPECTED)
    answer = answered(made)
    item = answer_item(made, answer, seq=4)
    assert {k: v for k, v in item.items() if k != "model_usage"} == {
        "pk": {"S": CONVERSATION},
        "sk": {"S": "msg#000000000004"},
        "seq": {"N": "4"},
        "role": {"S": "assistant"},
        "content": {"S": "Clause 14.2 …"},
        "created_at": {"S": "2026-11-30T09:00:42Z"},
    }
    usage = answer.usage
    assert item["model_usage"] == {
        "M": {
            "inputTokens": {"N": str(usage["inputTokens"])},
            "outputTokens": {"N": str(usage["outputTokens"])},
            "totalTokens": {"N": str(usage["totalTokens"])},
            "cacheReadInputTokens": {"N": "0"},
            "cacheWriteInputTokens": {"N": str(usage["cacheWriteInputTokens"])},
            "cacheDetails": {
                "L": [
                    {"M": {"ttl": {"S": d["ttl"]}, "inputTokens": {"N": str(d["inputTokens"])}}}
                    for d in usage["cacheDetails"]
                ]
            },
            "answered_at": {"S": "2026-11-30T09:00:42Z"},
            "command_id": {"S": "c-2"},
            "expected": {
                "M": {
                    "prompt_tokens": {"N": "2290"},
                    "expected_read_tokens": {"N": "2100"},
                    "points": {
                        "L": [
                            {"M": {"ttl": {"S": "1h"}, "prefix_tokens": {"N": "1000"}}},
                            {"M": {"ttl": {"S": "5m"}, "prefix_tokens": {"N": "1160"}}},
                        ]
                    },
                }
            },
        }
    }
    assert [d["ttl"] for d in usage["cacheDetails"]] == ["1h", "5m"]


def test_without_a_cache_block_the_item_has_no_expected_member() -> None:
    made = payload(2)
    assert "cache" not in made  # the stage does not send it yet
    item = answer_item(made, answered(made), seq=4, created_at=T0 + timedelta(minutes=1))
    assert "expected" not in item["model_usage"]["M"]
    assert item["created_at"] == {"S": "2026-11-30T09:01:00Z"}


def test_the_item_is_a_valid_put_item_and_the_stages_reader_reads_the_answer() -> None:
    made = payload(2, cache=EXPECTED)
    item = answer_item(made, answered(made), seq=4)
    put_item = botocore.session.get_session().get_service_model("dynamodb")
    report = ParamValidator().validate(
        {"TableName": "history", "Item": item}, put_item.operation_model("PutItem").input_shape
    )
    assert not report.has_errors(), report.generate_report()
    [message] = history_page({"Items": [item]}).messages  # type: ignore[typeddict-item]
    assert (message.seq, message.role, message.content) == (4, "assistant", "Clause 14.2 …")
    assert message.created_at == datetime(2026, 11, 30, 9, 0, 42, tzinfo=UTC)


@pytest.mark.parametrize("seq", [0, -1])
def test_an_answer_item_needs_a_seq_from_1(seq: int) -> None:
    made = payload(2)
    with pytest.raises(ValueError, match="seq counts from 1"):
        answer_item(made, answered(made), seq=seq)


def test_put_answer_stores_the_item_with_a_boto3_client() -> None:
    made = payload(2, cache=EXPECTED)
    item = answer_item(made, answered(made), seq=4)
    with mock_aws():
        client = boto3.client("dynamodb", **DUMMY_CLIENT_ARGS)
        client.create_table(
            TableName="history",
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        put_answer(client, "history", item)
        stored = client.get_item(TableName="history", Key={"pk": item["pk"], "sk": item["sk"]})
    assert stored["Item"] == item


class FakeAsyncDynamo:
    """Records what ``put_item`` is awaited with."""

    def __init__(self) -> None:
        self.puts: list[dict[str, Any]] = []

    async def put_item(self, **request: Any) -> dict[str, Any]:
        self.puts.append(request)
        return {}


async def test_put_answer_async_awaits_put_item_with_the_item() -> None:
    made = payload(2)
    item = answer_item(made, answered(made), seq=4)
    client = FakeAsyncDynamo()
    await put_answer_async(client, "history", item)  # type: ignore[arg-type]
    assert client.puts == [{"TableName": "history", "Item": item}]


def test_the_stand_ins_default_cache_plays_the_model_id_the_stage_is_given_for_it() -> None:
    """The demo, the tests and the benchmark run the cache-aligned stage with
    ``MODEL_ID=STAND_IN_MODEL_ID`` against this stand-in: the stage's row for that id has the
    stand-in's default minimum and takes ``1h``, as the stand-in honours it."""
    row = known_model(STAND_IN_MODEL_ID)
    config = CacheConfig()
    assert row is not None
    assert (row.min_tokens, row.offers_1h) == (config.min_prefix_tokens, config.honour_1h)
