"""TRIM: a history message above the per-message budget keeps its head and its tail.

The part counsel refers to sits at one end or the other (a clause quoted from the
top, a long answer cited by its conclusion), and what is left out is announced by
a visible marker with the real count: a silently cut clause reads as a finished one
and invites the model to complete it.
"""

from __future__ import annotations

from worker.memory.tokens import estimate_tokens

#: Tokens kept at each end of a trimmed message. The shape of a trim, not a deploy knob;
#: capped at half of ``HISTORY_MESSAGE_MAX_TOKENS`` so lowering that setting still bounds it.
HEAD_TOKENS = 400
TAIL_TOKENS = 400

#: Characters per estimated token, the inverse of :func:`estimate_tokens`.
CHARS_PER_TOKEN = 4


def omission_marker(omitted_tokens: int) -> str:
    """The marker that stands where text was left out: ``"\\n… N tokens omitted …\\n"``."""
    return f"\n… {omitted_tokens} tokens omitted …\n"


def trim_message(content: str, max_tokens: int) -> str:
    """Return ``content`` if its estimate is within ``max_tokens``, else head + marker + tail.

    The head is the first ``4·H`` characters and the tail the last ``4·H``, with
    ``H = min(400, max_tokens // 2)``. Each cut may move inward (shortening the kept
    piece) by at most a tenth of its length to land on whitespace, so a word is not
    split where a nearby gap exists. The marker's count is the estimate of exactly
    the characters left out.

    A trim never makes a message longer: when the marker would outweigh the cut (a
    message just over a small budget, ``max_tokens`` of 805 or less), the message is
    returned whole.
    """
    if estimate_tokens(content) <= max_tokens:
        return content
    head_chars = CHARS_PER_TOKEN * min(HEAD_TOKENS, max_tokens // 2)
    tail_chars = CHARS_PER_TOKEN * min(TAIL_TOKENS, max_tokens // 2)
    head_end = _head_cut(content, head_chars)
    tail_start = _tail_cut(content, tail_chars)
    omitted = -(-(tail_start - head_end) // CHARS_PER_TOKEN)  # estimate_tokens of the gap
    trimmed = content[:head_end] + omission_marker(omitted) + content[tail_start:]
    return trimmed if len(trimmed) < len(content) else content


def _head_cut(content: str, keep: int) -> int:
    """End of the head: ``keep``, or the nearest earlier index (by keep // 10) at a space."""
    for end in range(keep, keep - keep // 10 - 1, -1):
        if content[end].isspace():
            return end
    return keep


def _tail_cut(content: str, keep: int) -> int:
    """Start of the tail: ``len - keep``, or up to keep // 10 later, just past a space."""
    start = len(content) - keep
    for begin in range(start, start + keep // 10 + 1):
        if content[begin - 1].isspace():
            return begin
    return start
