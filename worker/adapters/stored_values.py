"""Stored attribute values as the reader takes them, one primitive per declared kind: a value
of the declared DynamoDB type and range, or :class:`Unreadable` naming the attribute and what is
wrong with it (never the value). Values come as botocore's parser hands them over: one
``{type: value}`` per attribute, of any of DynamoDB's ten types. Used by
:mod:`worker.adapters.stored_items` and :mod:`worker.adapters.stored_bills` only, which catch
:class:`Unreadable` per item: nothing here reaches a turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import NoReturn, TypeAlias

from worker.adapters.stored_attributes import MAX_TOKENS
from worker.stamps import read_time

#: An attribute value as botocore's parser returns it: ``{"S": "…"}``, ``{"N": "42"}``, …
Value: TypeAlias = Mapping[str, object]
Item: TypeAlias = Mapping[str, object]

TYPE_NAMES = {
    "S": "a string",
    "N": "a number",
    "B": "a binary",
    "SS": "a string set",
    "NS": "a number set",
    "BS": "a binary set",
    "M": "a map",
    "L": "a list",
    "NULL": "a null",
    "BOOL": "a boolean",
}


class Unreadable(Exception):
    """One attribute is not what the table declares: its name and why (never its value).
    Raised and caught inside this module only."""

    def __init__(self, attribute: str, reason: str) -> None:
        super().__init__(attribute, reason)
        self.attribute = attribute
        self.reason = reason


def fail(attribute: str, reason: str) -> NoReturn:
    raise Unreadable(attribute, reason)


def type_and_payload(value: object, attribute: str) -> tuple[str, object] | None:
    """The type and payload of an attribute value; None when it is absent (missing or NULL)."""
    if value is None:
        return None
    if not isinstance(value, Mapping) or len(value) != 1:
        fail(attribute, "not a DynamoDB attribute value")
    ((kind, inner),) = value.items()
    if kind == "NULL":
        return None
    if kind not in TYPE_NAMES:
        fail(attribute, "not a DynamoDB attribute value")
    return str(kind), inner


def of_type(value: object, attribute: str, kind: str) -> object | None:
    """The payload of ``value`` if it is of DynamoDB type ``kind``; None when absent."""
    typed = type_and_payload(value, attribute)
    if typed is None:
        return None
    found, inner = typed
    if found != kind:
        fail(attribute, f"{TYPE_NAMES[found]}, not {TYPE_NAMES[kind]}")
    return inner


def as_required(value: object, attribute: str, kind: str) -> object:
    inner = of_type(value, attribute, kind)
    if inner is None:
        fail(attribute, "missing")
    return inner


def as_whole_number(value: object, attribute: str, *, low: int, high: int) -> int | None:
    """A whole number in ``[low, high]``; None when absent."""
    raw = of_type(value, attribute, "N")
    if raw is None:
        return None
    try:
        number = Decimal(str(raw))
    except (InvalidOperation, ValueError):
        fail(attribute, "not a number")
    if not number.is_finite() or number != number.to_integral_value():
        fail(attribute, "not a whole number")
    if not low <= number <= high:
        fail(attribute, f"outside {low:,} to {high:,}")
    return int(number)


def as_count(value: object, attribute: str, *, high: int = MAX_TOKENS) -> int:
    number = as_whole_number(value, attribute, low=0, high=high)
    if number is None:
        fail(attribute, "missing")
    return number


def as_optional_count(value: object, attribute: str) -> int:
    """A count that reads as 0 when absent."""
    return as_whole_number(value, attribute, low=0, high=MAX_TOKENS) or 0


def as_text(value: object, attribute: str) -> str | None:
    inner = of_type(value, attribute, "S")
    return inner if isinstance(inner, str) or inner is None else fail(attribute, "not text")


def as_time(value: object, attribute: str) -> datetime | None:
    spelled = as_text(value, attribute)
    if spelled is None:
        return None
    moment = read_time(spelled)
    return moment if isinstance(moment, datetime) else fail(attribute, moment)


def as_members(inner: object, attribute: str) -> Mapping[str, object]:
    if not isinstance(inner, Mapping):
        fail(attribute, "not a map")
    return inner


def as_elements(inner: object, attribute: str) -> list[object]:
    if not isinstance(inner, list):
        fail(attribute, "not a list")
    return inner
