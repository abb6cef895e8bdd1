"""The stack's IAM as AWS evaluates it, for one concrete stack (account, region, stack name,
generated bucket name): the template's intrinsic functions resolved, then every call the
worker makes, on the exact ARN it makes it on, put to the policy evaluator — with the bucket
policy in force — and a few calls that must not be allowed.

The ARNs come from what the worker is given, not from the policy: the queue URLs, tables and
bucket in the task definition's environment, the dead-letter queue from the converse queue's
redrive policy (the worker reads it there), and the keys from the code's own key scheme. An
UpdateItem on the history table carries, as IAM's ``dynamodb:Attributes``, the attributes the
code's request builder names for it (tests/infra/history_requests.py), and
``dynamodb:ReturnValues`` ``NONE``, the value a request without the parameter has (DynamoDB
Developer Guide, "Using IAM policy conditions for fine-grained access control").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from tests.infra.cfn_stack import ConcreteStack, queue_arn_from_url
from tests.infra.history_requests import attributes_named, history_updates
from tests.infra.iam_policy import ContextValue, Decision, Principal, Request, evaluate
from tests.infra.test_task_role_matches_the_code import (
    GRANTED_FOR_AWS_ERROR_ANSWERS,
    actions_the_code_calls,
)
from worker.turn.payloads import payload_key

STACK = ConcreteStack()
OTHER_ACCOUNT = "444455556666"
#: An inbound payload at the Extended Client's default key: a bare UUID at the bucket root.
INBOUND_KEY = "8c3d6f1e-2b4a-4c5d-9e8f-0a1b2c3d4e5f"
TLS = {"aws:SecureTransport": "true"}


@dataclass(frozen=True)
class Worker:
    """What the worker is given and derives, as ARNs."""

    converse_queue: str
    dead_letter_queue: str
    model_queue: str
    compaction_queue: str
    history_table: str
    ledger_table: str
    bucket: str
    bucket_name: str
    role: str


def worker_of(stack: ConcreteStack) -> Worker:
    resources = stack.template["Resources"]
    env = stack.task_environment()
    redrive = stack.resolve(resources["ConverseQueue"]["Properties"]["RedrivePolicy"])
    tables = f"arn:aws:dynamodb:{stack.region}:{stack.account}:table"
    return Worker(
        converse_queue=queue_arn_from_url(env["CONVERSE_QUEUE_URL"]),
        dead_letter_queue=redrive["deadLetterTargetArn"],
        model_queue=queue_arn_from_url(env["MODEL_QUEUE_URL"]),
        compaction_queue=queue_arn_from_url(env["COMPACTION_QUEUE_URL"]),
        history_table=f"{tables}/{env['HISTORY_TABLE']}",
        ledger_table=f"{tables}/{env['LEDGER_TABLE']}",
        bucket=f"arn:aws:s3:::{env['PAYLOAD_BUCKET']}",
        bucket_name=env["PAYLOAD_BUCKET"],
        role=stack.resolve({"Fn::GetAtt": ["TaskRole", "Arn"]}),
    )


WORKER = worker_of(STACK)


def task_role_policies(stack: ConcreteStack) -> list[dict[str, Any]]:
    """The task role's own policies and the bucket policy: all that AWS weighs for its calls."""
    resources = stack.template["Resources"]
    role = stack.resolve(resources["TaskRole"]["Properties"])
    bucket_policy = stack.resolve(resources["PayloadBucketPolicy"]["Properties"])
    assert bucket_policy["Bucket"] == WORKER.bucket_name
    return [p["PolicyDocument"] for p in role["Policies"]] + [bucket_policy["PolicyDocument"]]


def as_the_worker(
    action: str, resource: str, context: dict[str, ContextValue] | None = None
) -> Decision:
    request = Request(action, resource, Principal("AWS", WORKER.role), {**TLS, **(context or {})})
    return evaluate(task_role_policies(STACK), request)


def an_update(request: dict[str, Any], return_values: str = "NONE") -> dict[str, ContextValue]:
    """The request context of an UpdateItem: the attributes it names, and ReturnValues."""
    return {
        "dynamodb:Attributes": tuple(sorted(attributes_named(request))),
        "dynamodb:ReturnValues": return_values,
    }


