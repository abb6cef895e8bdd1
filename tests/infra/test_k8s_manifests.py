"""The Kubernetes manifests: they parse, the KEDA trigger reads the converse queue from the
worker's ConfigMap, and the pod outlives the worker's drain."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.infra.cfn_conditions import render
from tests.infra.cfn_outputs import RESOURCE_VARIABLES
from tests.infra.cfn_stack import ConcreteStack, queue_arn_from_url
from tests.infra.cfn_yaml import REPO_ROOT, load_template
from tests.infra.iam_policy import Principal, Request, is_allowed
from tests.infra.stopping import kill_after_seconds
from worker.settings import Settings

K8S_DIR = REPO_ROOT / "infra" / "k8s"
MANIFESTS = sorted(K8S_DIR.glob("*.yaml"))
IAM_DIR = K8S_DIR / "iam"
CONFIG_MAP_NAME = "mira-converse-config"
NAMESPACE = "mira"
#: Variables the worker reads that are boto's, not the Settings'.
AWS_VARIABLES = {"AWS_REGION", "AWS_DEFAULT_REGION"}
#: A key of the ConfigMap's data, commented out: ``  # NAME: value``.
COMMENTED_KEY = re.compile(r"^  # (?P<name>[A-Z][A-Z0-9_]*): (?P<value>.+)$", re.MULTILINE)


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc is not None]


def the_only(kind: str) -> dict[str, Any]:
    found = [doc for path in MANIFESTS for doc in documents(path) if doc["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


@pytest.fixture(scope="module")
def config() -> dict[str, str]:
    config_map = the_only("ConfigMap")
    assert config_map["metadata"]["name"] == CONFIG_MAP_NAME
    return dict(config_map["data"])


@pytest.fixture(scope="module")
def pod_spec() -> dict[str, Any]:
    return dict(the_only("Deployment")["spec"]["template"]["spec"])


@pytest.fixture(scope="module")
def sqs_trigger() -> dict[str, Any]:
    (trigger,) = the_only("ScaledObject")["spec"]["triggers"]
    return dict(trigger)


def test_the_expected_manifests_exist() -> None:
    names = {path.name for path in MANIFESTS}
    assert {
        "configmap.yaml",
        "deployment.yaml",
        "keda-scaledobject.yaml",
        "networkpolicy.yaml",
    } <= names


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda path: path.name)
def test_every_manifest_parses_into_kubernetes_objects(path: Path) -> None:
    docs = documents(path)
    assert docs
    for doc in docs:
        assert {"apiVersion", "kind", "metadata"} <= set(doc)
        assert doc["metadata"]["name"]


def test_the_config_map_values_are_strings(config: dict[str, str]) -> None:
    assert all(isinstance(value, str) for value in config.values())


def ecs_environment(template: dict[str, Any]) -> list[Any]:
    (container,) = template["Resources"]["TaskDefinition"]["Properties"]["ContainerDefinitions"]
    return list(container["Environment"])


@pytest.fixture(scope="module")
def commented_out() -> dict[str, str]:
    """The ConfigMap's keys left commented out, with their example values."""
    text = (K8S_DIR / "configmap.yaml").read_text(encoding="utf-8")
    return {m["name"]: str(yaml.safe_load(m["value"])) for m in COMMENTED_KEY.finditer(text)}


def test_the_config_map_sets_the_same_variables_as_the_ecs_task(config: dict[str, str]) -> None:
    """The same as a stack at its defaults: what the task gets only when a parameter is given
    is left out of both."""
    assert set(config) == {entry["Name"] for entry in ecs_environment(render(load_template()))}


def test_the_config_map_comments_out_each_variable_the_ecs_task_gets_only_when_given(
    config: dict[str, str], commented_out: dict[str, str]
) -> None:
    """MODEL_ID, PROMPT_CACHE_MIN_TOKENS, MODEL_PREFIX_TOKENS and MODEL_CONTEXT_TOKENS: unset
    by default, as in the stack, each with an example an operator uncomments."""
    environment = ecs_environment(load_template())
    conditional = {entry["Fn::If"][1]["Name"] for entry in environment if "Fn::If" in entry}
    assert conditional == {
        "MODEL_ID",
        "PROMPT_CACHE_MIN_TOKENS",
        "MODEL_PREFIX_TOKENS",
        "MODEL_CONTEXT_TOKENS",
    }
    assert set(commented_out) == conditional
    assert not conditional & set(config)


