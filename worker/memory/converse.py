"""The model-ready view: the window and the current message as Bedrock's Converse API takes them.

Converse (and Anthropic's Messages API) refuses a conversation that does not start with
a user message, whose roles do not alternate, or that holds a blank text block. Stored
histories break all three (a greeting before the first question, a question asked again,
an answer stored in two parts, an empty answer), so the view is built to be accepted by
construction (``docs/CONTRACT.md``, "The model-ready view"):

- each non-blank history message becomes one text block, its content as in the window
  (trimmed or not); consecutive messages of one role are consecutive blocks of one
  message, so roles alternate without merging or inventing any text;
- a blank message, and an answer with no question before it in the view, become no
  block; each is returned in ``left_out`` with its reason, for the caller to log;
- the current counsel message is the last block, exactly as received (never trimmed):
  a block of its own user message, or the next block of a trailing user message;
- the fold summary, if not blank, is the system prompt, followed by one cache point.

For the cache-aligned window (``cache_history=True``) the view also gets a cache point
after the last history block, before the current message's block (inside the same user
message when the history ends on a question), and, when the history point's lookback
would not reach it, one where the previous turn's history ended. A cache point is never
the first block of a message, and the view holds at most 3 (one of Bedrock's 4 stays
free for the model stage). :func:`with_cache_ttls` then gives each point its ``ttl`` (or
leaves it out), never a longer one after a shorter.

Pure: no I/O, no logging. The caller logs what was left out.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NotRequired, TypedDict

from worker.memory.history_window import Role, Window
from worker.memory.tokens import estimate_tokens

LeftOutReason = Literal["blank", "leading_answer"]
#: A cache point's lifetime, as Converse's ``cachePoint.ttl`` spells it.
CacheTtl = Literal["5m", "1h"]


class TextBlock(TypedDict):
    text: str


class CachePoint(TypedDict):
    type: Literal["default"]
    #: Bedrock's ``CachePointBlock.ttl`` (botocore >= 1.44.5's model); only the
    #: cache-aligned mode sets it (:func:`with_cache_ttls`).
    ttl: NotRequired[CacheTtl]


class CachePointBlock(TypedDict):
    cachePoint: CachePoint


class ConverseMessage(TypedDict):
    role: Role
    content: list[TextBlock | CachePointBlock]


#: Blocks between the previous turn's end and the history's cache point from which a
#: point of its own is set there. Bedrock finds a cached prefix at a cache point or up
#: to about 20 blocks before it; within 16, the history's point alone finds it.
PREVIOUS_END_MIN_DISTANCE = 16


@dataclass(frozen=True, slots=True)
class LeftOut:
    """A window message that has no block in the view, and why."""

    seq: int
    reason: LeftOutReason


@dataclass(frozen=True, slots=True)
class ConverseView:
    """``system`` and ``messages`` as the Converse request takes them, and what is not there."""

    system: tuple[TextBlock | CachePointBlock, ...]
    messages: tuple[ConverseMessage, ...]
    left_out: tuple[LeftOut, ...]


def is_blank(text: str) -> bool:
    """Empty or whitespace only (Unicode whitespace: ``\\u00a0`` and ``\\u2028`` count)."""
    return not text or text.isspace()


def render_converse(
    window: Window,
    message: str,
    summary: str | None,
    *,
    cache_history: bool = False,
    previous_history_end: int | None = None,
) -> ConverseView:
    """Build the Converse view of ``window`` followed by the current counsel ``message``.

    ``message`` must not be blank (the command parser rejects such a command): the
    view always ends with it, so it is never empty and always ends on the user's turn.

    ``cache_history`` (the cache-aligned mode) adds the history's cache points;
    ``previous_history_end`` is the seq the previous turn's history ended on
    (:func:`previous_history_end`), for the optional second one. Without them the view
    is the default mode's, byte for byte.
    """
    if is_blank(message):
        raise ValueError("the current message is blank")
    if previous_history_end is not None and not cache_history:
        raise ValueError("previous_history_end is only used with cache_history")
    # One pass, no helper calls: this runs on every turn beside the window (make bench).
    messages: list[ConverseMessage] = []
    left_out: list[LeftOut] = []
    blocks: list[TextBlock | CachePointBlock] = []
    role: Role | None = None
    # Where the previous turn's history ended: (message, block) of its last block shown.
    previous_end = previous_history_end or 0
    previous_at: tuple[int, int] | None = None
    for stored in window.messages:
        content = stored.content
        if not content or content.isspace():
            left_out.append(LeftOut(stored.seq, "blank"))
            continue
        if stored.role == role:
            blocks.append({"text": content})
        elif role is None and stored.role == "assistant":
            left_out.append(LeftOut(stored.seq, "leading_answer"))
            continue
        else:
            role = stored.role
            blocks = [{"text": content}]
            messages.append({"role": role, "content": blocks})
        if stored.seq <= previous_end:
            previous_at = (len(messages) - 1, len(blocks) - 1)
    if cache_history and messages:
        _add_history_cache_points(messages, previous_at)
    if role == "user":
        blocks.append({"text": message})
    else:
        messages.append({"role": "user", "content": [{"text": message}]})
    # The model stage's own system prompt and the summary form a prefix that changes only
    # when the fold advances: the cache point after it lets the model cache that prefix.
    system: tuple[TextBlock | CachePointBlock, ...] = ()
    if summary is not None and not is_blank(summary):
        system = ({"text": summary}, {"cachePoint": {"type": "default"}})
    return ConverseView(system=system, messages=tuple(messages), left_out=tuple(left_out))


def previous_history_end(window: Window) -> int | None:
    """The seq the previous turn's history ended on: the one before the newest question
    (that question was the previous turn's current message). None without a question."""
    newest_question = next((m.seq for m in reversed(window.messages) if m.role == "user"), None)
    return newest_question - 1 if newest_question is not None and newest_question > 1 else None


def _add_history_cache_points(
    messages: list[ConverseMessage], previous_at: tuple[int, int] | None
) -> None:
    """A cache point after the last history block; another after ``previous_at`` (the
    previous turn's last block) when it lies too far back for the first one's lookback.
    Each follows a text block of its own message, so none is ever a message's first."""
    if previous_at is not None:
        message_index, block_index = previous_at
        after = len(messages[message_index]["content"]) - block_index - 1
        after += sum(len(m["content"]) for m in messages[message_index + 1 :])
        if after >= PREVIOUS_END_MIN_DISTANCE:
            messages[message_index]["content"].insert(block_index + 1, _cache_point())
    messages[-1]["content"].append(_cache_point())


@dataclass(frozen=True, slots=True)
class ViewPoint:
    """A cache point of a view: its ``ttl`` (``5m`` without one, Bedrock's default), the
    estimated tokens of the view before it, and that prefix's digest (:func:`prefix_digest`)."""

    ttl: CacheTtl
    prefix_tokens: int
    prefix_digest: str


def cache_points(view: ConverseView) -> tuple[ViewPoint, ...]:
    """Each cache point of the view, in order. The model stage's own system prompt, which
    Bedrock sees before the view, is neither counted nor digested: it is not the stage's."""
    points: list[ViewPoint] = []
    tokens = 0
    system: list[str] = []
    messages: list[tuple[Role, list[str]]] = []

    def walk(blocks: Sequence[TextBlock | CachePointBlock], texts: list[str]) -> None:
        nonlocal tokens
        for block in blocks:
            if "cachePoint" not in block:
                tokens += estimate_tokens(block["text"])
                texts.append(block["text"])
            elif "text" not in block:  # (narrows the union to the cache point)
                ttl = block["cachePoint"].get("ttl", "5m")
                points.append(ViewPoint(ttl, tokens, prefix_digest(system, messages)))

    walk(view.system, system)
    for message in view.messages:
        messages.append((message["role"], []))
        walk(message["content"], messages[-1][1])
    return tuple(points)


def prefix_digest(system: Sequence[str], messages: Sequence[tuple[Role, Sequence[str]]]) -> str:
    """The first 16 hex digits of the SHA-256 of a view's canonical JSON up to a point: its
    ``system`` texts and its messages (role and texts, the last one as far as the point),
    cache points left out (markers, not content), keys sorted, no whitespace, UTF-8. Two
    prefixes of equal length but other content have other digests."""
    canonical = json.dumps(
        {
            "system": list(system),
            "messages": [{"role": role, "content": list(texts)} for role, texts in messages],
        },
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def cache_point_prefixes(view: ConverseView) -> tuple[int, ...]:
    """The estimated tokens of the view before each of its cache points, in order (the
    model stage's own system prompt not counted)."""
    return tuple(point.prefix_tokens for point in cache_points(view))


def with_cache_ttls(view: ConverseView, ttls: tuple[CacheTtl | None, ...]) -> ConverseView:
    """``view`` with its cache points, in order, given ``ttls`` (None: the point is left
    out). Refused when their number differs, or a TTL is longer than one before it."""
    points = len(cache_point_prefixes(view))
    if len(ttls) != points:
        raise ValueError(f"{len(ttls)} TTLs for {points} cache points")
    kept = [ttl for ttl in ttls if ttl is not None]
    if any(earlier == "5m" and later == "1h" for earlier, later in itertools.pairwise(kept)):
        raise ValueError("a cache point may not have a longer TTL than one before it")
    remaining = iter(ttls)

    def blocks(
        content: tuple[TextBlock | CachePointBlock, ...] | list[TextBlock | CachePointBlock],
    ) -> list[TextBlock | CachePointBlock]:
        out: list[TextBlock | CachePointBlock] = []
        for block in content:
            if "cachePoint" not in block:
                out.append(block)
            elif (ttl := next(remaining)) is not None:
                out.append({"cachePoint": {"type": "default", "ttl": ttl}})
        return out

    system = tuple(blocks(view.system))
    messages = tuple(
        ConverseMessage(role=message["role"], content=blocks(message["content"]))
        for message in view.messages
    )
    return ConverseView(system=system, messages=messages, left_out=view.left_out)


def _cache_point() -> CachePointBlock:
    """A point without ``ttl``: the default mode's view never carries one (Bedrock gives
    such a point 5 minutes); the cache-aligned mode gives each point its TTL afterwards
    (:func:`with_cache_ttls`). A new dict each time: views share none."""
    return {"cachePoint": {"type": "default"}}
