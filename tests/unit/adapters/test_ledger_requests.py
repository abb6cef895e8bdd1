"""The command ledger's requests and how it reads a refused claim: the message's salted
digest written by the claim and kept by the done record, the takeover's condition on it, the
state each refused record means, and the previous release's records read while the ledger
moves (against fake clients: no network)."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from worker.adapters.ledger import DynamoCommandLedger
from worker.adapters.ledger_records import claim_request, done_record, takeover_request
from worker.adapters.legacy_ledger import LegacyRecords, legacy_claim, legacy_record_query
from worker.ports import CommandHold, DoneMark, MessageDigest

TABLE = "ledger"
HOLD = CommandHold("m", "c-1", "w/m/1")
NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
LEASE = timedelta(seconds=60)
QUESTION = "What does clause 14.2 say about termination?"
ASKED = MessageDigest.drawn(QUESTION)
OTHER = MessageDigest.drawn("And clause 15?")


def test_the_digest_is_an_hmac_of_the_message_under_a_salt_of_its_own_never_the_text() -> None:
    """No unsalted digest: the same question under two salts gives two digests, neither of
    them the SHA-256 a guess of the question would find."""
    message = "yes"
    one, two = MessageDigest.drawn(message), MessageDigest.drawn(message)
    assert one.salt != two.salt and one.value != two.value
    assert len(one.salt) == 32 and len(one.value) == 64
    assert hashlib.sha256(message.encode("utf-8")).hexdigest() not in (one.value, two.value)
    expected = hmac.new(one.salt.encode(), message.encode("utf-8"), hashlib.sha256).hexdigest()
    assert one.value == expected
    assert one.matches("yes") and not one.matches("yes ") and not one.matches("no")


def test_a_new_commands_claim_writes_the_salted_digest_and_takes_only_an_absent_record() -> None:
    request = claim_request(TABLE, HOLD, lease=LEASE, now=NOW, digest=ASKED)
    assert request["UpdateExpression"] == (
        "SET #status = :in_progress, lease_until = :until, #owner = :owner, "
        "expires_at = :ttl, #digest = :digest, #salt = :salt, attempts = :one"
    )
    assert request["ConditionExpression"] == "attribute_not_exists(pk)"
    assert request["ExpressionAttributeNames"]["#digest"] == "message_digest"
    assert request["ExpressionAttributeNames"]["#salt"] == "digest_salt"
    assert request["ExpressionAttributeValues"][":digest"] == {"S": ASKED.value}
    assert request["ExpressionAttributeValues"][":salt"] == {"S": ASKED.salt}
    assert request["ReturnValuesOnConditionCheckFailure"] == "ALL_OLD"


def test_a_takeover_takes_an_expired_or_own_lease_only_while_the_record_keeps_its_digest() -> None:
    request = takeover_request(TABLE, HOLD, lease=LEASE, now=NOW, digest=ASKED)
    assert request["ConditionExpression"] == (
        "#status = :in_progress AND (lease_until < :now OR #owner = :owner) AND #digest = :digest"
    )
    assert request["ExpressionAttributeValues"][":digest"] == {"S": ASKED.value}
    assert "#salt" not in request["UpdateExpression"]  # the record keeps its own salt
    unsalted = takeover_request(TABLE, HOLD, lease=LEASE, now=NOW, digest=None)
    assert unsalted["ConditionExpression"].endswith("AND attribute_not_exists(#digest)")


def test_the_done_record_keeps_the_digest_and_salt_the_claim_wrote() -> None:
    record = done_record(DoneMark("m", "c-1", "w/m/1", NOW, ASKED))
    assert record == {
        "pk": {"S": "m"},
        "sk": {"S": "cmd#c-1"},
        "status": {"S": "done"},
        "owner": {"S": "w/m/1"},
        "done_at": {"S": "2026-11-30T09:00:00Z"},
        "expires_at": {"N": str(int((NOW + timedelta(days=15)).timestamp()))},
        "message_digest": {"S": ASKED.value},
        "digest_salt": {"S": ASKED.salt},
    }


def test_a_done_mark_without_a_digest_writes_a_record_without_one() -> None:
    record = done_record(DoneMark("m", "c-1", "w/m/1", NOW))
    assert "message_digest" not in record and "digest_salt" not in record


class ConditionalCheckFailedException(ClientError):
    pass


def refusal(old: dict[str, Any], operation: str = "UpdateItem") -> ClientError:
    error = {"Error": {"Code": "ConditionalCheckFailedException", "Message": ""}}
    return ConditionalCheckFailedException({**error, "Item": old}, operation)


class ScriptedDynamo:
    """Answers each UpdateItem from a script: None writes, a record refuses with it as
    ALL_OLD; records every request; answers Query from ``legacy``."""

    class exceptions:  # botocore's client spells it so
        ConditionalCheckFailedException = ConditionalCheckFailedException

    def __init__(self, *answers: dict[str, Any] | None, legacy: list[Any] | None = None) -> None:
        self.answers = list(answers)
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.legacy = legacy or []

    async def update_item(self, **request: Any) -> dict[str, Any]:
        self.requests.append(("UpdateItem", request))
        answer = self.answers.pop(0) if self.answers else None
        if answer is not None:
            raise refusal(answer)
        return {}

    async def batch_write_item(self, **request: Any) -> dict[str, Any]:
        self.requests.append(("BatchWriteItem", request))
        return {}

    async def query(self, **request: Any) -> dict[str, Any]:
        self.requests.append(("Query", request))
        return {"Items": self.legacy}

    def calls(self) -> list[str]:
        return [name for name, _ in self.requests]


def record_of(owner: str, status: str, lease_until: datetime) -> dict[str, Any]:
    """Command ``c-1``'s record under ``owner``, without a message's digest."""
    return {
        "pk": {"S": "m"},
        "sk": {"S": "cmd#c-1"},
        "status": {"S": status},
        "owner": {"S": owner},
        "lease_until": {"N": str(int(lease_until.timestamp()))},
    }


def record(
    status: str, *, digest: MessageDigest | None, lease_until: datetime = NOW
) -> dict[str, Any]:
    item = record_of("other/m-0/1", status, lease_until)
    if digest is not None:
        item["message_digest"] = {"S": digest.value}
        item["digest_salt"] = {"S": digest.salt}
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
    """Done or in progress, live or expired: another message's digest (checked under the
    record's own salt) is an id reused for a new message. The same message, or a record
    without a digest, is a redelivery (done) or another owner's turn (busy); no takeover."""
    dynamo = ScriptedDynamo(old)
    ledger = DynamoCommandLedger(dynamo, TABLE)  # type: ignore[arg-type]
    claim = await ledger.begin(HOLD, lease=LEASE, now=NOW, message=QUESTION)
    assert claim.state == state
    assert dynamo.calls() == ["UpdateItem"]
    if state == "busy":
        assert claim.lease_until == LIVE


