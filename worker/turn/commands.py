"""The wire formats of the contract (docs/CONTRACT.md): the converse command in, the prompt
payload and the compaction request out, each sent with the contract's version. Parsing never
echoes the body: reasons name fields, not values.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from worker.caching.bills import CacheExpectation
from worker.errors import RejectedCommand
from worker.memory import CompactionPlan, ConverseView, FoldState, Window, is_blank
from worker.stamps import read_time

#: Characters SQS refuses in a body: lone surrogates and the two non-characters.
_SQS_UNSAFE = re.compile("[\ud800-\udfff\ufffe\uffff]")
_SURROGATE = re.compile("[\ud800-\udfff]")

#: The contract's version, ``"contract"`` on every payload and request the stage sends. A reader
#: ignores fields it does not know; an incompatible change raises it (docs/CONTRACT.md).
CONTRACT_VERSION = 1


class ConverseCommand(BaseModel):
    """``{"type": "converse", "command_id", "conversation_id", "message", "sent_at"?}``."""

    model_config = ConfigDict(frozen=True, extra="ignore", strict=True)

    type: Literal["converse"]
    command_id: str = Field(min_length=1, max_length=128)
    conversation_id: str = Field(min_length=1, max_length=256)
    message: str
    sent_at: str | None = None

    @property
    def sent_time(self) -> datetime | None:
        """``sent_at`` as a UTC time; None when absent or not one the stage can use (RFC 3339
        with a zone, within :mod:`worker.stamps`' range): the field is optional and only
        informs the cache's lifetimes, so the receive time stands in for it."""
        if self.sent_at is None:
            return None
        moment = read_time(self.sent_at)
        return moment if isinstance(moment, datetime) else None

    @property
    def sent_at_defect(self) -> str | None:
        """Why ``sent_at`` was not used (never its text); None when it was, or is absent."""
        if self.sent_at is None:
            return None
        moment = read_time(self.sent_at)
        return moment if isinstance(moment, str) else None

    @field_validator("message")
    @classmethod
    def _valid_text(cls, message: str) -> str:
        # JSON can spell lone surrogates, which are no text at all; a model cannot take them.
        if _SURROGATE.search(message):
            raise ValueError("not valid Unicode text (a lone surrogate)")
        return message


def parse_command(body: str) -> ConverseCommand:
    """Parse a converse command, or raise :class:`RejectedCommand` with a content-free reason."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        reason = "body is not valid JSON"
        if isinstance(exc, json.JSONDecodeError):
            reason += f" ({exc.msg} at position {exc.pos})"
        raise RejectedCommand(reason) from None
    if not isinstance(data, dict):
        raise RejectedCommand(f"body is a JSON {type(data).__name__}, not an object")
    try:
        command = ConverseCommand.model_validate(data)
    except ValidationError as exc:
        raise RejectedCommand(describe_invalid(exc)) from None
    if is_blank(command.message):
        raise RejectedCommand("message is blank")  # no model accepts a blank turn
    return command


def describe_invalid(exc: ValidationError) -> str:
    """``field: what is wrong`` for each error, without the offending values."""
    parts = []
    for error in exc.errors(include_input=False, include_url=False, include_context=False):
        where = ".".join(str(p) for p in error["loc"]) or "body"
        parts.append(f"{where}: {error['msg']}")
    return "invalid command: " + "; ".join(parts)


def prompt_payload(
    command: ConverseCommand,
    window: Window,
    state: FoldState,
    view: ConverseView,
    *,
    shown: tuple[str | None, int] | None = None,
    cache: CacheExpectation | None = None,
) -> dict[str, Any]:
    """The contract's prompt payload; ``message`` is the command's, exactly as received, and
    ``converse`` the model-ready view of the same prompt. ``memory`` is the summary the
    prompt shows (``shown``: summary and mark, the cache-aligned mode's snapshot) or else
    ``state``'s. ``cache``, when the view has a cache point, is what the stage expects the
    prompt cache to read (the model stage hands it back with the answer's bill)."""
    summary, folded = shown if shown is not None else (state.summary, state.folded_through)
    memory = {"summary": summary, "folded_through": folded} if summary is not None else None
    return {
        "type": "prompt",
        "contract": CONTRACT_VERSION,
        "command_id": command.command_id,
        "conversation_id": command.conversation_id,
        "memory": memory,
        "history": [{"seq": m.seq, "role": m.role, "content": m.content} for m in window.messages],
        "message": command.message,
        "window": {
            "kept": window.kept,
            "dropped": window.dropped,
            "trimmed": window.trimmed,
            "estimated_tokens": window.estimated_tokens,
            "left_out": len(view.left_out),
        },
        **({"cache": cache.as_json()} if cache is not None else {}),
        "converse": {"system": list(view.system), "messages": list(view.messages)},
    }


def compaction_request(
    command: ConverseCommand, plan: CompactionPlan
) -> dict[str, str | int | None]:
    """The contract's fold request: fold ``(folded_through, through]``, for this command."""
    return {
        "type": "compact",
        "contract": CONTRACT_VERSION,
        "conversation_id": command.conversation_id,
        "folded_through": plan.folded_through,
        "through": plan.through,
        "unfolded_tokens": plan.unfolded_tokens,
        "command_id": command.command_id,
    }


def encode_body(document: object) -> str:
    """Compact JSON, UTF-8 as written; ASCII-escaped only where SQS would refuse a character."""
    body = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
    if _SQS_UNSAFE.search(body):
        body = json.dumps(document, separators=(",", ":"))
    return body
