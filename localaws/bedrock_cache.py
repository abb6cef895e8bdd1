"""A stand-in for Amazon Bedrock's prompt cache (Claude, Converse API): one request in, the
``usage`` Converse would return for it out, priced by the documented rules.

Written from the documentation, never from the stage's own model of the cache
(``worker.caching``, ``worker.memory`` stay out of it, checked by import-linter): a check of
the stage's prediction against a copy of itself proves nothing. Sources: Bedrock user guide,
"Prompt caching for faster model inference"; Anthropic, "Prompt caching" and pricing;
botocore 1.44.5's ``bedrock-runtime`` model for the shape of ``TokenUsage``.

1. A request is its ``tools``, its ``system`` blocks, then its ``messages``' blocks. A
   ``cachePoint`` marks the exact prefix before it: every block's content, and each
   message's role and where it starts. The point blocks themselves are markers, not content.
2. At most 4 points a request; a point's ``ttl`` is ``"5m"`` or ``"1h"`` (absent: 5m), and no
   point may carry a longer TTL than one before it. Otherwise :class:`CacheRequestRefused`
   (the service's ValidationException).
3. A point caches only when its prefix holds at least ``min_prefix_tokens``: the whole
   prefix, Anthropic's wording ("the minimum cacheable prompt length"). Bedrock's guide words
   it per checkpoint ("requires at least 1,024 tokens per cache checkpoint. That means that
   your first cache checkpoint can be defined after 1,024 tokens and your second cache
   checkpoint can be defined after 2,048 tokens"); ``min_per_checkpoint`` applies that
   reading: a point caches when its prefix holds the minimum more than the prefix of the
   last point before it that caches (a point below it "can only create a cache checkpoint
   if your total prompt prefix meets the minimum": it is no checkpoint, and does not count).
4. A hit is looked for at each point and at the block boundaries before it, ``lookback_blocks``
   positions in all counting the point's own; the longest prefix alive is read, and the read
   renews that entry (only that one) for the TTL it was written with.
5. Each cacheable point after the read writes its prefix with its TTL. An entry lives its TTL
   after it was written or last read; at exactly its TTL it is gone.
6. ``usage``: ``cacheReadInputTokens`` the prefix read; ``cacheWriteInputTokens`` from there to
   the last point written; ``cacheDetails`` those writes by TTL, 1h before 5m (Anthropic's
   mixing rule: 1h up to the last 1h point written, 5m from there to the last point);
   ``inputTokens`` the rest; ``totalTokens`` all input (uncached, read, written) plus output.
   A request without a point gets no cache members; with one, all three (``cacheDetails``
   empty when nothing was written: the model's "Empty if no cache creation occurred").

Deviations, each off by default (:class:`CacheConfig`): another tokenizer, ``1h`` honoured as
``5m``, a share of entries evicted early (seeded), the per-checkpoint minimum; the model
stage's own (its system prompt changed mid-conversation, its clock skewed) and its writer's
(the bill stored without ``cacheDetails`` or with a time without a zone) are
:mod:`localaws.model_stage`'s. Time is always passed in.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.util import find_spec
from pathlib import Path
from typing import Any, Literal

Ttl = Literal["5m", "1h"]
Tokenizer = Callable[[str], int]
#: A moment: seconds since the Unix epoch, or an aware datetime.
Moment = float | datetime

TTL_SECONDS: dict[Ttl, float] = {"5m": 300.0, "1h": 3600.0}
MAX_CACHE_POINTS = 4
LOOKBACK_BLOCKS = 20
#: The least prefix a point caches, by model (Bedrock's and Anthropic's tables).
MIN_PREFIX_TOKENS: dict[str, int] = {
    "claude-sonnet-4": 1_024,
    "claude-sonnet-4-5": 1_024,
    "claude-3-7-sonnet": 1_024,
    "claude-opus-4": 1_024,
    "claude-3-5-haiku": 2_048,
    "claude-sonnet-4-6": 2_048,
    "claude-haiku-4-5": 4_096,
    "claude-opus-4-5": 4_096,
    "claude-opus-4-6": 4_096,
}
#: The Bedrock id of the model :class:`CacheConfig`'s defaults play (a 1,024-token minimum,
#: ``1h`` honoured): Claude Sonnet 4.5. The demo, the tests and the benchmark give the stage
#: this ``MODEL_ID`` when its cache-aligned mode meets this stand-in.
STAND_IN_MODEL_ID = "anthropic.claude-sonnet-4-5-20250929-v1:0"
#: Where :func:`claude_tokenizer` looks for ``tokenizer.json`` when given no path.
TOKENIZER_ENV = "CLAUDE_TOKENIZER_JSON"


class CacheRequestRefused(ValueError):
    """The request's cache points break a rule the service enforces (a ValidationException)."""


