"""The operators' policy for ``worker erase`` that docs/RETENTION.md gives, as AWS evaluates
it: every call erase makes is allowed, on the ARN it makes it on, and the calls it must never
make are refused: deleting or writing a history message, writing the writer's
``fold_summary``, reading the ``state`` item whole, deleting or writing outside
``payloads/``, sending to or receiving from any other queue.

The policy is read from the page itself (between its marker and the end of its JSON block).
The DynamoDB calls are the very requests :mod:`worker.adapters.erasure` builds, and their
condition keys are read from them as DynamoDB fills them in: ``dynamodb:Attributes`` every
attribute name the request uses (key included), ``dynamodb:ReturnValues`` its
``ReturnValues``, ``dynamodb:Select`` its ``Select``, or for a read without one
``SPECIFIC_ATTRIBUTES`` with a projection and ``ALL_ATTRIBUTES`` without (why AWS's own
example of an attribute-limited policy pairs the two conditions). Every operation
``worker/adapters/erasure.py`` calls must be among those evaluated here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.expressions import request_attributes
from tests.infra.iam_policy import Decision, Principal, Request, evaluate
from tests.infra.test_task_role_as_aws_evaluates_it import STACK, WORKER
from tests.infra.test_task_role_matches_the_code import ADAPTERS, iam_action, operations_called
from worker.adapters.erasure import (
    ledger_keys_query,
    ledger_record_delete,
    objects_delete_request,
    objects_list_request,
    state_erase_request,
    state_read_request,
)
from worker.turn.payloads import PayloadKind, conversation_prefix, payload_key

RETENTION = Path(__file__).resolve().parents[2] / "docs" / "RETENTION.md"
OPERATOR = Principal("AWS", f"arn:aws:iam::{STACK.account}:role/mira-operators")
TLS = {"aws:SecureTransport": "true"}
CONVERSATION = "matter-1187"
#: IAM authorises these operations by another action's name.
AUTHORISED_BY = {"s3:DeleteObjects": "s3:DeleteObject", "s3:ListObjectsV2": "s3:ListBucket"}


def _table(name: str) -> str:
    return f"arn:aws:dynamodb:{STACK.region}:{STACK.account}:table/{name}"


def _ledger_table() -> str:
    resources = STACK.template["Resources"]
    (container,) = STACK.resolve(resources["TaskDefinition"]["Properties"]["ContainerDefinitions"])
    env = {entry["Name"]: entry["Value"] for entry in container["Environment"]}
    return _table(env["LEDGER_TABLE"])


LEDGER = _ledger_table()
HISTORY = WORKER.history_table
LEDGER_NAME, HISTORY_NAME = LEDGER.rsplit("/", 1)[1], HISTORY.rsplit("/", 1)[1]
BUCKET = WORKER.bucket
LISTED = objects_list_request(WORKER.bucket_name, conversation_prefix(CONVERSATION))


def documented_policy() -> dict[str, Any]:
    text = RETENTION.read_text(encoding="utf-8")
    found = re.search(r"<!-- erase-policy -->\n```json\n(.*?)\n```", text, re.DOTALL)
    assert found is not None, "RETENTION.md has no erase policy"
    return dict(json.loads(found.group(1)))


def dynamodb_context(request: Mapping[str, Any], *, read: bool) -> dict[str, str | tuple[str, ...]]:
    context: dict[str, str | tuple[str, ...]] = {
        **TLS,
        "dynamodb:Attributes": tuple(sorted(request_attributes(request))),
    }
    if "ReturnValues" in request:
        context["dynamodb:ReturnValues"] = request["ReturnValues"]
    if "Select" in request:
        context["dynamodb:Select"] = request["Select"]
    elif read:
        projected = "ProjectionExpression" in request
        context["dynamodb:Select"] = "SPECIFIC_ATTRIBUTES" if projected else "ALL_ATTRIBUTES"
    return context


def as_operator(action: str, resource: str, context: Mapping[str, Any] | None = None) -> Decision:
    request = Request(action, resource, OPERATOR, dict(context or TLS))
    return evaluate([documented_policy()], request)


PAYLOAD_KEYS = [payload_key(CONVERSATION, "c-1", kind) for kind in PayloadKind] + [
    payload_key(None, "m-1", PayloadKind.DEAD_LETTER),
    "payloads/" + "0" * 64 + ".json",  # an older key a dead letter's pointer named
]
#: Each call ``worker erase`` makes: the action, the ARN, the request context.
ERASE_CALLS: list[tuple[str, str, Mapping[str, Any]]] = [
    ("sqs:GetQueueAttributes", WORKER.converse_queue, TLS),  # its RedrivePolicy
    ("sqs:GetQueueUrl", WORKER.dead_letter_queue, TLS),
    ("sqs:GetQueueAttributes", WORKER.dead_letter_queue, TLS),  # what a scan cannot see
    ("sqs:ReceiveMessage", WORKER.dead_letter_queue, TLS),
    ("sqs:DeleteMessage", WORKER.dead_letter_queue, TLS),
    ("sqs:ChangeMessageVisibility", WORKER.dead_letter_queue, TLS),
    ("s3:GetObject", f"{BUCKET}/8c3d6f1e-2b4a-4c5d-9e8f-0a1b2c3d4e5f", TLS),  # a producer's
    ("s3:GetObject", f"{BUCKET}/{PAYLOAD_KEYS[-2]}", TLS),
    (
        "s3:ListBucket",
        BUCKET,
        {**TLS, "s3:prefix": LISTED["Prefix"]},
    ),
    *[
        ("s3:DeleteObject", f"{BUCKET}/{entry['Key']}", TLS)
        for entry in objects_delete_request("b", PAYLOAD_KEYS)["Delete"]["Objects"]
    ],
    (
        "dynamodb:Query",
        LEDGER,
        dynamodb_context(ledger_keys_query(LEDGER_NAME, CONVERSATION), read=True),
    ),
    (
        "dynamodb:DeleteItem",
        LEDGER,
        dynamodb_context(ledger_record_delete(LEDGER_NAME, CONVERSATION, "cmd#c-1"), read=False),
    ),
    (
        "dynamodb:UpdateItem",
        HISTORY,
        dynamodb_context(state_erase_request(HISTORY_NAME, CONVERSATION), read=False),
    ),
    (
        "dynamodb:GetItem",
        HISTORY,
        dynamodb_context(state_read_request(HISTORY_NAME, CONVERSATION), read=True),
    ),
]


def test_the_documented_policy_names_this_stacks_resources() -> None:
    text = json.dumps(documented_policy())
    for arn in (WORKER.converse_queue, WORKER.dead_letter_queue, LEDGER, HISTORY, BUCKET):
        assert f'"{arn}' in text, arn


def test_every_operation_the_erasure_adapter_calls_is_evaluated_here() -> None:
    """A call added to worker/adapters/erasure.py fails this until it is evaluated."""
    services = {"query": "dynamodb", "delete_item": "dynamodb", "update_item": "dynamodb"}
    services |= {"get_item": "dynamodb", "list_objects_v2": "s3", "delete_objects": "s3"}
    called = operations_called(ADAPTERS / "erasure.py")
    assert called <= set(services), called - set(services)
    actions = {iam_action(services[op], op) for op in called}
    assert {AUTHORISED_BY.get(a, a) for a in actions} <= {action for action, _, _ in ERASE_CALLS}


@pytest.mark.parametrize(
    ("action", "resource", "context"),
    ERASE_CALLS,
    ids=[f"{action}-{i}" for i, (action, _, _) in enumerate(ERASE_CALLS)],
)
def test_each_call_erase_makes_is_allowed(
    action: str, resource: str, context: Mapping[str, Any]
) -> None:
    assert as_operator(action, resource, context) is Decision.ALLOWED


def update(expression: str, names: Mapping[str, str], **extra: Any) -> dict[str, Any]:
    request = {
        "TableName": HISTORY_NAME,
        "Key": {"pk": {"S": CONVERSATION}, "sk": {"S": "state"}},
        "UpdateExpression": expression,
        "ExpressionAttributeNames": dict(names),
        **extra,
    }
    return dynamodb_context(request, read=False)


def get(key: str, projection: str | None) -> dict[str, Any]:
    request: dict[str, Any] = {"Key": {"pk": {"S": CONVERSATION}, "sk": {"S": key}}}
    if projection is not None:
        request["ProjectionExpression"] = projection
    return dynamodb_context(request, read=True)


OTHER_QUEUE = f"arn:aws:sqs:{STACK.region}:{STACK.account}:other"
#: Calls erase must never be able to make, and why each matters.
REFUSED: list[tuple[str, str, Mapping[str, Any], str]] = [
    ("dynamodb:DeleteItem", HISTORY, TLS, "delete a history message"),
    ("dynamodb:PutItem", HISTORY, TLS, "write a history message"),
    ("dynamodb:BatchWriteItem", HISTORY, TLS, "write or delete history in bulk"),
    ("dynamodb:Query", HISTORY, TLS, "read the history's messages"),
    ("dynamodb:Scan", LEDGER, TLS, "read every conversation's records"),
    (
        "dynamodb:UpdateItem",
        HISTORY,
        update("REMOVE #f", {"#f": "fold_summary"}),
        "remove the writer's fold summary",
    ),
    (
        "dynamodb:UpdateItem",
        HISTORY,
        update("SET #f = :v", {"#f": "fold_summary"}),
        "write the writer's fold summary",
    ),
    (
        "dynamodb:UpdateItem",
        HISTORY,
        update("SET #c = :v", {"#c": "content"}),
        "rewrite a message's content",
    ),
    (
        "dynamodb:UpdateItem",
        HISTORY,
        update("REMOVE #w", {"#w": "window_summary"}, ReturnValues="ALL_OLD"),
        "read the whole item back through an update",
    ),
    ("dynamodb:GetItem", HISTORY, get("state", None), "read the state item whole"),
    ("dynamodb:GetItem", HISTORY, get("state", "fold_summary"), "read the fold summary"),
    ("dynamodb:GetItem", HISTORY, get("msg#000000000001", "content"), "read a message"),
    ("dynamodb:DeleteItem", _table("other"), TLS, "another table"),
    ("s3:DeleteObject", f"{BUCKET}/8c3d6f1e-2b4a-4c5d-9e8f-0a1b2c3d4e5f", TLS, "a producer's"),
    ("s3:DeleteObject", f"{BUCKET}/payloadsX/a.json", TLS, "a look-alike prefix"),
    ("s3:DeleteObject", "arn:aws:s3:::another-bucket/payloads/a.json", TLS, "another bucket"),
    ("s3:PutObject", f"{BUCKET}/{PAYLOAD_KEYS[0]}", TLS, "write a payload"),
    ("s3:DeleteBucket", BUCKET, TLS, "the bucket itself"),
    ("sqs:SendMessage", WORKER.dead_letter_queue, TLS, "write a dead letter"),
    ("sqs:SendMessage", WORKER.converse_queue, TLS, "send a command"),
    ("sqs:ReceiveMessage", WORKER.converse_queue, TLS, "take live commands"),
    ("sqs:DeleteMessage", WORKER.converse_queue, TLS, "drop live commands"),
    ("sqs:ReceiveMessage", WORKER.model_queue, TLS, "the model stage's queue"),
    ("sqs:DeleteMessage", WORKER.compaction_queue, TLS, "the compactor's queue"),
    ("sqs:PurgeQueue", WORKER.dead_letter_queue, TLS, "every dead letter at once"),
    ("sqs:DeleteMessage", OTHER_QUEUE, TLS, "another queue"),
]


@pytest.mark.parametrize(
    ("action", "resource", "context", "why"),
    REFUSED,
    ids=[why.replace(" ", "-") for *_, why in REFUSED],
)
def test_what_erase_must_not_do_is_refused(
    action: str, resource: str, context: Mapping[str, Any], why: str
) -> None:
    assert as_operator(action, resource, context) is not Decision.ALLOWED, why