#: An UpdateItem of the stage's own shape on a message item's key, and one more attribute.
MESSAGE_KEY = {"pk": {"S": "matter-1187"}, "sk": {"S": "msg#000000000042"}}


def writing(attribute: str) -> dict[str, Any]:
    return {"Key": MESSAGE_KEY, "UpdateExpression": f"SET {attribute} = :v"}


NO_CONTEXT: Callable[[], dict[str, ContextValue]] = dict

#: Each call the worker makes (IAM action), the ARN it makes it on, and the request context
#: it carries. The history table's UpdateItem: each shape the code's builders make.
WORKER_CALLS: list[tuple[str, Callable[[Worker], str], Callable[[], dict[str, ContextValue]]]] = [
    ("sqs:ReceiveMessage", lambda w: w.converse_queue, NO_CONTEXT),
    ("sqs:DeleteMessage", lambda w: w.converse_queue, NO_CONTEXT),
    ("sqs:ChangeMessageVisibility", lambda w: w.converse_queue, NO_CONTEXT),
    ("sqs:GetQueueAttributes", lambda w: w.converse_queue, NO_CONTEXT),
    ("sqs:GetQueueUrl", lambda w: w.dead_letter_queue, NO_CONTEXT),
    ("sqs:SendMessage", lambda w: w.dead_letter_queue, NO_CONTEXT),
    ("sqs:SendMessage", lambda w: w.model_queue, NO_CONTEXT),
    ("sqs:SendMessage", lambda w: w.compaction_queue, NO_CONTEXT),
    # The start-up checks: each queue the stage sends to is there and reachable.
    ("sqs:GetQueueAttributes", lambda w: w.model_queue, NO_CONTEXT),
    ("sqs:GetQueueAttributes", lambda w: w.compaction_queue, NO_CONTEXT),
    ("dynamodb:Query", lambda w: w.history_table, NO_CONTEXT),
    *(
        (
            "dynamodb:UpdateItem",
            lambda w: w.history_table,
            lambda shape=shape: an_update(history_updates()[shape]),
        )
        for shape in sorted(history_updates())
    ),
    ("dynamodb:UpdateItem", lambda w: w.ledger_table, NO_CONTEXT),
    ("dynamodb:GetItem", lambda w: w.ledger_table, NO_CONTEXT),
    ("dynamodb:BatchWriteItem", lambda w: w.ledger_table, NO_CONTEXT),
    ("s3:GetObject", lambda w: f"{w.bucket}/{INBOUND_KEY}", NO_CONTEXT),
    ("s3:GetObject", lambda w: f"{w.bucket}/producers/{INBOUND_KEY}", NO_CONTEXT),
    ("s3:PutObject", lambda w: f"{w.bucket}/{payload_key('matter-1187', 'c-8f2e')}", NO_CONTEXT),
    ("s3:ListBucket", lambda w: w.bucket, NO_CONTEXT),
]
#: The history table's UpdateItem shapes, in WORKER_CALLS's order, for the ids.
_SHAPES = iter(sorted(history_updates()))
#: A test over each call the worker makes, one case a call.
each_worker_call = pytest.mark.parametrize(
    ("action", "resource_of", "context_of"),
    WORKER_CALLS,
    ids=[
        f"{action}-{i}" + (f"-{next(_SHAPES)}" if context is not NO_CONTEXT else "")
        for i, (action, _, context) in enumerate(WORKER_CALLS)
    ],
)

