"""Without KmsKeyArn the stage is the stage it was before the parameter existed, and the key
changes nothing but encryption.

Two checks, for each template (converse-stage.yaml, pipeline-resources.yaml,
converse-resources.yaml):

- **before the key**: the templates, their Fn::If on HasKmsKey decided as false, render every
  resource of the template before the key came in (``tests/data/converse-stage.before-kms.yaml``,
  the template at commit db26453, kept as a file so that a shallow clone checks it too) property
  for property as it did. That template was one stack; its table and the model and compaction
  queues and their alarms are now the pipeline template's (:data:`MOVED_TO_THE_PIPELINE`), the
  rest the converse template's. What changed since for other reasons is named in
  :data:`CHANGED_SINCE` and :data:`ADDED_SINCE`, each with its reason;
- **only encryption**: rendered with the key and without, a template differs in the
  encryption properties of its queues, tables and bucket, the task role's statements on the
  key and the key's output, and nothing else.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.infra.cfn_conditions import (
    evaluate_conditions,
    parameter_values,
    with_condition,
    with_conditions,
)
from tests.infra.cfn_outputs import PIPELINE_RESOURCES
from tests.infra.cfn_yaml import (
    OWN_RESOURCES_TEMPLATE_PATH,
    PIPELINE_TEMPLATE_PATH,
    REPO_ROOT,
    TEMPLATE_PATH,
    load_cfn_yaml,
)

#: The template before the key came in.
BASELINE = REPO_ROOT / "tests" / "data" / "converse-stage.before-kms.yaml"
TEMPLATES = {
    "converse-stage": TEMPLATE_PATH,
    "pipeline-resources": PIPELINE_TEMPLATE_PATH,
    "converse-resources": OWN_RESOURCES_TEMPLATE_PATH,
}
#: The baseline's resources that live in the pipeline template now: other stages' own.
MOVED_TO_THE_PIPELINE = PIPELINE_RESOURCES
#: What later changes added, unrelated to the key: resource or parameter, and why.
ADDED_SINCE = {
    "UnexplainedCacheMissAlarm": "the bill, observed: unexplained cache misses",
    "UnexplainedCacheMissAlarmPercent": "that alarm's threshold",
    "Dashboard": "the operator's dashboard",
    "ModelId": "the model the model stage calls (MODEL_ID)",
    "ModelPrefixTokens": "the model stage's own prefix (MODEL_PREFIX_TOKENS)",
    "ModelContextTokens": "the model's context window, over ModelId's (MODEL_CONTEXT_TOKENS)",
    "LedgerTable": "the stage's own command ledger (LEDGER_TABLE)",
    "LedgerLegacyReads": "reading the previous release's records while the ledger moves",
    "HistoryTableArn": "the history table, joined, not created",
    "ModelQueueArn": "the model queue, joined, not created",
    "CompactionQueueArn": "the compaction queue, joined, not created",
    "PayloadBucketName": "a payload bucket joined instead of created",
}
#: Parameters changed since, unrelated to the key: parameter, and why.
CHANGED_SINCE = {
    "PromptCacheMinTokens": "optional: 0 leaves the minimum to ModelId's row of the model table",
    "HistoryCacheTtl": "its description says the worker refuses 1h for a model without it",
    "SourceRetentionSeconds": "the converse queue's alone: the others are the pipeline's",
    "PayloadExpirationDays": "at least the dead-letter queues' 14 days, as the docs require",
}
#: Resource attributes and properties changed since, unrelated to the key, and why.
RESOURCES_CHANGED_SINCE = {
    **{
        f"{queue}.{name}": "named under NamePrefix in a stack of its own (.fifo by ModelQueueType)"
        for queue in MOVED_TO_THE_PIPELINE
        if queue.endswith("Queue")
        for name in ["QueueName"]
    },
    **{
        f"{queue} {policy}": "retained: other stages' work in flight; resource import needs it"
        for queue in MOVED_TO_THE_PIPELINE
        if queue.endswith("Queue")
        for policy in ("DeletionPolicy", "UpdateReplacePolicy")
    },
    "HistoryTable.TableName": "named under NamePrefix in a stack of its own",
    "TaskRole.Policies": "the ledger's table, the joined ARNs, the history's attribute condition",
    "TaskDefinition.ContainerDefinitions": "the ledger, the model settings, the joined URLs",
}
#: The properties that encrypt, each where it may differ with the key.
ENCRYPTION = {
    "AWS::SQS::Queue": {"SqsManagedSseEnabled", "KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds"},
    "AWS::DynamoDB::Table": {"SSESpecification"},
    "AWS::S3::Bucket": {"BucketEncryption"},
}


def without_a_key(template: dict[str, Any]) -> dict[str, Any]:
    if "HasKmsKey" in template.get("Conditions", {}):
        return with_condition(template, "HasKmsKey", False)
    return template


def as_the_baselines_stack_gets_it(
    path: Any, baseline: dict[str, Any], *, key: str | None = None
) -> dict[str, Any]:
    """A template as the baseline's stack gets it: every condition but HasAlarmTopic decided
    (the baseline has only that one), PromptCacheMinTokens the baseline's default, the
    pipeline's names under ``mira``; with ``key``, KmsKeyArn given."""
    template = load_cfn_yaml(path)
    given = {"KmsKeyArn": key} if key else {}
    taken = template["Parameters"]
    if "PromptCacheMinTokens" in taken:
        given["PromptCacheMinTokens"] = str(
            baseline["Parameters"]["PromptCacheMinTokens"]["Default"]
        )
    if "NamePrefix" in taken:
        given["NamePrefix"] = "mira"
    decided = evaluate_conditions(template, parameter_values(template, given))
    decided.pop("HasAlarmTopic", None)
    return with_conditions(template, decided)


