"""How ``make run`` (:mod:`localaws.demo`) shows what reaches the output queues and what the
model stage's stand-in answered: for a reader, never for a queue.

Long texts are shortened to their head and tail; a trimmed history message keeps its
omission marker in view, so the console shows exactly where the window cut and by how
much. A conversation's first prompt payload is shown as its header (ids and the contract's
version), ``history`` as stored (with seqs) and ``converse`` as the model stage hands it to
Bedrock, one block a line; a later one in one line (its window and what it expects of the
cache), and each answer as its bill (Converse's ``usage``).
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

#: The window's omission marker, as :func:`worker.memory.omission_marker` writes it.
_MARKER = re.compile(r"\n… \d+ tokens omitted …\n")
#: Characters of a text's head and of its tail shown on the console.
HEAD = 60
TAIL = 40


def shorten(text: str) -> str:
    """One line: the text, or its head, any omission marker, and its tail."""
    marker = _MARKER.search(text)
    if marker is not None:
        head, tail = text[: marker.start()], text[marker.end() :]
        cut = f"{_flat(head[:HEAD])}… ⟪{marker.group().strip()}⟫ …{_flat(tail[-TAIL:])}"
        return f"{cut} ({len(text):,} chars)"
    if len(text) <= HEAD + TAIL + 5:
        return _flat(text)
    return f"{_flat(text[:HEAD])} … {_flat(text[-TAIL:])} ({len(text):,} chars)"


def _flat(text: str) -> str:
    return text.replace("\n", "⏎")


def show_prompt(payload: dict[str, Any]) -> str:
    """The prompt payload: header, ``history`` beside the ``converse`` view, ``message``."""
    memory = payload["memory"]
    lines = [
        f"command {payload['command_id']} · conversation {payload['conversation_id']} · "
        f"contract {payload['contract']}",
        "memory: "
        + (
            "none"
            if memory is None
            else f"folded through {memory['folded_through']}: {shorten(memory['summary'])!r}"
        ),
        "window: " + json.dumps(payload["window"]),
        f"history ({len(payload['history'])} messages as the window kept them, oldest first):",
    ]
    lines += [
        f"  #{m['seq']:<4} {m['role']:<9} {shorten(m['content'])!r}" for m in payload["history"]
    ]
    converse = payload["converse"]
    system = ["text" if "text" in block else next(iter(block)) for block in converse["system"]]
    lines.append(f"converse.system: {system or '[] (no fold summary)'}")
    lines.append(
        f"converse.messages ({len(converse['messages'])} turns, what Bedrock gets as is; "
        f"left out: {payload['window']['left_out']}):"
    )
    for number, turn in enumerate(converse["messages"], start=1):
        for index, block in enumerate(turn["content"]):
            label = f"{number:>3} {turn['role']:<9}" if index == 0 else " " * 13
            lines.append(f"  {label} {_block(block)}")
    lines.append(f"message (the current one, never trimmed): {shorten(payload['message'])!r}")
    return "\n".join(lines)


def _block(block: dict[str, Any]) -> str:
    """A text block shortened, a cache point as its TTL (``5m`` when it names none)."""
    if "cachePoint" in block:
        return f"⟨cache point, {block['cachePoint'].get('ttl', '5m')}⟩"
    return repr(shorten(block["text"]))


def show(payload: Any) -> str:
    """Any other payload (a compaction request): its JSON, long strings shortened."""
    return json.dumps(_shortened(payload), indent=2, ensure_ascii=False)


def _shortened(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _shortened(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_shortened(item) for item in value]
    if isinstance(value, str):
        return shorten(value)
    return value


def show_turn(payload: dict[str, Any]) -> str:
    """A later prompt payload in one line: its window and what it expects of the cache."""
    window = payload["window"]
    history = payload["history"]
    seqs = f", seq {history[0]['seq']}-{history[-1]['seq']}" if history else ""
    line = (
        f"command {payload['command_id']} · window {window['kept']} kept{seqs}, "
        f"{window['estimated_tokens']:,} estimated tokens"
    )
    cache = payload.get("cache")
    if cache is None:
        return line + " · no cache point"
    points = ", ".join(f"{p['ttl']} at {p['prefix_tokens']:,}" for p in cache["points"])
    return (
        f"{line} · expects to read {cache['expected_read_tokens']:,} of "
        f"{cache['prompt_tokens']:,} tokens from the cache (points: {points})"
    )


def show_answer(usage: dict[str, Any], *, answered_at: datetime, seq: int) -> str:
    """An answer's bill, as Converse's ``usage`` gives it, and where the writer stored it."""
    by_ttl = {detail["ttl"]: detail["inputTokens"] for detail in usage.get("cacheDetails", [])}
    written = ", ".join(f"{ttl} {tokens:,}" for ttl, tokens in by_ttl.items()) or "none"
    return (
        f"answered at {answered_at:%H:%M:%S}: input {usage['inputTokens']:,}, read "
        f"{usage.get('cacheReadInputTokens', 0):,}, written {written}; stored at seq {seq} "
        "with its model_usage"
    )
