"""Every attribute of the history table the stage reads, declared once: its DynamoDB type, the
values it may hold, who writes it, and what the stage does when it holds anything else.

Other stages write this table (the history writer, the compactor, the model stage's writer of
``model_usage``), and sometimes an operator's hand: what they store is input, exactly like a
command body. :mod:`worker.adapters.stored_items` reads each attribute as declared here and
never raises; ``docs/reference/stored-items.md`` is rendered from this table, and a test checks
that every attribute the reader names is declared and every declared one is read.

``NULL`` on an optional attribute reads as absent. Unknown attributes are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from worker.stamps import TIME_RANGE

ItemKind = Literal["message", "bill", "state"]

#: The ``state`` item's sort key; a message's is this prefix and its seq in 12 digits.
STATE_KEY = "state"
MESSAGE_PREFIX = "msg#"

#: The most tokens a count may hold: no real prompt reaches it (the largest models' context
#: is a tenth of it), so a larger count is a writer's fault, not a bill.
MAX_TOKENS = 2_000_000
#: The largest seq the key's 12 digits can spell.
MAX_SEQ = 999_999_999_999
#: The most cache points a prompt may have (Bedrock's limit).
MAX_POINTS = 4
#: A command id's length, as the command's own rule has it.
MAX_COMMAND_ID = 128

HISTORY_WRITER = "the history writer"
BILL_WRITER = "the model stage's writer"
COMPACTOR = "the compactor"
THIS_STAGE = "this stage"

LEFT_OUT = "the message is left out (`clerk.converse_history_entries_dropped`)"
DROPPED = "the bill is dropped whole (`clerk.converse_bill_dropped`)"
REFUSED = "the command is refused at once to the dead-letter queue, naming the attribute"
IGNORED = "read as absent (`clerk.converse_stored_attribute_ignored`): "

_COUNT = f"a whole number from 0 to {MAX_TOKENS:,}"
_MARK = f"a whole number from 0 to {MAX_SEQ:,}"


@dataclass(frozen=True, slots=True)
class StoredAttribute:
    """One attribute: which item holds it, its name (``a.b`` for a member of a map, ``a[]``
    for each element of a list), its DynamoDB type, the values it may hold, whether it may be
    absent, who writes it, and what a malformed value does."""

    item: ItemKind
    name: str
    type: str
    holds: str
    optional: bool
    writer: str
    when_malformed: str


def _bill(name: str, type_: str, holds: str, *, optional: bool = True) -> StoredAttribute:
    return StoredAttribute(
        "bill", f"model_usage.{name}", type_, holds, optional, BILL_WRITER, DROPPED
    )


ATTRIBUTES: tuple[StoredAttribute, ...] = (
    StoredAttribute(
        "message",
        "sk",
        "S",
        "`msg#` and the seq in 12 digits (a key between `msg#` and "
        "`state` of any other shape is a stray item)",
        False,
        HISTORY_WRITER,
        LEFT_OUT,
    ),
    StoredAttribute(
        "message",
        "seq",
        "N",
        f"a whole number from 1 to {MAX_SEQ:,}, the key's own (absent: the key's)",
        True,
        HISTORY_WRITER,
        LEFT_OUT,
    ),
    StoredAttribute(
        "message", "role", "S", "`user` or `assistant`", False, HISTORY_WRITER, LEFT_OUT
    ),
    StoredAttribute("message", "content", "S", "any string", False, HISTORY_WRITER, LEFT_OUT),
    StoredAttribute(
        "message",
        "created_at",
        "S",
        TIME_RANGE,
        True,
        HISTORY_WRITER,
        IGNORED + "the message is kept and gives no gap to the pace",
    ),
    StoredAttribute(
        "message",
        "model_usage",
        "M",
        "the members below, on an answer (on a question it is not read)",
        True,
        BILL_WRITER,
        DROPPED,
    ),
    _bill("inputTokens", "N", _COUNT, optional=False),
    _bill("cacheReadInputTokens", "N", _COUNT + " (absent: 0)"),
    _bill("cacheWriteInputTokens", "N", _COUNT + " (absent: 0)"),
    _bill(
        "cacheDetails",
        "L",
        "maps `{ttl, inputTokens}` whose tokens add up to at most `cacheWriteInputTokens`",
    ),
    _bill("cacheDetails[].ttl", "S", "`5m` or `1h`", optional=False),
    _bill("cacheDetails[].inputTokens", "N", _COUNT, optional=False),
    _bill("answered_at", "S", TIME_RANGE),
    _bill("command_id", "S", f"1 to {MAX_COMMAND_ID} characters"),
    _bill("expected", "M", "the prompt payload's `cache` block, as the stage sent it"),
    _bill("expected.prompt_tokens", "N", _COUNT, optional=False),
    _bill(
        "expected.expected_read_tokens",
        "N",
        "a whole number from 0 to `prompt_tokens`",
        optional=False,
    ),
    _bill(
        "expected.points",
        "L",
        f"at most {MAX_POINTS} maps `{{ttl, prefix_tokens, prefix_digest}}`",
        optional=False,
    ),
    _bill("expected.points[].ttl", "S", "`5m` or `1h`", optional=False),
    _bill(
        "expected.points[].prefix_tokens",
        "N",
        "a whole number from 0 to `prompt_tokens`",
        optional=False,
    ),
    _bill(
        "expected.points[].prefix_digest",
        "S",
        "16 lowercase hex digits, the prefix's digest (an older payload's points have none)",
    ),
    StoredAttribute(
        "state",
        "folded_through",
        "N",
        _MARK + " (absent: 0)",
        True,
        COMPACTOR,
        REFUSED + ": no reading is safe, the mark says what the summary covers",
    ),
    StoredAttribute(
        "state",
        "fold_summary",
        "S",
        "any string",
        True,
        COMPACTOR,
        REFUSED + ": no reading is safe, the summary is the conversation's older memory",
    ),
    StoredAttribute(
        "state",
        "compaction_requested_through",
        "N",
        _MARK,
        True,
        THIS_STAGE,
        IGNORED + "no request is pending, so a due request is claimed and its write repairs "
        "the mark",
    ),
    StoredAttribute(
        "state",
        "compaction_requested_at",
        "S",
        TIME_RANGE,
        True,
        THIS_STAGE,
        IGNORED + "a pending request is overdue and sent again, and its claim repairs the mark",
    ),
    StoredAttribute(
        "state",
        "compaction_request_version",
        "N",
        _MARK,
        True,
        THIS_STAGE,
        "the turn is served (`clerk.converse_stored_attribute_ignored`); the next claim is "
        "conditional on the value as it stands, so exactly one worker's claim replaces it",
    ),
    StoredAttribute(
        "state",
        "window_anchor",
        "N",
        f"a whole number from 1 to {MAX_SEQ:,}",
        True,
        THIS_STAGE,
        IGNORED + "the cache-aligned window re-anchors, as on a first turn",
    ),
    StoredAttribute(
        "state",
        "window_anchor_folded_through",
        "N",
        _MARK,
        True,
        THIS_STAGE,
        IGNORED + "the cache-aligned window re-anchors, as on a first turn",
    ),
    StoredAttribute(
        "state",
        "window_summary",
        "S",
        "any string",
        True,
        THIS_STAGE,
        IGNORED + "no snapshot is held, so the window re-anchors when the fold moves",
    ),
    StoredAttribute(
        "state",
        "window_summary_folded_through",
        "N",
        _MARK,
        True,
        THIS_STAGE,
        IGNORED + "no snapshot is held, so the window re-anchors when the fold moves",
    ),
)

#: Each attribute by item kind and name.
BY_NAME: Mapping[tuple[ItemKind, str], StoredAttribute] = MappingProxyType(
    {(attribute.item, attribute.name): attribute for attribute in ATTRIBUTES}
)