@pytest.fixture(scope="module")
def baseline() -> dict[str, Any]:
    return without_a_key(load_cfn_yaml(BASELINE))


@pytest.fixture(scope="module")
def current(baseline: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each template without a key, as the baseline's stack gets it."""
    return {
        name: as_the_baselines_stack_gets_it(path, baseline) for name, path in TEMPLATES.items()
    }


def where_now(current: dict[str, dict[str, Any]], logical_id: str) -> dict[str, Any]:
    home = "pipeline-resources" if logical_id in MOVED_TO_THE_PIPELINE else "converse-stage"
    return dict(current[home]["Resources"][logical_id])


def test_every_resource_of_the_baseline_is_in_one_template_of_the_same_type(
    baseline: dict[str, Any], current: dict[str, dict[str, Any]]
) -> None:
    for logical_id, before in baseline["Resources"].items():
        assert where_now(current, logical_id)["Type"] == before["Type"], logical_id
    stage, pipeline = current["converse-stage"], current["pipeline-resources"]
    assert not MOVED_TO_THE_PIPELINE & set(stage["Resources"])
    added = set(stage["Resources"]) | set(pipeline["Resources"])
    added -= set(baseline["Resources"])
    assert added == {name for name in ADDED_SINCE if name in added}
    assert added == {"UnexplainedCacheMissAlarm", "Dashboard", "LedgerTable"}


def test_every_resource_renders_property_for_property_as_before(
    baseline: dict[str, Any], current: dict[str, dict[str, Any]]
) -> None:
    """Without the key, as before the key came in, but for what is named as changed since
    (and every name there names a real change)."""
    differences = set()
    for logical_id, before in baseline["Resources"].items():
        now = where_now(current, logical_id)
        for attribute in sorted(set(before) | set(now)):
            if attribute != "Properties" and before.get(attribute) != now.get(attribute):
                differences.add(f"{logical_id} {attribute}")
        properties_before, properties_now = before.get("Properties", {}), now.get("Properties", {})
        for name in sorted(set(properties_before) | set(properties_now)):
            if properties_before.get(name) != properties_now.get(name):
                differences.add(f"{logical_id}.{name}")
    assert differences == set(RESOURCES_CHANGED_SINCE)


def test_the_stages_own_new_table_is_encrypted_as_the_table_was(
    baseline: dict[str, Any], current: dict[str, dict[str, Any]]
) -> None:
    ledger = current["converse-stage"]["Resources"]["LedgerTable"]["Properties"]
    history = baseline["Resources"]["HistoryTable"]["Properties"]
    assert ledger["SSESpecification"] == history["SSESpecification"]


def test_the_parameters_are_as_before_but_for_the_key_and_what_is_named(
    baseline: dict[str, Any], current: dict[str, dict[str, Any]]
) -> None:
    stage = current["converse-stage"]["Parameters"]
    moved = {"ModelVisibilityTimeout", "CompactionVisibilityTimeout"}
    assert moved <= set(current["pipeline-resources"]["Parameters"])
    added = set(stage) - set(baseline["Parameters"]) - set(ADDED_SINCE)
    assert added == {"KmsKeyArn"}
    assert stage["KmsKeyArn"]["Default"] == ""
    apart = {"KmsKeyArn", *ADDED_SINCE, *CHANGED_SINCE}
    kept = {k: v for k, v in stage.items() if k not in apart}
    assert kept == {
        k: v for k, v in baseline["Parameters"].items() if k not in apart and k not in moved
    }
    for name in CHANGED_SINCE:
        assert stage[name] != baseline["Parameters"][name], f"{name} is named as changed"


# ---------------------------------------------------------------- the key, alone


KEY = "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_the_key_changes_only_encryption_its_grants_and_its_output(
    name: str, baseline: dict[str, Any]
) -> None:
    path = TEMPLATES[name]
    without = as_the_baselines_stack_gets_it(path, baseline)
    keyed = as_the_baselines_stack_gets_it(path, baseline, key=KEY)
    assert set(keyed["Resources"]) == set(without["Resources"])
    encrypted = set()
    for logical_id, resource in without["Resources"].items():
        with_key = keyed["Resources"][logical_id]
        assert {k: v for k, v in with_key.items() if k != "Properties"} == {
            k: v for k, v in resource.items() if k != "Properties"
        }, logical_id
        before, after = resource.get("Properties", {}), with_key.get("Properties", {})
        changed = {n for n in set(before) | set(after) if before.get(n) != after.get(n)}
        if logical_id == "TaskRole":
            assert changed == {"Policies"}
            assert statements_off_the_key(after) == statements_off_the_key(before)
            continue
        assert changed <= ENCRYPTION.get(resource["Type"], set()), (logical_id, changed)
        if changed:
            encrypted.add(logical_id)
    # Guard the comparison: the key does reach every queue, table and bucket.
    assert encrypted == {
        logical_id
        for logical_id, resource in without["Resources"].items()
        if resource["Type"] in ENCRYPTION
    }
    assert set(keyed.get("Outputs", {})) - set(without.get("Outputs", {})) <= {"KmsKeyArn"}
    for output, value in without.get("Outputs", {}).items():
        assert keyed["Outputs"][output] == value, output


def statements_off_the_key(role: dict[str, Any]) -> list[Any]:
    """The role's statements but those on the key (their resource is KmsKeyArn)."""
    (policy,) = role["Policies"]
    return [
        s for s in policy["PolicyDocument"]["Statement"] if s["Resource"] != {"Ref": "KmsKeyArn"}
    ]
