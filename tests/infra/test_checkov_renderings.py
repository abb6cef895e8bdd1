"""checkov on each template as each stack gets it: without KmsKeyArn and with it.

checkov reads a template as written and does not decide its conditions. On this one it counts
``KmsMasterKeyId: !If [HasKmsKey, …]`` as a key (CKV_AWS_27 would pass for a stack without
one), cannot look inside ``SSESpecification: !If …`` (CKV_AWS_119 would fail for a stack with
one), and leaves its IAM checks (CKV_AWS_107 to 111) out for a role whose statements hold an
``!If``. So ``make scan`` runs it on the template as written, with the skips a stack without a
key needs, and these tests run it on the two renderings (every condition decided:
tests/infra/cfn_conditions.py), where nothing is conditional. The template's
``# checkov:skip=<ID>:<reason>`` comments are carried into each rendering as the resource
``Metadata`` checkov also reads; with a key, the skips the key makes moot are left out, and
those checks must pass on their own. The three templates (converse-stage.yaml,
pipeline-resources.yaml, converse-resources.yaml) are checked alike.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.infra.cfn_conditions import render
from tests.infra.cfn_yaml import (
    OWN_RESOURCES_TEMPLATE_PATH,
    PIPELINE_TEMPLATE_PATH,
    REPO_ROOT,
    TEMPLATE_PATH,
    load_cfn_yaml,
)

CHECKOV = REPO_ROOT / ".tools" / "venv" / "bin" / "checkov"
KEY = "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
SKIP_COMMENT = re.compile(r"^\s*# checkov:skip=(?P<id>[A-Z0-9_]+):(?P<reason>.+)$")
#: Checks skipped for AWS's own encryption (SSE-SQS, DynamoDB's AWS managed key) that a
#: customer managed key satisfies: with the key they run, and pass.
MOOT_WITH_A_KEY = {"CKV_AWS_27", "CKV_AWS_119"}
OWN_QUEUES = ["ConverseQueue", "ConverseDeadLetterQueue"]
PIPELINE_QUEUES = [
    "ModelQueue",
    "ModelDeadLetterQueue",
    "CompactionQueue",
    "CompactionDeadLetterQueue",
]
#: Each template: its path, the parameters a stack must give it, its queues and its tables.
TEMPLATES: dict[str, tuple[Path, dict[str, str], list[str], list[str]]] = {
    "converse-stage": (TEMPLATE_PATH, {}, OWN_QUEUES, ["LedgerTable"]),
    "pipeline-resources": (
        PIPELINE_TEMPLATE_PATH,
        {"NamePrefix": "mira"},
        PIPELINE_QUEUES,
        ["HistoryTable"],
    ),
    "converse-resources": (OWN_RESOURCES_TEMPLATE_PATH, {}, OWN_QUEUES, ["LedgerTable"]),
}
#: checkov's checks of an IAM role's policies, which it leaves out while they hold an !If.
IAM_POLICY_CHECKS = {"CKV_AWS_107", "CKV_AWS_108", "CKV_AWS_109", "CKV_AWS_110", "CKV_AWS_111"}


def skips_in_the_template(path: Path) -> dict[str, list[tuple[str, str]]]:
    """Each resource's ``# checkov:skip`` comments, (check, reason), found by the lines the
    resource spans."""
    resources = load_cfn_yaml(path)["Resources"]
    spans = {
        logical_id: (resource.start_mark.line, resource.end_mark.line)
        for logical_id, resource in resources.items()
    }
    skips: dict[str, list[tuple[str, str]]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        match = SKIP_COMMENT.match(line)
        if match is None:
            continue
        (owner,) = [name for name, (start, end) in spans.items() if start <= number <= end]
        skips.setdefault(owner, []).append((match["id"], match["reason"].strip()))
    return skips


def rendering(path: Path, parameters: dict[str, str], *, moot: set[str]) -> dict[str, Any]:
    """The template rendered for ``parameters``, its skips (but ``moot``) as Metadata.

    The parameters given become the rendering's defaults: checkov reads a ``Ref`` to a
    parameter as its default (``KmsMasterKeyId`` would otherwise be the empty default)."""
    document = render(load_cfn_yaml(path), parameters)
    document["Parameters"] = {
        name: {**parameter, "Default": parameters[name]} if name in parameters else parameter
        for name, parameter in document["Parameters"].items()
    }
    for logical_id, skips in skips_in_the_template(path).items():
        kept = [{"id": check, "comment": reason} for check, reason in skips if check not in moot]
        if kept and logical_id in document["Resources"]:
            resource = dict(document["Resources"][logical_id])
            resource["Metadata"] = {**resource.get("Metadata", {}), "checkov": {"skip": kept}}
            document["Resources"][logical_id] = resource
    return document


def checkov_results(document: dict[str, Any], directory: Path) -> dict[str, set[tuple[str, str]]]:
    """checkov's passed, failed and skipped checks on ``document``, as (check, logical id)."""
    if not CHECKOV.exists():
        missing = "checkov is not installed: run `make tools`"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{missing} (CI=true: `make test` installs it before the tests)")
        pytest.skip(missing)
    path = directory / "converse-stage.rendered.json"
    path.write_text(json.dumps(document, indent=1), encoding="utf-8")
    # Run from the directory of the copy: checkov reads a .checkov.yaml in its working
    # directory, and the project's (compact, quiet) would leave the passed checks out.
    arguments = ["--skip-download", "--framework", "cloudformation", "--output", "json"]
    scanned = subprocess.run(
        [CHECKOV, *arguments, "--file", path.name],
        cwd=directory,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    report = json.loads(scanned.stdout)
    assert report["summary"]["parsing_errors"] == 0
    return {
        outcome: {
            (check["check_id"], check["resource"].rsplit(".", 1)[-1])
            for check in report["results"][f"{outcome}_checks"]
        }
        for outcome in ("passed", "failed", "skipped")
    }


Results = dict[tuple[str, str], dict[str, set[tuple[str, str]]]]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Results:
    """checkov on every template's two renderings, two at a time (each run takes seconds)."""
    documents = {}
    for name, (path, given, _, _) in TEMPLATES.items():
        documents[name, "without a key"] = rendering(path, given, moot=set())
        documents[name, "with a key"] = rendering(
            path, {**given, "KmsKeyArn": KEY}, moot=MOOT_WITH_A_KEY
        )
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            which: pool.submit(checkov_results, document, tmp_path_factory.mktemp("rendered"))
            for which, document in documents.items()
        }
        return {which: future.result() for which, future in futures.items()}


