"""The bill on an answer (``model_usage``), read whole or dropped whole: the typed
:class:`ModelUsage`, None when the answer has none (an older writer), or the reason it is
dropped, never half-used (:mod:`worker.adapters.stored_attributes` declares each member).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from worker.adapters.stored_attributes import MAX_COMMAND_ID, MAX_POINTS
from worker.adapters.stored_values import (
    Unreadable,
    as_count,
    as_elements,
    as_members,
    as_optional_count,
    as_required,
    as_text,
    as_time,
    fail,
    of_type,
)
from worker.caching.bills import CacheExpectation, ExpectedPoint, ModelUsage
from worker.memory.converse import CacheTtl
from worker.ports import StoredDefect

_TTLS: Mapping[object, CacheTtl] = {"5m": "5m", "1h": "1h"}
_DIGEST = re.compile(r"[0-9a-f]{16}", re.ASCII)


def read_bill(value: object, seq: int) -> ModelUsage | StoredDefect | None:
    """An answer's ``model_usage``: the bill, None when it has none (an older writer), or the
    reason it is dropped whole."""
    try:
        members = of_type(value, "model_usage", "M")
        if members is None:
            return None
        return _bill(as_members(members, "model_usage"), seq)
    except Unreadable as exc:
        return StoredDefect(exc.attribute, exc.reason, seq=seq)


def _bill(usage: Mapping[str, object], seq: int) -> ModelUsage:
    name = "model_usage."
    input_tokens = as_count(usage.get("inputTokens"), name + "inputTokens")
    read = as_optional_count(usage.get("cacheReadInputTokens"), name + "cacheReadInputTokens")
    write = as_optional_count(usage.get("cacheWriteInputTokens"), name + "cacheWriteInputTokens")
    written_1h = _written_1h(usage.get("cacheDetails"), write)
    details_known = of_type(usage.get("cacheDetails"), name + "cacheDetails", "L") is not None
    command_id = as_text(usage.get("command_id"), name + "command_id")
    if command_id is not None and not 1 <= len(command_id) <= MAX_COMMAND_ID:
        fail(name + "command_id", f"not 1 to {MAX_COMMAND_ID} characters")
    return ModelUsage(
        seq=seq,
        input_tokens=input_tokens,
        read_tokens=read,
        write_tokens=write,
        written_5m=write - written_1h,
        written_1h=written_1h,
        answered_at=as_time(usage.get("answered_at"), name + "answered_at"),
        command_id=command_id,
        expected=_expectation(usage.get("expected")),
        details_known=details_known,
    )


def _written_1h(value: object, write: int) -> int:
    """The ``1h`` writes ``cacheDetails`` lists (the rest of the writes are ``5m``, Bedrock's
    default); its entries may not add up to more than the writes."""
    name = "model_usage.cacheDetails"
    details = of_type(value, name, "L")
    if details is None:
        return 0
    by_ttl = {"5m": 0, "1h": 0}
    for element in as_elements(details, name):
        detail = as_members(as_required(element, name + "[]", "M"), name + "[]")
        ttl = _TTLS.get(as_text(detail.get("ttl"), name + "[].ttl"))
        if ttl is None:
            fail(name + "[].ttl", "neither 5m nor 1h")
        by_ttl[ttl] += as_count(detail.get("inputTokens"), name + "[].inputTokens")
    if by_ttl["5m"] + by_ttl["1h"] > write:
        fail(name, "adds up to more than cacheWriteInputTokens")
    return by_ttl["1h"]


def _expectation(value: object) -> CacheExpectation | None:
    name = "model_usage.expected"
    members = of_type(value, name, "M")
    if members is None:
        return None
    block = as_members(members, name)
    prompt = as_count(block.get("prompt_tokens"), name + ".prompt_tokens")
    read = as_count(block.get("expected_read_tokens"), name + ".expected_read_tokens", high=prompt)
    raw_points = as_elements(
        as_required(block.get("points"), name + ".points", "L"), name + ".points"
    )
    if len(raw_points) > MAX_POINTS:
        fail(name + ".points", f"more than {MAX_POINTS}")
    points = []
    for element in raw_points:
        point = as_members(as_required(element, name + ".points[]", "M"), name + ".points[]")
        ttl = _TTLS.get(as_text(point.get("ttl"), name + ".points[].ttl"))
        if ttl is None:
            fail(name + ".points[].ttl", "neither 5m nor 1h")
        prefix = as_count(point.get("prefix_tokens"), name + ".points[].prefix_tokens", high=prompt)
        digest = as_text(point.get("prefix_digest"), name + ".points[].prefix_digest")
        if digest is not None and not _DIGEST.fullmatch(digest):
            fail(name + ".points[].prefix_digest", "not 16 hex digits")
        points.append(ExpectedPoint(ttl, prefix, digest))
    return CacheExpectation(prompt, read, tuple(points))
