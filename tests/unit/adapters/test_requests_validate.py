"""Every request builder's output passes botocore's own parameter validation.

The worker's clients run with ``parameter_validation=False`` (``aws_clients`` says why);
this is where the check it skips is made instead, once per request shape, against the
service models of the installed botocore: members, types, required fields, bounds.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import botocore.session
import pytest
from botocore.validate import ParamValidator

from localaws.history_writer import message_item, state_item
from worker.adapters.dynamodb import (
    anchor_request,
    fold_claim_request,
    fold_release_request,
    history_page_query,
)
from worker.adapters.ledger_records import (
    claim_request,
    command_get_request,
    done_marks_request,
    lease_request,
    takeover_request,
)
from worker.adapters.legacy_ledger import legacy_record_query
from worker.adapters.probes import probe_query
from worker.adapters.reachability import (
    head_bucket_request,
    history_probe_update,
    ledger_probe_get,
    ledger_probe_update,
    queue_arn_request,
)
from worker.adapters.sqs import (
    OutboundMessage,
    delete_entries,
    queue_url_request,
    receive_request,
    redrive_request,
    send_entries,
    send_request,
    visibility_entries,
)
from worker.caching.anchor import WindowAnchor
from worker.memory import CompactionPlan, FoldState
from worker.ports import CommandHold, DoneMark, FoldClaim, MessageDigest

TABLE = "mira-history"
QUEUE = "https://sqs.eu-west-1.amazonaws.com/123456789012/mira-model"
FIFO = QUEUE + ".fifo"
NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
ANCHOR = WindowAnchor(seq=30, folded_through=24)
MARKED = FoldState(folded_through=24, requested_through=40, requested_at=NOW, request_version=3)
PLAN = CompactionPlan(folded_through=24, through=57, unfolded_tokens=0)
FIRST_CLAIM = FoldClaim("matter-1", PLAN, seen=FoldState(), claimed_at=NOW)
CLAIM_OVER_MARK = FoldClaim("matter-1", PLAN, seen=MARKED, claimed_at=NOW)
#: The command a claim and a takeover are built for.
HOLD = CommandHold("matter-1", "c-1", "w-1")
LEASE = timedelta(seconds=60)
DIGEST = MessageDigest.drawn("q")
TRACE = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
MESSAGE = OutboundMessage(
    '{"type": "prompt"}', "matter 1", "c-1", {"RejectionReason": "x", "Size": 18}, TRACE
)

_session = botocore.session.get_session()

REQUESTS: list[tuple[str, str, str, Mapping[str, Any]]] = [
    ("query", "dynamodb", "Query", history_page_query(TABLE, "matter-1", 61)),
    (
        "query-below",
        "dynamodb",
        "Query",
        history_page_query(TABLE, "matter-1", 61, older_than="msg#000000000040"),
    ),
    ("anchor", "dynamodb", "UpdateItem", anchor_request(TABLE, "matter-1", ANCHOR)),
    (
        "fold-claim-first",
        "dynamodb",
        "UpdateItem",
        fold_claim_request(TABLE, FIRST_CLAIM),
    ),
    (
        "fold-claim-anchored",
        "dynamodb",
        "UpdateItem",
        fold_claim_request(TABLE, CLAIM_OVER_MARK, anchor=ANCHOR),
    ),
    (
        "fold-release-to-nothing",
        "dynamodb",
        "UpdateItem",
        fold_release_request(TABLE, FIRST_CLAIM),
    ),
    (
        "fold-release-to-mark",
        "dynamodb",
        "UpdateItem",
        fold_release_request(TABLE, CLAIM_OVER_MARK),
    ),
    *(
        (name, "dynamodb", "UpdateItem", build(TABLE, HOLD, lease=LEASE, now=NOW, digest=DIGEST))
        for name, build in [("claim", claim_request), ("takeover", takeover_request)]
    ),
    ("legacy-record", "dynamodb", "Query", legacy_record_query(TABLE, "matter-1", "c-1")),
    ("probe", "dynamodb", "Query", probe_query(TABLE)),
    ("lease", "dynamodb", "UpdateItem", lease_request(TABLE, CommandHold("m", "c", "w"), until=0)),
    ("get", "dynamodb", "GetItem", command_get_request(TABLE, "matter-1", "c-1")),
    (
        "done-marks",
        "dynamodb",
        "BatchWriteItem",
        done_marks_request(
            TABLE,
            [DoneMark(f"m-{i}", f"c-{i}", "w-1", NOW, MessageDigest.drawn("q")) for i in range(25)],
        ),
    ),
    (
        "history-items",
        "dynamodb",
        "BatchWriteItem",
        {
            "RequestItems": {
                TABLE: [
                    {"PutRequest": {"Item": item}}
                    for item in (
                        message_item("matter-1", 1, "user", "q", created_at=NOW),
                        state_item("matter-1", folded_through=0, summary="s"),
                    )
                ]
            }
        },
    ),
    ("receive", "sqs", "ReceiveMessage", receive_request(QUEUE, 10, 20)),
    ("receive-held", "sqs", "ReceiveMessage", receive_request(QUEUE, 10, 1, visibility_timeout=0)),
    ("delete", "sqs", "DeleteMessageBatch", {"QueueUrl": QUEUE, "Entries": delete_entries(["r"])}),
    (
        "visibility",
        "sqs",
        "ChangeMessageVisibilityBatch",
        {"QueueUrl": QUEUE, "Entries": visibility_entries(["r", "s"], 0)},
    ),
    (
        "send-batch",
        "sqs",
        "SendMessageBatch",
        {"QueueUrl": QUEUE, "Entries": send_entries([MESSAGE] * 10, fifo=False)},
    ),
    (
        "send-batch-fifo",
        "sqs",
        "SendMessageBatch",
        {"QueueUrl": FIFO, "Entries": send_entries([MESSAGE] * 10, fifo=True)},
    ),
    ("send", "sqs", "SendMessage", send_request(QUEUE, MESSAGE, fifo=False)),
    ("send-fifo", "sqs", "SendMessage", send_request(FIFO, MESSAGE, fifo=True)),
    # The start-up checks'.
    ("redrive", "sqs", "GetQueueAttributes", redrive_request(QUEUE)),
    ("dead-letter-url", "sqs", "GetQueueUrl", queue_url_request("123456789012", "mira-dlq")),
    ("queue-arn", "sqs", "GetQueueAttributes", queue_arn_request(FIFO)),
    ("history-probe-update", "dynamodb", "UpdateItem", history_probe_update(TABLE)),
    ("ledger-probe", "dynamodb", "GetItem", ledger_probe_get("mira-ledger")),
    ("ledger-probe-update", "dynamodb", "UpdateItem", ledger_probe_update("mira-ledger")),
    ("head-bucket", "s3", "HeadBucket", head_bucket_request("mira-payloads")),
]


@pytest.mark.parametrize(
    ("service", "operation", "request_"), [r[1:] for r in REQUESTS], ids=[r[0] for r in REQUESTS]
)
def test_the_request_passes_botocores_validation(
    service: str, operation: str, request_: Mapping[str, Any]
) -> None:
    shape = _session.get_service_model(service).operation_model(operation).input_shape
    report = ParamValidator().validate(request_, shape)
    assert not report.has_errors(), report.generate_report()


def test_the_check_itself_refuses_a_malformed_request() -> None:
    """Guard the check: a request botocore would refuse is refused here."""
    shape = _session.get_service_model("sqs").operation_model("ReceiveMessage").input_shape
    bad = {**receive_request(QUEUE, 10, 20), "MaxNumberOfMessages": "ten"}
    assert ParamValidator().validate(bad, shape).has_errors()