class TokenizerUnavailable(RuntimeError):
    """The public Claude tokenizer cannot be loaded here (the reason says why)."""


def chars_over_4(text: str) -> int:
    """``ceil(len / 4)`` over code points: the estimate the stage budgets with."""
    return math.ceil(len(text) / 4)


def chars_per_token(ratio: float) -> Tokenizer:
    """A tokenizer counting ``ceil(len / ratio)``: above 4 counts fewer tokens than chars/4
    (the public Claude tokenizer reads legal English at about 4.68), below 4 more."""
    if ratio <= 0:
        raise ValueError(f"chars per token must be positive, not {ratio}")
    return lambda text: math.ceil(len(text) / ratio)


def claude_tokenizer(path: str | Path | None = None) -> Tokenizer:
    """The public Claude tokenizer: the ``tokenizer.json`` the ``anthropic`` 0.37 wheel ships,
    loaded with ``tokenizers``. Without ``path``: ``$CLAUDE_TOKENIZER_JSON``, else the one
    inside an installed ``anthropic`` package. Neither ``tokenizers`` nor the file is a
    dependency of the project: :class:`TokenizerUnavailable` says which is missing."""
    try:
        from tokenizers import Tokenizer as HFTokenizer  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:
        raise TokenizerUnavailable("the `tokenizers` package is not installed") from exc
    found = Path(path) if path else _tokenizer_json()
    if found is None or not found.is_file():
        raise TokenizerUnavailable(
            f"no tokenizer.json: pass a path, set ${TOKENIZER_ENV}, or install anthropic==0.37.1"
        )
    loaded = HFTokenizer.from_file(str(found))
    return lambda text: len(loaded.encode(text).ids)


def _tokenizer_json() -> Path | None:
    if os.environ.get(TOKENIZER_ENV):
        return Path(os.environ[TOKENIZER_ENV])
    spec = find_spec("anthropic")  # located, not imported: its own imports are not needed
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "tokenizer.json"


def seconds(at: Moment) -> float:
    """A moment as seconds since the Unix epoch."""
    if isinstance(at, datetime):
        if at.tzinfo is None:
            raise ValueError("a datetime moment must be timezone-aware")
        return at.timestamp()
    return float(at)


def moment(at: Moment) -> datetime:
    """A moment as an aware UTC datetime."""
    return at.astimezone(UTC) if isinstance(at, datetime) else datetime.fromtimestamp(at, UTC)


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """The model's documented figures, and the deviations (each off by default)."""

    min_prefix_tokens: int = MIN_PREFIX_TOKENS["claude-sonnet-4-5"]
    lookback_blocks: int = LOOKBACK_BLOCKS
    count_tokens: Tokenizer = chars_over_4
    #: False: the service writes every point as a 5m entry and reports it as 5m.
    honour_1h: bool = True
    #: Each write or renewal is, with this chance, evicted at a random moment of its life.
    evict_share: float = 0.0
    seed: int = 0
    #: Bedrock's per-checkpoint reading of the minimum (rule 3), instead of the whole prefix.
    min_per_checkpoint: bool = False
    #: Not a deviation but a bound for measuring: entries live for ever (nor are evicted).
    never_expire: bool = False


@dataclass(frozen=True, slots=True)
class CacheOutcome:
    """One request's ``usage`` (Converse's ``TokenUsage``), and what the stand-in knows that
    the bill does not say: whether an early eviction cost a read, whether ``1h`` was
    written as ``5m``."""

    usage: dict[str, Any]
    evicted: bool = False
    downgraded: bool = False


@dataclass(slots=True)
class _Entry:
    ttl: Ttl
    expires: float
    evicted_at: float


