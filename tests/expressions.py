"""The attribute names a DynamoDB request uses, read from the request itself: its key, its
item, and each expression (``#name`` placeholders resolved). Shared by the retention table's
test (what the stage writes) and the erase policy's test (what IAM's ``dynamodb:Attributes``
holds for a request)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: Words of DynamoDB's expression grammar that are not attribute names.
GRAMMAR = frozenset(
    {
        "SET", "REMOVE", "ADD", "DELETE", "AND", "OR", "NOT", "BETWEEN", "IN",
        "attribute_exists", "attribute_not_exists", "attribute_type", "begins_with",
        "contains", "size", "if_not_exists", "list_append",
    }
)  # fmt: skip
#: A name, a ``#placeholder`` or a ``:value``; values are skipped.
_TOKEN = re.compile(r"[#:]?[A-Za-z_][A-Za-z0-9_]*")
EXPRESSIONS = (
    "UpdateExpression",
    "ConditionExpression",
    "ProjectionExpression",
    "KeyConditionExpression",
    "FilterExpression",
)


def expression_names(expression: str, placeholders: Mapping[str, str]) -> set[str]:
    """The attribute names ``expression`` names (top-level: a path's first element)."""
    found = set()
    for token in _TOKEN.findall(expression):
        if token.startswith(":") or token in GRAMMAR:
            continue
        found.add(placeholders[token] if token.startswith("#") else token)
    return found


def written_attributes(request: Mapping[str, Any]) -> set[str]:
    """What a write sets or removes: an ``Item``'s attributes, or the names of an
    ``UpdateExpression`` (its right-hand sides too: an over-count, never an under-count)."""
    if "Item" in request:
        return set(request["Item"])
    return expression_names(
        request.get("UpdateExpression", ""), request.get("ExpressionAttributeNames", {})
    )


def request_attributes(request: Mapping[str, Any]) -> set[str]:
    """Every attribute name a request uses: its key's and each expression's."""
    placeholders = request.get("ExpressionAttributeNames", {})
    names = set(request.get("Key", {})) | set(request.get("Item", {}))
    for field in EXPRESSIONS:
        names |= expression_names(request.get(field, ""), placeholders)
    return names
