"""A model of Amazon Bedrock's prompt cache for Claude, to price a conversation turn by turn.

The rules it applies, and where they are stated:

- Bedrock user guide, "Prompt caching for faster model inference"
  (https://docs.aws.amazon.com/bedrock/latest/userguide/prompt-caching.html);
- Anthropic, "Prompt caching"
  (https://docs.claude.com/en/docs/build-with-claude/prompt-caching);
- Anthropic's pricing page (https://www.anthropic.com/pricing, and
  https://docs.claude.com/en/docs/about-claude/pricing for the multipliers).

1. A request is, in order: the model stage's own system prompt (``system_prompt_tokens``,
   always first), the view's ``system`` blocks, then its ``messages``' blocks. A
   ``cachePoint`` caches the prefix before it, matched exactly: every block's text, its
   role and where each message starts.
2. At most 4 cache points a request; more is refused (ValidationException), here a
   ``ValueError``.
3. A point caches only if its prefix holds at least ``min_prefix_tokens``: 1,024 for
   Claude Sonnet 4 / 3.7 and Opus 4, 2,048 for Claude 3.5 Haiku, 4,096 for Haiku 4.5 and
   Opus 4.5. Below it the request succeeds and nothing is cached. Bedrock's guide words
   the minimum per checkpoint ("the first after 1,024 tokens, the second after 2,048");
   ``min_tokens_per_point`` models that stricter reading.
4. A hit is looked for at each point and at the block boundaries up to about 20 blocks
   before it (``lookback_blocks``); the longest cached prefix found is read.
5. Each cacheable point past what was read writes its prefix; the tokens from the end of
   the read up to the last point written are billed as written. Tokens after that are
   billed as uncached input.
6. Each point carries its TTL (``cachePoint.ttl``: ``"5m"`` or ``"1h"``; a point without
   one has ``CacheRules.ttl``, 5 minutes by default). A point may not carry a longer TTL
   than one before it (tools, system, messages): such a request is refused, here a
   ``ValueError``. An entry lives its TTL after it was written or last read.
7. Billing in input-token units: uncached 1x, read 0.1x; written tokens 2x from the end
   of the read up to the last 1-hour point written, 1.25x after it up to the last point
   written (Anthropic's "mixing TTLs" rule).
8. The refresh rule is not stated for mixed TTLs. ``refresh="strict"`` (the default, the
   one to price with): a hit renews the entry it read for the TTL that entry was written
   with, so no 1-hour life is bought by a read. ``refresh="lenient"``: the entry is
   renewed for the TTL of the point whose lookback found it (a sensitivity case only: a
   policy must not depend on it).

Tokens are estimated with :func:`estimate_tokens` (a budget signal, not a tokenizer), so
the model compares shapes of prompts, not exact bills. Assumptions beyond the sources: a
hit refreshes only the entry read; a point at or before the prefix read writes nothing.
Pure: the cache state is a value passed in and returned.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from worker.caching.prices import PRICE_READ, PRICE_WRITE, TTL_SECONDS
from worker.memory.converse import CacheTtl
from worker.memory.tokens import estimate_tokens

RefreshRule = Literal["strict", "lenient"]


@dataclass(frozen=True, slots=True)
class CacheRules:
    """The model's knobs, at Claude Sonnet 4's values on Bedrock."""

    min_prefix_tokens: int = 1024
    ttl: CacheTtl = "5m"
    lookback_blocks: int = 20
    max_points: int = 4
    read_multiplier: float = PRICE_READ
    #: The model stage's own system prompt, placed before the view's system blocks.
    system_prompt_tokens: int = 0
    #: Whether the model stage sets a cache point after its own system prompt.
    system_prompt_cache_point: bool = False
    min_tokens_per_point: bool = False
    refresh: RefreshRule = "strict"

    @property
    def ttl_seconds(self) -> float:
        """The life of a point that carries no ``ttl`` of its own."""
        return TTL_SECONDS[self.ttl]


@dataclass(frozen=True, slots=True)
class TurnCost:
    """One request's input tokens, by how they were billed, and the billed units."""

    read: int
    written: int
    uncached: int
    billed: float

    @property
    def input_tokens(self) -> int:
        return self.read + self.written + self.uncached


@dataclass(frozen=True, slots=True)
class PromptCache:
    """The cached prefixes one conversation's requests see: (digest, expiry in seconds, the
    TTL in seconds it was written with)."""

    entries: tuple[tuple[bytes, float, float], ...] = ()


