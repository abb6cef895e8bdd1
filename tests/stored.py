"""Stored values for the tests: plain JSON as the writers store it in DynamoDB's typed form
(boto3's own serializer, as a writer on boto3's resource API would), read back by the stage's
one reader of stored items."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeSerializer

from worker.adapters.stored_bills import read_bill
from worker.caching.bills import ModelUsage
from worker.ports import StoredDefect

_SERIALIZER = TypeSerializer()


def typed(value: object) -> dict[str, Any]:
    """``value`` as a DynamoDB attribute value (a float goes in as the Decimal it spells)."""
    return _SERIALIZER.serialize(_decimals(value))


def _decimals(value: object) -> object:
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, dict):
        return {key: _decimals(member) for key, member in value.items()}
    if isinstance(value, list):
        return [_decimals(member) for member in value]
    return value


def bill_from(plain: object, seq: int = 6) -> ModelUsage | StoredDefect | None:
    """A plain ``model_usage`` as the stage reads it once the writer stored it."""
    return read_bill(typed(plain), seq)


#: A bill as the model stage's writer stores it (plain values; ``typed`` makes it DynamoDB's).
USAGE: dict[str, Any] = {
    "inputTokens": 50,
    "outputTokens": 120,
    "totalTokens": 1_870,
    "cacheReadInputTokens": 1_000,
    "cacheWriteInputTokens": 700,
    "cacheDetails": [{"ttl": "1h", "inputTokens": 500}, {"ttl": "5m", "inputTokens": 200}],
    "answered_at": "2026-11-30T09:00:42Z",
    "command_id": "c-8f2e",
    "expected": {
        "prompt_tokens": 2_290,
        "expected_read_tokens": 2_100,
        "points": [{"ttl": "1h", "prefix_tokens": 1_000}, {"ttl": "5m", "prefix_tokens": 1_160}],
    },
}

#: The ways a writer was found to store a bill slightly wrong.
BROKEN_BILLS = (
    "ttl as a list",
    "a negative count",
    "a count of 1E+30",
    "answered_at without a zone",
    "answered_at in year 9999",
)


def break_bill(item: dict[str, Any], how: str) -> None:
    """Store the answer ``item``'s bill wrong in one of the :data:`BROKEN_BILLS` ways."""
    usage = item["model_usage"]["M"]
    if how == "ttl as a list":
        usage["cacheDetails"] = {
            "L": [{"M": {"ttl": {"L": [{"S": "5m"}]}, "inputTokens": {"N": "9"}}}]
        }
    elif how == "a negative count":
        usage["cacheReadInputTokens"] = {"N": "-1000"}
    elif how == "a count of 1E+30":
        usage["inputTokens"] = {"N": "1E+30"}
    elif how == "answered_at without a zone":
        usage["answered_at"] = {"S": "2026-11-30T09:12:00"}
    elif how == "answered_at in year 9999":
        usage["answered_at"] = {"S": "9999-12-31T23:59:45Z"}
    else:
        raise ValueError(how)
