"""Settings: the contract's variables, the fold coupling, what the model is (the
cache-aligned mode refuses to start on a guess; the sliding mode needs none of it; the
context window a command's message must fit), and one-line start-up errors."""

from __future__ import annotations

import pytest

from localaws.bedrock_cache import STAND_IN_MODEL_ID
from worker.caching.models import ContextWindow
from worker.errors import ConfigError
from worker.settings import Settings, load_settings

REQUIRED = {
    "CONVERSE_QUEUE_URL": "http://127.0.0.1:1/123/converse",
    "MODEL_QUEUE_URL": "http://127.0.0.1:1/123/model",
    "COMPACTION_QUEUE_URL": "http://127.0.0.1:1/123/compaction",
    "HISTORY_TABLE": "mira-history",
    "LEDGER_TABLE": "mira-ledger",
}


@pytest.fixture(autouse=True)
def _required_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in REQUIRED.items():
        monkeypatch.setenv(name, value)


def refusal(monkeypatch: pytest.MonkeyPatch, **env: str) -> str:
    """The one line start-up stops with under ``env``."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_the_contract_defaults() -> None:
    s = load_settings()
    assert (s.history_window_max_tokens, s.history_window_max_messages) == (4000, 25)
    assert (s.history_window_floor_messages, s.history_message_max_tokens) == (10, 1000)
    assert (s.memory_fold_min_tokens, s.payload_inline_max_bytes) == (2000, 262_144)
    assert s.payload_bucket is None and s.log_format == "json"
    assert s.history_page_size == 27
    assert (s.payload_max_bytes, s.payload_read_buckets) == (4 * 1024 * 1024, ())


def test_pointers_may_name_payload_bucket_and_the_comma_separated_read_buckets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PAYLOAD_BUCKET", "mira-payloads")
    assert load_settings().inbound_payloads.buckets == {"mira-payloads"}
    monkeypatch.setenv("PAYLOAD_READ_BUCKETS", " producer-a, producer-b ,,")
    s = load_settings()
    assert s.payload_read_buckets == ("producer-a", "producer-b")
    assert s.inbound_payloads.buckets == {"mira-payloads", "producer-a", "producer-b"}
    monkeypatch.delenv("PAYLOAD_BUCKET")
    monkeypatch.setenv("PAYLOAD_READ_BUCKETS", "")
    assert load_settings().inbound_payloads.buckets == frozenset()


def test_the_inbound_bound_may_not_be_below_the_inline_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A producer offloads exactly the bodies over its inline limit: a lower bound would
    reject every command that came through S3."""
    assert refusal(monkeypatch, PAYLOAD_MAX_BYTES="262143") == (
        "invalid configuration: PAYLOAD_MAX_BYTES (262143) must be >= PAYLOAD_INLINE_MAX_BYTES "
        "(262144): a producer offloads exactly the bodies over its inline limit, so a lower "
        "bound would reject behind a pointer what the stage takes inline"
    )
    monkeypatch.setenv("PAYLOAD_MAX_BYTES", "262144")
    assert load_settings().inbound_payloads.max_bytes == 262_144


def test_a_fold_trigger_of_4000_with_the_window_left_at_4000_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    message = refusal(monkeypatch, MEMORY_FOLD_MIN_TOKENS="4000")
    assert "HISTORY_WINDOW_MAX_TOKENS (4000)" in message
    assert "MEMORY_FOLD_MIN_TOKENS (4000)" in message
    assert "the fold is async; below 2x a reference falls into a gap held by neither" in message


def test_exactly_twice_the_fold_trigger_is_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_FOLD_MIN_TOKENS", "3000")
    monkeypatch.setenv("HISTORY_WINDOW_MAX_TOKENS", "6000")
    assert load_settings().history_window_max_tokens == 6000


