"""The model stage's side of a turn, for the demo, the tests and the benchmark: its own tools
and system prompt first (of any size: :mod:`localaws.model_prefix`), then the prompt payload's
``converse`` view as is, priced by the prompt-cache stand-in (:mod:`localaws.bedrock_cache`,
one cache per conversation); and the writer of the answer with its bill, ``model_usage``.

The answer item is laid out here from the contract's "The history table" and "The bill,
observed" (``docs/CONTRACT.md``), not with ``localaws.history_writer``: a second
implementation of the contract, so a test of the stage's reader against it checks the layout,
not a copy.

The deviations that are the model stage's own live here, each off by default: its system
prompt changed once mid-conversation (:class:`SystemPromptChange`), from a call of each
conversation or a moment; its clock skewed from the producers' (``clock_skew``: the
``answered_at`` it stamps is the true moment plus the skew, while the cache runs on true
time); and its writer's (:class:`BillWriter`): the bill stored without ``cacheDetails``, as a
writer on botocore before 1.42.31 stores it, or ``answered_at`` in local time without a zone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from localaws.bedrock_cache import (
    CacheConfig,
    Moment,
    PromptCache,
    Ttl,
    moment,
    seconds,
)

if TYPE_CHECKING:  # the stubs are a dev dependency: nothing of them runs
    from types_aiobotocore_dynamodb import DynamoDBClient

SYSTEM_PROMPT = (
    "You are Mira, a legal assistant to counsel. Answer from the conversation and its summary; "
    "quote clauses exactly, name the document and clause you rely on, and say plainly when the "
    "record does not answer the question. Never invent a citation."
)
ANSWER = "Clause 14.2 allows termination for material breach on thirty days' written notice."

#: DynamoDB's attribute values, as the boto3 *client* takes them ({"S": …}, {"N": …}, …).
Item = dict[str, dict[str, Any]]


@dataclass(frozen=True, slots=True)
class SystemPromptChange:
    """The model stage's system prompt becomes ``text`` from a conversation's ``at_call``-th
    call (1 = its first) or from the moment ``at`` on: exactly one of the two."""

    text: str
    at_call: int | None = None
    at: Moment | None = None

    def __post_init__(self) -> None:
        if (self.at_call is None) == (self.at is None):
            raise ValueError("a system prompt change needs exactly one of at_call and at")

    def applies(self, call: int, at: Moment) -> bool:
        if self.at_call is not None:
            return call >= self.at_call
        return self.at is not None and seconds(at) >= seconds(self.at)


@dataclass(frozen=True, slots=True)
class ModelAnswer:
    """One model call: the answer, Converse's ``usage`` for it, when it was made (the true
    moment, the cache's clock), and what the stand-in knows that the bill does not (evicted
    early, ``1h`` written as ``5m``, the system prompt changed on this call, the model
    stage's clock ahead by ``clock_skew``)."""

    content: str
    usage: dict[str, Any]
    answered_at: datetime
    evicted: bool = False
    downgraded: bool = False
    system_prompt_changed: bool = False
    clock_skew: timedelta = field(default=timedelta(0))

    @property
    def stamped_at(self) -> datetime:
        """The moment as the model stage's clock reads it: what its writer stores."""
        return self.answered_at + self.clock_skew


class ModelStage:
    """Answers prompt payloads as the model stage would, each conversation with a cache of
    its own: ``tools`` (Converse's ``toolConfig.tools``), then its system prompt, then the
    view. ``own_cache_point``: a point after the stage's own system prompt, ``1h`` when any
    point of the view says ``1h`` (Bedrock refuses a longer TTL after a shorter).
    ``clock_skew``: how far ahead of true time its clock runs (negative: behind)."""

    def __init__(
        self,
        *,
        system_prompt: str = SYSTEM_PROMPT,
        tools: Sequence[Mapping[str, Any]] = (),
        cache: CacheConfig | None = None,
        own_cache_point: bool = False,
        system_prompt_change: SystemPromptChange | None = None,
        clock_skew: timedelta = timedelta(0),
    ) -> None:
        self.system_prompt = system_prompt
        self.tools = tuple(tools)
        self.config = cache or CacheConfig()
        self.own_cache_point = own_cache_point
        self.system_prompt_change = system_prompt_change
        self.clock_skew = clock_skew
        self._caches: dict[str, PromptCache] = {}
        self._calls: dict[str, int] = {}
        self._prompts: dict[str, str] = {}

    def answer(
        self, payload: Mapping[str, Any], *, at: Moment, content: str = ANSWER
    ) -> ModelAnswer:
        """Send ``payload``'s view (after this stage's system prompt) at ``at``, answered
        with ``content``: the usage its conversation's cache gives."""
        conversation = payload["conversation_id"]
        call = self._calls.get(conversation, 0) + 1
        prompt = self.system_prompt
        if self.system_prompt_change is not None and self.system_prompt_change.applies(call, at):
            prompt = self.system_prompt_change.text
        view = payload["converse"]
        system: list[dict[str, Any]] = [{"text": prompt}]
        if self.own_cache_point:
            system.append({"cachePoint": {"type": "default", "ttl": _own_ttl(view)}})
        cache = self._caches.get(conversation) or PromptCache(self.config, name=conversation)
        outcome = cache.converse(
            system=[*system, *view["system"]],
            messages=view["messages"],
            at=at,
            tools=self.tools,
            output_tokens=self.config.count_tokens(content),
        )
        changed = self._prompts.get(conversation, prompt) != prompt
        self._caches[conversation] = cache
        self._calls[conversation] = call
        self._prompts[conversation] = prompt
        return ModelAnswer(
            content=content,
            usage=outcome.usage,
            answered_at=moment(at),
            evicted=outcome.evicted,
            downgraded=outcome.downgraded,
            system_prompt_changed=changed,
            clock_skew=self.clock_skew,
        )


