"""What every DynamoDB table of the templates is, whichever stack holds it: the table
`worker bootstrap` makes, kept, expiring and encrypted alike."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from worker.app.resources import TTL_ATTRIBUTE, history_table_definition


def assert_the_table_bootstrap_makes(table: Mapping[str, Any]) -> None:
    """``table``'s properties: the key schema and billing `worker bootstrap` makes a table
    with, point-in-time recovery, DynamoDB's TTL on ``TTL_ATTRIBUTE``, and encryption at
    rest."""
    made_locally = history_table_definition("any")
    for field in ("KeySchema", "AttributeDefinitions", "BillingMode"):
        assert table[field] == made_locally[field], field
    assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert table["TimeToLiveSpecification"] == {"AttributeName": TTL_ATTRIBUTE, "Enabled": True}
    assert table["SSESpecification"] == {"SSEEnabled": True}