def test_env_overrides_reach_the_window_and_fold_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HISTORY_WINDOW_MAX_MESSAGES", "40")
    monkeypatch.setenv("HISTORY_WINDOW_FLOOR_MESSAGES", "12")
    monkeypatch.setenv("HISTORY_MESSAGE_MAX_TOKENS", "500")
    monkeypatch.setenv("PAYLOAD_BUCKET", "mira-payloads")
    monkeypatch.setenv("LOG_FORMAT", "console")
    s = load_settings()
    assert s.window_limits.max_messages == 40 and s.window_limits.floor_messages == 12
    assert s.window_limits.message_max_tokens == 500
    assert s.fold_limits.window_max_messages == 40
    assert s.payload_bucket == "mira-payloads" and s.log_format == "console"
    assert s.history_page_size == 42


def test_the_floor_must_stay_below_the_message_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    message = refusal(monkeypatch, HISTORY_WINDOW_FLOOR_MESSAGES="25")
    assert "HISTORY_WINDOW_FLOOR_MESSAGES (25) must be below" in message


@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        ("HISTORY_WINDOW_MAX_MESSAGES", "0", "greater than or equal to 1"),
        ("HISTORY_WINDOW_FLOOR_MESSAGES", "-3", "greater than or equal to 1"),
        ("HISTORY_MESSAGE_MAX_TOKENS", "0", "greater than or equal to 1"),
        ("MEMORY_FOLD_MIN_TOKENS", "0", "greater than or equal to 1"),
        ("PAYLOAD_INLINE_MAX_BYTES", "0", "greater than or equal to 1"),
        ("PAYLOAD_MAX_BYTES", "0", "greater than or equal to 1"),
        ("PAYLOAD_MAX_BYTES", "4MiB", "valid integer"),
        ("HISTORY_WINDOW_MAX_TOKENS", "lots", "valid integer"),
        ("LOG_FORMAT", "xml", "'json' or 'console'"),
        ("HISTORY_WINDOW_MODE", "stepped", "'sliding' or 'cache-aligned'"),
        ("HISTORY_WINDOW_ANCHOR_HEADROOM_TOKENS", "-1", "greater than or equal to 0"),
        ("HISTORY_WINDOW_ANCHOR_HEADROOM_MESSAGES", "-1", "greater than or equal to 0"),
        ("HISTORY_CACHE_TTL", "10m", "'adaptive', '5m' or '1h'"),
        ("PROMPT_CACHE_MIN_TOKENS", "0", "greater than or equal to 1"),
        ("PROMPT_CACHE_MIN_TOKENS", "many", "valid integer"),
        ("STARTUP_TIMEOUT_SECONDS", "0.5", "greater than or equal to 1"),
        ("STARTUP_TIMEOUT_SECONDS", "301", "less than or equal to 300"),
        ("MODEL_CONTEXT_TOKENS", "0", "greater than or equal to 1"),
        ("MODEL_CONTEXT_TOKENS", "20000000", "less than or equal to 10000000"),
    ],
)
def test_bad_values_fail_with_the_variable_named(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, reason: str
) -> None:
    message = refusal(monkeypatch, **{name: value})
    assert f"{name}: " in message and reason in message
    assert value not in message.split(": ", 1)[1].replace(name, "")


def test_a_missing_required_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MODEL_QUEUE_URL")
    with pytest.raises(ConfigError, match="MODEL_QUEUE_URL: Field required"):
        load_settings()


def test_settings_are_frozen() -> None:
    s = load_settings()
    with pytest.raises(ValueError, match="frozen"):
        s.history_window_max_tokens = 1  # type: ignore[misc]
    assert isinstance(s, Settings)


def test_metrics_are_off_unless_asked_and_the_container_asks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert load_settings().metrics == "off"  # `make run`, a developer's `worker run`
    monkeypatch.setenv("METRICS", "emf")
    assert load_settings().metrics == "emf"
    monkeypatch.setenv("METRICS", "prometheus")
    with pytest.raises(ConfigError, match=r"^invalid configuration: METRICS: "):
        load_settings()


def test_a_health_bound_an_idle_long_poll_would_break_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert refusal(monkeypatch, RECEIVE_WAIT_SECONDS="20", HEALTH_MAX_SILENCE_SECONDS="22") == (
        "invalid configuration: HEALTH_MAX_SILENCE_SECONDS (22) must be above "
        "RECEIVE_WAIT_SECONDS + 2 (22): an idle worker's receive loop beats once per long poll"
    )
    monkeypatch.setenv("HEALTH_MAX_SILENCE_SECONDS", "22.5")
    assert load_settings().health_max_silence_seconds == 22.5


