"""A small IAM policy evaluator: would AWS allow this call, given these policy documents?

It follows AWS's evaluation logic for one account (identity policies, resource policies and
role trust policies together): a matching ``Deny`` statement wins; otherwise a matching
``Allow`` allows; otherwise the request is implicitly denied. A statement matches when its
action, resource, principal and every condition match:

- ``Action`` / ``NotAction``: ``service:Name`` patterns, case-insensitive, with ``*`` and ``?``;
- ``Resource`` / ``NotResource``: ARN patterns, case-sensitive, with ``*`` and ``?`` (a ``*``
  may span ``:`` and ``/``, as it does in IAM); a statement with neither (a trust policy) is
  about the policy's own resource and matches any;
- ``Principal``: ``"*"``, or ``{"Service": …}`` / ``{"AWS": …}`` naming the caller (an account
  id or ``arn:…:root`` names every principal of that account); a statement without one (an
  identity policy) applies to its own caller;
- ``Condition``: ``StringEquals``, ``StringLike``, ``ArnEquals`` and ``ArnLike`` (the same
  operator in AWS: both take ``*`` and ``?``, matched segment by segment, so a ``*`` never
  crosses a ``:``) and ``Bool``; every operator and every key must match, any one value of a
  key is enough; a key absent from the request does not match, unless the operator ends in
  ``IfExists`` (then it matches). ``ForAllValues:`` before one of them takes a multivalued
  key (a list in the request's context, e.g. ``dynamodb:Attributes``): every value of it
  must match one of the policy's, and a key absent or empty matches (as in AWS: hence
  ``ForAllValues`` alone never requires the key).

What it does not model it refuses rather than guesses: other condition operators, the set
operator ``ForAnyValue:``, a multivalued key under a single-valued operator,
``NotPrincipal``, policy variables (``${aws:username}``). Also
outside it: SCPs, permission boundaries, session policies and cross-account access (where both
accounts must allow), none of which this stage's templates use.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: The condition operators this evaluator knows (each also with ``IfExists``, and under
#: ``ForAllValues:``).
CONDITION_OPERATORS = frozenset({"StringEquals", "StringLike", "ArnEquals", "ArnLike", "Bool"})
FOR_ALL_VALUES = "ForAllValues:"
IF_EXISTS = "IfExists"


class Decision(enum.Enum):
    ALLOWED = "allowed"
    EXPLICIT_DENY = "explicitly denied"
    IMPLICIT_DENY = "implicitly denied"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who calls: ``kind`` is ``"AWS"`` (an IAM ARN) or ``"Service"`` (a service principal)."""

    kind: str
    identifier: str


@dataclass(frozen=True, slots=True)
class Request:
    """One API call as IAM sees it: the action, the ARN it acts on, who asks, and the request
    context's condition keys (``aws:SecureTransport``, ``aws:SourceAccount``, …; a
    multivalued key, such as ``dynamodb:Attributes``, as a tuple of its values)."""

    action: str
    resource: str
    principal: Principal | None = None
    context: Mapping[str, str | tuple[str, ...]] = field(default_factory=dict)


def evaluate(policies: Iterable[Mapping[str, Any]], request: Request) -> Decision:
    """The decision AWS reaches for ``request`` under all of ``policies`` together."""
    allowed = False
    for policy in policies:
        for statement in _as_list(policy["Statement"]):
            if not _statement_matches(statement, request):
                continue
            effect = statement["Effect"]
            if effect == "Deny":
                return Decision.EXPLICIT_DENY
            if effect != "Allow":
                raise ValueError(f"Effect must be Allow or Deny, not {effect!r}")
            allowed = True
    return Decision.ALLOWED if allowed else Decision.IMPLICIT_DENY


def is_allowed(policies: Iterable[Mapping[str, Any]], request: Request) -> bool:
    return evaluate(policies, request) is Decision.ALLOWED


def wildcard_match(pattern: str, value: str, *, case_sensitive: bool) -> bool:
    """IAM's wildcards: ``*`` any run of characters (none included), ``?`` exactly one."""
    if "${" in pattern:
        raise NotImplementedError(f"policy variables are not evaluated: {pattern!r}")
    regex = "".join(
        ".*" if char == "*" else "." if char == "?" else re.escape(char) for char in pattern
    )
    flags = re.DOTALL if case_sensitive else re.DOTALL | re.IGNORECASE
    return re.fullmatch(regex, value, flags) is not None


