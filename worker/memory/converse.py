"""The model-ready view: the window and the current message as Bedrock's Converse API takes them.

Converse (and Anthropic's Messages API) refuses a conversation that does not start with
a user message, whose roles do not alternate, or that holds a blank text block. Stored
histories break all three (a greeting before the first question, a question asked again,
an answer stored in two parts, an empty answer), so the view is built to be accepted by
construction (``../shared/CONTRACT.md``, "The model-ready view"):

- each non-blank history message becomes one text block, its content as in the window
  (trimmed or not); consecutive messages of one role are consecutive blocks of one
  message, so roles alternate without merging or inventing any text;
- a blank message, and an answer with no question before it in the view, become no
  block; each is returned in ``left_out`` with its reason, for the caller to log;
- the current counsel message is the last block, exactly as received (never trimmed):
  a block of its own user message, or the next block of a trailing user message;
- the fold summary, if not blank, is the system prompt, followed by one cache point.

Pure: no I/O, no logging. The caller logs what was left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypedDict

from worker.memory.window import Role, Window

LeftOutReason = Literal["blank", "leading_answer"]


class TextBlock(TypedDict):
    text: str


class CachePoint(TypedDict):
    type: Literal["default"]


class CachePointBlock(TypedDict):
    cachePoint: CachePoint


class ConverseMessage(TypedDict):
    role: Role
    content: list[TextBlock]


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


def render_converse(window: Window, message: str, summary: str | None) -> ConverseView:
    """Build the Converse view of ``window`` followed by the current counsel ``message``.

    ``message`` must not be blank (the command parser rejects such a command): the
    view always ends with it, so it is never empty and always ends on the user's turn.
    """
    if is_blank(message):
        raise ValueError("the current message is blank")
    # One pass, no helper calls: this runs on every turn beside the window (make bench).
    messages: list[ConverseMessage] = []
    left_out: list[LeftOut] = []
    blocks: list[TextBlock] = []
    role: Role | None = None
    for stored in window.messages:
        content = stored.content
        if not content or content.isspace():
            left_out.append(LeftOut(stored.seq, "blank"))
        elif stored.role == role:
            blocks.append({"text": content})
        elif role is None and stored.role == "assistant":
            left_out.append(LeftOut(stored.seq, "leading_answer"))
        else:
            role = stored.role
            blocks = [{"text": content}]
            messages.append({"role": role, "content": blocks})
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