def _own_ttl(view: Mapping[str, Any]) -> Ttl:
    blocks = [*view["system"], *(b for m in view["messages"] for b in m["content"])]
    asked = {block["cachePoint"].get("ttl", "5m") for block in blocks if "cachePoint" in block}
    return "1h" if "1h" in asked else "5m"


def rfc3339(at: datetime) -> str:
    """Second precision, UTC, ``Z``: the history table's time format."""
    return moment(at).strftime("%Y-%m-%dT%H:%M:%SZ")


def attribute(value: Any) -> dict[str, Any]:
    """A JSON value as a DynamoDB attribute value: objects as ``M``, arrays as ``L``,
    strings ``S``, numbers ``N``, booleans ``BOOL``, null ``NULL``."""
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"DynamoDB numbers are finite, not {value}")
        return {"N": str(value)}
    if isinstance(value, str):
        return {"S": value}
    if value is None:
        return {"NULL": True}
    if isinstance(value, Mapping):
        return {"M": {str(key): attribute(member) for key, member in value.items()}}
    if isinstance(value, list | tuple):
        return {"L": [attribute(member) for member in value]}
    raise TypeError(f"no DynamoDB attribute for a {type(value).__name__}")


@dataclass(frozen=True, slots=True)
class BillWriter:
    """How the writer stores the bill: as the contract lays it out (the defaults), or as a
    writer that departs from it. ``cache_details`` False: a writer on botocore before 1.42.31,
    whose parsed ``usage`` has no ``cacheDetails`` (botocore 1.40.61's ``TokenUsage`` shape
    does not name the member, and its parser keeps only the members a shape names).
    ``local_time``: a writer that stamps ``answered_at`` in its local time, this far ahead of
    UTC, without a zone (``2026-11-30T10:00:05``)."""

    cache_details: bool = True
    local_time: timedelta | None = None

    def usage(self, usage: Mapping[str, Any]) -> dict[str, Any]:
        """The usage members it stores."""
        return {k: v for k, v in usage.items() if self.cache_details or k != "cacheDetails"}

    def stamp(self, at: datetime) -> str:
        """``answered_at`` as it stores it."""
        if self.local_time is None:
            return rfc3339(at)
        return (moment(at) + self.local_time).strftime("%Y-%m-%dT%H:%M:%S")


#: The writer the contract describes.
CONTRACT_WRITER = BillWriter()


def answer_item(
    payload: Mapping[str, Any],
    answer: ModelAnswer,
    *,
    seq: int,
    created_at: datetime | None = None,
    writer: BillWriter = CONTRACT_WRITER,
) -> Item:
    """The answer's message item (``pk`` the conversation, ``sk`` ``msg#`` + 12-digit
    ``seq``, ``role`` assistant, ``content``, ``created_at``: the model stage's clock unless
    given) with ``model_usage``: the usage members as returned, ``answered_at`` (the model
    stage's clock), ``command_id`` and, when the payload has ``cache``, ``expected`` (that
    block as received); each as ``writer`` stores it."""
    if seq < 1:
        raise ValueError(f"seq counts from 1, not {seq}")
    usage: dict[str, Any] = {
        **writer.usage(answer.usage),
        "answered_at": writer.stamp(answer.stamped_at),
        "command_id": payload["command_id"],
    }
    if payload.get("cache") is not None:
        usage["expected"] = payload["cache"]
    return {
        "pk": {"S": payload["conversation_id"]},
        "sk": {"S": f"msg#{seq:012d}"},
        "seq": {"N": str(seq)},
        "role": {"S": "assistant"},
        "content": {"S": answer.content},
        "created_at": {"S": rfc3339(created_at or answer.stamped_at)},
        "model_usage": attribute(usage),
    }


def put_answer(client: Any, table: str, item: Item) -> None:
    """Store an answer item with a boto3 DynamoDB client."""
    client.put_item(TableName=table, Item=item)


async def put_answer_async(client: DynamoDBClient, table: str, item: Item) -> None:
    """Store an answer item with an aioboto3 / aiobotocore DynamoDB client."""
    await client.put_item(TableName=table, Item=item)