def every_skip(path: Path) -> Iterator[tuple[str, str]]:
    for logical_id, skips in skips_in_the_template(path).items():
        for check, _ in skips:
            yield check, logical_id


each_template = pytest.mark.parametrize("name", sorted(TEMPLATES))


@each_template
def test_each_skip_comment_belongs_to_one_resource_and_says_why(name: str) -> None:
    path = TEMPLATES[name][0]
    skips = skips_in_the_template(path)
    assert {check for check, _ in every_skip(path)} >= MOOT_WITH_A_KEY
    assert all(len(reason) > 20 for found in skips.values() for _, reason in found)


@each_template
def test_without_a_key_checkov_finds_nothing_and_skips_only_what_the_template_says(
    results: Results, name: str
) -> None:
    path = TEMPLATES[name][0]
    without_a_key = results[name, "without a key"]
    assert without_a_key["failed"] == set()
    assert without_a_key["skipped"] == set(every_skip(path))
    if name == "converse-stage":
        assert {(check, "TaskRole") for check in IAM_POLICY_CHECKS} <= without_a_key["passed"]


@each_template
def test_with_a_key_checkov_finds_nothing_and_its_key_checks_pass_unskipped(
    results: Results, name: str
) -> None:
    path, _, queues, tables = TEMPLATES[name]
    with_a_key = results[name, "with a key"]
    assert with_a_key["failed"] == set()
    assert {("CKV_AWS_27", queue) for queue in queues} <= with_a_key["passed"]
    assert {("CKV_AWS_119", table) for table in tables} <= with_a_key["passed"]
    assert with_a_key["skipped"] == {
        (check, logical_id)
        for check, logical_id in every_skip(path)
        if check not in MOOT_WITH_A_KEY
    }
    if name == "converse-stage":
        assert {(check, "TaskRole") for check in IAM_POLICY_CHECKS} <= with_a_key["passed"]
