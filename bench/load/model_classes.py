"""The model classes the stage meets in production: a prompt cache's minimum prefix and the
model stage's own prefix before the view, with a model a firm runs at that minimum and the
settings a deployment gives the stage for it.

Minimums of 1,024, 2,048 and 4,096 tokens (Claude Sonnet 4.5; Sonnet 4.6; Opus 4.5/4.6 and
Haiku 4.5, the table in ``worker/caching/models.py``) by the model stage's own system prompt
and tools, 300 or 2,500 tokens (the 2,500 are 1,500 of tool definitions and a 1,000-token
system prompt). Each is run with the stage configured as a deployment configures it
(``MODEL_ID`` a model of the class, ``MODEL_PREFIX_TOKENS`` the prefix). A stage without
``MODEL_ID`` or ``PROMPT_CACHE_MIN_TOKENS`` does not start in the cache-aligned mode, so no
class runs without them.
"""

from __future__ import annotations

from dataclasses import dataclass

from localaws.bedrock_cache import STAND_IN_MODEL_ID
from worker.settings import Settings


@dataclass(frozen=True, slots=True)
class ModelClass:
    """A cache minimum, the model stage's own prefix, and the model a firm runs with them."""

    min_tokens: int
    prefix_tokens: int
    model: str
    model_id: str

    @property
    def key(self) -> str:
        return f"{self.min_tokens}/{self.prefix_tokens}"

    @property
    def tool_tokens(self) -> int:
        return int(self.prefix_tokens * TOOL_SHARE) if self.prefix_tokens >= 1_000 else 0


#: The share of a prefix of 1,000 tokens or more that is tool definitions.
TOOL_SHARE = 0.6
SONNET_45 = ("Claude Sonnet 4.5", "anthropic.claude-sonnet-4-5-20250929-v1:0")
SONNET_46 = ("Claude Sonnet 4.6", "anthropic.claude-sonnet-4-6")
OPUS_45 = ("Claude Opus 4.5", "anthropic.claude-opus-4-5-20251101-v1:0")
CLASSES = tuple(
    ModelClass(minimum, prefix, *model)
    for minimum, model in ((1_024, SONNET_45), (2_048, SONNET_46), (4_096, OPUS_45))
    for prefix in (300, 2_500)
)
BY_KEY = {c.key: c for c in CLASSES}
#: The classes part 10 measures under every deviation.
DEVIATION_CLASSES = ("1024/300", "4096/2500")


def settings_for(model: ModelClass, *, prior: bool = True) -> Settings:
    """The stage's settings as a deployment sets them for ``model``: ``MODEL_ID``, and
    ``MODEL_PREFIX_TOKENS`` unless not ``prior``."""
    return Settings.at_defaults().model_copy(update={
        "model_id": model.model_id,
        "model_prefix_tokens": model.prefix_tokens if prior else 0,
    })  # fmt: skip


def baseline_settings() -> Settings:
    """The stage's defaults with ``MODEL_ID`` the model the prompt-cache stand-in's defaults
    play (Claude Sonnet 4.5: 1,024 tokens, ``1h``): how the cases without a model class, and
    the run through the worker, configure the cache-aligned mode."""
    return Settings.at_defaults().model_copy(update={"model_id": STAND_IN_MODEL_ID})
