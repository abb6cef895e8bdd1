"""The dashboard: written from its one declaration (tests/dashboard.py), every metric it draws
one the stage declares with the dimensions it is written with, every alarm of the stack on
it at its threshold, and the template still small enough to deploy from a file.

The body is read as CloudFormation renders it for a concrete stack (``Fn::Sub`` over the
stack's names and parameters, :class:`~tests.infra.cfn_stack.ConcreteStack`), then parsed as
CloudWatch parses it."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests import dashboard
from tests.infra.cfn_stack import ConcreteStack
from tests.infra.cfn_yaml import TEMPLATE_PATH
from worker.telemetry import metric_names as names
from worker.telemetry.metric_names import METRICS, Metric

ROOT = Path(__file__).resolve().parents[2]
#: CloudFormation takes a template body of at most 51,200 bytes (`aws cloudformation deploy
#: --template-file` without --s3-bucket, CreateStack's TemplateBody).
TEMPLATE_BODY_LIMIT = 51_200
STACK = ConcreteStack()


def rendered_body(stack: ConcreteStack = STACK) -> dict[str, Any]:
    """The template's DashboardBody as CloudFormation renders it for ``stack``, parsed."""
    resource = stack.template["Resources"]["Dashboard"]
    assert resource["Type"] == "AWS::CloudWatch::Dashboard"
    return dict(json.loads(stack.resolve(resource["Properties"]["DashboardBody"])))


