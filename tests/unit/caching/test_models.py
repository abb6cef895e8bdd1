"""The model table: each documented model found by the ids Bedrock gives it (base model, a
Region's inference profile, an ARN), its minimum and its ``1h``; and the settings built on it."""

from __future__ import annotations

import pytest

from tests.conftest import settings
from worker.caching.models import DEFAULT_MIN_TOKENS, UNKNOWN_MIN_TOKENS, cache_model
from worker.errors import ConfigError
from worker.settings import load_settings


@pytest.mark.parametrize(
    ("model_id", "name", "minimum", "offers_1h"),
    [
        ("anthropic.claude-sonnet-4-6", "Claude Sonnet 4.6", 2_048, True),
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "Claude Sonnet 4.5", 1_024, True),
        ("anthropic.claude-sonnet-4-20250514-v1:0", "Claude Sonnet 4", 1_024, False),
        ("global.anthropic.claude-opus-4-5-20251101-v1:0", "Claude Opus 4.5", 4_096, True),
        ("anthropic.claude-opus-4-6-v1", "Claude Opus 4.6", 4_096, True),
        ("anthropic.claude-opus-4-1-20250805-v1:0", "Claude Opus 4.1", 1_024, False),
        ("anthropic.claude-opus-4-20250514-v1:0", "Claude Opus 4", 1_024, False),
        ("eu.anthropic.claude-haiku-4-5-20251001-v1:0", "Claude Haiku 4.5", 4_096, True),
        ("anthropic.claude-3-7-sonnet-20250219-v1:0", "Claude 3.7 Sonnet", 1_024, False),
        ("anthropic.claude-3-5-haiku-20241022-v1:0", "Claude 3.5 Haiku", 2_048, False),
        ("amazon.nova-micro-v1:0", "Amazon Nova Micro", 1_536, False),
        (
            "arn:aws:bedrock:eu-west-1:111122223333:inference-profile/"
            "eu.anthropic.claude-sonnet-4-6",
            "Claude Sonnet 4.6",
            2_048,
            True,
        ),
    ],
)
def test_each_model_is_found_by_its_ids_with_its_minimum_and_1h(
    model_id: str, name: str, minimum: int, offers_1h: bool
) -> None:
    model = cache_model(model_id)
    assert model is not None and (model.name, model.min_tokens, model.offers_1h) == (
        name,
        minimum,
        offers_1h,
    )
    chosen = settings(model_id=model_id)
    assert (chosen.cache_min_tokens, chosen.cache_offers_1h) == (minimum, offers_1h)
    assert chosen.plan_config.min_tokens == minimum
    assert chosen.plan_config.offers_1h is offers_1h


def test_without_model_id_the_stage_keeps_its_defaults() -> None:
    default = settings()
    assert (default.cache_min_tokens, default.cache_offers_1h) == (DEFAULT_MIN_TOKENS, True)
    assert default.plan_config.model_prefix_tokens == 0


def test_an_unknown_model_starts_from_the_highest_minimum_and_no_1h() -> None:
    unknown = settings(model_id="meta.llama4-maverick-17b-instruct-v1:0")
    assert (unknown.cache_model, unknown.cache_min_tokens, unknown.cache_offers_1h) == (
        None,
        UNKNOWN_MIN_TOKENS,
        False,
    )


def test_an_explicit_minimum_overrides_the_table() -> None:
    chosen = settings(
        model_id="anthropic.claude-opus-4-5-20251101-v1:0", prompt_cache_min_tokens=2_000
    )
    assert chosen.cache_min_tokens == 2_000
    assert settings(model_id="x", prompt_cache_min_tokens=700).cache_min_tokens == 700


def test_a_1h_ttl_for_a_model_that_does_not_take_it_stops_start_up_naming_both() -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(
            converse_queue_url="http://127.0.0.1:1/q/c",
            model_queue_url="http://127.0.0.1:1/q/m",
            compaction_queue_url="http://127.0.0.1:1/q/f",
            history_table="history",
            ledger_table="ledger",
            history_cache_ttl="1h",
            model_id="anthropic.claude-sonnet-4-20250514-v1:0",
        )
    assert "HISTORY_CACHE_TTL (1h)" in str(refused.value)
    assert "Claude Sonnet 4" in str(refused.value)
    assert "\n" not in str(refused.value)
    assert settings(history_cache_ttl="1h", model_id="anthropic.claude-sonnet-4-6").cache_offers_1h