#: Calls the worker must not be able to make, and why each matters.
FORBIDDEN_CALLS: list[tuple[str, Callable[[Worker], str], str]] = [
    ("s3:GetObject", lambda w: f"arn:aws:s3:::another-bucket/{INBOUND_KEY}", "another bucket"),
    ("s3:ListBucket", lambda _: "arn:aws:s3:::another-bucket", "list another bucket"),
    ("s3:PutObject", lambda w: f"{w.bucket}/{INBOUND_KEY}", "write outside payloads/"),
    ("s3:PutObject", lambda w: f"{w.bucket}/payloadsX/a.json", "a look-alike prefix"),
    ("s3:PutObject", lambda _: "arn:aws:s3:::another-bucket/payloads/a.json", "another bucket"),
    ("s3:DeleteObject", lambda w: f"{w.bucket}/payloads/a.json", "delete a payload"),
    (
        "dynamodb:Query",
        lambda _: f"arn:aws:dynamodb:{STACK.region}:{STACK.account}:table/other-history",
        "another table",
    ),
    ("dynamodb:DeleteItem", lambda w: w.history_table, "delete history"),
    ("dynamodb:PutItem", lambda w: w.history_table, "write history whole"),
    ("dynamodb:BatchWriteItem", lambda w: w.history_table, "batch-write history"),
    ("dynamodb:GetItem", lambda w: w.history_table, "get from history"),
    ("dynamodb:Scan", lambda w: w.history_table, "scan every conversation"),
    ("dynamodb:Query", lambda w: w.ledger_table, "the ledger is only read by key"),
    ("dynamodb:DeleteItem", lambda w: w.ledger_table, "delete a command record"),
    (
        "sqs:SendMessage",
        lambda _: f"arn:aws:sqs:{STACK.region}:{STACK.account}:other-model",
        "another queue",
    ),
    (
        "sqs:SendMessage",
        lambda w: w.model_queue.replace(STACK.account, OTHER_ACCOUNT),
        "the same name in another account",
    ),
    ("sqs:SendMessage", lambda w: w.converse_queue, "feed its own input"),
    ("sqs:ReceiveMessage", lambda w: w.model_queue, "consume its own output"),
    ("sqs:ReceiveMessage", lambda w: w.dead_letter_queue, "consume dead letters"),
    ("sqs:StartMessageMoveTask", lambda w: w.dead_letter_queue, "an operator's redrive"),
]


def test_the_concrete_stack_names_what_the_template_names() -> None:
    """Guard the resolution itself: the ARNs follow the stack name, account and region."""
    assert WORKER.converse_queue == "arn:aws:sqs:eu-west-1:111122223333:mira-converse"
    assert WORKER.dead_letter_queue == "arn:aws:sqs:eu-west-1:111122223333:mira-converse-dlq"
    assert WORKER.history_table == "arn:aws:dynamodb:eu-west-1:111122223333:table/mira-history"
    assert WORKER.ledger_table == "arn:aws:dynamodb:eu-west-1:111122223333:table/mira-ledger"
    assert WORKER.model_queue == "arn:aws:sqs:eu-west-1:111122223333:mira-model"
    assert WORKER.bucket == f"arn:aws:s3:::{STACK.bucket}"


def test_every_action_the_code_calls_is_evaluated_here() -> None:
    evaluated = {action for action, _, _ in WORKER_CALLS}
    assert evaluated == actions_the_code_calls() | GRANTED_FOR_AWS_ERROR_ANSWERS


@each_worker_call
def test_the_task_role_allows_each_call_the_worker_makes(
    action: str,
    resource_of: Callable[[Worker], str],
    context_of: Callable[[], dict[str, ContextValue]],
) -> None:
    assert as_the_worker(action, resource_of(WORKER), context_of()) is Decision.ALLOWED


@pytest.mark.parametrize(
    ("action", "resource_of", "why"),
    FORBIDDEN_CALLS,
    ids=[why for _, _, why in FORBIDDEN_CALLS],
)
def test_the_task_role_refuses_calls_outside_the_stage(
    action: str, resource_of: Callable[[Worker], str], why: str
) -> None:
    assert as_the_worker(action, resource_of(WORKER)) is not Decision.ALLOWED, why


#: A fold claim of the code's, with the stage's own anchor.
FOLD_CLAIM = history_updates()["fold claim with the anchor, snapshot with its summary"]

