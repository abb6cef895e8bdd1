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
from worker.caching.models import (
    DEFAULT_MIN_TOKENS,
    UNKNOWN_MIN_TOKENS,
    ContextWindow,
    KnownModel,
    known_model,
)
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

    converse_queue_url: str = Field(
        min_length=1,
        description="URL of the SQS queue converse commands arrive on; it must have a "
        "dead-letter queue (RedrivePolicy), checked at start-up.",
    )
    model_queue_url: str = Field(
        min_length=1,
        description="URL of the SQS queue prompt payloads are sent to (standard or FIFO).",
    )
    compaction_queue_url: str = Field(
        min_length=1, description="URL of the SQS queue fold requests are sent to."
    )
    history_table: str = Field(
        min_length=1,
        description="Name of the DynamoDB history table (`pk`/`sk`) the writer owns: the "
        "messages and each conversation's state. The stage reads it and updates only its own "
        "attributes of `state`.",
    )
    ledger_table: str = Field(
        min_length=1,
        description="Name of the stage's own DynamoDB table for its command records "
        "(idempotency, leases): `pk` (S) the conversation id, `sk` (S) `cmd#<command_id>`, TTL "
        "on `expires_at`. Never the history table.",
    )
    ledger_legacy_reads: bool = Field(
        default=False,
        description="While the ledger moves out of the history table: a new command's claim "
        "also reads the record the previous release kept there (`cmd#<command_id>`), so a "
        "command it forwarded or still holds is neither sent twice nor lost. Off once the "
        "converse queue's retention has passed since the move (docs/DEPLOY.md).",
    )

    @model_validator(mode="after")
    def _ledger_apart_from_the_history(self) -> Self:
        """LEDGER_TABLE != HISTORY_TABLE: the history table is the writer's, and the stage's
        role may not write its records there."""
        if self.ledger_table == self.history_table:
            raise ValueError(
                f"LEDGER_TABLE ({self.ledger_table}) must not be HISTORY_TABLE: the history "
                "table belongs to the writer, and the stage keeps its command records in a "
                "table of its own"
            )
        return self

    payload_bucket: str | None = Field(
        default=None,
        description="S3 bucket for bodies over PAYLOAD_INLINE_MAX_BYTES, which inbound "
        "pointers may name too; unset or empty: none (an oversized prompt is retried with an "
        "error, never truncated).",
    )
    payload_inline_max_bytes: int = Field(
        default=262_144,
        ge=1,
        description="Largest body sent inline, in bytes (UTF-8, attributes counted as SQS "
        "counts them); a larger one goes to PAYLOAD_BUCKET.",
    )
    payload_read_buckets: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="More S3 buckets inbound pointers may name, comma-separated "
        "(PAYLOAD_BUCKET always may); the role needs s3:GetObject and s3:ListBucket on each.",
    )
    # 4 MiB: above any counsel message a model can take (a million tokens at the contract's
    # four characters a token), and small enough that a full set of concurrent turns, each
    # holding its command several times over at its peak, stays well within a 1 GiB task
    # (docs/PRODUCERS.md, "Commands too large for SQS").
    payload_max_bytes: int = Field(
        default=4 * 1024 * 1024,
        ge=1,
        description="Largest object an inbound pointer may name, in bytes; a larger one is "
        "rejected before it is read.",
    )

    @field_validator("payload_read_buckets", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(name.strip() for name in value.split(",") if name.strip())
        return value

    @model_validator(mode="after")
    def _inbound_bound_covers_the_inline_limit(self) -> Self:
        """PAYLOAD_MAX_BYTES >= PAYLOAD_INLINE_MAX_BYTES: a producer offloads exactly the
        bodies over its inline limit, so a lower bound would reject behind a pointer what the
        stage takes inline."""
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
    memory_fold_min_tokens: int = Field(
        default=2000,
        ge=1,
        description="Estimated tokens of the unfolded tail (untrimmed) that make a fold "
        "request due.",
    )
    history_window_max_tokens: int = Field(
        default=4000,
        ge=1,
        description="The window's budget, in estimated tokens after trimming.",
    )
    history_window_max_messages: int = Field(
        default=25,
        ge=1,
        description="Most history messages in the window; half of it is also the fold "
        "trigger in messages.",
    )
    history_window_floor_messages: int = Field(
        default=10,
        ge=1,
        description="Newest history messages always kept, whatever they cost.",
    )
    history_message_max_tokens: int = Field(
        default=1000,
        ge=1,
        description="Estimated tokens above which a history message is trimmed to its head "
        "and tail.",
    )

    @field_validator("payload_bucket", mode="before")
    @classmethod
    def _empty_bucket_is_unset(cls, value: object) -> object:
        return None if value == "" else value

    @model_validator(mode="after")
    def _window_covers_the_fold_gap(self) -> Self:
        """HISTORY_WINDOW_MAX_TOKENS >= 2x MEMORY_FOLD_MIN_TOKENS: the fold is async; below
        2x a reference falls into a gap held by neither window nor fold."""
        if self.history_window_max_tokens < 2 * self.memory_fold_min_tokens:
            raise ValueError(
                f"HISTORY_WINDOW_MAX_TOKENS ({self.history_window_max_tokens}) must be >= "
                f"2x MEMORY_FOLD_MIN_TOKENS ({self.memory_fold_min_tokens}): the fold is "
                "async; below 2x a reference falls into a gap held by neither"
            )
        return self

    @model_validator(mode="after")
    def _floor_below_the_message_cap(self) -> Self:
        """HISTORY_WINDOW_FLOOR_MESSAGES < HISTORY_WINDOW_MAX_MESSAGES: the budget extends the
        window past the floor, so the floor must leave it room."""
        if self.history_window_floor_messages >= self.history_window_max_messages:
            raise ValueError(
                f"HISTORY_WINDOW_FLOOR_MESSAGES ({self.history_window_floor_messages}) must be "
                f"below HISTORY_WINDOW_MAX_MESSAGES ({self.history_window_max_messages}): "
                "the budget extends the window past the floor, so the floor must leave it room"
            )
        return self

    history_window_mode: Literal["sliding", "cache-aligned"] = Field(
        default="sliding",
        description="`sliding` (the window rules exactly) or `cache-aligned` (the window's "
        "start stays put between fold landings, so the model can read the history from its "
        "prompt cache).",
    )
    history_window_anchor_headroom_tokens: int = Field(
        default=DEFAULT_HEADROOM_TOKENS,
        ge=0,
        description="Cache-aligned mode: estimated tokens a re-anchored window leaves below "
        "HISTORY_WINDOW_MAX_TOKENS to grow into.",
    )
    history_window_anchor_headroom_messages: int = Field(
        default=DEFAULT_HEADROOM_MESSAGES,
        ge=0,
        description="Cache-aligned mode: messages a re-anchored window leaves below "
        "HISTORY_WINDOW_MAX_MESSAGES to grow into.",
    )
    history_cache_ttl: HistoryCacheTtl = Field(
        default="adaptive",
        description="Cache-aligned mode: the `ttl` of the view's cache points: `adaptive` "
        "(chosen per turn and point from the conversation's pace), `5m` or `1h` (every point).",
    )
    model_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=2048,
        description="The Bedrock model or inference-profile id the model stage calls: selects "
        "the prompt cache's minimum prefix, whether `1h` is offered and the context window a "
        "command's message must fit, from the table in worker/caching/models.py (which cites "
        "its sources). The cache-aligned mode needs it, or PROMPT_CACHE_MIN_TOKENS. Unset: a "
        "1,024-token minimum for the sliding mode's summary point, no `1h`, and no command "
        "refused for its size unless MODEL_CONTEXT_TOKENS is set. An id the table does not "
        "know: in the sliding mode its highest minimum and no `1h`, with a warning at "
        "start-up; the cache-aligned mode then needs PROMPT_CACHE_MIN_TOKENS.",
    )
    prompt_cache_min_tokens: int | None = Field(
        default=None,
        ge=1,
        description="The model's minimum prefix before a cache point, in tokens: a point below "
        "it is worth nothing. Unset: MODEL_ID's row (1,024 without MODEL_ID, in the sliding "
        "mode only); set, it overrides the table, and without MODEL_ID it lets the "
        "cache-aligned mode run with no `1h`.",
    )
    model_prefix_tokens: int = Field(
        default=0,
        ge=0,
        le=1_000_000,
        description="The model stage's own system prompt and tool definitions, in tokens, which "
        "Bedrock sees before the view: the cache policy's prior for what precedes it, replaced "
        "by the calibration once the stored bills say otherwise; and counted with a command's "
        "message against the context window.",
    )
    model_context_tokens: int | None = Field(
        default=None,
        ge=1,
        le=10_000_000,
        description="The model's context window, in tokens: a command whose message "
        "(estimated at four characters a token) and MODEL_PREFIX_TOKENS exceed it is rejected "
        "at once, never forwarded. Unset: MODEL_ID's row; without either, no command is "
        "refused for its size. Set, it overrides the table (e.g. a model stage given a "
        "1M-token window).",
    )

    @model_validator(mode="after")
    def _cache_aligned_knows_its_model(self) -> Self:
        """HISTORY_WINDOW_MODE=cache-aligned needs MODEL_ID from the table, or
        PROMPT_CACHE_MIN_TOKENS: the mode's cache points and lifetimes must be ones the model
        takes, and Bedrock refuses a request whose cache point its model does not take (any
        point, on a model without prompt caching; a ``1h`` one, on a model without it)."""
        if not self.cache_aligned or self.prompt_cache_min_tokens is not None:
            return self
        if self.model_id is None:
            raise ValueError(
                "HISTORY_WINDOW_MODE (cache-aligned) needs MODEL_ID or PROMPT_CACHE_MIN_TOKENS: "
                "its cache points must be ones the model takes, and Bedrock refuses every "
                "prompt whose cache point (or its `1h` lifetime) the model does not take"
            )
        if self.known_model is None:
            raise ValueError(
                f"MODEL_ID ({self.model_id}) is not in the stage's model table, so "
                "HISTORY_WINDOW_MODE (cache-aligned) needs PROMPT_CACHE_MIN_TOKENS from the "
                "model's documentation: Bedrock refuses every prompt with a cache point on a "
                "model without prompt caching"
            )
        return self

    @model_validator(mode="after")
    def _a_1h_ttl_the_model_takes(self) -> Self:
        """In the cache-aligned mode, HISTORY_CACHE_TTL=1h needs a MODEL_ID that takes
        ``1h``: Bedrock refuses a point with a lifetime its model does not offer, so every
        prompt would be refused."""
        if not self.cache_aligned or self.history_cache_ttl != "1h" or self.cache_offers_1h:
            return self
        if self.model_id is None:
            raise ValueError(
                "HISTORY_CACHE_TTL (1h) needs MODEL_ID naming a model that takes the 1-hour "
                "lifetime: without it the stage cannot know the model does, and Bedrock "
                "refuses every prompt whose point asks for a lifetime its model does not "
                "take; set MODEL_ID, or use adaptive or 5m"
            )
        named = self.known_model.name if self.known_model else "an id the table does not know"
        raise ValueError(
            f"HISTORY_CACHE_TTL (1h) needs a model that takes the 1-hour lifetime, and "
            f"MODEL_ID ({self.model_id}) is {named}, which does not: Bedrock would refuse "
            "every prompt; use adaptive or 5m"
        )

    @model_validator(mode="after")
    def _prefix_leaves_room_in_the_context(self) -> Self:
        """MODEL_PREFIX_TOKENS < the model's context window (MODEL_CONTEXT_TOKENS or
        MODEL_ID's row): the model stage's own prefix alone must leave room for a message,
        or every command would be refused."""
        window = self.context_window
        if window is not None and self.model_prefix_tokens >= window.tokens:
            source = "MODEL_CONTEXT_TOKENS" if window.stated else f"MODEL_ID's {window.model}"
            raise ValueError(
                f"MODEL_PREFIX_TOKENS ({self.model_prefix_tokens}) must be below the model's "
                f"context window ({source}: {window.tokens}): the model stage's own prefix "
                "would leave no room for a message, and every command would be refused"
            )
        return self

    @model_validator(mode="after")
    def _headroom_below_the_budget(self) -> Self:
        """In the cache-aligned mode, HISTORY_WINDOW_ANCHOR_HEADROOM_TOKENS <
        HISTORY_WINDOW_MAX_TOKENS and HISTORY_WINDOW_ANCHOR_HEADROOM_MESSAGES <
        HISTORY_WINDOW_MAX_MESSAGES: the headroom is room left inside the budget, and the
        window must keep some to re-anchor."""
        # Checked only where it is used: a sliding window never reads the headroom, so the
        # headroom's defaults put no floor under a sliding window's budget.
        if self.history_window_mode != "cache-aligned":
            return self
        for unit, headroom, budget in (
            ("TOKENS", self.history_window_anchor_headroom_tokens, self.history_window_max_tokens),
            (
                "MESSAGES",
                self.history_window_anchor_headroom_messages,
                self.history_window_max_messages,
            ),
        ):
            if headroom >= budget:
                raise ValueError(
                    f"HISTORY_WINDOW_ANCHOR_HEADROOM_{unit} ({headroom}) must be below "
                    f"HISTORY_WINDOW_MAX_{unit} ({budget}): the headroom is room left inside "
                    "the budget, and the window must keep some to re-anchor"
                )
        return self

    log_format: Literal["json", "console"] = Field(
        default="json",
        description="`json` (one object a line on stdout) or `console` (for humans).",
    )

    # The worker's own knobs (not part of the wire contract).
    worker_concurrency: int = Field(
        default=16, ge=1, le=1000, description="Commands one process handles at once."
    )
    receive_wait_seconds: int = Field(
        default=20, ge=0, le=20, description="The long-poll wait of each receive, in seconds."
    )
    shutdown_grace_seconds: float = Field(
        default=20.0,
        gt=0,
        description="Seconds the turns in flight get to finish after SIGTERM or SIGINT; below "
        "the converse queue's visibility timeout, checked at start-up.",
    )
    compaction_retry_seconds: float = Field(
        default=300.0,
        gt=0,
        description="Seconds after which a pending fold request whose fold has not arrived is "
        "sent again.",
    )
    retry_base_seconds: float = Field(
        default=2.0,
        gt=0,
        description="Backoff of a command that failed for a passing reason, in seconds: "
        "doubled per receive, jittered.",
    )
    retry_max_seconds: float = Field(
        default=300.0,
        gt=0,
        le=43_200,
        description="The longest backoff of a retried command, in seconds.",
    )
    lease_max_seconds: float = Field(
        default=900.0,
        gt=0,
        le=43_200,
        description="The longest a worker keeps extending one message's visibility, in seconds.",
    )

    startup_timeout_seconds: float = Field(
        default=20.0,
        ge=1,
        le=300,
        description="The longest the start-up checks take, in seconds: every resource the "
        "stage uses is checked side by side, passing failures (throttling, 5xx, connection "
        "errors) are retried within it, and a resource refused, or still unanswered at its "
        "end, stops the worker with one line naming it (exit code 2).",
    )

    # Operating it: metrics on stdout, and the liveness file `worker health` reads.
    metrics: Literal["emf", "off"] = Field(
        default="off",
        description="`emf`: CloudWatch Embedded Metric Format documents on stdout, beside the "
        "logs; `off`: none (the image sets `emf`).",
    )
    metrics_flush_seconds: float = Field(
        default=60.0,
        gt=0,
        le=3600,
        description="Seconds between EMF document sets; one more is written at stop.",
    )
    health_file: str = Field(
        default=DEFAULT_HEALTH_FILE,
        description="The liveness file the worker writes and `worker health` reads; empty: no "
        "file (and `worker health` fails).",
    )
    health_max_silence_seconds: float = Field(
        default=120.0,
        gt=0,
        description="Seconds of silence of the receive loop (or of the health file) after "
        "which `worker health` fails.",
    )

    @model_validator(mode="after")
    def _health_bound_covers_a_long_poll(self) -> Self:
        """HEALTH_MAX_SILENCE_SECONDS > RECEIVE_WAIT_SECONDS + the receive's return margin:
        an idle worker's receive loop beats once per long poll."""
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
            ledger_table="unset-ledger",
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
            min_tokens=self.cache_min_tokens,
            offers_1h=self.cache_offers_1h,
            model_prefix_tokens=self.model_prefix_tokens,
            min_tokens_stated=self.model_id is not None or self.prompt_cache_min_tokens is not None,
        )

    @property
    def known_model(self) -> KnownModel | None:
        """MODEL_ID's row of the model table; None without MODEL_ID or for an unknown id."""
        return known_model(self.model_id) if self.model_id is not None else None

    @property
    def cache_min_tokens(self) -> int:
        """PROMPT_CACHE_MIN_TOKENS if set, else MODEL_ID's row's, else the default (no
        MODEL_ID) or the table's highest (an unknown one): the last two in the sliding mode
        only, which the validators leave them to."""
        if self.prompt_cache_min_tokens is not None:
            return self.prompt_cache_min_tokens
        if self.model_id is None:
            return DEFAULT_MIN_TOKENS
        model = self.known_model
        return model.min_tokens if model is not None else UNKNOWN_MIN_TOKENS

    @property
    def cache_offers_1h(self) -> bool:
        """Whether the model takes ``cachePoint.ttl`` = ``1h``: MODEL_ID's row; no without
        MODEL_ID or for an id the table does not know."""
        model = self.known_model
        return model is not None and model.offers_1h

    @property
    def context_window(self) -> ContextWindow | None:
        """The model's context window: MODEL_CONTEXT_TOKENS if set, else MODEL_ID's row's;
        None without either (no command is refused for its size)."""
        model = self.known_model
        name = model.name if model is not None else None
        if self.model_context_tokens is not None:
            return ContextWindow(self.model_context_tokens, name, True, self.model_prefix_tokens)
        if model is None:
            return None
        return ContextWindow(model.context_tokens, name, False, self.model_prefix_tokens)

    def consumer_policy(
        self, *, visibility_timeout: int, max_receive_count: int | None = None
    ) -> ConsumerPolicy:
        """The consumer's knobs, with the converse queue's visibility timeout and the
        receives after which its redrive policy dead-letters a message."""
        return ConsumerPolicy(
            concurrency=self.worker_concurrency,
            wait_seconds=self.receive_wait_seconds,
            grace_seconds=self.shutdown_grace_seconds,
            visibility_timeout=visibility_timeout,
            retry_base_seconds=self.retry_base_seconds,
            retry_max_seconds=self.retry_max_seconds,
            lease_max_seconds=self.lease_max_seconds,
            max_receive_count=max_receive_count,
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
