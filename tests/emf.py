"""The CloudWatch Embedded Metric Format specification, as checks a test can run on a line.

From the specification (CloudWatch User Guide, "Specification: Embedded metric format"):
the document is one JSON object with an ``_aws`` member holding ``Timestamp`` (epoch ms)
and ``CloudWatchMetrics``, an array of directives each with ``Namespace`` (1-255
characters), ``Dimensions`` (an array of dimension sets, each at most 30 keys naming
string members of the root) and ``Metrics`` (at most 100 definitions, each a ``Name``
naming a root member and an optional ``Unit`` among CloudWatch's units). A metric's member
is a number or an array of at most 100 numbers.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable
from typing import Any

UNITS = frozenset(
    [
        "Seconds",
        "Microseconds",
        "Milliseconds",
        "Bytes",
        "Kilobytes",
        "Megabytes",
        "Gigabytes",
        "Terabytes",
        "Bits",
        "Kilobits",
        "Megabits",
        "Gigabits",
        "Terabits",
        "Percent",
        "Count",
        "Bytes/Second",
        "Kilobytes/Second",
        "Megabytes/Second",
        "Gigabytes/Second",
        "Terabytes/Second",
        "Bits/Second",
        "Kilobits/Second",
        "Megabits/Second",
        "Gigabits/Second",
        "Terabits/Second",
        "Count/Second",
        "None",
    ]
)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_document(document: dict[str, Any]) -> None:
    """Assert ``document`` satisfies the specification."""
    meta = document["_aws"]
    assert isinstance(meta["Timestamp"], int) and meta["Timestamp"] > 0
    directives = meta["CloudWatchMetrics"]
    assert isinstance(directives, list) and directives
    for directive in directives:
        assert isinstance(directive["Namespace"], str) and 1 <= len(directive["Namespace"]) <= 255
        assert isinstance(directive["Dimensions"], list) and directive["Dimensions"]
        for dimension_set in directive["Dimensions"]:
            assert len(dimension_set) <= 30
            for key in dimension_set:
                assert isinstance(document[key], str) and document[key]
        definitions = directive["Metrics"]
        assert 0 < len(definitions) <= 100
        for definition in definitions:
            assert definition.get("Unit", "None") in UNITS
            value = document[definition["Name"]]  # every declared metric has its member
            if isinstance(value, list):
                assert 0 < len(value) <= 100
                assert all(is_number(v) for v in value)
            else:
                assert is_number(value)


def documents(lines: Iterable[str]) -> list[dict[str, Any]]:
    """The EMF documents among output lines (JSON objects with ``_aws``), each checked."""
    found = []
    for line in lines:
        if not line.startswith("{"):
            continue
        document = json.loads(line)
        if "_aws" in document:
            check_document(document)
            found.append(document)
    return found


def values_of(document: dict[str, Any], name: str) -> list[float]:
    value = document.get(name)
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def totals(docs: Iterable[dict[str, Any]], *, by: str | None = None) -> Counter[Any]:
    """Each declared metric summed over ``docs`` (with ``by``: keyed by that dimension too)."""
    total: Counter[Any] = Counter()
    for document in docs:
        names = [d["Name"] for d in document["_aws"]["CloudWatchMetrics"][0]["Metrics"]]
        for name in names:
            key = (name, document.get(by)) if by else name
            total[key] += sum(values_of(document, name))
    return total


def samples(docs: Iterable[dict[str, Any]], name: str) -> list[float]:
    """Every value of a distribution over ``docs``."""
    return [v for document in docs for v in values_of(document, name)]
