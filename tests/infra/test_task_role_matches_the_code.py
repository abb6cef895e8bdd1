"""The task role grants exactly the AWS actions the stage's code can call: no more, no less,
except the one action AWS needs granted for its error answers (``s3:ListBucket``).

The calls are read from the source of the adapters (the only modules that hold an AWS
client): every ``self._client.<operation>(`` becomes an IAM action. Batch operations are
authorised by their single-message action, as IAM defines them. Where the code fixes the
resource (the key prefix it writes under), the grant's resource is pinned to it too.

With KmsKeyArn the role also grants the KMS actions SQS, DynamoDB and S3 make with the worker's
credentials: those are the services' calls, not the code's, and nothing else is added.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from tests.infra.cfn_conditions import with_condition
from tests.infra.cfn_yaml import load_template, reference_name
from worker.turn.payloads import KEY_PREFIX, payload_key

ADAPTERS = Path(__file__).resolve().parents[2] / "worker" / "adapters"
SERVICE_OF_MODULE = {
    "sqs.py": "sqs",
    "dynamodb.py": "dynamodb",
    "ledger.py": "dynamodb",
    "s3.py": "s3",
    "probes.py": "dynamodb",
}
#: IAM has no separate action for these: the single-message action authorises the batch, and
#: s3:GetObject authorises HeadObject (S3's "Actions, resources, and condition keys").
BATCH_ACTIONS = {
    "sqs:SendMessageBatch": "sqs:SendMessage",
    "sqs:DeleteMessageBatch": "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
    "s3:HeadObject": "s3:GetObject",
}
#: Granted though never called: without s3:ListBucket on the bucket, S3 answers a GetObject
#: of a missing key with 403 AccessDenied instead of 404 NoSuchKey, and the worker would retry
#: (403 is retryable) a command whose payload is gone instead of rejecting it with its reason.
GRANTED_FOR_AWS_ERROR_ANSWERS = {"s3:ListBucket"}
#: Granted with KmsKeyArn only, on the key only: what the services ask KMS for on the
#: worker's behalf (test_task_role_as_aws_evaluates_it.py evaluates them call by call).
GRANTED_FOR_THE_KEY = {"kms:GenerateDataKey", "kms:Decrypt"}


def without_a_key() -> dict[str, Any]:
    return with_condition(load_template(), "HasKmsKey", False)


def with_a_key() -> dict[str, Any]:
    return with_condition(load_template(), "HasKmsKey", True)


def operations_called(path: Path) -> set[str]:
    """``self._client.<name>(…)`` calls in one module (or ``self._receive_client``: any
    attribute named ``…_client``), as boto operation names (snake_case)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = node.func.value
        if (
            isinstance(owner, ast.Attribute)
            and owner.attr.endswith("_client")
            and isinstance(owner.value, ast.Name)
            and owner.value.id == "self"
        ):
            names.add(node.func.attr)
    return names


def iam_action(service: str, operation: str) -> str:
    action = f"{service}:{''.join(part.title() for part in operation.split('_'))}"
    return BATCH_ACTIONS.get(action, action)


def actions_the_code_calls() -> set[str]:
    actions = set()
    for module, service in SERVICE_OF_MODULE.items():
        actions |= {iam_action(service, op) for op in operations_called(ADAPTERS / module)}
    return actions


def actions_the_role_grants(template: dict[str, Any]) -> set[str]:
    role = template["Resources"]["TaskRole"]["Properties"]
    granted = set()
    for policy in role["Policies"]:
        for statement in policy["PolicyDocument"]["Statement"]:
            action = statement["Action"]
            granted |= set(action if isinstance(action, list) else [action])
    return granted


def test_only_the_adapters_hold_aws_clients() -> None:
    for module in SERVICE_OF_MODULE:
        assert operations_called(ADAPTERS / module), module
    others = [
        p
        for p in ADAPTERS.parent.rglob("*.py")
        if p.parent != ADAPTERS and p.name != "bootstrap.py"
    ]
    assert not [p for p in others if operations_called(p)]


def test_the_scan_sees_every_kind_of_call() -> None:
    """Guard the scanner itself: it finds the calls it must, in the form they take."""
    actions = actions_the_code_calls()
    assert {"sqs:ReceiveMessage", "dynamodb:Query", "s3:PutObject"} <= actions


def test_the_task_role_grants_exactly_what_the_code_calls() -> None:
    assert not GRANTED_FOR_AWS_ERROR_ANSWERS & actions_the_code_calls()
    assert (
        actions_the_role_grants(without_a_key())
        == actions_the_code_calls() | GRANTED_FOR_AWS_ERROR_ANSWERS
    )


def test_with_a_key_the_role_adds_the_keys_data_key_actions_and_nothing_else() -> None:
    keyed = with_a_key()
    assert not GRANTED_FOR_THE_KEY & actions_the_code_calls()
    assert (
        actions_the_role_grants(keyed)
        == actions_the_code_calls() | GRANTED_FOR_AWS_ERROR_ANSWERS | GRANTED_FOR_THE_KEY
    )
    for action in GRANTED_FOR_THE_KEY:
        assert resources_granted(keyed, action) == {"KmsKeyArn"}


def resources_granted(template: dict[str, Any], action: str) -> set[str]:
    role = template["Resources"]["TaskRole"]["Properties"]
    found = set()
    for policy in role["Policies"]:
        for statement in policy["PolicyDocument"]["Statement"]:
            actions = statement["Action"]
            if action in (actions if isinstance(actions, list) else [actions]):
                resources = statement["Resource"]
                found |= {
                    reference_name(resource)
                    for resource in (resources if isinstance(resources, list) else [resources])
                }
    return found


def test_the_worker_writes_objects_only_where_the_role_lets_it_put() -> None:
    """The code's one key scheme is under KEY_PREFIX, and PutObject is granted there only."""
    assert payload_key("matter-1187", "c-8f2e").startswith(KEY_PREFIX)
    assert KEY_PREFIX.endswith("/")
    assert resources_granted(without_a_key(), "s3:PutObject") == {
        f"PayloadBucket.Arn/{KEY_PREFIX}*"
    }


def test_the_worker_reads_payloads_at_any_key_and_lists_nothing_but_its_bucket() -> None:
    template = without_a_key()
    assert resources_granted(template, "s3:GetObject") == {"PayloadBucket.Arn/*"}
    assert resources_granted(template, "s3:ListBucket") == {"PayloadBucket.Arn"}


@pytest.mark.parametrize(
    ("service", "operation", "action"),
    [
        ("sqs", "delete_message_batch", "sqs:DeleteMessage"),
        ("sqs", "get_queue_url", "sqs:GetQueueUrl"),
        ("dynamodb", "update_item", "dynamodb:UpdateItem"),
    ],
)
def test_operations_map_to_iam_actions(service: str, operation: str, action: str) -> None:
    assert iam_action(service, operation) == action


def test_the_operators_dead_letter_actions_are_not_the_tasks() -> None:
    """`worker dlq` runs with an operator's credentials: SQS's message move task is not
    something the worker itself ever starts, so the task role does not grant it."""
    operator = {iam_action("sqs", op) for op in operations_called(ADAPTERS / "sqs_admin.py")}
    assert {"sqs:StartMessageMoveTask", "sqs:ListMessageMoveTasks"} <= operator
    assert not {"sqs:StartMessageMoveTask", "sqs:ListMessageMoveTasks"} & (
        actions_the_role_grants(with_a_key())
    )
