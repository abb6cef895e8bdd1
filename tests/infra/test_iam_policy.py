"""The policy evaluator the IAM checks rely on: each rule of AWS's evaluation logic it claims
to follow, and a refusal for each thing it does not model."""

from __future__ import annotations

from typing import Any

import pytest

from tests.infra.iam_policy import (
    Decision,
    Principal,
    Request,
    arn_like,
    evaluate,
    is_allowed,
    wildcard_match,
)

BUCKET = "arn:aws:s3:::payloads-bucket"
QUEUE = "arn:aws:sqs:eu-west-1:111122223333:mira-converse"


def policy(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements)}


def allow(action: Any, resource: Any = "*", **extra: Any) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": action, "Resource": resource, **extra}


def deny(action: Any, resource: Any = "*", **extra: Any) -> dict[str, Any]:
    return {"Effect": "Deny", "Action": action, "Resource": resource, **extra}


# ---------------------------------------------------------------------------- wildcards


@pytest.mark.parametrize(
    ("pattern", "value", "case_sensitive", "matches"),
    [
        ("s3:GetObject", "s3:GetObject", True, True),
        ("s3:Get*", "s3:GetObjectAcl", True, True),
        ("s3:Get*", "s3:PutObject", True, False),
        ("s3:*Object", "s3:Object", True, True),  # * matches nothing too
        ("s3:?etObject", "s3:GetObject", True, True),
        ("s3:?etObject", "s3:etObject", True, False),  # ? is exactly one character
        ("s3:getobject", "s3:GetObject", False, True),
        ("s3:getobject", "s3:GetObject", True, False),
        (f"{BUCKET}/payloads/*", f"{BUCKET}/payloads/a/b.json", True, True),  # * spans /
        (f"{BUCKET}/payloads/*", f"{BUCKET}/payloadsX/a.json", True, False),
        (f"{BUCKET}/payloads/*", f"{BUCKET}/Payloads/a.json", True, False),
        ("arn:aws:sqs:*", QUEUE, True, True),  # * spans : in a Resource
        ("arn:aws:s3:::payloads-bucket", f"{BUCKET}/key", True, False),
        ("a.b", "axb", True, False),  # regex characters are literal
        ("*", "anything:at/all", True, True),
    ],
)
def test_wildcards_match_as_iam_matches_them(
    pattern: str, value: str, case_sensitive: bool, matches: bool
) -> None:
    assert wildcard_match(pattern, value, case_sensitive=case_sensitive) is matches


@pytest.mark.parametrize(
    ("pattern", "arn", "matches"),
    [
        (
            "arn:aws:ecs:eu-west-1:111122223333:*",
            "arn:aws:ecs:eu-west-1:111122223333:task/c/1",
            True,
        ),
        (
            "arn:aws:ecs:eu-west-1:111122223333:*",
            "arn:aws:ecs:eu-west-1:444455556666:task/c/1",
            False,
        ),
        ("arn:aws:ecs:*:111122223333:*", "arn:aws:ecs:us-east-1:111122223333:task/c/1", True),
        # In ArnLike a * stays within its segment: it cannot swallow the account.
        ("arn:aws:ecs:eu-west-1*:*", "arn:aws:ecs:eu-west-1:444455556666:task/c/1", False),
        ("arn:aws:ecs:eu-west-1:111122223333:*", "not-an-arn", False),
    ],
)
def test_arn_like_matches_each_arn_segment_on_its_own(
    pattern: str, arn: str, matches: bool
) -> None:
    assert arn_like(pattern, arn) is matches


# ---------------------------------------------------------------------------- decisions


def test_nothing_is_allowed_without_an_allow() -> None:
    request = Request("s3:GetObject", f"{BUCKET}/k")
    assert evaluate([], request) is Decision.IMPLICIT_DENY
    assert evaluate([policy(allow("s3:PutObject", f"{BUCKET}/*"))], request) is (
        Decision.IMPLICIT_DENY
    )