def test_the_window_mode_is_sliding_unless_asked_with_the_measured_headroom() -> None:
    s = load_settings()
    assert s.history_window_mode == "sliding" and not s.cache_aligned
    assert (s.anchor_headroom.tokens, s.anchor_headroom.messages) == (1500, 8)


def test_the_cache_lifetimes_are_adaptive_at_the_sonnet_minimum_unless_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = load_settings()
    assert (s.history_cache_ttl, s.cache_min_tokens) == ("adaptive", 1024)
    monkeypatch.setenv("HISTORY_CACHE_TTL", "1h")
    monkeypatch.setenv("PROMPT_CACHE_MIN_TOKENS", "4096")
    s = load_settings()
    assert (s.history_cache_ttl, s.cache_min_tokens) == ("1h", 4096)


def test_the_cache_aligned_mode_and_its_headroom_are_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HISTORY_WINDOW_MODE", "cache-aligned")
    monkeypatch.setenv("MODEL_ID", STAND_IN_MODEL_ID)
    monkeypatch.setenv("HISTORY_WINDOW_ANCHOR_HEADROOM_TOKENS", "0")
    monkeypatch.setenv("HISTORY_WINDOW_ANCHOR_HEADROOM_MESSAGES", "24")
    s = load_settings()
    assert s.cache_aligned
    assert (s.anchor_headroom.tokens, s.anchor_headroom.messages) == (0, 24)


@pytest.mark.parametrize(
    ("name", "value", "budget"),
    [
        ("HISTORY_WINDOW_ANCHOR_HEADROOM_TOKENS", "4000", "HISTORY_WINDOW_MAX_TOKENS (4000)"),
        ("HISTORY_WINDOW_ANCHOR_HEADROOM_MESSAGES", "25", "HISTORY_WINDOW_MAX_MESSAGES (25)"),
    ],
)
def test_a_headroom_that_leaves_the_cache_aligned_window_no_room_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, budget: str
) -> None:
    aligned = {"HISTORY_WINDOW_MODE": "cache-aligned", "MODEL_ID": STAND_IN_MODEL_ID}
    message = refusal(monkeypatch, **aligned, **{name: value})
    assert f"{name} ({value}) must be below {budget}" in message


def test_the_headroom_is_not_checked_in_the_sliding_mode_which_never_reads_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A small budget valid before the mode existed stays valid in the default mode."""
    monkeypatch.setenv("HISTORY_WINDOW_MAX_MESSAGES", "5")
    monkeypatch.setenv("HISTORY_WINDOW_FLOOR_MESSAGES", "2")
    assert load_settings().history_window_max_messages == 5
    message = refusal(monkeypatch, HISTORY_WINDOW_MODE="cache-aligned", MODEL_ID=STAND_IN_MODEL_ID)
    assert "HEADROOM_MESSAGES (8) must be below" in message


UNKNOWN = "arn:aws:bedrock:eu-west-1:111122223333:application-inference-profile/k2x9"


def test_the_cache_aligned_mode_without_model_id_or_a_minimum_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    message = refusal(monkeypatch, HISTORY_WINDOW_MODE="cache-aligned")
    assert message == (
        "invalid configuration: HISTORY_WINDOW_MODE (cache-aligned) needs MODEL_ID or "
        "PROMPT_CACHE_MIN_TOKENS: its cache points must be ones the model takes, and Bedrock "
        "refuses every prompt whose cache point (or its `1h` lifetime) the model does not take"
    )


def test_an_unknown_model_id_in_the_cache_aligned_mode_needs_an_explicit_minimum(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An id the table does not know (an application inference profile's ARN names no
    family) may be a model without prompt caching: no guess, the operator states it."""
    message = refusal(monkeypatch, HISTORY_WINDOW_MODE="cache-aligned", MODEL_ID=UNKNOWN)
    assert f"MODEL_ID ({UNKNOWN}) is not in the stage's model table" in message
    assert "HISTORY_WINDOW_MODE (cache-aligned) needs PROMPT_CACHE_MIN_TOKENS" in message
    monkeypatch.setenv("PROMPT_CACHE_MIN_TOKENS", "2048")
    stated = load_settings()
    assert (stated.cache_min_tokens, stated.cache_offers_1h) == (2048, False)
    assert stated.plan_config.min_tokens_stated


