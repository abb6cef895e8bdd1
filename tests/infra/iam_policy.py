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
  key is enough; a key absent from the request does not match;
- ``…IfExists`` on each of those: a key absent from the request matches, a present one is
  compared as without the suffix (IAM User Guide, "IAM JSON policy elements: Condition
  operators", "...IfExists condition operators");
- ``ForAllValues:`` on each of those, for a multivalued key (a request value that is a list or
  tuple, such as ``dynamodb:Attributes``): it matches when every value in the request matches
  at least one value of the policy, and also when the request has no value for the key at
  all, absent or empty (IAM User Guide, "Single-valued vs. multivalued context keys": "It also
  returns true if there are no context keys in the request").

What it does not model it refuses rather than guesses: other condition operators (the negated
ones, ``Null``, numbers, dates), ``ForAnyValue:`` (no policy here uses it), a set operator
with ``IfExists``, a set operator on a single-valued key or a plain operator on a multivalued
one (AWS's reference warns against both), ``NotPrincipal``, policy variables
(``${aws:username}``). Also outside it: SCPs, permission boundaries, session policies and
cross-account access (where both accounts must allow), none of which this stage's templates
use.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: The condition operators this evaluator knows (each also with ``IfExists``, and with the
#: ``ForAllValues:`` set operator for a multivalued key).
CONDITION_OPERATORS = frozenset({"StringEquals", "StringLike", "ArnEquals", "ArnLike", "Bool"})
IF_EXISTS = "IfExists"
FOR_ALL_VALUES = "ForAllValues:"

#: A request context's value: one string, or the strings of a multivalued key.
ContextValue = str | tuple[str, ...] | list[str]


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
    context: Mapping[str, ContextValue] = field(default_factory=dict)


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


def _conditions_match(conditions: Mapping[str, Any], context: Mapping[str, ContextValue]) -> bool:
    by_key = {key.lower(): value for key, value in context.items()}
    for written, tests in conditions.items():
        for key, wanted in tests.items():
            if not _condition_matches(written, [str(w) for w in _as_list(wanted)], by_key, key):
                return False
    return True


def _condition_matches(
    written: str, wanted: list[str], context: Mapping[str, ContextValue], key: str
) -> bool:
    """One operator's test of one key: plain, ``…IfExists``, or ``ForAllValues:…``."""
    for_all = written.startswith(FOR_ALL_VALUES)
    operator = written.removeprefix(FOR_ALL_VALUES)
    if_exists = operator.endswith(IF_EXISTS)
    operator = operator.removesuffix(IF_EXISTS)
    if operator not in CONDITION_OPERATORS or ":" in operator:
        raise NotImplementedError(f"condition operator {written!r} is not evaluated")
    if for_all and if_exists:
        raise NotImplementedError(f"a set operator with IfExists is not evaluated: {written!r}")
    actual = context.get(key.lower())
    multivalued = isinstance(actual, list | tuple)
    if for_all:
        if actual is not None and not multivalued:
            raise NotImplementedError(f"{written!r} on the single-valued key {key!r}")
        # Every value the request has matches one of the policy's; none at all matches too.
        return all(
            any(_condition_value_matches(operator, w, a) for w in wanted) for a in actual or ()
        )
    if multivalued:
        raise NotImplementedError(f"{written!r} on the multivalued key {key!r}: use a set operator")
    if actual is None:
        return if_exists
    return any(_condition_value_matches(operator, w, str(actual)) for w in wanted)


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
