"""The task role grants exactly the AWS actions the stage's code can call: no more, no less.
``s3:ListBucket`` is both called (the start-up's HeadBucket) and needed for AWS's error
answers (a 404, not a 403, for a missing payload).

The calls are read from the source of the adapters (the only modules that hold an AWS
client): every ``self._client.<operation>(`` becomes an IAM action. Batch operations are
authorised by their single-message action, as IAM defines them. Where the code fixes the
resource (the key prefix it writes under), the grant's resource is pinned to it too.

On DynamoDB the grant is pinned table by table: the history table gets exactly what the
modules that runtime.py gives the history table call, the ledger exactly what the ledger's
module calls; and the history table's UpdateItem names exactly the attributes the code's
request builders name, no more (tests/infra/history_requests.py builds each shape).

With KmsKeyArn the role also grants the KMS actions SQS, DynamoDB and S3 make with the worker's
credentials: those are the services' calls, not the code's, and nothing else is added.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from tests.infra.cfn_conditions import with_condition
from tests.infra.cfn_stack import ConcreteStack
from tests.infra.cfn_yaml import load_template
from tests.infra.history_requests import attributes_named, history_updates
from worker.turn.payloads import KEY_PREFIX, payload_key

WORKER = Path(__file__).resolve().parents[2] / "worker"
ADAPTERS = WORKER / "adapters"
RUNTIME = WORKER / "app" / "runtime.py"
SERVICE_OF_MODULE = {
    "sqs.py": "sqs",
    "dynamodb.py": "dynamodb",
    "ledger.py": "dynamodb",
    "legacy_ledger.py": "dynamodb",
    "s3.py": "s3",
    "probes.py": "dynamodb",
}
#: The DynamoDB adapters by the class runtime.py makes of each, and the setting naming the
#: table it is given there (test_runtime_gives_each_dynamodb_adapter_its_table checks it).
DYNAMODB_ADAPTERS = {
    "DynamoHistoryStore": ("dynamodb.py", "history_table"),
    "LegacyRecords": ("legacy_ledger.py", "history_table"),
    "TableProbe": ("probes.py", "history_table"),
    "DynamoCommandLedger": ("ledger.py", "ledger_table"),
}
STACK = ConcreteStack()
#: Each table's ARN in the concrete stack, by the setting that names it.
TABLE_ARN = {
    "history_table": STACK.joined()["HistoryTableArn"],
    "ledger_table": STACK.values()["LedgerTable.Arn"],
}
#: IAM has no separate action for these: the single-message action authorises the batch, and
#: s3:GetObject authorises HeadObject (S3's "Actions, resources, and condition keys").
BATCH_ACTIONS = {
    "sqs:SendMessageBatch": "sqs:SendMessage",
    "sqs:DeleteMessageBatch": "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
    "s3:HeadObject": "s3:GetObject",
}
#: Granted for AWS's error answers too (the start-up's HeadBucket calls it): without
#: s3:ListBucket on the bucket, S3 answers a GetObject of a missing key with 403 AccessDenied
#: instead of 404 NoSuchKey, and the worker would retry (403 is retryable) a command whose
#: payload is gone instead of rejecting it with its reason.
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


#: Modules whose calls take their clients as arguments (several services each): their calls
#: are read from the operation each wraps in ``aws_call("<service>.<Operation>")``.
CALLS_NAMED_BY_AWS_CALL = ("reachability.py",)
#: Actions IAM names otherwise than the operation.
ACTION_OF_OPERATION = {"s3:HeadBucket": "s3:ListBucket"}


def operations_named(path: Path) -> set[str]:
    """The IAM actions of the ``aws_call("<service>.<Operation>")`` calls of one module."""
    actions = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "aws_call"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            service, operation = str(node.args[0].value).split(".", 1)
            action = f"{service}:{operation}"
            actions.add(ACTION_OF_OPERATION.get(action, action))
    return actions


def actions_the_code_calls() -> set[str]:
    actions = set()
    for module, service in SERVICE_OF_MODULE.items():
        actions |= {iam_action(service, op) for op in operations_called(ADAPTERS / module)}
    for module in CALLS_NAMED_BY_AWS_CALL:
        actions |= operations_named(ADAPTERS / module)
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
    key = "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    stack = ConcreteStack(parameters={**STACK.parameters, "KmsKeyArn": key})
    for action in GRANTED_FOR_THE_KEY:
        assert resources_granted(action, stack) == {key}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def statements(stack: ConcreteStack = STACK) -> list[dict[str, Any]]:
    """The task role's statements, resolved for ``stack``."""
    (policy,) = stack.resolve(stack.template["Resources"]["TaskRole"]["Properties"]["Policies"])
    return list(policy["PolicyDocument"]["Statement"])