def test_an_explicit_minimum_without_model_id_runs_the_cache_aligned_mode_without_1h(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HISTORY_WINDOW_MODE", "cache-aligned")
    monkeypatch.setenv("PROMPT_CACHE_MIN_TOKENS", "1024")
    settings = load_settings()
    assert settings.cache_aligned and settings.history_cache_ttl == "adaptive"
    assert (settings.cache_min_tokens, settings.cache_offers_1h) == (1024, False)
    assert settings.plan_config.offers_1h is False  # adaptive chooses between 5m and none
    message = refusal(monkeypatch, HISTORY_CACHE_TTL="1h")
    assert message.startswith(
        "invalid configuration: HISTORY_CACHE_TTL (1h) needs MODEL_ID naming a model that "
        "takes the 1-hour lifetime"
    )
    monkeypatch.setenv("HISTORY_CACHE_TTL", "5m")
    assert load_settings().history_cache_ttl == "5m"


def test_a_known_model_id_runs_the_cache_aligned_mode_with_its_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HISTORY_WINDOW_MODE", "cache-aligned")
    monkeypatch.setenv("MODEL_ID", STAND_IN_MODEL_ID)
    monkeypatch.setenv("HISTORY_CACHE_TTL", "1h")
    settings = load_settings()
    assert (settings.cache_min_tokens, settings.cache_offers_1h) == (1024, True)


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"HISTORY_CACHE_TTL": "1h"},
        {"MODEL_ID": UNKNOWN},
        {"MODEL_ID": "anthropic.claude-sonnet-4-20250514-v1:0", "HISTORY_CACHE_TTL": "1h"},
    ],
    ids=["nothing", "1h-without-model", "unknown-model", "1h-model-without-it"],
)
def test_the_sliding_mode_needs_no_model_and_never_reads_the_lifetimes(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    assert not settings.cache_aligned and not settings.cache_offers_1h


def test_the_context_window_comes_from_model_id_or_model_context_tokens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert load_settings().context_window is None  # neither: no command refused for its size
    monkeypatch.setenv("MODEL_CONTEXT_TOKENS", "50000")
    assert load_settings().context_window == ContextWindow(50_000, None, True, 0)
    monkeypatch.setenv("MODEL_ID", "amazon.nova-micro-v1:0")
    monkeypatch.setenv("MODEL_PREFIX_TOKENS", "3000")
    assert load_settings().context_window == ContextWindow(50_000, "Amazon Nova Micro", True, 3000)
    monkeypatch.delenv("MODEL_CONTEXT_TOKENS")
    assert load_settings().context_window == ContextWindow(
        128_000, "Amazon Nova Micro", False, 3000
    )


@pytest.mark.parametrize(
    ("env", "named"),
    [
        (
            {"MODEL_ID": "amazon.nova-micro-v1:0", "MODEL_PREFIX_TOKENS": "128000"},
            "context window (MODEL_ID's Amazon Nova Micro: 128000)",
        ),
        (
            {"MODEL_CONTEXT_TOKENS": "8000", "MODEL_PREFIX_TOKENS": "9000"},
            "context window (MODEL_CONTEXT_TOKENS: 8000)",
        ),
    ],
    ids=["model-id", "model-context-tokens"],
)
def test_a_model_prefix_that_fills_the_context_window_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], named: str
) -> None:
    message = refusal(monkeypatch, **env)
    prefix = env["MODEL_PREFIX_TOKENS"]
    assert f"MODEL_PREFIX_TOKENS ({prefix}) must be below the model's {named}" in message
    assert "every command would be refused" in message
