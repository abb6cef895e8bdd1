"""The stage's configuration, read from the environment (names as in the contract, no prefix)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any, Literal, Self

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from worker.caching.anchor import (
    DEFAULT_HEADROOM_MESSAGES,
    DEFAULT_HEADROOM_TOKENS,
    AnchorHeadroom,
)
from worker.caching.lifetimes import HistoryCacheTtl
from worker.consumer.pacing import RECEIVE_RETURN_MARGIN_SECONDS, ConsumerPolicy
from worker.delivery.pointers import InboundPayloads
from worker.errors import ConfigError
from worker.memory import FoldLimits, WindowLimits
from worker.planning import PlanConfig
from worker.telemetry.probe import DEFAULT_HEALTH_FILE


class Settings(BaseSettings):
    """Every variable of the contract, plus the worker's own operating knobs.

    The AWS endpoint, region and credentials are boto's own variables and are not
    read here: a local endpoint is just ``AWS_ENDPOINT_URL``.
    """

    model_config = SettingsConfigDict(frozen=True, extra="ignore")

    converse_queue_url: str = Field(min_length=1)
    model_queue_url: str = Field(min_length=1)
    compaction_queue_url: str = Field(min_length=1)
    history_table: str = Field(min_length=1)
    payload_bucket: str | None = None
    payload_inline_max_bytes: int = Field(default=262_144, ge=1)
    # Inbound pointers: the buckets read besides PAYLOAD_BUCKET (comma-separated), and the
    # largest object read. 4 MiB: above any counsel message a model can take (1M tokens at
    # the contract's 4 characters a token), and a turn holds about 6-8x its command at its
    # peak, so 16 turns of 4 MiB at once stay near half of a 1 GiB task (README, "Payloads").
    payload_read_buckets: Annotated[tuple[str, ...], NoDecode] = ()
    payload_max_bytes: int = Field(default=4 * 1024 * 1024, ge=1)

    @field_validator("payload_read_buckets", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(name.strip() for name in value.split(",") if name.strip())
        return value

    @model_validator(mode="after")
    def _inbound_bound_covers_the_inline_limit(self) -> Self:
        if self.payload_max_bytes < self.payload_inline_max_bytes:
            raise ValueError(
                f"PAYLOAD_MAX_BYTES ({self.payload_max_bytes}) must be >= "
                f"PAYLOAD_INLINE_MAX_BYTES ({self.payload_inline_max_bytes}): a producer "
                "offloads exactly the bodies over its inline limit, so a lower bound would "
                "reject behind a pointer what the stage takes inline"
            )
        return self

    # Two halves of one memory: the window below and the fold trigger beside it.
    # Change one and the validator under them checks the other still covers it.
    memory_fold_min_tokens: int = Field(default=2000, ge=1)
    history_window_max_tokens: int = Field(default=4000, ge=1)
    history_window_max_messages: int = Field(default=25, ge=1)
    history_window_floor_messages: int = Field(default=10, ge=1)
    history_message_max_tokens: int = Field(default=1000, ge=1)

    @field_validator("payload_bucket", mode="before")
    @classmethod
    def _empty_bucket_is_unset(cls, value: object) -> object:
        return None if value == "" else value

    @model_validator(mode="after")
    def _window_covers_the_fold_gap(self) -> Self:
        if self.history_window_max_tokens < 2 * self.memory_fold_min_tokens:
            raise ValueError(
                f"HISTORY_WINDOW_MAX_TOKENS ({self.history_window_max_tokens}) must be >= "
                f"2x MEMORY_FOLD_MIN_TOKENS ({self.memory_fold_min_tokens}): the fold is "
                "async; below 2x a reference falls into a gap held by neither"
            )
        return self

    @model_validator(mode="after")
    def _floor_below_the_message_cap(self) -> Self:
        if self.history_window_floor_messages >= self.history_window_max_messages:
            raise ValueError(
                f"HISTORY_WINDOW_FLOOR_MESSAGES ({self.history_window_floor_messages}) must be "
                f"below HISTORY_WINDOW_MAX_MESSAGES ({self.history_window_max_messages}): "
                "the budget extends the window past the floor, so the floor must leave it room"
            )
        return self

    # The window's mode: `sliding` (the window rules exactly) or `cache-aligned` (the start
    # stays put between fold landings, so the model can read the history from its cache).
    # The headroom is what a re-anchored window leaves below the budget to grow into.
    history_window_mode: Literal["sliding", "cache-aligned"] = "sliding"
    history_window_anchor_headroom_tokens: int = Field(default=DEFAULT_HEADROOM_TOKENS, ge=0)
    history_window_anchor_headroom_messages: int = Field(default=DEFAULT_HEADROOM_MESSAGES, ge=0)
    # Cache-aligned mode only: the view's cache points' `ttl` (`adaptive`: chosen per turn
    # from the conversation's pace, worker/caching/lifetimes.py), and the model's minimum
    # prefix before a point (1,024 Claude Sonnet 4 / 3.7 and Opus 4; 2,048 Claude 3.5
    # Haiku; 4,096 Haiku 4.5 and Opus 4.5), below which a point is worth nothing.
    history_cache_ttl: HistoryCacheTtl = "adaptive"
    prompt_cache_min_tokens: int = Field(default=1024, ge=1)

    @model_validator(mode="after")
    def _headroom_below_the_budget(self) -> Self:
        # Checked only where it is used: a sliding window never reads the headroom, so a
        # small budget that was valid before the mode existed stays valid.
        if self.history_window_mode != "cache-aligned":
            return self
        if self.history_window_anchor_headroom_tokens >= self.history_window_max_tokens:
            raise ValueError(
                "HISTORY_WINDOW_ANCHOR_HEADROOM_TOKENS "
                f"({self.history_window_anchor_headroom_tokens}) must be below "
                f"HISTORY_WINDOW_MAX_TOKENS ({self.history_window_max_tokens}): the headroom "
                "is room left inside the budget, and the window must keep some to re-anchor"
            )
        if self.history_window_anchor_headroom_messages >= self.history_window_max_messages:
            raise ValueError(
                "HISTORY_WINDOW_ANCHOR_HEADROOM_MESSAGES "
                f"({self.history_window_anchor_headroom_messages}) must be below "
                f"HISTORY_WINDOW_MAX_MESSAGES ({self.history_window_max_messages}): the "
                "headroom is room left inside the budget, and the window must keep some to "
                "re-anchor"
            )
        return self

    log_format: Literal["json", "console"] = "json"

    # The worker's own knobs (not part of the wire contract).
    worker_concurrency: int = Field(default=16, ge=1, le=1000)
    receive_wait_seconds: int = Field(default=20, ge=0, le=20)
    shutdown_grace_seconds: float = Field(default=20.0, gt=0)
    compaction_retry_seconds: float = Field(default=300.0, gt=0)
    retry_base_seconds: float = Field(default=2.0, gt=0)
    retry_max_seconds: float = Field(default=300.0, gt=0, le=43_200)
    lease_max_seconds: float = Field(default=900.0, gt=0, le=43_200)

    # Operating it: metrics on stdout, and the liveness file `worker health` reads.
    metrics: Literal["emf", "off"] = "off"
    metrics_flush_seconds: float = Field(default=60.0, gt=0, le=3600)
    health_file: str = DEFAULT_HEALTH_FILE  # empty: no file (and `worker health` fails)
    health_max_silence_seconds: float = Field(default=120.0, gt=0)

    @model_validator(mode="after")
    def _health_bound_covers_a_long_poll(self) -> Self:
        floor = self.receive_wait_seconds + RECEIVE_RETURN_MARGIN_SECONDS
        if self.health_max_silence_seconds <= floor:
            raise ValueError(
                f"HEALTH_MAX_SILENCE_SECONDS ({self.health_max_silence_seconds:g}) must be above "
                f"RECEIVE_WAIT_SECONDS + {RECEIVE_RETURN_MARGIN_SECONDS:g} ({floor:g}): an idle "
                "worker's receive loop beats once per long poll"
            )
        return self

    @classmethod
    def at_defaults(cls) -> Settings:
        """Every setting at its default, the required ones as placeholders, the environment
        not read: where tests and benchmarks take the contract's limits from, so the numbers
        are written only here."""
        unset = "unset"
        return cls.model_construct(
            converse_queue_url=unset,
            model_queue_url=unset,
            compaction_queue_url=unset,
            history_table=unset,
        )

    @property
    def window_limits(self) -> WindowLimits:
        return WindowLimits(
            max_tokens=self.history_window_max_tokens,
            max_messages=self.history_window_max_messages,
            floor_messages=self.history_window_floor_messages,
            message_max_tokens=self.history_message_max_tokens,
        )

    @property
    def inbound_payloads(self) -> InboundPayloads:
        """What an inbound pointer may name: PAYLOAD_BUCKET (a dead-lettered body the stage
        offloaded there comes back through a redrive) and PAYLOAD_READ_BUCKETS."""
        own = (self.payload_bucket,) if self.payload_bucket else ()
        return InboundPayloads(
            buckets=frozenset((*own, *self.payload_read_buckets)),
            max_bytes=self.payload_max_bytes,
        )

    @property
    def fold_limits(self) -> FoldLimits:
        return FoldLimits(
            fold_min_tokens=self.memory_fold_min_tokens,
            window_max_messages=self.history_window_max_messages,
            retry_after=timedelta(seconds=self.compaction_retry_seconds),
        )

    @property
    def anchor_headroom(self) -> AnchorHeadroom:
        """What a re-anchored cache-aligned window leaves below the budget."""
        return AnchorHeadroom(
            tokens=self.history_window_anchor_headroom_tokens,
            messages=self.history_window_anchor_headroom_messages,
        )

    @property
    def cache_aligned(self) -> bool:
        return self.history_window_mode == "cache-aligned"

    @property
    def plan_config(self) -> PlanConfig:
        """What :func:`worker.planning.plan_turn` takes of the settings."""
        return PlanConfig(
            limits=self.window_limits,
            cache_aligned=self.cache_aligned,
            headroom=self.anchor_headroom,
            cache_ttl=self.history_cache_ttl,
            min_tokens=self.prompt_cache_min_tokens,
        )

    def consumer_policy(self, *, visibility_timeout: int) -> ConsumerPolicy:
        """The consumer's knobs, with the converse queue's visibility timeout."""
        return ConsumerPolicy(
            concurrency=self.worker_concurrency,
            wait_seconds=self.receive_wait_seconds,
            grace_seconds=self.shutdown_grace_seconds,
            visibility_timeout=visibility_timeout,
            retry_base_seconds=self.retry_base_seconds,
            retry_max_seconds=self.retry_max_seconds,
            lease_max_seconds=self.lease_max_seconds,
        )

    @property
    def history_page_size(self) -> int:
        """Items one Query reads: the state item and one message more than the window holds."""
        return self.history_window_max_messages + 2


def load_settings(**overrides: Any) -> Settings:
    """Read the settings from the environment (``overrides`` win over it, validated alike),
    or raise :class:`ConfigError` with one line."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc)) from None


def describe_validation_error(exc: ValidationError) -> str:
    """One line naming each bad variable and why, without echoing the values given."""
    parts = []
    for error in exc.errors(include_input=False, include_url=False):
        name = "_".join(str(part) for part in error["loc"]).upper()
        reason = error["msg"].removeprefix("Value error, ")
        parts.append(f"{name}: {reason}" if name else reason)
    return "invalid configuration: " + "; ".join(parts)