def metric_widgets(body: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    for widget in body["widgets"]:
        if widget["type"] == "metric":
            yield widget["properties"]


def drawn(properties: Mapping[str, Any]) -> list[tuple[str, str, dict[str, str], dict[str, Any]]]:
    """A widget's metrics, shorthand expanded: (namespace, name, dimensions, options)."""
    found = []
    for metric in dashboard.expand(properties["metrics"]):
        options = metric[-1] if isinstance(metric[-1], dict) else {}
        items = metric[:-1] if options else metric
        if not items:  # an expression
            continue
        namespace, name, *pairs = items
        found.append((namespace, name, dict(zip(pairs[::2], pairs[1::2], strict=True)), options))
    return found


def dashboard_problems(body: Mapping[str, Any], declared: Sequence[Metric]) -> list[str]:
    """What a body draws that the stage does not write: a metric of its namespace that is not
    declared, or with dimensions it is not written with."""
    by_name = {metric.name: metric for metric in declared}
    queue = STACK.values()["ConverseQueue.QueueName"]
    problems = []
    for properties in metric_widgets(body):
        for namespace, name, dimensions, _ in drawn(properties):
            if namespace != names.NAMESPACE:
                continue
            metric = by_name.get(name)
            where = f"{properties['title']!r}: {name}"
            if metric is None:
                problems.append(f"{where} is not declared in worker/telemetry/metric_names.py")
                continue
            base = {names.SERVICE_DIMENSION: names.SERVICE, names.QUEUE_DIMENSION: queue}
            extra = {k: v for k, v in dimensions.items() if k not in base}
            if {k: v for k, v in dimensions.items() if k in base} != base:
                problems.append(f"{where} is drawn with {dimensions}, not Service and Queue")
            elif not extra and not metric.total:
                problems.append(f"{where} is written only per {metric.per and metric.per.name}")
            elif extra and (
                metric.per is None
                or list(extra) != [metric.per.name]
                or extra[metric.per.name] not in metric.per.values
            ):
                problems.append(f"{where} is drawn per {extra}, which it is not written with")
    return problems


def new_problems(body: Mapping[str, Any], declared: Sequence[Metric]) -> list[str]:
    """The problems of ``body`` against ``declared`` that the committed body against the
    stage's declaration does not have."""
    committed = dashboard_problems(rendered_body(), METRICS)
    return [problem for problem in dashboard_problems(body, declared) if problem not in committed]


# ---------------------------------------------------------------------------- one source


@pytest.mark.parametrize("path", sorted(dashboard.written(), key=str), ids=str)
def test_each_written_copy_is_what_the_declaration_renders_now(path: Path) -> None:
    committed = (ROOT / path).read_text()
    assert committed == dashboard.written()[path], (
        f"{path} is stale: run `make dashboard` and commit the result"
    )


def test_the_template_stays_small_enough_to_deploy_from_a_file() -> None:
    assert len(TEMPLATE_PATH.read_bytes()) <= TEMPLATE_BODY_LIMIT


# ---------------------------------------------------------------------------- the metrics


def test_every_metric_a_panel_draws_is_one_the_stage_writes_with_those_dimensions() -> None:
    body = rendered_body()
    assert dashboard_problems(body, METRICS) == []
    stage = {
        name for p in metric_widgets(body) for ns, name, _, _ in drawn(p) if ns == names.NAMESPACE
    }
    assert len(stage) >= 15  # the check saw the stage's metrics


def test_a_metric_renamed_in_its_declaration_fails_the_check() -> None:
    """GIVEN the declaration with TurnLatency renamed, THEN the panel that draws it fails."""
    renamed = tuple(
        replace(metric, name="TurnLatencyMs") if metric.name == names.TURN_LATENCY else metric
        for metric in METRICS
    )
    body = rendered_body()
    assert (
        new_problems(body, renamed)
        == ["'Turn latency (ms)': TurnLatency is not declared in worker/telemetry/metric_names.py"]
        * 2
    )


def test_a_dimension_the_metric_is_not_written_with_fails_the_check() -> None:
    body = rendered_body()
    misses = next(p for p in metric_widgets(body) if p["title"] == "Checks and misses")
    metric = next(m for m in misses["metrics"] if "expired" in m)
    metric[metric.index("expired")] = "evicted"
    assert new_problems(body, METRICS) == [
        "'Checks and misses': CacheMisses is drawn per {'Cause': 'evicted'}, which it is not "
        "written with"
    ]


def test_every_widget_names_the_stacks_own_queues_the_joined_ones_cluster_and_service() -> None:
    """The converse queue and its DLQ by the stack's names; the model and compaction queues by
    the names in the ARNs the stack joined (their DLQs are their owners' to watch)."""
    values = STACK.values()
    own = {values[f"{q}.QueueName"] for q in ["ConverseQueue", "ConverseDeadLetterQueue"]}
    joined = {
        STACK.joined()[arn].rsplit(":", 1)[-1] for arn in ("ModelQueueArn", "CompactionQueueArn")
    }
    assert joined == {"mira-model", "mira-compaction"}
    queues = own | joined
    seen = set()
    for properties in metric_widgets(rendered_body()):
        assert properties["region"] == STACK.region
        for namespace, _, dimensions, _ in drawn(properties):
            if namespace == "AWS/SQS":
                assert dimensions["QueueName"] in queues
                seen.add(dimensions["QueueName"])
            elif namespace == dashboard.ECS_TASKS:
                assert dimensions == {
                    "ClusterName": values["Cluster"],
                    "ServiceName": values["Service.Name"],
                }
    assert seen == queues


# ---------------------------------------------------------------------------- the alarms


def alarms(stack: ConcreteStack = STACK) -> dict[str, dict[str, Any]]:
    return {
        logical_id: stack.resolve(resource["Properties"])
        for logical_id, resource in stack.template["Resources"].items()
        if resource["Type"] == "AWS::CloudWatch::Alarm"
    }


def test_the_alarm_widget_shows_every_alarm_of_the_stack() -> None:
    (widget,) = [w for w in rendered_body()["widgets"] if w["type"] == "alarm"]
    values = STACK.values()
    assert sorted(widget["properties"]["alarms"]) == sorted(
        values[f"{alarm}.Arn"] for alarm in alarms()
    )


@pytest.mark.parametrize("alarm", sorted(alarms()))
def test_each_alarm_is_drawn_at_its_threshold_on_a_panel_of_its_metric(alarm: str) -> None:
    """The alarm's name and threshold (its parameter's value for this stack) on a panel that
    draws the alarm's metric with the alarm's statistic, or, for a metric-math alarm, the
    same expression over the same metrics."""
    properties = alarms()[alarm]
    stack = replace(STACK, parameters={**STACK.parameters, "OldestMessageAgeAlarmSeconds": "420"})
    body = rendered_body(stack)
    (panel,) = [
        p
        for p in metric_widgets(body)
        if any(a["label"] == alarm for a in p.get("annotations", {}).get("horizontal", []))
    ]
    (annotation,) = [a for a in panel["annotations"]["horizontal"] if a["label"] == alarm]
    assert annotation["value"] == float(stack.resolve(alarms(stack)[alarm]["Threshold"]))
    lines = drawn(panel)
    if "Metrics" in properties:
        expressions = [m[0]["expression"] for m in panel["metrics"] if isinstance(m[0], dict)]
        (share,) = [q for q in properties["Metrics"] if q.get("ReturnData")]
        assert share["Expression"] in expressions
        for query in properties["Metrics"]:
            if "MetricStat" not in query:
                continue
            stat = query["MetricStat"]
            (line,) = [line for line in lines if line[3].get("id") == query["Id"]]
            wanted = {d["Name"]: d["Value"] for d in stat["Metric"]["Dimensions"]}
            assert (line[0], line[1], line[2]) == (
                stat["Metric"]["Namespace"],
                stat["Metric"]["MetricName"],
                wanted,
            )
            assert panel["period"] == stat["Period"]
        return
    statistic = properties.get("Statistic") or properties["ExtendedStatistic"]
    wanted = {d["Name"]: d["Value"] for d in properties["Dimensions"]}
    assert [
        (namespace, name, dimensions, options.get("stat", panel["stat"]))
        for namespace, name, dimensions, options in lines
        if (namespace, name, dimensions)
        == (properties["Namespace"], properties["MetricName"], wanted)
        and options.get("stat", panel["stat"]) == statistic
    ], f"{alarm}: its metric is not drawn with {statistic} on {panel['title']!r}"


# ---------------------------------------------------------------------------- Kubernetes


def test_the_kubernetes_copy_draws_the_same_panels_for_the_example_names() -> None:
    """The same panels, resolved for infra/k8s's example names: nothing left to substitute,
    the ConfigMap's queue and region, and none of what only the stack has."""
    text = (ROOT / dashboard.KUBERNETES).read_text()
    assert "${" not in text
    kubernetes = json.loads(text)
    config = (ROOT / "infra/k8s/configmap.yaml").read_text()
    stack = ConcreteStack(region="eu-west-1")
    queue = stack.values()["ConverseQueue.QueueName"]
    assert f"/{queue}\n" in config and "AWS_REGION: eu-west-1" in config
    assert dashboard_problems(kubernetes, METRICS) == []
    assert [w["type"] for w in kubernetes["widgets"]] == [
        w["type"] for w in rendered_body(stack)["widgets"] if w["type"] != "alarm"
    ]
    namespaces = {ns for p in metric_widgets(kubernetes) for ns, _, _, _ in drawn(p)}
    assert namespaces == {names.NAMESPACE, "AWS/SQS"}