def arn_like(pattern: str, arn: str) -> bool:
    """``ArnLike`` and ``ArnEquals``: each of the six ``:``-separated ARN parts matched on its
    own. IAM's reference gives the two operators one behaviour: ``ArnEquals`` takes wildcards
    too, it is not a string comparison."""
    pattern_parts = pattern.split(":", 5)
    arn_parts = arn.split(":", 5)
    if len(pattern_parts) != 6 or len(arn_parts) != 6:
        return False
    return all(
        wildcard_match(p, a, case_sensitive=True)
        for p, a in zip(pattern_parts, arn_parts, strict=True)
    )


def _statement_matches(statement: Mapping[str, Any], request: Request) -> bool:
    if "NotPrincipal" in statement:
        raise NotImplementedError("NotPrincipal is not evaluated")
    return (
        _action_matches(statement, request.action)
        and _resource_matches(statement, request.resource)
        and _principal_matches(statement, request.principal)
        and _conditions_match(statement.get("Condition", {}), request.context)
    )


def _action_matches(statement: Mapping[str, Any], action: str) -> bool:
    if ("Action" in statement) == ("NotAction" in statement):
        raise ValueError(f"a statement has exactly one of Action, NotAction: {statement!r}")
    if "Action" in statement:
        return _any_match(statement["Action"], action, case_sensitive=False)
    return not _any_match(statement["NotAction"], action, case_sensitive=False)


def _resource_matches(statement: Mapping[str, Any], resource: str) -> bool:
    if "Resource" in statement and "NotResource" in statement:
        raise ValueError(f"a statement has at most one of Resource, NotResource: {statement!r}")
    if "Resource" in statement:
        return _any_match(statement["Resource"], resource, case_sensitive=True)
    if "NotResource" in statement:
        return not _any_match(statement["NotResource"], resource, case_sensitive=True)
    return True


def _principal_matches(statement: Mapping[str, Any], principal: Principal | None) -> bool:
    if "Principal" not in statement:
        return True
    named = statement["Principal"]
    if named == "*":
        return True
    if principal is None:
        return False
    if not isinstance(named, Mapping):
        raise ValueError(f"Principal must be '*' or a mapping: {named!r}")
    unknown = set(named) - {"AWS", "Service"}
    if unknown:
        raise NotImplementedError(f"principal kinds not evaluated: {sorted(unknown)}")
    candidates = _as_list(named.get(principal.kind, []))
    if principal.kind == "Service":
        return principal.identifier in candidates
    return any(_names_aws_principal(candidate, principal.identifier) for candidate in candidates)


def _names_aws_principal(candidate: str, arn: str) -> bool:
    if candidate == "*":
        return True
    account = arn.split(":")[4] if arn.count(":") >= 5 else None
    if re.fullmatch(r"\d{12}", candidate):
        return account == candidate
    if candidate.endswith(":root"):
        return account == candidate.split(":")[4]
    return candidate == arn


def _conditions_match(
    conditions: Mapping[str, Any], context: Mapping[str, str | tuple[str, ...]]
) -> bool:
    by_key = {key.lower(): value for key, value in context.items()}
    for operator, tests in conditions.items():
        for_all = operator.startswith(FOR_ALL_VALUES)
        base = operator.removeprefix(FOR_ALL_VALUES)
        if_exists = base.endswith(IF_EXISTS)
        base = base.removesuffix(IF_EXISTS)
        if base not in CONDITION_OPERATORS:
            raise NotImplementedError(f"condition operator {operator!r} is not evaluated")
        for key, wanted in tests.items():
            wanted_values = [str(w) for w in _as_list(wanted)]
            actual = by_key.get(key.lower())
            if for_all:
                values = () if actual is None else _as_values(actual)
                if not all(
                    any(_condition_value_matches(base, w, value) for w in wanted_values)
                    for value in values
                ):
                    return False
                continue
            if actual is None:
                if if_exists:
                    continue
                return False
            if not isinstance(actual, str):
                raise NotImplementedError(
                    f"{key!r} has many values: only {FOR_ALL_VALUES} takes it here"
                )
            if not any(_condition_value_matches(base, w, actual) for w in wanted_values):
                return False
    return True


def _as_values(value: str | tuple[str, ...]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else value


def _condition_value_matches(operator: str, wanted: str, actual: str) -> bool:
    if operator == "StringEquals":
        return wanted == actual
    if operator == "StringLike":
        return wildcard_match(wanted, actual, case_sensitive=True)
    if operator in ("ArnEquals", "ArnLike"):
        return arn_like(wanted, actual)
    return wanted.lower() == actual.lower()  # Bool


def _any_match(patterns: Any, value: str, *, case_sensitive: bool) -> bool:
    return any(
        wildcard_match(pattern, value, case_sensitive=case_sensitive)
        for pattern in _as_list(patterns)
    )


def _as_list(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list) else [value]