#: UpdateItems on the history table the role must refuse: the request context, and why.
FORBIDDEN_UPDATES: list[tuple[dict[str, ContextValue], str]] = [
    (an_update(writing("content")), "rewrite a message's content"),
    (an_update(writing("role")), "turn a question into an answer"),
    (an_update(writing("seq")), "renumber a message"),
    (an_update(writing("model_usage")), "forge the model's bill"),
    (an_update(writing("folded_through")), "move the compactor's fold mark"),
    (an_update(writing("fold_summary")), "rewrite the compactor's summary"),
    (
        an_update({**FOLD_CLAIM, "UpdateExpression": FOLD_CLAIM["UpdateExpression"] + ", x = :x"}),
        "the stage's own write with one attribute more",
    ),
    (
        an_update(
            {
                "Key": {"pk": {"S": "matter-1187"}, "sk": {"S": "cmd#c-8f2e"}},
                "UpdateExpression": "SET #s = :s, lease_until = :u",
                "ExpressionAttributeNames": {"#s": "status"},
            }
        ),
        "the previous release's ledger records",
    ),
    (an_update(FOLD_CLAIM, return_values="ALL_OLD"), "return the whole item before"),
    (an_update(FOLD_CLAIM, return_values="ALL_NEW"), "return the whole item after"),
]


@pytest.mark.parametrize(
    "context", [c for c, _ in FORBIDDEN_UPDATES], ids=[why for _, why in FORBIDDEN_UPDATES]
)
def test_the_task_role_refuses_an_update_of_the_history_beyond_the_stages_attributes(
    context: dict[str, ContextValue],
) -> None:
    assert as_the_worker("dynamodb:UpdateItem", WORKER.history_table, context) is not (
        Decision.ALLOWED
    )


def test_the_same_updates_are_the_ledgers_own_to_make() -> None:
    """Guard the refusals above: on the stage's own ledger the same requests pass."""
    for context, why in FORBIDDEN_UPDATES:
        assert as_the_worker("dynamodb:UpdateItem", WORKER.ledger_table, context) is (
            Decision.ALLOWED
        ), why


def test_the_bucket_refuses_the_worker_over_plain_http() -> None:
    key = f"{WORKER.bucket}/{INBOUND_KEY}"
    assert as_the_worker("s3:GetObject", key, {"aws:SecureTransport": "false"}) is (
        Decision.EXPLICIT_DENY
    )


# ---------------------------------------------------------------------------- execution role


def execution_role_policies(stack: ConcreteStack) -> list[dict[str, Any]]:
    role = stack.resolve(stack.template["Resources"]["TaskExecutionRole"]["Properties"])
    return [p["PolicyDocument"] for p in role["Policies"]]


def as_the_agent(stack: ConcreteStack, action: str, resource: str) -> Decision:
    agent = Principal("AWS", stack.resolve({"Fn::GetAtt": ["TaskExecutionRole", "Arn"]}))
    return evaluate(execution_role_policies(stack), Request(action, resource, agent, TLS))


LAYER_ACTIONS = [
    "ecr:BatchCheckLayerAvailability",
    "ecr:GetDownloadUrlForLayer",
    "ecr:BatchGetImage",
]
DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize(
    ("image", "repository"),
    [
        (
            "111122223333.dkr.ecr.eu-west-1.amazonaws.com/mira-converse-worker:0.1.0",
            "arn:aws:ecr:eu-west-1:111122223333:repository/mira-converse-worker",
        ),
        (
            f"111122223333.dkr.ecr.eu-west-1.amazonaws.com/mira-converse-worker:0.1.0@{DIGEST}",
            "arn:aws:ecr:eu-west-1:111122223333:repository/mira-converse-worker",
        ),
        (
            f"999988887777.dkr.ecr.us-east-2.amazonaws.com/platform/mira/worker@{DIGEST}",
            "arn:aws:ecr:us-east-2:999988887777:repository/platform/mira/worker",
        ),
    ],
    ids=["tag", "tag-and-digest", "other-registry-nested-name-digest"],
)
def test_the_execution_role_pulls_layers_from_the_images_repository_only(
    image: str, repository: str
) -> None:
    stack = ConcreteStack(parameters={"ContainerImage": image})
    for action in LAYER_ACTIONS:
        assert as_the_agent(stack, action, repository) is Decision.ALLOWED, action
        for other in (
            f"{repository}-other",
            f"{repository}/nested",
            repository.replace("ecr:", "ecr:x"),
        ):
            assert as_the_agent(stack, action, other) is not Decision.ALLOWED, (action, other)
    assert as_the_agent(stack, "ecr:GetAuthorizationToken", "*") is Decision.ALLOWED