def price_turn(
    cache: PromptCache,
    system: Sequence[Mapping[str, Any]],
    messages: Sequence[Mapping[str, Any]],
    *,
    at: float,
    rules: CacheRules,
) -> tuple[TurnCost, PromptCache]:
    """Price one Converse request sent at ``at`` seconds; return its cost and the cache after.

    ``system`` and ``messages`` are as the view gives them (``{"text": …}`` and
    ``{"cachePoint": …}`` blocks).
    """
    request = _Request.of(system, messages, rules)
    if len(request.points) > rules.max_points:
        raise ValueError(f"a request holds at most {rules.max_points} cache points")
    lives = request.lives
    if any(later > earlier for earlier, later in itertools.pairwise(lives)):
        raise ValueError("a cache point has a longer TTL than one before it")
    live = {digest: (expiry, life) for digest, expiry, life in cache.entries if expiry > at}
    read_at, found_by = _longest_hit(request, live, rules.lookback_blocks)
    read = request.tokens_through(read_at)
    if read_at >= 0:
        digest = request.digests[read_at]
        life = live[digest][1] if rules.refresh == "strict" else lives[found_by]
        live[digest] = (at + life, life)
    written_through = long_through = read
    for point, life in _cacheable(request, rules):
        if point > read_at:
            live[request.digests[point]] = (at + life, life)
            written_through = request.tokens_through(point)
            if life >= TTL_SECONDS["1h"]:
                long_through = written_through
    written = written_through - read
    uncached = request.tokens_through(len(request.digests) - 1) - read - written
    long_written = long_through - read
    billed = (
        uncached
        + long_written * PRICE_WRITE["1h"]
        + (written - long_written) * PRICE_WRITE["5m"]
        + read * rules.read_multiplier
    )
    cost = TurnCost(read=read, written=written, uncached=uncached, billed=billed)
    entries = tuple((digest, expiry, life) for digest, (expiry, life) in live.items())
    return cost, PromptCache(entries=entries)


@dataclass(frozen=True, slots=True)
class _Request:
    """The request as blocks: each one's cumulative tokens and prefix digest, the index of
    the block each cache point follows (-1: none precedes it) and each point's TTL in
    seconds, in the request's order."""

    cumulative: tuple[int, ...]
    digests: tuple[bytes, ...]
    points: tuple[int, ...]
    lives: tuple[float, ...]

    @classmethod
    def of(
        cls,
        system: Sequence[Mapping[str, Any]],
        messages: Sequence[Mapping[str, Any]],
        rules: CacheRules,
    ) -> _Request:
        cumulative: list[int] = []
        digests: list[bytes] = []
        points: list[int] = []
        lives: list[float] = []

        def add(key: bytes, tokens: int) -> None:
            previous = digests[-1] if digests else b""
            digests.append(hashlib.blake2b(previous + key, digest_size=16).digest())
            cumulative.append((cumulative[-1] if cumulative else 0) + tokens)

        if rules.system_prompt_tokens > 0:
            add(b"model-system\0%d" % rules.system_prompt_tokens, rules.system_prompt_tokens)
            if rules.system_prompt_cache_point:
                # The model stage's point carries the longest TTL of the view's (the
                # contract's rule for it), else the default.
                points.append(0)
                lives.append(max(_view_lives(system, messages, rules), default=rules.ttl_seconds))
        sections = [(b"system", system)] + [
            (message["role"].encode(), message["content"]) for message in messages
        ]
        for label, blocks in sections:
            first = b"\0first\0"
            for block in blocks:
                if "cachePoint" in block:
                    points.append(len(digests) - 1)
                    lives.append(_life(block, rules))
                    continue
                text: str = block["text"]
                add(label + first + text.encode(), estimate_tokens(text))
                first = b"\0next\0"
        return cls(tuple(cumulative), tuple(digests), tuple(points), tuple(lives))

    def tokens_through(self, index: int) -> int:
        return self.cumulative[index] if index >= 0 else 0


def _life(block: Mapping[str, Any], rules: CacheRules) -> float:
    ttl = block["cachePoint"].get("ttl")
    if ttl is None:
        return rules.ttl_seconds
    if ttl not in TTL_SECONDS:
        raise ValueError("a cache point's ttl is 5m or 1h")
    return TTL_SECONDS[ttl]


def _view_lives(
    system: Sequence[Mapping[str, Any]], messages: Sequence[Mapping[str, Any]], rules: CacheRules
) -> list[float]:
    blocks = [*system, *(block for message in messages for block in message["content"])]
    return [_life(block, rules) for block in blocks if "cachePoint" in block]


def _longest_hit(
    request: _Request, live: Mapping[bytes, tuple[float, float]], lookback: int
) -> tuple[int, int]:
    """Index of the last block of the longest cached prefix found from any point (-1: none),
    and the index of the point whose lookback found it."""
    found, found_by = -1, -1
    for number, point in enumerate(request.points):
        for index in range(point, max(point - lookback, 0) - 1, -1):
            if request.digests[index] in live:
                if index > found:
                    found, found_by = index, number
                break
    return found, found_by


def _cacheable(request: _Request, rules: CacheRules) -> list[tuple[int, float]]:
    """The points whose prefix reaches the minimum (per point, when the rules say so), each
    with its TTL in seconds (of two points at one block, the longer)."""
    by_block: dict[int, float] = {}
    for point, life in zip(request.points, request.lives, strict=True):
        by_block[point] = max(life, by_block.get(point, 0.0))
    cacheable: list[tuple[int, float]] = []
    previous = 0
    for point in sorted(by_block):
        tokens = request.tokens_through(point)
        needed = previous + rules.min_prefix_tokens if rules.min_tokens_per_point else 0
        if tokens >= max(rules.min_prefix_tokens, needed):
            cacheable.append((point, by_block[point]))
            previous = tokens
    return cacheable
