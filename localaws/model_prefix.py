"""The model stage's own prefix, of any size: the system prompt and tool definitions it puts
before the view, sized to a number of tokens under the stand-in's tokenizer.

A production model stage sends its own instructions and tools first; Bedrock counts them in
every prefix, and the stage's estimate of its view never sees them. :func:`sized_prefix`
builds one that holds exactly ``tokens`` (as far as the tokenizer can count to it: with
``chars / k`` always): tool definitions up to ``tool_tokens`` (whole tools only, each a
Converse ``toolSpec``), then the system prompt, :data:`HOUSE_PROMPT` and numbered standing
instructions after it, cut to the tokens left. A tool block is counted as Bedrock's stand-in
counts it (:func:`localaws.bedrock_cache.block_tokens`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from localaws.bedrock_cache import Tokenizer, block_tokens, chars_over_4

#: The model stage's instructions: about 1,200 characters, 294 ``chars / 4`` tokens.
HOUSE_PROMPT = (
    "You are Mira, a legal assistant to counsel at a commercial law firm. Answer from the "
    "conversation and its summary only; quote clauses exactly, name the document and the "
    "clause you rely on, and say plainly when the record does not answer the question. Never "
    "invent a citation, a date, a party or an amount. When two clauses conflict, quote both "
    "and say which one governs under the agreement's own order of precedence, if it has one. "
    "Distinguish what a clause says from what counsel may argue it means. Flag notice "
    "periods, limitation periods, caps on liability and termination triggers whenever they "
    "bear on the question. Use defined terms as the agreement defines them, with their "
    "capitals. Keep privileged material inside this matter: do not refer to other matters, "
    "clients or counterparties. If counsel asks for a draft, mark it as a draft for review "
    "and list the assumptions it makes. Prefer short paragraphs and numbered points; cite "
    "each point. When a question depends on facts that are not in the record, list the facts "
    "that would decide it and how each would change the answer. Be concise, exact and "
    "complete, in that order of priority, and end with the open points."
)
#: The firm's standing instructions, numbered and cycled after :data:`HOUSE_PROMPT`.
_STANDING = (
    "Cite a clause by its number and its heading, as the document prints them.",
    "Give a date as the document gives it, and the day it falls on when a period runs to it.",
    "State an amount with its currency and whether it is net or gross of tax.",
    "Where the governing law is not stated, say so, and do not assume one.",
    "Treat a side letter as part of the agreement it amends, and say which clause it changes.",
    "Name the party a duty falls on, with the defined term the agreement uses for it.",
    "Quote a schedule or an annex only from the version the record holds.",
    "When counsel's question assumes a fact, say whether the record supports it.",
    "Say when a clause is silent, and what the default rule would fill it with.",
    "Keep each answer to the matter in this conversation and its documents.",
)
_TOOLS = (
    ("search_matter_documents", "Search the matter's documents for a phrase or a defined term."),
    ("quote_clause", "Return the exact text of a clause, by document and clause number."),
    ("compare_clauses", "Set two clauses side by side and list where their terms differ."),
    ("lookup_defined_term", "Return the definition of a defined term and where it is defined."),
    ("list_deadlines", "List the notice periods and deadlines a document sets, with dates."),
    ("check_citation", "Check that a cited clause exists in the document it is cited from."),
    ("draft_clause", "Draft a clause for counsel's review, marked as a draft."),
    ("summarize_document", "Summarise one document of the matter, clause by clause."),
)


@dataclass(frozen=True, slots=True)
class ModelPrefix:
    """What the model stage puts before the view: its tools (Converse ``toolSpec`` blocks),
    then its system prompt."""

    system_prompt: str
    tools: tuple[dict[str, Any], ...] = ()

    def tokens(self, count: Tokenizer = chars_over_4) -> int:
        """Its tokens as the stand-in counts them with ``count``."""
        return count(self.system_prompt) + sum(block_tokens(t, count) for t in self.tools)


def tool_spec(name: str, description: str) -> dict[str, Any]:
    """One tool as Converse takes it: a name, a description and its input's JSON schema."""
    return {
        "toolSpec": {
            "name": name,
            "description": description,
            "inputSchema": {
                "json": {
                    "type": "object",
                    "properties": {
                        "document": {"type": "string", "description": "The document's name."},
                        "query": {"type": "string", "description": "What to look for."},
                    },
                    "required": ["query"],
                }
            },
        }
    }


def sized_prefix(
    tokens: int,
    count: Tokenizer = chars_over_4,
    *,
    tool_tokens: int = 0,
    opening: str = HOUSE_PROMPT,
) -> ModelPrefix:
    """A prefix of ``tokens`` under ``count``: whole tools while they fit in ``tool_tokens``,
    then a system prompt (``opening``, then the standing instructions) of the tokens left."""
    if not 0 <= tool_tokens <= tokens:
        raise ValueError(f"tool tokens must be 0 to {tokens}, not {tool_tokens}")
    tools: list[dict[str, Any]] = []
    used = 0
    for round_ in itertools.count(1):
        name, description = _TOOLS[(round_ - 1) % len(_TOOLS)]
        tool = tool_spec(name if round_ <= len(_TOOLS) else f"{name}_{round_}", description)
        size = block_tokens(tool, count)
        if used + size > tool_tokens:
            break
        tools.append(tool)
        used += size
    return ModelPrefix(_text_of(tokens - used, count, opening), tuple(tools))


def _text_of(tokens: int, count: Tokenizer, opening: str) -> str:
    """The longest start of ``opening`` and the standing instructions after it that holds at
    most ``tokens`` under ``count``."""
    text = opening
    for number in itertools.count(1):
        if count(text) > tokens:
            break
        text += f" {number}. {_STANDING[(number - 1) % len(_STANDING)]}"
    low, high = 0, len(text)  # count(text[:low]) <= tokens < count(text[:high])
    while high - low > 1:
        middle = (low + high) // 2
        if count(text[:middle]) <= tokens:
            low = middle
        else:
            high = middle
    return text[:low]
