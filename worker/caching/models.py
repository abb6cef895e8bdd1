"""What the stage knows of the model before any bill: its prompt cache's minimum prefix, and
whether it takes the ``1h`` lifetime, by the Bedrock model or inference-profile id
(``MODEL_ID``) the model stage calls.

The table, read 2026-12-01 from: AWS's Bedrock user guide, "Prompt caching for faster model
inference" (its table of supported models, minimum tokens per cache checkpoint and TTLs) and
the aws-samples prompt-caching README; Anthropic's "Prompt caching" page (its minimums). Where
they disagree the stricter is kept: Sonnet 4.6 is 2,048 in AWS's table while one revision of
Anthropic's page said 1,024, and users measured 2,048 (anthropics/anthropic-sdk-python#1194).
``1h`` on Bedrock: the 4.5 models since January 2026, the 4.6 ones after; none of the older
models, nor Nova. Ids are matched by the family they name, so a Region's inference profile
(``us.…``, ``global.…``, an ARN ending in one) finds the same row as the base model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The minimum when no ``MODEL_ID`` is given: the stage's behaviour before it knew its model.
DEFAULT_MIN_TOKENS = 1_024


@dataclass(frozen=True, slots=True)
class CacheModel:
    """One row: the models an id pattern names, their minimum prefix before a cache point, and
    whether ``cachePoint.ttl`` may be ``1h``."""

    name: str
    pattern: str
    min_tokens: int
    offers_1h: bool

    def names(self, model_id: str) -> bool:
        return re.search(self.pattern, model_id.lower()) is not None


#: Most specific first: ``claude-sonnet-4-5`` before ``claude-sonnet-4``.
MODELS: tuple[CacheModel, ...] = (
    CacheModel("Claude Sonnet 4.6", r"claude-sonnet-4-6", 2_048, True),
    CacheModel("Claude Sonnet 4.5", r"claude-sonnet-4-5", 1_024, True),
    CacheModel("Claude Sonnet 4", r"claude-sonnet-4(?!-[56](?!\d))", 1_024, False),
    CacheModel("Claude Opus 4.6", r"claude-opus-4-6", 4_096, True),
    CacheModel("Claude Opus 4.5", r"claude-opus-4-5", 4_096, True),
    CacheModel("Claude Opus 4.1", r"claude-opus-4-1(?!\d)", 1_024, False),
    CacheModel("Claude Opus 4", r"claude-opus-4(?!-[156](?!\d))", 1_024, False),
    CacheModel("Claude Haiku 4.5", r"claude-haiku-4-5", 4_096, True),
    CacheModel("Claude 3.7 Sonnet", r"claude-3-7-sonnet", 1_024, False),
    CacheModel("Claude 3.5 Haiku", r"claude-3-5-haiku", 2_048, False),
    CacheModel("Amazon Nova Pro", r"nova-pro", 1_024, False),
    CacheModel("Amazon Nova Lite", r"nova-lite", 1_536, False),
    CacheModel("Amazon Nova Micro", r"nova-micro", 1_536, False),
)
#: What an id the table does not know gets: the highest minimum (a point below the real one
#: would write nothing, so overestimating only forgoes some writes), and no ``1h``.
UNKNOWN_MIN_TOKENS = max(model.min_tokens for model in MODELS)


def cache_model(model_id: str) -> CacheModel | None:
    """The row naming ``model_id``; None for an id the table does not know."""
    return next((model for model in MODELS if model.names(model_id)), None)