@dataclass(frozen=True, slots=True)
class _Point:
    boundary: int  # content blocks before it
    ttl: Ttl


@dataclass(frozen=True, slots=True)
class _Prompt:
    digests: list[str]  # the prefix's identity after 0, 1, … blocks
    tokens: list[int]  # the prefix's tokens after 0, 1, … blocks
    points: list[_Point]


class PromptCache:
    """One conversation's cache. :meth:`converse` prices a request at a moment that never
    goes back, and keeps what it wrote. ``name`` (the conversation) seeds the evictions."""

    def __init__(self, config: CacheConfig | None = None, name: str = "") -> None:
        self.config = config or CacheConfig()
        self._entries: dict[str, _Entry] = {}
        self._now = -math.inf
        self._rng = random.Random(f"{self.config.seed}:{name}")  # a str seed is stable
        self._texts: dict[str, tuple[bytes, int]] = {}

    def converse(
        self,
        *,
        system: Sequence[Mapping[str, Any]],
        messages: Sequence[Mapping[str, Any]],
        at: Moment,
        tools: Sequence[Mapping[str, Any]] = (),
        output_tokens: int = 0,
    ) -> CacheOutcome:
        """Price one request (``system``, ``messages``, ``tools`` as Converse takes them) at
        ``at``: read, write and renew entries, and return the usage."""
        prompt = self._linearize(tools, system, messages)
        _check_points(prompt.points)
        now = seconds(at)
        if now < self._now:
            raise ValueError(f"time went back: {now} after {self._now}")
        self._now = now
        total = prompt.tokens[-1]
        usage: dict[str, Any] = {
            "outputTokens": output_tokens,
            "totalTokens": total + output_tokens,
        }
        if not prompt.points:
            return CacheOutcome({"inputTokens": total, **usage})
        read, evicted = self._longest_alive(prompt, now)
        if read:
            self._renew(self._entries[prompt.digests[read]], now)
        writes = self._writes(prompt, read)
        for point in writes:
            entry = _Entry(ttl=point.ttl, expires=now, evicted_at=now)
            self._renew(entry, now)
            self._entries[prompt.digests[point.boundary]] = entry
        read_tokens = prompt.tokens[read]
        last_1h = max((p.boundary for p in writes if p.ttl == "1h"), default=0)
        last = max((p.boundary for p in writes), default=0)
        one_hour = prompt.tokens[last_1h] - read_tokens if last_1h else 0
        five_minutes = prompt.tokens[last] - max(read_tokens, prompt.tokens[last_1h]) if last else 0
        written = one_hour + five_minutes
        written_at = {p.boundary for p in writes}
        return CacheOutcome(
            {
                "inputTokens": total - read_tokens - written,
                **usage,
                "cacheReadInputTokens": read_tokens,
                "cacheWriteInputTokens": written,
                "cacheDetails": [
                    {"ttl": ttl, "inputTokens": count}
                    for ttl, count in (("1h", one_hour), ("5m", five_minutes))
                    if count > 0
                ],
            },
            evicted=evicted,
            downgraded=any(p.ttl == "1h" and p.boundary in written_at for p in prompt.points)
            and not self.config.honour_1h,
        )

    def _linearize(
        self,
        tools: Sequence[Mapping[str, Any]],
        system: Sequence[Mapping[str, Any]],
        messages: Sequence[Mapping[str, Any]],
    ) -> _Prompt:
        blocks: list[tuple[bytes, int]] = []
        points: list[_Point] = []

        def add(where: bytes, block: Mapping[str, Any]) -> None:
            if "cachePoint" in block:
                point = block["cachePoint"]
                if point.get("type") != "default":
                    raise CacheRequestRefused("A cachePoint's type must be default.")
                ttl = point.get("ttl", "5m")
                if ttl not in TTL_SECONDS:
                    raise CacheRequestRefused(f"A cachePoint's ttl must be 5m or 1h, not {ttl!r}.")
                points.append(_Point(boundary=len(blocks), ttl=ttl))
                return
            body, tokens = self._content(block)
            blocks.append((where + body, tokens))

        for tool in tools:
            add(b'["tool"]\t', tool)
        for block in system:
            add(b'["system"]\t', block)
        for index, message in enumerate(messages):
            where = json.dumps(["message", index, message["role"]]).encode() + b"\t"
            for block in message["content"]:
                add(where, block)
        digest = hashlib.sha256()
        digests, tokens = [digest.hexdigest()], [0]
        for identity, count in blocks:
            digest.update(identity + b"\n")
            digests.append(digest.hexdigest())
            tokens.append(tokens[-1] + count)
        return _Prompt(digests=digests, tokens=tokens, points=points)

    def _content(self, block: Mapping[str, Any]) -> tuple[bytes, int]:
        """A block's content as JSON and its tokens; a text block's remembered by its text
        (a conversation sends the same texts turn after turn)."""
        text = block.get("text")
        if not isinstance(text, str) or len(block) != 1:
            return json.dumps(block, sort_keys=True).encode(), block_tokens(
                block, self.config.count_tokens
            )
        known = self._texts.get(text)
        if known is None:
            known = self._texts[text] = (json.dumps(text).encode(), self.config.count_tokens(text))
        return known

    def _longest_alive(self, prompt: _Prompt, now: float) -> tuple[int, bool]:
        """The longest prefix alive within the points' lookback (0: none), and whether an
        early eviction hid a longer one."""
        self._entries = {k: e for k, e in self._entries.items() if now < e.expires}
        best = unevicted = 0
        for point in prompt.points:
            lowest = max(point.boundary - self.config.lookback_blocks + 1, 1)
            for boundary in range(point.boundary, lowest - 1, -1):
                entry = self._entries.get(prompt.digests[boundary])
                if entry is not None:
                    unevicted = max(unevicted, boundary)
                    if now < entry.evicted_at:
                        best = max(best, boundary)
        return best, unevicted > best

    def _writes(self, prompt: _Prompt, read: int) -> list[_Point]:
        """The points after the read that cache (rule 3), one per boundary (the first, whose
        TTL is the longest there), with the TTL the service writes."""
        writes: dict[int, _Point] = {}
        floor = 0  # per checkpoint: the prefix of the last point that caches
        for point in prompt.points:
            tokens = prompt.tokens[point.boundary]
            if tokens < floor + self.config.min_prefix_tokens:
                continue
            if self.config.min_per_checkpoint:
                floor = tokens
            if point.boundary > read:
                ttl: Ttl = point.ttl if self.config.honour_1h else "5m"
                writes.setdefault(point.boundary, _Point(boundary=point.boundary, ttl=ttl))
        return list(writes.values())

    def _renew(self, entry: _Entry, now: float) -> None:
        """Give an entry its TTL from ``now``, and draw whether it is evicted before then
        (two draws every time, so the sequence does not depend on the share)."""
        life = math.inf if self.config.never_expire else TTL_SECONDS[entry.ttl]
        roll, cut = self._rng.random(), self._rng.random()
        entry.expires = now + life
        evicts = roll < self.config.evict_share and not self.config.never_expire
        entry.evicted_at = now + cut * life if evicts else entry.expires


def block_tokens(block: Mapping[str, Any], count: Tokenizer) -> int:
    """One content block's tokens: a text block's text, any other block (a tool's
    definition, say) as its JSON."""
    text = block.get("text")
    return count(text if isinstance(text, str) else json.dumps(block, sort_keys=True))


def _check_points(points: Sequence[_Point]) -> None:
    if len(points) > MAX_CACHE_POINTS:
        raise CacheRequestRefused(
            f"A request holds {len(points)} cache points; at most {MAX_CACHE_POINTS} are allowed."
        )
    for earlier, later in itertools.pairwise(points):
        if TTL_SECONDS[later.ttl] > TTL_SECONDS[earlier.ttl]:
            raise CacheRequestRefused("A cachePoint has a longer ttl than a cachePoint before it.")


def converse_response(usage: Mapping[str, Any], answer: str, latency_ms: int = 0) -> dict[str, Any]:
    """A whole Converse response around ``usage``: the answer as one text block, ``end_turn``."""
    return {
        "output": {"message": {"role": "assistant", "content": [{"text": answer}]}},
        "stopReason": "end_turn",
        "usage": dict(usage),
        "metrics": {"latencyMs": latency_ms},
    }
