"""The model table: each documented model found by the ids Bedrock gives it (base model, a
Region's inference profile, an ARN), its minimum, its ``1h`` and its context window; and the
settings built on it."""

from __future__ import annotations

import pytest

from tests.conftest import settings
from worker.caching.models import (
    DEFAULT_MIN_TOKENS,
    UNKNOWN_MIN_TOKENS,
    ContextWindow,
    known_model,
)
from worker.errors import ConfigError
from worker.settings import load_settings

#: Every Claude row's context window.
CLAUDE = 200_000


@pytest.mark.parametrize(
    ("model_id", "name", "minimum", "offers_1h", "context"),
    [
        ("anthropic.claude-sonnet-4-6", "Claude Sonnet 4.6", 2_048, True, CLAUDE),
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "Claude Sonnet 4.5", 1_024, True, CLAUDE),
        ("anthropic.claude-sonnet-4-20250514-v1:0", "Claude Sonnet 4", 1_024, False, CLAUDE),
        ("global.anthropic.claude-opus-4-5-20251101-v1:0", "Claude Opus 4.5", 4_096, True, CLAUDE),
        ("anthropic.claude-opus-4-6-v1", "Claude Opus 4.6", 4_096, True, CLAUDE),
        ("anthropic.claude-opus-4-1-20250805-v1:0", "Claude Opus 4.1", 1_024, False, CLAUDE),
        ("anthropic.claude-opus-4-20250514-v1:0", "Claude Opus 4", 1_024, False, CLAUDE),
        ("eu.anthropic.claude-haiku-4-5-20251001-v1:0", "Claude Haiku 4.5", 4_096, True, CLAUDE),
        ("anthropic.claude-3-7-sonnet-20250219-v1:0", "Claude 3.7 Sonnet", 1_024, False, CLAUDE),
        ("anthropic.claude-3-5-haiku-20241022-v1:0", "Claude 3.5 Haiku", 2_048, False, CLAUDE),
        ("us.amazon.nova-pro-v1:0", "Amazon Nova Pro", 1_024, False, 300_000),
        ("amazon.nova-lite-v1:0", "Amazon Nova Lite", 1_536, False, 300_000),
        ("amazon.nova-micro-v1:0", "Amazon Nova Micro", 1_536, False, 128_000),
        (
            "arn:aws:bedrock:eu-west-1:111122223333:inference-profile/"
            "eu.anthropic.claude-sonnet-4-6",
            "Claude Sonnet 4.6",
            2_048,
            True,
            CLAUDE,
        ),
    ],
)
def test_each_model_is_found_by_its_ids_with_its_minimum_1h_and_context_window(
    model_id: str, name: str, minimum: int, offers_1h: bool, context: int
) -> None:
    model = known_model(model_id)
    assert model is not None
    assert (model.name, model.min_tokens, model.offers_1h, model.context_tokens) == (
        name,
        minimum,
        offers_1h,
        context,
    )
    chosen = settings(model_id=model_id)
    assert (chosen.cache_min_tokens, chosen.cache_offers_1h) == (minimum, offers_1h)
    assert chosen.plan_config.min_tokens == minimum
    assert chosen.plan_config.offers_1h is offers_1h
    window = chosen.context_window
    assert window is not None and (window.tokens, window.model, window.stated) == (
        context,
        name,
        False,
    )


def test_without_model_id_the_sliding_mode_takes_1024_no_1h_and_no_window() -> None:
    default = settings()
    assert (default.cache_min_tokens, default.cache_offers_1h) == (DEFAULT_MIN_TOKENS, False)
    assert default.plan_config.model_prefix_tokens == 0
    assert default.context_window is None


def test_an_unknown_model_starts_the_sliding_mode_from_the_highest_minimum_and_no_1h() -> None:
    unknown = settings(model_id="meta.llama4-maverick-17b-instruct-v1:0")
    assert (unknown.known_model, unknown.cache_min_tokens, unknown.cache_offers_1h) == (
        None,
        UNKNOWN_MIN_TOKENS,
        False,
    )
    assert unknown.context_window is None


def test_an_explicit_minimum_overrides_the_table() -> None:
    chosen = settings(
        model_id="anthropic.claude-opus-4-5-20251101-v1:0", prompt_cache_min_tokens=2_000
    )
    assert chosen.cache_min_tokens == 2_000
    assert settings(model_id="x", prompt_cache_min_tokens=700).cache_min_tokens == 700


def test_a_1h_ttl_for_a_model_that_does_not_take_it_stops_the_cache_aligned_mode() -> None:
    """The setting is the cache-aligned mode's: the sliding mode never reads it."""
    with pytest.raises(ConfigError) as refused:
        load_settings(
            converse_queue_url="http://127.0.0.1:1/q/c",
            model_queue_url="http://127.0.0.1:1/q/m",
            compaction_queue_url="http://127.0.0.1:1/q/f",
            history_table="history",
            ledger_table="ledger",
            history_window_mode="cache-aligned",
            history_cache_ttl="1h",
            model_id="anthropic.claude-sonnet-4-20250514-v1:0",
        )
    assert "HISTORY_CACHE_TTL (1h)" in str(refused.value)
    assert "Claude Sonnet 4" in str(refused.value)
    assert "\n" not in str(refused.value)
    aligned = settings(
        history_window_mode="cache-aligned",
        history_cache_ttl="1h",
        model_id="anthropic.claude-sonnet-4-6",
    )
    assert aligned.cache_offers_1h
    sliding = settings(history_cache_ttl="1h", model_id="anthropic.claude-sonnet-4-20250514-v1:0")
    assert not sliding.cache_aligned


SONNET = ContextWindow(200_000, "Claude Sonnet 4.5", False)


@pytest.mark.parametrize(
    ("window", "chars", "reason"),
    [
        (SONNET, 800_000, None),  # ceil(800,000 / 4) = 200,000: it fits exactly
        (
            SONNET,
            800_001,
            "message is larger than the model's context window: ~200,001 tokens estimated, "
            "Claude Sonnet 4.5 takes 200,000",
        ),
        (ContextWindow(200_000, "Claude Sonnet 4.5", False, 2_500), 790_000, None),
        (
            ContextWindow(200_000, "Claude Sonnet 4.5", False, 2_500),
            790_001,
            "message is larger than the model's context window: ~197,501 tokens estimated plus "
            "the model stage's 2,500 (MODEL_PREFIX_TOKENS), Claude Sonnet 4.5 takes 200,000",
        ),
        (
            ContextWindow(1_000, None, True),
            4_001,
            "message is larger than the model's context window: ~1,001 tokens estimated, the "
            "model takes 1,000 (MODEL_CONTEXT_TOKENS)",
        ),
    ],
    ids=["fits-exactly", "one-over", "fits-after-prefix", "over-after-prefix", "stated"],
)
def test_a_message_that_cannot_fit_the_context_window_is_refused_by_its_sizes(
    window: ContextWindow, chars: int, reason: str | None
) -> None:
    """The message counted as the window counts (``ceil(chars/4)``), plus the model stage's
    own prefix, against the window; the reason names sizes and the model, never the text."""
    message = "q" * chars
    assert window.refusal(message) == reason
    assert "qq" not in (reason or "")  # no text of the message


def test_the_estimate_counts_code_points_not_bytes() -> None:
    """Four characters a token over code points: 4,000 three-byte characters are 1,000."""
    assert ContextWindow(1_000, "Claude Sonnet 4.5", False).refusal("\u6761" * 4_000) is None
