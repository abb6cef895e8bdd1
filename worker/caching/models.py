"""What the stage knows of the model before any bill, by the Bedrock model or
inference-profile id (``MODEL_ID``) the model stage calls: its prompt cache's minimum prefix,
whether it takes the ``1h`` lifetime, and its context window.

The cache columns, read 2026-12-01 from: AWS's Bedrock user guide, "Prompt caching for faster
model inference" (its table of supported models, minimum tokens per cache checkpoint and TTLs)
and the aws-samples prompt-caching README; Anthropic's "Prompt caching" page (its minimums).
Where they disagree the stricter is kept: Sonnet 4.6 is 2,048 in AWS's table while one
revision of Anthropic's page said 1,024, and users measured 2,048
(anthropics/anthropic-sdk-python#1194). ``1h`` on Bedrock: the 4.5 models since January 2026,
the 4.6 ones after; none of the older models, nor Nova.

The context windows, read 2026-12-04 from: Anthropic's model pages
(platform.claude.com/docs/en/models/<model>/overview: Sonnet 4.5 and Haiku 4.5 "Context
window: 200K tokens"; Sonnet 4.6 and Opus 4.6 "1M tokens" on the Claude API), the Claude API's
1M-token beta for Sonnet 4 and 4.5 behind the ``context-1m-2025-08-07`` header
(anthropics/claude-code#8381), and Bedrock's model card for Nova Lite (300K tokens); Nova Pro
300K and Nova Micro 128K as third-party catalogues give them (no Bedrock card for those two
was at hand). Every Claude row is 200,000, the stricter where the sources disagree: the 1M
windows are the Claude API's (behind a header for Sonnet 4 and 4.5), and no Bedrock source at
hand says Converse serves them; a deployment whose model stage does get 1M sets
``MODEL_CONTEXT_TOKENS``.

Ids are matched by the family they name, so a Region's inference profile (``us.…``,
``global.…``, an ARN ending in one) finds the same row as the base model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from worker.memory import estimate_tokens

#: The minimum when no ``MODEL_ID`` is given: the sliding mode's summary point is judged by it.
DEFAULT_MIN_TOKENS = 1_024
#: The setting that overrides a row's context window, or gives one where there is no row.
CONTEXT_SETTING = "MODEL_CONTEXT_TOKENS"
#: What every rejection of a command too large for the model begins with.
OVER_CONTEXT_WINDOW = "message is larger than the model's context window"


@dataclass(frozen=True, slots=True)
class KnownModel:
    """One row: the models an id pattern names, their minimum prefix before a cache point,
    whether ``cachePoint.ttl`` may be ``1h``, and their context window in tokens."""

    name: str
    pattern: str
    min_tokens: int
    offers_1h: bool
    context_tokens: int

    def names(self, model_id: str) -> bool:
        return re.search(self.pattern, model_id.lower()) is not None


_CLAUDE = 200_000
#: Most specific first: ``claude-sonnet-4-5`` before ``claude-sonnet-4``.
MODELS: tuple[KnownModel, ...] = (
    KnownModel("Claude Sonnet 4.6", r"claude-sonnet-4-6", 2_048, True, _CLAUDE),
    KnownModel("Claude Sonnet 4.5", r"claude-sonnet-4-5", 1_024, True, _CLAUDE),
    KnownModel("Claude Sonnet 4", r"claude-sonnet-4(?!-[56](?!\d))", 1_024, False, _CLAUDE),
    KnownModel("Claude Opus 4.6", r"claude-opus-4-6", 4_096, True, _CLAUDE),
    KnownModel("Claude Opus 4.5", r"claude-opus-4-5", 4_096, True, _CLAUDE),
    KnownModel("Claude Opus 4.1", r"claude-opus-4-1(?!\d)", 1_024, False, _CLAUDE),
    KnownModel("Claude Opus 4", r"claude-opus-4(?!-[156](?!\d))", 1_024, False, _CLAUDE),
    KnownModel("Claude Haiku 4.5", r"claude-haiku-4-5", 4_096, True, _CLAUDE),
    KnownModel("Claude 3.7 Sonnet", r"claude-3-7-sonnet", 1_024, False, _CLAUDE),
    KnownModel("Claude 3.5 Haiku", r"claude-3-5-haiku", 2_048, False, _CLAUDE),
    KnownModel("Amazon Nova Pro", r"nova-pro", 1_024, False, 300_000),
    KnownModel("Amazon Nova Lite", r"nova-lite", 1_536, False, 300_000),
    KnownModel("Amazon Nova Micro", r"nova-micro", 1_536, False, 128_000),
)
#: What an id the table does not know gets in the sliding mode: the highest minimum (a point
#: below the real one would write nothing, so overestimating only forgoes some writes), and
#: no ``1h``. The cache-aligned mode takes no guess: it needs ``PROMPT_CACHE_MIN_TOKENS``.
UNKNOWN_MIN_TOKENS = max(model.min_tokens for model in MODELS)


def known_model(model_id: str) -> KnownModel | None:
    """The row naming ``model_id``; None for an id the table does not know."""
    return next((model for model in MODELS if model.names(model_id)), None)


@dataclass(frozen=True, slots=True)
class ContextWindow:
    """The model's context window in tokens, the model's name (None: not in the table),
    whether ``MODEL_CONTEXT_TOKENS`` gave it, and the model stage's own prefix
    (``MODEL_PREFIX_TOKENS``), which Bedrock sees before the current message."""

    tokens: int
    model: str | None
    stated: bool
    prefix_tokens: int = 0

    def refusal(self, message: str) -> str | None:
        """Why ``message`` cannot fit, sizes and the model only, never its text; None when it
        can. Counted as the window counts: ``ceil(chars/4)`` over code points (one length, no
        pass over the text), plus the model stage's prefix. The estimate undercounts real
        tokenizers on prose, so a message it refuses the model would refuse too."""
        estimated = estimate_tokens(message)
        if estimated + self.prefix_tokens <= self.tokens:
            return None
        before = (
            f" plus the model stage's {self.prefix_tokens:,} (MODEL_PREFIX_TOKENS)"
            if self.prefix_tokens
            else ""
        )
        source = f" ({CONTEXT_SETTING})" if self.stated else ""
        return (
            f"{OVER_CONTEXT_WINDOW}: ~{estimated:,} tokens estimated{before}, "
            f"{self.model or 'the model'} takes {self.tokens:,}{source}"
        )