def test_the_config_map_with_its_commented_keys_set_is_one_the_worker_accepts(
    config: dict[str, str], commented_out: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {**config, **commented_out}.items():
        monkeypatch.setenv(name, value)
    settings = Settings()  # raises if the worker would refuse to start
    for name, value in commented_out.items():
        assert str(getattr(settings, name.lower())) == value, name


def test_every_config_map_variable_is_one_the_worker_reads(config: dict[str, str]) -> None:
    known = {field.upper() for field in Settings.model_fields} | AWS_VARIABLES
    assert set(config) <= known


def test_the_config_map_holds_a_configuration_the_worker_accepts(
    config: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in config.items():
        monkeypatch.setenv(name, value)
    settings = Settings()  # raises if the worker would refuse to start
    assert settings.converse_queue_url == config["CONVERSE_QUEUE_URL"]
    assert settings.shutdown_grace_seconds == 20


def test_the_deployment_takes_its_environment_from_the_config_map(pod_spec: dict[str, Any]) -> None:
    (container,) = pod_spec["containers"]
    assert {"configMapRef": {"name": CONFIG_MAP_NAME}} in container["envFrom"]


def test_the_pod_is_killed_only_after_the_workers_stop_can_have_finished(
    pod_spec: dict[str, Any], config: dict[str, str]
) -> None:
    assert pod_spec["terminationGracePeriodSeconds"] == 45
    assert pod_spec["terminationGracePeriodSeconds"] >= kill_after_seconds(config) == 42


def test_the_worker_runs_unprivileged_on_a_read_only_root(pod_spec: dict[str, Any]) -> None:
    (container,) = pod_spec["containers"]
    assert pod_spec["securityContext"]["runAsNonRoot"] is True
    assert pod_spec["securityContext"]["runAsUser"] != 0
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["resources"]["requests"]
    assert container["resources"]["limits"]["memory"]


def test_the_deployment_leaves_the_entrypoint_to_the_image(pod_spec: dict[str, Any]) -> None:
    (container,) = pod_spec["containers"]
    assert "command" not in container
    assert "args" not in container


def test_keda_scales_the_deployment_on_the_converse_queue(
    sqs_trigger: dict[str, Any], config: dict[str, str]
) -> None:
    target = the_only("ScaledObject")["spec"]["scaleTargetRef"]
    assert target["name"] == the_only("Deployment")["metadata"]["name"]
    assert sqs_trigger["type"] == "aws-sqs-queue"
    metadata = sqs_trigger["metadata"]
    assert metadata["queueURLFromEnv"] == "CONVERSE_QUEUE_URL"
    assert "queueURL" not in metadata, "queueURL would override queueURLFromEnv"
    assert metadata["queueURLFromEnv"] in config
    assert metadata["awsRegion"] == config["AWS_REGION"]


def test_the_target_backlog_per_pod_is_numeric_and_matches_the_ecs_target(
    sqs_trigger: dict[str, Any],
) -> None:
    queue_length = sqs_trigger["metadata"]["queueLength"]
    assert isinstance(queue_length, str), "KEDA trigger metadata values are strings"
    assert queue_length.isdigit()
    ecs_target = load_template()["Parameters"]["BacklogPerTaskTarget"]["Default"]
    assert int(queue_length) == int(ecs_target) == 100


def test_keda_authenticates_with_aws_pod_identity(sqs_trigger: dict[str, Any]) -> None:
    auth = the_only("TriggerAuthentication")
    assert sqs_trigger["authenticationRef"]["name"] == auth["metadata"]["name"]
    assert auth["spec"]["podIdentity"]["provider"] == "aws"


def test_replica_bounds_match_the_ecs_defaults() -> None:
    spec = the_only("ScaledObject")["spec"]
    parameters = load_template()["Parameters"]
    assert spec["minReplicaCount"] == int(parameters["MinTasks"]["Default"]) == 1
    assert spec["maxReplicaCount"] == int(parameters["MaxTasks"]["Default"]) == 20


def test_the_worker_writes_emf_metrics_on_kubernetes(config: dict[str, str]) -> None:
    assert config["METRICS"] == "emf"


def test_a_pod_is_ready_only_once_its_start_up_checks_passed(pod_spec: dict[str, Any]) -> None:
    """`worker health` fails while the worker checks its resources: the startup probe gives it
    the checks' bound and more before the liveness probe counts, and the readiness probe keeps
    a pod that cannot reach its resources from replacing a running one in a rollout."""
    (container,) = pod_spec["containers"]
    startup, ready = container["startupProbe"], container["readinessProbe"]
    assert startup["exec"]["command"] == ready["exec"]["command"] == ["worker", "health"]
    bound = Settings.model_fields["startup_timeout_seconds"].default
    # The checks' bound, the process's start and one write of the health file (every 5 s).
    assert startup["periodSeconds"] * startup["failureThreshold"] >= bound + 10 + 5
    assert "initialDelaySeconds" not in container["livenessProbe"]


def test_a_worker_whose_loops_stop_beating_is_restarted_by_its_liveness_probe(
    pod_spec: dict[str, Any], config: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe is `worker health` (exec), reading the file the worker writes under the
    writable /tmp; it fails only past the worker's bound (an idle worker passes), and three
    failures in a row restart the container."""
    (container,) = pod_spec["containers"]
    probe = container["livenessProbe"]
    assert probe["exec"]["command"] == ["worker", "health"]
    assert probe["failureThreshold"] == 3
    assert probe["timeoutSeconds"] >= 10  # a Python start-up, on a busy node
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]  # noqa: S108 - a path in the manifest
    for name, value in config.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    assert settings.health_max_silence_seconds > settings.receive_wait_seconds


# ---------------------------------------------------------------------------- namespace, network


def test_every_object_lives_in_the_stages_own_namespace() -> None:
    """Nothing lands in `default` (where any other workload could sit beside it)."""
    namespaces = {doc["metadata"].get("namespace") for path in MANIFESTS for doc in documents(path)}
    assert namespaces == {NAMESPACE}


def test_no_connection_into_the_worker_pods_is_admitted(pod_spec: dict[str, Any]) -> None:
    """The worker listens on nothing: its NetworkPolicy selects its pods, governs ingress and
    admits none."""
    policy = the_only("NetworkPolicy")["spec"]
    pod_labels = the_only("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert "Ingress" in policy["policyTypes"]
    assert not policy.get("ingress")
    (container,) = pod_spec["containers"]
    assert "ports" not in container


# ---------------------------------------------------------------------------- the AWS roles


def example_stack(config: dict[str, str]) -> ConcreteStack:
    """The stack the ConfigMap's example values describe: account, region and stack name from
    the converse queue's URL, the bucket from PAYLOAD_BUCKET."""
    arn = queue_arn_from_url(config["CONVERSE_QUEUE_URL"])
    _, _, _, region, account, queue = arn.split(":")
    return ConcreteStack(
        account=account,
        region=region,
        name=queue.removesuffix("-converse"),
        bucket=config["PAYLOAD_BUCKET"],
    )


def iam_document(name: str) -> dict[str, Any]:
    document = json.loads((IAM_DIR / name).read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


def test_the_workers_kubernetes_policy_is_the_ecs_task_roles_policy(
    config: dict[str, str],
) -> None:
    """The Kubernetes role is written by hand: it must say exactly what the template's task
    role says (which tests/infra evaluates call by call), for the ConfigMap's resources."""
    stack = example_stack(config)
    environment = stack.task_environment()
    for name in RESOURCE_VARIABLES:
        assert environment[name] == config[name], name
    (policy,) = stack.resolve(stack.template["Resources"]["TaskRole"]["Properties"]["Policies"])
    assert iam_document("worker-policy.json") == policy["PolicyDocument"]


def test_with_a_key_the_workers_kubernetes_policies_are_the_keyed_task_roles_policy(
    config: dict[str, str],
) -> None:
    """With a customer managed key, the role gets iam/worker-kms-policy.json beside
    iam/worker-policy.json: together they say what the template's task role says with
    KmsKeyArn given (the key named in the file, the ConfigMap's stack)."""
    kms_policy = iam_document("worker-kms-policy.json")
    (key,) = {statement["Resource"] for statement in kms_policy["Statement"]}
    stack = example_stack(config)
    keyed = ConcreteStack(
        account=stack.account,
        region=stack.region,
        name=stack.name,
        bucket=stack.bucket,
        parameters={**stack.parameters, "KmsKeyArn": key},
    )
    (policy,) = keyed.resolve(keyed.template["Resources"]["TaskRole"]["Properties"]["Policies"])
    assert policy["PolicyDocument"] == {
        "Version": "2012-10-17",
        "Statement": iam_document("worker-policy.json")["Statement"] + kms_policy["Statement"],
    }


def test_irsa_trusts_only_the_workers_service_account() -> None:
    (statement,) = iam_document("worker-trust-irsa.json")["Statement"]
    service_account = the_only("ServiceAccount")["metadata"]
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    provider = statement["Principal"]["Federated"].split("oidc-provider/", 1)[1]
    assert statement["Condition"] == {
        "StringEquals": {
            f"{provider}:sub": (
                f"system:serviceaccount:{service_account['namespace']}:{service_account['name']}"
            ),
            f"{provider}:aud": "sts.amazonaws.com",
        }
    }
    assert (
        the_only("Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
        == (service_account["name"])
    )


@pytest.mark.parametrize(("account", "allowed"), [("123456789012", True), ("444455556666", False)])
def test_eks_pod_identity_may_assume_the_worker_role_only_for_this_accounts_cluster(
    config: dict[str, str], account: str, allowed: bool
) -> None:
    stack = example_stack(config)
    trust = iam_document("worker-trust-pod-identity.json")
    cluster = f"arn:aws:eks:{stack.region}:{account}:cluster/mira"
    for action in ("sts:AssumeRole", "sts:TagSession"):
        request = Request(
            action,
            f"arn:aws:iam::{stack.account}:role/mira-converse-worker",
            Principal("Service", "pods.eks.amazonaws.com"),
            {"aws:SourceAccount": account, "aws:SourceArn": cluster},
        )
        assert is_allowed([trust], request) is allowed, action


def test_keda_may_read_the_converse_backlog_and_nothing_else(config: dict[str, str]) -> None:
    policy = iam_document("keda-policy.json")
    converse = queue_arn_from_url(config["CONVERSE_QUEUE_URL"])
    model = queue_arn_from_url(config["MODEL_QUEUE_URL"])
    assert is_allowed([policy], Request("sqs:GetQueueAttributes", converse))
    assert not is_allowed([policy], Request("sqs:GetQueueAttributes", model))
    assert not is_allowed([policy], Request("sqs:ReceiveMessage", converse))
    assert not is_allowed([policy], Request("sqs:DeleteMessage", converse))