def resources_granted(action: str, stack: ConcreteStack = STACK) -> set[str]:
    """The ARNs the role grants ``action`` on, for ``stack``."""
    return {
        resource
        for statement in statements(stack)
        if action in as_list(statement["Action"])
        for resource in as_list(statement["Resource"])
    }


def actions_granted_on(arn: str) -> set[str]:
    return {
        action
        for statement in statements()
        if arn in as_list(statement["Resource"])
        for action in as_list(statement["Action"])
    }


def test_the_worker_writes_objects_only_where_the_role_lets_it_put() -> None:
    """The code's one key scheme is under KEY_PREFIX, and PutObject is granted there only."""
    assert payload_key("matter-1187", "c-8f2e").startswith(KEY_PREFIX)
    assert KEY_PREFIX.endswith("/")
    bucket = f"arn:aws:s3:::{STACK.bucket}"
    assert resources_granted("s3:PutObject") == {f"{bucket}/{KEY_PREFIX}*"}


def test_the_worker_reads_payloads_at_any_key_and_lists_nothing_but_its_bucket() -> None:
    bucket = f"arn:aws:s3:::{STACK.bucket}"
    assert resources_granted("s3:GetObject") == {f"{bucket}/*"}
    assert resources_granted("s3:ListBucket") == {bucket}


# ---------------------------------------------------------------------------- table by table


def tables_given_in_runtime() -> dict[str, str]:
    """``Class(client, settings.<table>, …)`` in runtime.py: class -> the setting named."""
    given = {}
    for node in ast.walk(ast.parse(RUNTIME.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id in DYNAMODB_ADAPTERS and len(node.args) >= 2:
            table = node.args[1]
            if isinstance(table, ast.Attribute) and table.attr.endswith("_table"):
                given[node.func.id] = table.attr
    return given


def test_runtime_gives_each_dynamodb_adapter_its_table() -> None:
    assert tables_given_in_runtime() == {
        name: table for name, (_, table) in DYNAMODB_ADAPTERS.items()
    }


@pytest.mark.parametrize("table", sorted(TABLE_ARN))
def test_the_role_grants_on_each_table_exactly_what_the_code_calls_on_it(table: str) -> None:
    """The history table: Query (the page, the previous release's records, the probe) and
    UpdateItem (the fold claim and its release, the anchor). The ledger: its calls. No
    GetItem, PutItem, BatchWriteItem or DeleteItem on the history table."""
    called = set()
    for module, setting in DYNAMODB_ADAPTERS.values():
        if setting == table:
            called |= {iam_action("dynamodb", op) for op in operations_called(ADAPTERS / module)}
    assert actions_granted_on(TABLE_ARN[table]) == called
    if table == "history_table":
        assert called == {"dynamodb:Query", "dynamodb:UpdateItem"}


def granted_attributes() -> set[str]:
    (update,) = [
        s
        for s in statements()
        if s["Resource"] == TABLE_ARN["history_table"] and s["Action"] == "dynamodb:UpdateItem"
    ]
    return set(update["Condition"]["ForAllValues:StringEquals"]["dynamodb:Attributes"])


@pytest.mark.parametrize("shape", sorted(history_updates()))
def test_each_history_update_of_the_code_names_only_attributes_the_role_grants(
    shape: str,
) -> None:
    assert attributes_named(history_updates()[shape]) <= granted_attributes()


def test_the_role_grants_no_attribute_the_code_does_not_name() -> None:
    """The list is the union of what the request builders name, the key included."""
    named = set().union(*(attributes_named(r) for r in history_updates().values()))
    assert named == granted_attributes()
    assert {"pk", "sk"} <= named


@pytest.mark.parametrize(
    ("request_", "named"),
    [
        ({"Key": {"pk": {}, "sk": {}}}, {"pk", "sk"}),
        ({"UpdateExpression": "SET a = :a, b.c[0] = :b REMOVE d"}, {"a", "b", "d"}),
        (
            {
                "UpdateExpression": "SET #n = if_not_exists(#n, :z) + :one",
                "ExpressionAttributeNames": {"#n": "count"},
            },
            {"count"},
        ),
        (
            {"ConditionExpression": "attribute_exists(v) AND size(w) > :n OR NOT x IN (:a, :b)"},
            {"v", "w", "x"},
        ),
        ({"ConditionExpression": "y BETWEEN :low AND :high AND begins_with(z, :p)"}, {"y", "z"}),
        ({"UpdateExpression": "ADD s :s DELETE t :t"}, {"s", "t"}),
    ],
    ids=["key", "paths", "placeholders", "functions", "between", "add-delete"],
)
def test_the_attribute_reader_finds_each_top_level_name_of_a_request(
    request_: dict[str, Any], named: set[str]
) -> None:
    """Guard the reader: names behind placeholders, paths to their first element, never a
    value, a function or a keyword."""
    assert attributes_named(request_) == named


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
