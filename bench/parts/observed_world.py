"""The world part 10 replays the stage in: the model classes
(:mod:`bench.load.model_classes`), the deviations from Bedrock's documented rules and from the
contract, and the model stage and writer of each.

A deviation is one way the world departs from what the stage assumes: the stand-in's cache
(another tokenizer, ``1h`` honoured as ``5m``, early evictions, the per-checkpoint minimum),
the model stage (its system prompt changed mid-conversation, its own prefix shorter than
``MODEL_PREFIX_TOKENS`` says, its clock skewed from the producers'), or its writer (the bill
without ``cacheDetails``, ``answered_at`` without a zone). Each is measured on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from functools import cache

from bench.load.answered import changed_system_prompt
from bench.load.model_classes import ModelClass
from localaws.bedrock_cache import CacheConfig, Tokenizer, chars_over_4, chars_per_token
from localaws.model_prefix import ModelPrefix, sized_prefix
from localaws.model_stage import CONTRACT_WRITER, BillWriter, ModelStage, SystemPromptChange
from worker.planning import PlanConfig
from worker.settings import Settings

SEED = 11
#: The model stage's prefix under the "prefix shorter than configured" deviation.
SHORT_PREFIX_TOKENS = 60


@dataclass(frozen=True, slots=True)
class Deviation:
    """One departure, the miss cause the stage should report on the answers it affects, and
    how the stand-in's ground truth finds those: ``affects`` (``real_minimum``: the expected
    prefix below the minimum by the stand-in's count; ``twin``: the documented rules read
    the expected prefix on the same requests; ``evicted``, ``system_prompt_changed``: the
    stand-in's mark) and ``flags`` (the answers it marks: ``other_side``, the expected prefix
    on the other side of the minimum from the stage's calibrated count; ``downgraded``,
    ``evicted``, ``system_prompt_changed``). ``judged_on``: the target's answers, ``short``
    (affected) or ``flagged``."""

    key: str
    name: str
    count_tokens: Tokenizer = chars_over_4
    honour_1h: bool = True
    evict_share: float = 0.0
    min_per_checkpoint: bool = False
    prompt_change: bool = False
    short_prefix: bool = False
    clock_skew: timedelta = timedelta(0)
    writer: BillWriter = CONTRACT_WRITER
    cause: str | None = None
    affects: str | None = None
    flags: str | None = None
    judged_on: str = "short"
    #: Classes it is measured on besides those every deviation is (where it bites).
    also_on: tuple[str, ...] = ()

    @property
    def rebills(self) -> bool:
        """Whether it changes what a request is billed (else only what the loop is told)."""
        billed = ("count_tokens", "honour_1h", "evict_share", "min_per_checkpoint",
                  "prompt_change", "short_prefix")  # fmt: skip
        return any(getattr(self, name) != getattr(NONE, name) for name in billed)


NONE = Deviation("none", "none (the documented rules)")
OVER, UNDER = chars_per_token(4.68), chars_per_token(3.4)
DEVIATIONS = (
    NONE,
    Deviation("overcount", "tokenizer: 4.68 chars a token (chars / 4 overcounts by 17%)",
              OVER, cause="below_minimum", affects="real_minimum", flags="other_side"),
    Deviation("overcount-short", "tokenizer: 4.68 chars a token, the model stage's prefix "
              f"{SHORT_PREFIX_TOKENS} tokens, not the class's", OVER, short_prefix=True,
              cause="below_minimum", affects="real_minimum", flags="other_side"),
    Deviation("undercount", "tokenizer: 3.4 chars a token (chars / 4 undercounts)", UNDER,
              cause="below_minimum", affects="real_minimum", flags="other_side"),
    Deviation("downgrade", "`1h` honoured as `5m`", honour_1h=False, cause="ttl_downgraded",
              affects="twin", flags="downgraded", judged_on="flagged"),
    Deviation("prompt", "the model stage's system prompt changed mid-conversation",
              prompt_change=True, cause="unexplained", affects="system_prompt_changed",
              flags="system_prompt_changed"),
    Deviation("evict", "a tenth of the entries evicted early", evict_share=0.1,
              cause="unexplained", affects="evicted", flags="evicted"),
    Deviation("per-checkpoint", "Bedrock's per-checkpoint minimum", min_per_checkpoint=True,
              cause="below_minimum", affects="twin", also_on=("1024/2500",)),
    *(Deviation(f"skew{sign}{label}", f"the model stage's clock {label} "
                f"{'ahead of' if sign == '+' else 'behind'} the producers'",
                clock_skew=skew if sign == "+" else -skew)
      for label, skew in (("2h", timedelta(hours=2)), ("5m", timedelta(minutes=5)))
      for sign in "+-"),
    Deviation("no-details", "the writer on botocore < 1.42.31: no `cacheDetails`",
              writer=BillWriter(cache_details=False)),
    Deviation("no-zone", "the writer stamps `answered_at` in local time without a zone",
              writer=BillWriter(local_time=timedelta(hours=1))),
)  # fmt: skip
BY_DEVIATION = {d.key: d for d in DEVIATIONS}


@cache
def model_prefix(tokens: int, count: Tokenizer, tool_tokens: int) -> ModelPrefix:
    return sized_prefix(tokens, count, tool_tokens=tool_tokens)


def prefix_of(model: ModelClass, deviation: Deviation) -> ModelPrefix:
    """The model stage's own prefix, sized under the deviation's tokenizer."""
    if deviation.short_prefix:
        return model_prefix(SHORT_PREFIX_TOKENS, deviation.count_tokens, 0)
    return model_prefix(model.prefix_tokens, deviation.count_tokens, model.tool_tokens)


def change_call(turns: int) -> int:
    """The call from which the system prompt is changed: the conversation's middle one."""
    return turns // 2 + 1


def model_stage(
    model: ModelClass, deviation: Deviation, turns: int, *, never_expire: bool = False
) -> ModelStage:
    """The model stage of one conversation of ``turns`` turns under ``deviation``: its own
    prefix with a cache point of its own, the cache with the class's minimum (and, to
    measure a bound, entries that never expire)."""
    prefix = prefix_of(model, deviation)
    change = None
    if deviation.prompt_change:
        change = SystemPromptChange(
            changed_system_prompt(prefix.system_prompt), at_call=change_call(turns)
        )
    config = CacheConfig(min_prefix_tokens=model.min_tokens, count_tokens=deviation.count_tokens,
                         honour_1h=deviation.honour_1h, evict_share=deviation.evict_share,
                         seed=SEED, min_per_checkpoint=deviation.min_per_checkpoint,
                         never_expire=never_expire)  # fmt: skip
    return ModelStage(
        system_prompt=prefix.system_prompt,
        tools=prefix.tools,
        cache=config,
        own_cache_point=True,
        system_prompt_change=change,
        clock_skew=deviation.clock_skew,
    )


def prefix_tokens_at(model: ModelClass, deviation: Deviation, turns: int, turn: int) -> int:
    """The real tokens of the model stage's prefix on ``turn``."""
    prefix = prefix_of(model, deviation)
    if deviation.prompt_change and turn >= change_call(turns):
        prefix = replace(prefix, system_prompt=changed_system_prompt(prefix.system_prompt))
    return prefix.tokens(deviation.count_tokens)


def plan_config(settings: Settings, *, aligned: bool) -> PlanConfig:
    """The settings' plan in the sliding or the cache-aligned mode (adaptive lifetimes)."""
    return replace(settings.plan_config, cache_aligned=aligned, cache_ttl="adaptive")