def test_an_allow_on_the_action_and_resource_allows() -> None:
    assert (
        evaluate(
            [policy(allow(["s3:GetObject"], f"{BUCKET}/*"))], Request("s3:GetObject", f"{BUCKET}/k")
        )
        is Decision.ALLOWED
    )


def test_an_explicit_deny_wins_over_any_allow_in_any_policy() -> None:
    identity = policy(allow("s3:*", "*"))
    resource_policy = policy(deny("s3:GetObject", f"{BUCKET}/secret/*", Principal="*"))
    assert evaluate([identity, resource_policy], Request("s3:GetObject", f"{BUCKET}/secret/x")) is (
        Decision.EXPLICIT_DENY
    )
    assert is_allowed([identity, resource_policy], Request("s3:GetObject", f"{BUCKET}/open/x"))


def test_not_action_covers_every_action_but_the_named_ones() -> None:
    document = policy({"Effect": "Allow", "NotAction": "s3:Delete*", "Resource": "*"})
    assert is_allowed([document], Request("s3:GetObject", f"{BUCKET}/k"))
    assert not is_allowed([document], Request("s3:DeleteObject", f"{BUCKET}/k"))
    assert not is_allowed([document], Request("S3:deleteobject", f"{BUCKET}/k"))


def test_not_resource_covers_every_resource_but_the_named_ones() -> None:
    document = policy({"Effect": "Allow", "Action": "s3:GetObject", "NotResource": f"{BUCKET}/x/*"})
    assert is_allowed([document], Request("s3:GetObject", f"{BUCKET}/y/1"))
    assert not is_allowed([document], Request("s3:GetObject", f"{BUCKET}/x/1"))


def test_actions_compare_case_insensitively_and_resources_case_sensitively() -> None:
    document = policy(allow("SQS:receivemessage", QUEUE))
    assert is_allowed([document], Request("sqs:ReceiveMessage", QUEUE))
    assert not is_allowed([document], Request("sqs:ReceiveMessage", QUEUE.upper()))


# ---------------------------------------------------------------------------- principals


def trust(**condition: Any) -> dict[str, Any]:
    statement: dict[str, Any] = {
        "Effect": "Allow",
        "Principal": {"Service": "ecs-tasks.amazonaws.com"},
        "Action": "sts:AssumeRole",
    }
    if condition:
        statement["Condition"] = condition
    return policy(statement)


def test_a_trust_policy_admits_only_the_principal_it_names() -> None:
    role = "arn:aws:iam::111122223333:role/worker"
    ecs = Principal("Service", "ecs-tasks.amazonaws.com")
    lambda_ = Principal("Service", "lambda.amazonaws.com")
    assert is_allowed([trust()], Request("sts:AssumeRole", role, ecs))
    assert not is_allowed([trust()], Request("sts:AssumeRole", role, lambda_))
    assert not is_allowed([trust()], Request("sts:AssumeRole", role))


@pytest.mark.parametrize(
    ("named", "caller", "matches"),
    [
        ("*", "arn:aws:iam::444455556666:role/x", True),
        ("111122223333", "arn:aws:iam::111122223333:role/x", True),
        ("arn:aws:iam::111122223333:root", "arn:aws:iam::111122223333:role/x", True),
        ("111122223333", "arn:aws:iam::444455556666:role/x", False),
        ("arn:aws:iam::111122223333:role/x", "arn:aws:iam::111122223333:role/y", False),
    ],
)
def test_an_aws_principal_names_a_role_or_every_principal_of_an_account(
    named: str, caller: str, matches: bool
) -> None:
    document = policy(allow("s3:GetObject", f"{BUCKET}/*", Principal={"AWS": named}))
    request = Request("s3:GetObject", f"{BUCKET}/k", Principal("AWS", caller))
    assert is_allowed([document], request) is matches


# ---------------------------------------------------------------------------- conditions


