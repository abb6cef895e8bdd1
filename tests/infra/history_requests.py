"""The requests the stage makes on the history table, built by the code's own request builders
(``worker/adapters/dynamodb.py``, ``legacy_ledger.py``, ``probes.py``), and the attributes
each names as IAM's ``dynamodb:Attributes`` sees them.

DynamoDB's fine-grained access control gives an UpdateItem's ``dynamodb:Attributes`` every
top-level attribute the request names: the key's, the ones it writes or removes, and the ones
its condition reads ("These attributes can be read, written, or evaluated in a conditional
write": DynamoDB Developer Guide, "Using IAM policy conditions for fine-grained access
control"). :func:`attributes_named` reads them out of a request the way that key is filled:
the key's names, then every attribute path in the expressions, to its first element, with
``#name`` placeholders resolved.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from worker.adapters.dynamodb import anchor_request, fold_claim_request, fold_release_request
from worker.caching.anchor import SummarySnapshot, WindowAnchor
from worker.memory import CompactionPlan, FoldState
from worker.ports import FoldClaim

TABLE = "mira-history"
#: The expressions of a request that name attributes.
EXPRESSIONS = (
    "UpdateExpression",
    "ConditionExpression",
    "KeyConditionExpression",
    "ProjectionExpression",
    "FilterExpression",
)
#: The words of DynamoDB's expression grammar that are not attribute names.
GRAMMAR = frozenset(
    {
        "set",
        "remove",
        "add",
        "delete",
        "and",
        "or",
        "not",
        "between",
        "in",
        "attribute_exists",
        "attribute_not_exists",
        "attribute_type",
        "begins_with",
        "contains",
        "size",
        "if_not_exists",
        "list_append",
    }
)
#: An attribute path's first element (a name or a ``#placeholder``), not a ``:value``, not
#: an element after a ``.``, not a function's name.
_FIRST_ELEMENT = re.compile(r"(?<![.:#\w])(#?[A-Za-z_][A-Za-z0-9_]*)\b(?!\s*\()")


def attributes_named(request: Mapping[str, Any]) -> set[str]:
    """The top-level attributes ``request`` names: IAM's ``dynamodb:Attributes``."""
    names = dict(request.get("ExpressionAttributeNames", {}))
    found = set(request.get("Key", {}))
    for field in EXPRESSIONS:
        for token in _FIRST_ELEMENT.findall(request.get(field, "")):
            if token.lower() in GRAMMAR:
                continue
            found.add(names[token] if token.startswith("#") else token)
    return found


NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
PLAN = CompactionPlan(folded_through=24, through=57, unfolded_tokens=2350)
MARKED = FoldState(folded_through=24, requested_through=40, requested_at=NOW, request_version=3)
#: Versions an operator's hand stored as no count: the claim conditions on them as they stand
#: (a string's value, another type's type, a value of no known type's presence).
UNREADABLE = {
    "a string": FoldState(folded_through=24, unreadable_version=("S", "three")),
    "a binary": FoldState(folded_through=24, unreadable_version=("B", None)),
    "an unknown type": FoldState(folded_through=24, unreadable_version=("", None)),
}
ANCHORS = {
    "no snapshot": WindowAnchor(seq=30, folded_through=24),
    "snapshot without a summary": WindowAnchor(
        seq=30, folded_through=24, snapshot=SummarySnapshot(None, 0)
    ),
    "snapshot with its summary": WindowAnchor(
        seq=30, folded_through=24, snapshot=SummarySnapshot("the fold so far", 24)
    ),
}


def history_updates() -> dict[str, dict[str, Any]]:
    """Every shape of UpdateItem the stage makes on the history table, by name: the anchor
    write, the fold claim (first, over a mark, over an unreadable version, with each anchor),
    and the release of a claim (to no mark, to the mark it replaced)."""
    first = FoldClaim("matter-1187", PLAN, seen=FoldState(), claimed_at=NOW)
    over_mark = FoldClaim("matter-1187", PLAN, seen=MARKED, claimed_at=NOW)
    requests: dict[str, Any] = {
        "fold claim, first": fold_claim_request(TABLE, first),
        "fold claim, over a mark": fold_claim_request(TABLE, over_mark),
        "fold release, to no mark": fold_release_request(TABLE, first),
        "fold release, to the mark it replaced": fold_release_request(TABLE, over_mark),
    }
    for name, seen in UNREADABLE.items():
        claim = FoldClaim("matter-1187", PLAN, seen=seen, claimed_at=NOW)
        requests[f"fold claim, over a version stored as {name}"] = fold_claim_request(TABLE, claim)
    for name, anchor in ANCHORS.items():
        requests[f"anchor write, {name}"] = anchor_request(TABLE, "matter-1187", anchor)
        requests[f"fold claim with the anchor, {name}"] = fold_claim_request(
            TABLE, over_mark, anchor=anchor
        )
    return {name: dict(request) for name, request in requests.items()}
