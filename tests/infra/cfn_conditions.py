"""The template's conditions, evaluated as CloudFormation evaluates them.

:func:`render` gives the template one stack would get for a set of parameter values: every
condition evaluated, each ``Fn::If`` replaced by the branch it takes, ``AWS::NoValue`` removed
(a property, or a list item, that is not there), and the resources and outputs whose
``Condition`` is false left out. :func:`with_condition` does the same for one condition only
(:func:`with_conditions` for some), so a test can pin one choice (the stack with or without a
key) and still read every other intrinsic as written. Nothing else is resolved: ``Ref``,
``Fn::Sub`` and the rest stay.

The condition functions known are those a template's ``Conditions`` may use: ``Fn::Equals``,
``Fn::Not``, ``Fn::And``, ``Fn::Or`` and ``Condition``, over parameters and literals. Anything
else raises: a rendering must know every value it decides on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: What ``{"Ref": "AWS::NoValue"}`` renders to before its holder drops it.
_NO_VALUE = object()


def parameter_values(template: Mapping[str, Any], given: Mapping[str, str]) -> dict[str, str]:
    """Each parameter's value as a string: ``given``, else its default; one without either
    raises, as CloudFormation refuses the stack."""
    values = {}
    for name, parameter in template.get("Parameters", {}).items():
        if name in given:
            values[name] = str(given[name])
        elif "Default" in parameter:
            values[name] = str(parameter["Default"])
    unknown = set(given) - set(template.get("Parameters", {}))
    if unknown:
        raise KeyError(f"not parameters of the template: {sorted(unknown)}")
    return values


def evaluate_conditions(
    template: Mapping[str, Any], parameters: Mapping[str, str]
) -> dict[str, bool]:
    """Every condition of the template, for these parameter values (see
    :func:`parameter_values`)."""
    definitions = template.get("Conditions", {})
    decided: dict[str, bool] = {}

    def condition(name: str) -> bool:
        if name not in decided:
            decided[name] = _truth(definitions[name], condition, parameters)
        return decided[name]

    for name in definitions:
        condition(name)
    return decided


def rules_refusing(template: Mapping[str, Any], given: Mapping[str, str]) -> list[str]:
    """The template's ``Rules`` whose assertion fails for these parameter values (a rule
    applies when its ``RuleCondition``, if any, holds), as CloudFormation refuses the stack.
    Rules are evaluated with the conditions' functions (``Fn::Equals``, ``Fn::Not``,
    ``Fn::And``, ``Fn::Or``), over parameters and literals."""
    parameters = parameter_values(template, given)

    def no_condition(name: str) -> bool:
        raise ValueError(f"a rule names the condition {name!r}: rules cannot")

    refusing = []
    for name, rule in template.get("Rules", {}).items():
        applies = rule.get("RuleCondition", True)
        if applies is not True and not _truth(applies, no_condition, parameters):
            continue
        if not all(_truth(a["Assert"], no_condition, parameters) for a in rule["Assertions"]):
            refusing.append(name)
    return refusing


def render(
    template: Mapping[str, Any], parameters: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The template with every condition decided for ``parameters`` (defaults elsewhere)."""
    values = parameter_values(template, parameters or {})
    return _decided(template, evaluate_conditions(template, values))


def with_condition(template: Mapping[str, Any], name: str, value: bool) -> dict[str, Any]:
    """The template with the one condition ``name`` decided as ``value``; every other
    condition, and every other intrinsic, stays as written."""
    return with_conditions(template, {name: value})


def with_conditions(template: Mapping[str, Any], decided: Mapping[str, bool]) -> dict[str, Any]:
    """The template with the conditions of ``decided`` decided; every other condition, and
    every other intrinsic, stays as written."""
    unknown = set(decided) - set(template.get("Conditions", {}))
    if unknown:
        raise KeyError(f"the template has no condition {sorted(unknown)}")
    return _decided(template, decided)


def render_value(value: Any, conditions: Mapping[str, bool]) -> Any:
    """One fragment of a template with the ``Fn::If`` of ``conditions`` decided."""
    rendered = _render(value, conditions)
    if rendered is _NO_VALUE:
        raise ValueError(f"the whole fragment renders to AWS::NoValue: {value!r}")
    return rendered


def _decided(template: Mapping[str, Any], conditions: Mapping[str, bool]) -> dict[str, Any]:
    document = dict(template)
    for section in ("Resources", "Outputs"):
        if section not in document:
            continue
        kept = {}
        for logical_id, entry in document[section].items():
            name = entry.get("Condition")
            if name in conditions:
                if not conditions[name]:
                    continue
                entry = {key: item for key, item in entry.items() if key != "Condition"}
            kept[logical_id] = render_value(entry, conditions)
        document[section] = kept
    if "Conditions" in document:
        document["Conditions"] = {
            name: definition
            for name, definition in document["Conditions"].items()
            if name not in conditions
        }
    return document


def _render(value: Any, conditions: Mapping[str, bool]) -> Any:
    if isinstance(value, list):
        items = [_render(item, conditions) for item in value]
        return [item for item in items if item is not _NO_VALUE]
    if not isinstance(value, dict):
        return value
    if value == {"Ref": "AWS::NoValue"}:
        return _NO_VALUE
    if set(value) == {"Fn::If"}:
        name, when_true, when_false = value["Fn::If"]
        if name in conditions:
            return _render(when_true if conditions[name] else when_false, conditions)
        # Left as written, an Fn::If keeps its AWS::NoValue branch for CloudFormation.
        return {"Fn::If": [name, _kept(when_true, conditions), _kept(when_false, conditions)]}
    rendered = {key: _render(item, conditions) for key, item in value.items()}
    return {key: item for key, item in rendered.items() if item is not _NO_VALUE}


def _kept(branch: Any, conditions: Mapping[str, bool]) -> Any:
    rendered = _render(branch, conditions)
    return {"Ref": "AWS::NoValue"} if rendered is _NO_VALUE else rendered


def _truth(definition: Any, condition: Any, parameters: Mapping[str, str]) -> bool:
    if not isinstance(definition, dict) or len(definition) != 1:
        raise ValueError(f"not a condition function: {definition!r}")
    ((function, argument),) = definition.items()
    if function == "Condition":
        return bool(condition(argument))
    if function == "Fn::Not":
        (inner,) = argument
        return not _truth(inner, condition, parameters)
    if function == "Fn::And":
        return all(_truth(inner, condition, parameters) for inner in argument)
    if function == "Fn::Or":
        return any(_truth(inner, condition, parameters) for inner in argument)
    if function == "Fn::Equals":
        left, right = (_operand(item, parameters) for item in argument)
        return left == right
    raise NotImplementedError(f"{function} is not evaluated in conditions here")


def _operand(value: Any, parameters: Mapping[str, str]) -> str:
    if isinstance(value, dict):
        if set(value) == {"Ref"} and value["Ref"] in parameters:
            return parameters[value["Ref"]]
        raise NotImplementedError(f"only parameters and literals are compared here: {value!r}")
    return str(value)