def test_the_execution_role_writes_to_its_own_log_group_only() -> None:
    group = STACK.resolve({"Fn::GetAtt": ["WorkerLogGroup", "Arn"]}).removesuffix(":*")
    stream = f"{group}:log-stream:converse/worker/0123456789abcdef"
    assert as_the_agent(STACK, "logs:PutLogEvents", stream) is Decision.ALLOWED
    other = stream.replace(group.rsplit(":", 1)[-1], "another-group")
    assert as_the_agent(STACK, "logs:PutLogEvents", other) is not Decision.ALLOWED
    assert as_the_agent(STACK, "s3:GetObject", f"{WORKER.bucket}/{INBOUND_KEY}") is not (
        Decision.ALLOWED
    )


# ---------------------------------------------------------------------------- who may assume


@pytest.mark.parametrize("role", ["TaskRole", "TaskExecutionRole"])
@pytest.mark.parametrize(
    ("account", "allowed"),
    [(STACK.account, True), (OTHER_ACCOUNT, False)],
    ids=["this-account", "another-account"],
)
def test_only_ecs_on_behalf_of_this_account_may_assume_the_roles(
    role: str, account: str, allowed: bool
) -> None:
    """The confused-deputy guard: ECS assuming the role for another account's task fails."""
    trust = STACK.resolve(
        STACK.template["Resources"][role]["Properties"]["AssumeRolePolicyDocument"]
    )
    request = Request(
        "sts:AssumeRole",
        STACK.resolve({"Fn::GetAtt": [role, "Arn"]}),
        Principal("Service", "ecs-tasks.amazonaws.com"),
        {
            "aws:SourceAccount": account,
            "aws:SourceArn": f"arn:aws:ecs:{STACK.region}:{account}:task/mira/0123456789abcdef",
        },
    )
    assert (evaluate([trust], request) is Decision.ALLOWED) is allowed


# ---------------------------------------------------------------- a customer managed key

KEY = f"arn:aws:kms:{STACK.region}:{STACK.account}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
OTHER_KEY = KEY.replace("1234abcd", "5678efab")
KEYED = ConcreteStack(parameters={**STACK.parameters, "KmsKeyArn": KEY})
OTHER_REGION = "us-east-1"

#: What KMS each call of the worker needs once its queue, table or bucket is under the key,
#: and through which service: SQS (Developer Guide, "Amazon SQS key management": a send asks
#: for a data key and checks it, a receive checks it), DynamoDB (KMS Developer Guide, "How
#: Amazon DynamoDB uses AWS KMS": the caller's Decrypt of the table key, reads and writes
#: alike) and S3 (a one-part PutObject generates a data key, GetObject decrypts one). Calls on
#: no message, item or object (delete, visibility, attributes, URL, list) need none.
KMS_NEEDS: dict[str, tuple[str, frozenset[str]]] = {
    "sqs:SendMessage": ("sqs", frozenset({"kms:GenerateDataKey", "kms:Decrypt"})),
    "sqs:ReceiveMessage": ("sqs", frozenset({"kms:Decrypt"})),
    "dynamodb:Query": ("dynamodb", frozenset({"kms:Decrypt"})),
    "dynamodb:GetItem": ("dynamodb", frozenset({"kms:Decrypt"})),
    "dynamodb:UpdateItem": ("dynamodb", frozenset({"kms:Decrypt"})),
    "dynamodb:BatchWriteItem": ("dynamodb", frozenset({"kms:Decrypt"})),
    "s3:PutObject": ("s3", frozenset({"kms:GenerateDataKey"})),
    "s3:GetObject": ("s3", frozenset({"kms:Decrypt"})),
}
#: The KMS actions and services the worker's calls need, together.
KMS_USES = sorted(
    {(service, action) for service, actions in KMS_NEEDS.values() for action in actions}
)