def test_every_condition_must_hold_and_a_missing_key_does_not_match() -> None:
    role = "arn:aws:iam::111122223333:role/worker"
    document = trust(
        ArnLike={"aws:SourceArn": "arn:aws:ecs:eu-west-1:111122223333:*"},
        StringEquals={"aws:SourceAccount": "111122223333"},
    )
    ecs = Principal("Service", "ecs-tasks.amazonaws.com")
    task = "arn:aws:ecs:eu-west-1:111122223333:task/mira/0123"
    ours = {"aws:SourceAccount": "111122223333", "aws:SourceArn": task}
    assert is_allowed([document], Request("sts:AssumeRole", role, ecs, ours))
    other_account = {**ours, "aws:SourceAccount": "444455556666"}
    assert not is_allowed([document], Request("sts:AssumeRole", role, ecs, other_account))
    assert not is_allowed(
        [document], Request("sts:AssumeRole", role, ecs, {"aws:SourceAccount": "111122223333"})
    )


ECS = "arn:aws:ecs:eu-west-1:111122223333"


@pytest.mark.parametrize("operator", ["ArnEquals", "ArnLike"])
@pytest.mark.parametrize(
    ("pattern", "source", "matches"),
    [
        # Wildcards: ArnEquals once compared strings here, and refused these two.
        (f"{ECS}:task/*", f"{ECS}:task/a", True),
        ("arn:aws:ecs:eu-west-?:111122223333:*", f"{ECS}:task/a", True),
        # Segment by segment: a * does not swallow the account.
        ("arn:aws:ecs:*:task/a", f"{ECS}:task/a", False),
        (f"{ECS}:task/a", f"{ECS}:task/a", True),
        (f"{ECS}:task/a", f"{ECS}:task/b", False),
    ],
)
def test_arn_equals_and_arn_like_are_one_operator_wildcards_included(
    operator: str, pattern: str, source: str, matches: bool
) -> None:
    """AWS's condition operator reference: ArnEquals and ArnLike behave the same."""
    document = trust(**{operator: {"aws:SourceArn": pattern}})
    ecs = Principal("Service", "ecs-tasks.amazonaws.com")
    request = Request(
        "sts:AssumeRole", "arn:aws:iam::111122223333:role/worker", ecs, {"aws:SourceArn": source}
    )
    assert is_allowed([document], request) is matches


def test_condition_keys_are_case_insensitive_and_any_listed_value_is_enough() -> None:
    document = policy(
        allow(
            "s3:GetObject", f"{BUCKET}/*", Condition={"StringLike": {"AWS:UserAgent": ["a*", "b*"]}}
        )
    )
    assert is_allowed(
        [document], Request("s3:GetObject", f"{BUCKET}/k", context={"aws:useragent": "boto"})
    )
    assert not is_allowed(
        [document], Request("s3:GetObject", f"{BUCKET}/k", context={"aws:useragent": "curl"})
    )


def test_a_deny_on_plain_http_denies_only_plain_http() -> None:
    identity = policy(allow("s3:GetObject", f"{BUCKET}/*"))
    tls_only = policy(
        deny(
            "s3:*",
            [BUCKET, f"{BUCKET}/*"],
            Principal="*",
            Condition={"Bool": {"aws:SecureTransport": "false"}},
        )
    )
    caller = Principal("AWS", "arn:aws:iam::111122223333:role/worker")
    over_tls = Request("s3:GetObject", f"{BUCKET}/k", caller, {"aws:SecureTransport": "true"})
    over_http = Request("s3:GetObject", f"{BUCKET}/k", caller, {"aws:SecureTransport": "false"})
    assert evaluate([identity, tls_only], over_tls) is Decision.ALLOWED
    assert evaluate([identity, tls_only], over_http) is Decision.EXPLICIT_DENY


TABLE = "arn:aws:dynamodb:eu-west-1:111122223333:table/mira-history"


