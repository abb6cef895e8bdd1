"""The command ledger's requests and how it reads a refused claim: the message's digest
written by the claim and kept by the done record, the claim's condition on it, and the
state each refused record means (against a fake client: no network)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from worker.adapters.ledger import DynamoCommandLedger, claim_request, done_record
from worker.ports import CommandHold, DoneMark, message_digest

TABLE = "history"
HOLD = CommandHold("m", "c-1", "w/m/1")
NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
LEASE = timedelta(seconds=60)
ASKED = message_digest("What does clause 14.2 say about termination?")
OTHER = message_digest("And clause 15?")


def test_the_digest_is_the_sha256_of_the_messages_utf8_text_never_the_text() -> None:
    message = "Clause 14.2 — may the buyer terminate?"
    assert message_digest(message) == hashlib.sha256(message.encode("utf-8")).hexdigest()
    assert len(message_digest(message)) == 64
    assert message_digest(message) != message_digest(message + " ")


def test_the_claim_writes_the_digest_and_takes_a_record_only_for_the_same_message() -> None:
    """An expired lease (or the owner's own) is taken over only when the record holds the
    same digest, or none (a record written before records kept one)."""
    request = claim_request(TABLE, HOLD, lease=LEASE, now=NOW, digest=ASKED)
    assert request["UpdateExpression"] == (
        "SET #status = :in_progress, lease_until = :until, #owner = :owner, "
        "expires_at = :ttl, #digest = :digest, attempts = if_not_exists(attempts, :zero) + :one"
    )
    assert request["ConditionExpression"] == (
        "attribute_not_exists(pk) OR (#status = :in_progress AND "
        "(lease_until < :now OR #owner = :owner) AND "
        "(attribute_not_exists(#digest) OR #digest = :digest))"
    )
    assert request["ExpressionAttributeNames"]["#digest"] == "message_sha256"
    assert request["ExpressionAttributeValues"][":digest"] == {"S": ASKED}
    assert request["ReturnValuesOnConditionCheckFailure"] == "ALL_OLD"


def test_the_done_record_keeps_the_digest_the_claim_wrote() -> None:
    record = done_record(DoneMark("m", "c-1", "w/m/1", NOW, ASKED))
    assert record == {
        "pk": {"S": "m"},
        "sk": {"S": "cmd#c-1"},
        "status": {"S": "done"},
        "owner": {"S": "w/m/1"},
        "done_at": {"S": "2026-11-30T09:00:00Z"},
        "expires_at": {"N": str(int((NOW + timedelta(days=15)).timestamp()))},
        "message_sha256": {"S": ASKED},
    }


def test_a_done_mark_without_a_digest_writes_a_record_without_one() -> None:
    assert "message_sha256" not in done_record(DoneMark("m", "c-1", "w/m/1", NOW))


class ConditionalCheckFailedException(ClientError):
    pass


class RefusingDynamo:
    """Refuses every claim, returning ``old`` as ALL_OLD puts it in the refusal."""

    class exceptions:  # botocore's client spells it so
        ConditionalCheckFailedException = ConditionalCheckFailedException

    def __init__(self, old: dict[str, Any]) -> None:
        self.old = old

    async def update_item(self, **_: Any) -> dict[str, Any]:
        error = {"Error": {"Code": "ConditionalCheckFailedException", "Message": ""}}
        raise ConditionalCheckFailedException({**error, "Item": self.old}, "UpdateItem")


def record(status: str, *, digest: str | None, lease_until: datetime = NOW) -> dict[str, Any]:
    item: dict[str, Any] = {
        "pk": {"S": "m"},
        "sk": {"S": "cmd#c-1"},
        "status": {"S": status},
        "owner": {"S": "other/m-0/1"},
        "lease_until": {"N": str(int(lease_until.timestamp()))},
    }
    if digest is not None:
        item["message_sha256"] = {"S": digest}
    return item


LIVE = NOW + timedelta(seconds=30)
EXPIRED = NOW - timedelta(seconds=1)


@pytest.mark.parametrize(
    ("old", "state"),
    [
        (record("done", digest=ASKED), "done"),
        (record("done", digest=None), "done"),
        (record("done", digest=OTHER), "reused"),
        (record("in_progress", digest=ASKED, lease_until=LIVE), "busy"),
        (record("in_progress", digest=None, lease_until=LIVE), "busy"),
        (record("in_progress", digest=OTHER, lease_until=LIVE), "reused"),
        (record("in_progress", digest=OTHER, lease_until=EXPIRED), "reused"),
    ],
    ids=[
        "done-same",
        "done-no-digest",
        "done-other",
        "live-same",
        "live-no-digest",
        "live-other",
        "expired-other",
    ],
)
async def test_a_refused_claim_is_reused_when_its_record_holds_another_messages_digest(
    old: dict[str, Any], state: str
) -> None:
    """Done or in progress, live or expired: another digest is an id reused for a new
    message. The same digest, or none, is a redelivery (done) or another owner's turn (busy)."""
    ledger = DynamoCommandLedger(RefusingDynamo(old), TABLE)  # type: ignore[arg-type]
    claim = await ledger.begin(HOLD, lease=LEASE, now=NOW, digest=ASKED)
    assert claim.state == state
    if state == "busy":
        assert claim.lease_until == LIVE