def via(service: str, region: str = STACK.region) -> dict[str, str]:
    """The request context of a KMS call a service makes for its caller."""
    return {**TLS, "kms:ViaService": f"{service}.{region}.amazonaws.com"}


def as_the_worker_on_the_key(
    stack: ConcreteStack, action: str, context: dict[str, str], key: str = KEY
) -> Decision:
    role = Principal("AWS", stack.resolve({"Fn::GetAtt": ["TaskRole", "Arn"]}))
    return evaluate(task_role_policies(stack), Request(action, key, role, context))


def test_every_call_that_touches_a_message_item_or_object_has_its_kms_needs_named() -> None:
    """The table above covers the worker's calls: one that reads or writes data cannot be
    left out of it (the others are named here as needing nothing)."""
    without_data = {
        "sqs:DeleteMessage",
        "sqs:ChangeMessageVisibility",
        "sqs:GetQueueAttributes",
        "sqs:GetQueueUrl",
        "s3:ListBucket",
    }
    assert set(KMS_NEEDS) | without_data == {action for action, _, _ in WORKER_CALLS}
    assert not set(KMS_NEEDS) & without_data


@pytest.mark.parametrize(("service", "action"), KMS_USES, ids=[f"{s}-{a}" for s, a in KMS_USES])
def test_with_a_key_the_role_uses_it_through_each_service_in_the_stacks_region(
    service: str, action: str
) -> None:
    assert as_the_worker_on_the_key(KEYED, action, via(service)) is Decision.ALLOWED


def test_with_a_key_the_role_grants_no_kms_action_no_call_needs() -> None:
    """DynamoDB makes its table key itself: the worker's calls never ask it for a data key."""
    for service in ("sqs", "dynamodb", "s3"):
        needed = {a for s, a in KMS_USES if s == service}
        for action in {"kms:GenerateDataKey", "kms:Decrypt"} - needed:
            assert as_the_worker_on_the_key(KEYED, action, via(service)) is not (
                Decision.ALLOWED
            ), (service, action)


@pytest.mark.parametrize(("service", "action"), KMS_USES, ids=[f"{s}-{a}" for s, a in KMS_USES])
def test_with_a_key_the_role_cannot_use_it_directly_elsewhere_or_another_key(
    service: str, action: str
) -> None:
    assert as_the_worker_on_the_key(KEYED, action, TLS) is not Decision.ALLOWED, "direct"
    assert as_the_worker_on_the_key(KEYED, action, via(service, OTHER_REGION)) is not (
        Decision.ALLOWED
    ), "the same service in another region"
    assert as_the_worker_on_the_key(KEYED, action, via("secretsmanager")) is not (
        Decision.ALLOWED
    ), "another service"
    assert as_the_worker_on_the_key(KEYED, action, via(service), OTHER_KEY) is not (
        Decision.ALLOWED
    ), "another key"


@pytest.mark.parametrize(
    "action",
    ["kms:Encrypt", "kms:ReEncryptFrom", "kms:CreateGrant", "kms:DescribeKey", "kms:DisableKey"],
)
def test_with_a_key_the_role_can_do_nothing_else_with_it(action: str) -> None:
    for service in ("sqs", "dynamodb", "s3"):
        assert as_the_worker_on_the_key(KEYED, action, via(service)) is not Decision.ALLOWED


def test_without_a_key_the_role_has_no_kms_permission_at_all() -> None:
    """SSE-SQS, DynamoDB's AWS managed key and SSE-S3 ask nothing of the caller's IAM."""
    for service, action in KMS_USES:
        assert as_the_worker_on_the_key(STACK, action, via(service)) is not Decision.ALLOWED


@each_worker_call
def test_with_a_key_the_role_still_allows_each_call_the_worker_makes(
    action: str,
    resource_of: Callable[[Worker], str],
    context_of: Callable[[], dict[str, ContextValue]],
) -> None:
    keyed_worker = worker_of(KEYED)
    assert keyed_worker == WORKER
    context = {**TLS, **context_of()}
    request = Request(
        action, resource_of(keyed_worker), Principal("AWS", keyed_worker.role), context
    )
    assert evaluate(task_role_policies(KEYED), request) is Decision.ALLOWED