@pytest.mark.parametrize(
    ("attributes", "allowed"),
    [
        (("pk", "sk", "window_summary"), True),
        (("pk",), True),  # a subset
        ((), True),  # empty: every one of no values matches, as in AWS
        (None, True),  # absent: the same (so ForAllValues alone never requires the key)
        (("pk", "sk", "fold_summary"), False),  # one value outside the list is enough
    ],
)
def test_for_all_values_needs_every_value_of_a_multivalued_key_in_the_list(
    attributes: tuple[str, ...] | None, allowed: bool
) -> None:
    document = policy(
        allow(
            "dynamodb:UpdateItem",
            TABLE,
            Condition={
                "ForAllValues:StringEquals": {"dynamodb:Attributes": ["pk", "sk", "window_summary"]}
            },
        )
    )
    context = {} if attributes is None else {"dynamodb:Attributes": attributes}
    assert is_allowed([document], Request("dynamodb:UpdateItem", TABLE, context=context)) is allowed


@pytest.mark.parametrize(
    ("context", "allowed"),
    [
        ({}, True),  # absent: IfExists matches
        ({"dynamodb:ReturnValues": "UPDATED_OLD"}, True),
        ({"dynamodb:ReturnValues": "ALL_OLD"}, False),  # present: compared as without it
    ],
)
def test_an_if_exists_operator_matches_an_absent_key_and_compares_a_present_one(
    context: dict[str, str], allowed: bool
) -> None:
    document = policy(
        allow(
            "dynamodb:UpdateItem",
            TABLE,
            Condition={"StringEqualsIfExists": {"dynamodb:ReturnValues": ["NONE", "UPDATED_OLD"]}},
        )
    )
    assert is_allowed([document], Request("dynamodb:UpdateItem", TABLE, context=context)) is allowed


def test_a_multivalued_key_under_a_single_valued_operator_is_refused_not_guessed() -> None:
    single = {"StringEquals": {"dynamodb:Attributes": "pk"}}
    document = policy(allow("dynamodb:UpdateItem", TABLE, Condition=single))
    request = Request("dynamodb:UpdateItem", TABLE, context={"dynamodb:Attributes": ("pk",)})
    with pytest.raises(NotImplementedError):
        evaluate([document], request)


# ---------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "statement",
    [
        allow("s3:GetObject", "*", Condition={"StringNotEquals": {"aws:SourceAccount": "1"}}),
        allow("s3:GetObject", "*", Condition={"ForAnyValue:StringLike": {"aws:TagKeys": "a*"}}),
        allow("s3:GetObject", "arn:aws:s3:::b/${aws:username}/*"),
        {"Effect": "Allow", "NotPrincipal": {"AWS": "1"}, "Action": "s3:*", "Resource": "*"},
        allow("s3:GetObject", "*", Principal={"Federated": "cognito-identity.amazonaws.com"}),
    ],
    ids=["negated-operator", "set-operator", "policy-variable", "not-principal", "federated"],
)
def test_what_the_evaluator_does_not_model_is_refused_not_guessed(
    statement: dict[str, Any],
) -> None:
    request = Request(
        "s3:GetObject",
        "arn:aws:s3:::b/k",
        Principal("AWS", "arn:aws:iam::111122223333:role/x"),
        {"aws:SourceAccount": "1"},
    )
    with pytest.raises(NotImplementedError):
        evaluate([policy(statement)], request)


@pytest.mark.parametrize(
    "statement",
    [
        {"Effect": "Allow", "Resource": "*"},
        {"Effect": "Allow", "Action": "s3:*", "NotAction": "s3:Get*", "Resource": "*"},
        {"Effect": "Maybe", "Action": "s3:*", "Resource": "*"},
    ],
    ids=["no-action", "action-and-not-action", "unknown-effect"],
)
def test_a_malformed_statement_is_an_error(statement: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"Action|Effect"):
        evaluate([policy(statement)], Request("s3:GetObject", "arn:aws:s3:::b/k"))