async def test_an_expired_lease_on_the_same_message_is_taken_over_keeping_the_records_salt() -> (
    None
):
    old = record("in_progress", digest=ASKED, lease_until=EXPIRED)
    dynamo = ScriptedDynamo(old, None)
    claim = await DynamoCommandLedger(dynamo, TABLE).begin(  # type: ignore[arg-type]
        HOLD, lease=LEASE, now=NOW, message=QUESTION
    )
    assert claim.state == "started" and claim.digest == ASKED
    assert dynamo.calls() == ["UpdateItem", "UpdateItem"]
    takeover = dynamo.requests[1][1]
    assert takeover == takeover_request(TABLE, HOLD, lease=LEASE, now=NOW, digest=ASKED)


async def test_a_takeover_lost_to_another_owner_reads_the_record_it_lost_to() -> None:
    """Between the refusal and the takeover another owner took the record: the takeover's
    refusal returns that owner's live lease, and the claim is busy until it ends."""
    expired = record("in_progress", digest=ASKED, lease_until=EXPIRED)
    taken = record("in_progress", digest=ASKED, lease_until=LIVE)
    dynamo = ScriptedDynamo(expired, taken)
    claim = await DynamoCommandLedger(dynamo, TABLE).begin(  # type: ignore[arg-type]
        HOLD, lease=LEASE, now=NOW, message=QUESTION
    )
    assert (claim.state, claim.lease_until) == ("busy", LIVE)
    assert dynamo.calls() == ["UpdateItem", "UpdateItem"]


def legacy_record(status: str, message: str | None, lease_until: datetime = NOW) -> dict[str, Any]:
    """A command record as the previous release wrote it in the history table."""
    item = record_of("old/m-0/1", status, lease_until)
    if message is not None:
        item["message_sha256"] = {"S": hashlib.sha256(message.encode()).hexdigest()}
    return item


@pytest.mark.parametrize(
    ("legacy", "state", "calls"),
    [
        ([], "started", ["UpdateItem", "Query"]),
        ([legacy_record("done", QUESTION)], "done", ["UpdateItem", "Query", "BatchWriteItem"]),
        ([legacy_record("done", None)], "done", ["UpdateItem", "Query", "BatchWriteItem"]),
        (
            [legacy_record("done", "And clause 15?")],
            "reused",
            ["UpdateItem", "Query", "UpdateItem"],
        ),
        (
            [legacy_record("in_progress", QUESTION, LIVE)],
            "busy",
            ["UpdateItem", "Query", "UpdateItem"],
        ),
        ([legacy_record("in_progress", QUESTION, EXPIRED)], "started", ["UpdateItem", "Query"]),
    ],
    ids=["none", "done", "done-no-digest", "done-other", "live", "expired"],
)
async def test_while_the_ledger_moves_a_new_claim_reads_the_previous_releases_record(
    legacy: list[Any], state: str, calls: list[str]
) -> None:
    """Done there: marked done here, nothing forwarded. Another message there: reused. A
    live lease there: this record's lease is given up (UpdateItem) and the claim is busy. An
    expired one, or none: the command is this owner's."""
    dynamo = ScriptedDynamo(legacy=legacy)
    ledger = DynamoCommandLedger(
        dynamo,  # type: ignore[arg-type]
        TABLE,
        legacy=LegacyRecords(dynamo, "history"),  # type: ignore[arg-type]
    )
    claim = await ledger.begin(HOLD, lease=LEASE, now=NOW, message=QUESTION)
    assert claim.state == state
    assert dynamo.calls() == calls
    assert dynamo.requests[1][1] == legacy_record_query("history", "m", "c-1")
    if state == "busy":
        assert claim.lease_until == LIVE
    if state == "done":
        [(table, [put])] = dynamo.requests[2][1]["RequestItems"].items()
        assert table == TABLE and put["PutRequest"]["Item"]["status"] == {"S": "done"}


def test_a_legacy_records_lease_that_is_no_number_reads_as_expired() -> None:
    item = legacy_record("in_progress", QUESTION)
    item["lease_until"] = {"N": "9" * 40}
    assert legacy_claim(item, message=QUESTION, now=NOW) is None


async def test_without_legacy_reads_a_new_claim_is_one_call() -> None:
    dynamo = ScriptedDynamo()
    claim = await DynamoCommandLedger(dynamo, TABLE).begin(  # type: ignore[arg-type]
        HOLD, lease=LEASE, now=NOW, message=QUESTION
    )
    assert claim.state == "started" and claim.digest is not None
    assert claim.digest.matches(QUESTION)
    assert dynamo.calls() == ["UpdateItem"]
