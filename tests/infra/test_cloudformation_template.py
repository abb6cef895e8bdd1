"""The converse stage's CloudFormation template: lint-clean (the other templates too), and
every property the contract and the worker's timing depend on pinned, read from the YAML as
written (no AWS, no network). It creates only what is the stage's own and joins the history
table and the model and compaction queues by ARN (tests/infra/test_pipeline_template.py pins
the template that creates those for a stack of their own)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from cfnlint.api import lint_file

from tests.infra.cfn_conditions import (
    evaluate_conditions,
    parameter_values,
    rules_refusing,
    with_condition,
    with_conditions,
)
from tests.infra.cfn_outputs import JOINED, STACK_OUTPUTS
from tests.infra.cfn_stack import ConcreteStack
from tests.infra.cfn_tables import assert_the_table_bootstrap_makes
from tests.infra.cfn_yaml import (
    REPO_ROOT,
    TEMPLATE_DIR,
    load_cfn_yaml,
    load_template,
    parameter_default,
    properties,
    reference_name,
)
from tests.infra.stopping import kill_after_seconds
from worker.adapters.dynamodb import STAGE_STATE_ATTRIBUTES
from worker.app.resources import (
    CONVERSE_VISIBILITY_TIMEOUT,
    DEAD_LETTER_RETENTION_SECONDS,
    MAX_RECEIVE_COUNT,
    SOURCE_RETENTION_SECONDS,
    TTL_ATTRIBUTE,
    Resources,
    dead_letter_name,
)
from worker.caching.models import DEFAULT_MIN_TOKENS
from worker.settings import Settings
from worker.telemetry import metrics
from worker.turn.payloads import KEY_PREFIX

TEMPLATES = sorted(
    path for path in TEMPLATE_DIR.iterdir() if path.suffix in {".yaml", ".yml", ".json"}
)

#: Today's all-in-one template, which running stacks were made from (commit ccd10f6).
ALL_IN_ONE = REPO_ROOT / "tests" / "data" / "converse-stage.all-in-one.yaml"
#: The stack's own queue and its dead-letter queue.
DEAD_LETTER_QUEUE_OF = {"ConverseQueue": "ConverseDeadLetterQueue"}
#: What the stack joins, by the parameters naming them (ARNs), never creates or configures.
#: The only resources that name a joined resource: the role that uses it, the task that is
#: told where it is, and for a queue the dashboard that reads its depth.
READERS_OF_THE_JOINED = {
    "HistoryTableArn": {"TaskRole", "TaskDefinition"},
    "ModelQueueArn": {"TaskRole", "TaskDefinition", "Dashboard"},
    "CompactionQueueArn": {"TaskRole", "TaskDefinition", "Dashboard"},
}

STACK = ConcreteStack()
#: The history table's attributes the stage may name in an UpdateItem: the key, and the
#: ``state`` attributes the contract gives it (its "Resources: what the stage owns, what it
#: joins").
STATE_ATTRIBUTES_OF_THE_STAGE = ["pk", "sk", *STAGE_STATE_ATTRIBUTES]


def task_role_grants(stack: ConcreteStack) -> dict[str, set[str]]:
    """The task role's whole grant for ``stack``, as it should be: ARN -> actions. Nothing
    more, nothing less."""
    values = stack.values()
    joined = stack.joined()
    bucket = f"arn:aws:s3:::{stack.bucket}"
    return {
        values["ConverseQueue.Arn"]: {
            "sqs:ReceiveMessage",
            "sqs:DeleteMessage",
            "sqs:ChangeMessageVisibility",
            "sqs:GetQueueAttributes",
        },
        # Rejected commands are sent to the converse DLQ by the worker itself.
        values["ConverseDeadLetterQueue.Arn"]: {"sqs:GetQueueUrl", "sqs:SendMessage"},
        # GetQueueAttributes: the start-up check that each is there.
        joined["ModelQueueArn"]: {"sqs:SendMessage", "sqs:GetQueueAttributes"},
        joined["CompactionQueueArn"]: {"sqs:SendMessage", "sqs:GetQueueAttributes"},
        # Query; UpdateItem only of the stage's state attributes (its own statement).
        joined["HistoryTableArn"]: {"dynamodb:Query", "dynamodb:UpdateItem"},
        values["LedgerTable.Arn"]: {
            "dynamodb:UpdateItem",
            "dynamodb:GetItem",
            # The ledger's done marks, from concurrent turns together.
            "dynamodb:BatchWriteItem",
        },
        # Inbound payloads, at any key: the Extended Client's default is a bare UUID at the root.
        f"{bucket}/*": {"s3:GetObject"},
        # Never called: it makes S3 answer a missing key with 404 NoSuchKey, not 403.
        bucket: {"s3:ListBucket"},
        # The worker writes under payloads/ only (worker/turn/payloads.py).
        f"{bucket}/{KEY_PREFIX}*": {"s3:PutObject"},
    }


#: The worker's environment, variable -> the resource it names.
ENV_FROM_RESOURCE = {
    "CONVERSE_QUEUE_URL": {"Ref": "ConverseQueue"},
    "LEDGER_TABLE": {"Ref": "LedgerTable"},
    "PAYLOAD_BUCKET": {"Ref": "PayloadBucket"},
}

#: The worker's tunables, variable -> the parameter that sets it.
ENV_FROM_PARAMETER = {
    "HISTORY_WINDOW_MAX_TOKENS": "HistoryWindowMaxTokens",
    "MEMORY_FOLD_MIN_TOKENS": "MemoryFoldMinTokens",
    "HISTORY_WINDOW_MODE": "HistoryWindowMode",
    "HISTORY_CACHE_TTL": "HistoryCacheTtl",
    "WORKER_CONCURRENCY": "WorkerConcurrency",
    "LEDGER_LEGACY_READS": "LedgerLegacyReads",
}

#: The model's settings, passed only when their parameter is given: variable -> (parameter, a
#: value to give). Left unset, the worker takes its own default.
ENV_WHEN_GIVEN = {
    "MODEL_ID": ("ModelId", "eu.anthropic.claude-sonnet-4-5-20250929-v1:0"),
    "PROMPT_CACHE_MIN_TOKENS": ("PromptCacheMinTokens", "2048"),
    "MODEL_PREFIX_TOKENS": ("ModelPrefixTokens", "1500"),
    "MODEL_CONTEXT_TOKENS": ("ModelContextTokens", "1000000"),
}

#: Variables the worker reads that are boto's, not the Settings'.
AWS_VARIABLES = {"AWS_REGION", "AWS_DEFAULT_REGION"}


def as_a_stack_gets_it(given: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The template as a stack given ``given`` (defaults elsewhere) gets it: every condition
    decided but HasAlarmTopic, which the alarm tests read as written; every other intrinsic
    as written."""
    document = load_template()
    decided = evaluate_conditions(document, parameter_values(document, given or {}))
    del decided["HasAlarmTopic"]
    return with_conditions(document, decided)


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    """The template as a stack at the defaults gets it: without KmsKeyArn, and without the
    model's settings."""
    return as_a_stack_gets_it()


@pytest.fixture(scope="module")
def keyed() -> dict[str, Any]:
    """The template as a stack with KmsKeyArn gets it."""
    return with_condition(load_template(), "HasKmsKey", True)


def resources_of_type(template: dict[str, Any], resource_type: str) -> dict[str, Any]:
    return {
        logical_id: resource
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == resource_type
    }


def worker_container(template: dict[str, Any]) -> dict[str, Any]:
    (container,) = properties(template, "TaskDefinition")["ContainerDefinitions"]
    return dict(container)


def container_environment(template: dict[str, Any]) -> dict[str, Any]:
    return {entry["Name"]: entry["Value"] for entry in worker_container(template)["Environment"]}


def shutdown_grace_seconds(template: dict[str, Any]) -> float:
    return float(container_environment(template)["SHUTDOWN_GRACE_SECONDS"])


def settings_default(field: str) -> Any:
    return Settings.model_fields[field].default


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


# ---------------------------------------------------------------------------- the file itself


def test_there_is_a_template_to_check() -> None:
    assert TEMPLATES, f"no CloudFormation template under {TEMPLATE_DIR}"


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda path: path.name)
def test_cfn_lint_reports_nothing(path: Path) -> None:
    matches = lint_file(path)
    assert [str(match) for match in matches] == []


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda path: path.name)
def test_the_template_loads_with_cloudformation_short_tags(path: Path) -> None:
    document = load_cfn_yaml(path)
    assert document["AWSTemplateFormatVersion"] == "2010-09-09"
    assert document["Resources"]


# ---------------------------------------------------------------------------- queues


def test_the_stack_creates_only_its_own_queues_and_table(template: dict[str, Any]) -> None:
    """The converse queue and its DLQ, the ledger: the model and compaction queues and the
    history table are other stages', joined by ARN."""
    expected = set(DEAD_LETTER_QUEUE_OF) | set(DEAD_LETTER_QUEUE_OF.values())
    assert set(resources_of_type(template, "AWS::SQS::Queue")) == expected
    assert set(resources_of_type(template, "AWS::DynamoDB::Table")) == {"LedgerTable"}


def test_only_the_role_the_task_and_the_dashboard_name_what_the_stack_joins(
    template: dict[str, Any],
) -> None:
    """Nothing of the joined resources is set here: no visibility timeout, retention, key or
    alarm of theirs; the stack uses them (the role), points the worker at them (the task) and
    reads their depth (the dashboard)."""
    for parameter in JOINED:
        readers = {
            logical_id
            for logical_id, resource in template["Resources"].items()
            if refers_to(resource, parameter)
        }
        assert readers == READERS_OF_THE_JOINED[parameter], parameter
    assert not {"ModelVisibilityTimeout", "CompactionVisibilityTimeout"} & set(
        template["Parameters"]
    )


@pytest.mark.parametrize(
    ("parameter", "value", "accepted"),
    [
        ("HistoryTableArn", "arn:aws:dynamodb:eu-west-1:111122223333:table/mira-history", True),
        ("HistoryTableArn", "arn:aws-cn:dynamodb:cn-north-1:111122223333:table/a.b_c-d", True),
        ("HistoryTableArn", "mira-history", False),  # a name: the role needs the ARN
        ("HistoryTableArn", "arn:aws:dynamodb:eu-west-1:111122223333:table/h/index/i", False),
        ("ModelQueueArn", "arn:aws:sqs:eu-west-1:111122223333:mira-model", True),
        ("ModelQueueArn", "arn:aws:sqs:eu-west-1:111122223333:mira-model.fifo", True),
        ("ModelQueueArn", "https://sqs.eu-west-1.amazonaws.com/111122223333/mira-model", False),
        ("ModelQueueArn", "arn:aws:sqs:eu-west-1:111122223333:" + "m" * 81, False),
        ("ModelQueueArn", "arn:aws:sqs:eu-west-1:111122223333:" + "m" * 76 + ".fifo", False),
        ("ModelQueueArn", "arn:aws:sqs:eu-west-1:1111:mira-model", False),
        ("CompactionQueueArn", "arn:aws:sqs:eu-west-1:111122223333:mira-compaction", True),
        ("CompactionQueueArn", "arn:aws:sqs:eu-west-1:111122223333:mira-compaction.fifo", False),
        ("CompactionQueueArn", "arn:aws:sqs:eu-west-1:111122223333:mira compaction", False),
    ],
)
def test_the_joined_parameters_take_the_arns_of_what_they_name(
    template: dict[str, Any], parameter: str, value: str, accepted: bool
) -> None:
    """The model queue standard or FIFO (the worker sends to a .fifo URL with a group and a
    deduplication id); the compaction queue standard, as the contract has it."""
    pattern = template["Parameters"][parameter]["AllowedPattern"]
    assert "Default" not in template["Parameters"][parameter]  # required
    assert (re.fullmatch(pattern, value) is not None) is accepted


@pytest.mark.parametrize(
    ("account", "region", "model_queue"),
    [
        ("111122223333", "eu-west-1", "mira-model"),
        ("444455556666", "us-east-2", "platform-prompts.fifo"),
    ],
)
def test_the_task_is_pointed_at_the_joined_resources_derived_from_their_arns(
    account: str, region: str, model_queue: str
) -> None:
    """SQS's URL of a queue (https://sqs.<region>.amazonaws.com/<account>/<name>) and the
    table's name, from the ARNs the stack was given, whoever owns them."""
    owner = "999988887777"
    stack = ConcreteStack(
        account=account,
        region=region,
        parameters={
            **ConcreteStack().parameters,
            "ModelQueueArn": f"arn:aws:sqs:{region}:{owner}:{model_queue}",
            "CompactionQueueArn": f"arn:aws:sqs:{region}:{owner}:the-compactor",
            "HistoryTableArn": f"arn:aws:dynamodb:{region}:{owner}:table/the-writers.history",
        },
    )
    env = stack.task_environment()
    assert env["MODEL_QUEUE_URL"] == f"https://sqs.{region}.amazonaws.com/{owner}/{model_queue}"
    assert env["COMPACTION_QUEUE_URL"] == (
        f"https://sqs.{region}.amazonaws.com/{owner}/the-compactor"
    )
    assert env["HISTORY_TABLE"] == "the-writers.history"


@pytest.mark.parametrize(("queue", "dead_letter_queue"), DEAD_LETTER_QUEUE_OF.items())
def test_every_queue_redrives_to_its_own_dead_letter_queue_after_max_receive_count(
    template: dict[str, Any], queue: str, dead_letter_queue: str
) -> None:
    redrive = properties(template, queue)["RedrivePolicy"]
    assert redrive == {
        "deadLetterTargetArn": {"Fn::GetAtt": [dead_letter_queue, "Arn"]},
        "maxReceiveCount": {"Ref": "MaxReceiveCount"},
    }
    assert "RedrivePolicy" not in properties(template, dead_letter_queue)


def test_max_receive_count_defaults_to_the_bootstrap_value(template: dict[str, Any]) -> None:
    assert parameter_default(template, "MaxReceiveCount") == MAX_RECEIVE_COUNT == 5


@pytest.mark.parametrize("queue", [*DEAD_LETTER_QUEUE_OF, *DEAD_LETTER_QUEUE_OF.values()])
def test_every_queue_is_encrypted(template: dict[str, Any], queue: str) -> None:
    assert properties(template, queue)["SqsManagedSseEnabled"] is True


#: SQS's longest retention: fourteen days.
SQS_MAX_RETENTION_SECONDS = 1_209_600


@pytest.mark.parametrize(("queue", "dead_letter_queue"), DEAD_LETTER_QUEUE_OF.items())
def test_dead_letter_queues_keep_messages_fourteen_days_and_their_sources_the_parameter(
    template: dict[str, Any], queue: str, dead_letter_queue: str
) -> None:
    assert properties(template, queue)["MessageRetentionPeriod"] == {
        "Ref": "SourceRetentionSeconds"
    }
    assert (
        properties(template, dead_letter_queue)["MessageRetentionPeriod"]
        == DEAD_LETTER_RETENTION_SECONDS
        == SQS_MAX_RETENTION_SECONDS
    )


def test_source_retention_defaults_to_four_days_as_bootstrap_creates_it(
    template: dict[str, Any],
) -> None:
    assert parameter_default(template, "SourceRetentionSeconds") == SOURCE_RETENTION_SECONDS
    assert SOURCE_RETENTION_SECONDS == 4 * 86_400


def test_the_template_refuses_a_source_retention_a_dead_letter_could_not_outlive(
    template: dict[str, Any],
) -> None:
    """SQS moves a dead letter with its first enqueue time and deletes it when the dead-letter
    queue's retention has passed since then. So the parameter's bounds (CloudFormation checks
    MinValue and MaxValue as numbers) keep a source's retention below the dead-letter queue's,
    and leave time after the age alarm: the longest source retention plus the highest alarm
    threshold still ends before the dead letter expires."""
    source = template["Parameters"]["SourceRetentionSeconds"]
    alarm = template["Parameters"]["DeadLetterAgeAlarmSeconds"]
    assert int(source["MaxValue"]) == 7 * 86_400 < DEAD_LETTER_RETENTION_SECONDS
    assert int(source["MinValue"]) == 60  # SQS's shortest
    assert int(source["MaxValue"]) + int(alarm["MaxValue"]) < DEAD_LETTER_RETENTION_SECONDS
    assert int(alarm["MinValue"]) > 0


def test_payloads_outlive_the_dead_letters_that_point_at_them_whatever_the_parameter(
    template: dict[str, Any],
) -> None:
    """Dead letters too big to send inline are pointers to the bucket, as are inbound
    payloads redriven from the dead-letter queue: the parameter refuses fewer days than a
    dead-letter queue keeps a message."""
    parameter = template["Parameters"]["PayloadExpirationDays"]
    assert parameter_default(template, "PayloadExpirationDays") == 14
    assert int(parameter["MinValue"]) * 86_400 >= DEAD_LETTER_RETENTION_SECONDS
    assert (int(parameter["MinValue"]) - 1) * 86_400 < DEAD_LETTER_RETENTION_SECONDS


def test_the_visibility_timeout_is_a_parameter(template: dict[str, Any]) -> None:
    assert properties(template, "ConverseQueue")["VisibilityTimeout"] == {
        "Ref": "ConverseVisibilityTimeout"
    }


def test_the_converse_visibility_timeout_outlasts_the_shutdown_drain(
    template: dict[str, Any],
) -> None:
    """A command still being finished during the drain must not reappear for another task."""
    grace = shutdown_grace_seconds(template)
    parameter = template["Parameters"]["ConverseVisibilityTimeout"]
    assert parameter_default(template, "ConverseVisibilityTimeout") == 60
    assert CONVERSE_VISIBILITY_TIMEOUT == 60
    assert int(parameter["Default"]) > grace
    assert int(parameter["MinValue"]) > grace, "the parameter must refuse a value <= the drain"


def test_resource_names_follow_bootstrap_when_the_stack_is_named_after_the_prefix(
    template: dict[str, Any],
) -> None:
    resources = Resources()

    def named(logical_id: str, name_property: str) -> str:
        pattern = properties(template, logical_id)[name_property]["Fn::Sub"]
        return str(pattern.replace("${AWS::StackName}", resources.prefix))

    (converse,) = [spec for spec in resources.queues if spec.env == "CONVERSE_QUEUE_URL"]
    assert named("ConverseQueue", "QueueName") == converse.name
    assert named("ConverseDeadLetterQueue", "QueueName") == dead_letter_name(converse.name)
    assert named("LedgerTable", "TableName") == resources.ledger_table


# ---------------------------------------------------------------------------- storage


def test_the_ledger_table_matches_the_contract(template: dict[str, Any]) -> None:
    """LEDGER_TABLE: ``pk``/``sk``, its command records expiring at ``expires_at``."""
    assert_the_table_bootstrap_makes(properties(template, "LedgerTable"))
    assert TTL_ATTRIBUTE == "expires_at"


def test_the_resources_an_update_of_a_running_stack_keeps_keep_their_ids_and_properties(
    template: dict[str, Any],
) -> None:
    """The all-in-one stack's converse queue, its DLQ, bucket, service and the rest are this
    stack's under the same logical ids and the same replacement-relevant properties, so the
    move to the split stacks updates them in place (docs/DEPLOY.md, "Moving to the split
    stacks"): the converse queue keeps its URL, the bucket its objects."""
    before = with_condition(load_cfn_yaml(ALL_IN_ONE), "HasKmsKey", False)
    kept = ["ConverseQueue", "ConverseDeadLetterQueue", "PayloadBucket", "Cluster", "Service"]
    for logical_id in kept:
        assert template["Resources"][logical_id]["Type"] == before["Resources"][logical_id]["Type"]
    for logical_id, name in [
        ("ConverseQueue", "QueueName"),
        ("ConverseDeadLetterQueue", "QueueName"),
    ]:
        assert properties(template, logical_id)[name] == properties(before, logical_id)[name]
    assert properties(template, "PayloadBucket") == properties(before, "PayloadBucket")
    assert "BucketName" not in properties(template, "PayloadBucket")  # generated, as before


def test_the_payload_bucket_is_private_and_encrypted(template: dict[str, Any]) -> None:
    bucket = properties(template, "PayloadBucket")
    assert bucket["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert bucket["BucketEncryption"] == {
        "ServerSideEncryptionConfiguration": [
            {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
        ]
    }


def test_the_payload_bucket_expires_every_object_after_the_parameter_days(
    template: dict[str, Any],
) -> None:
    """Inbound payloads sit wherever producers put them (the Extended Client's default key is
    a bare UUID at the root), so the one rule has no prefix, tag or size filter: every object
    the stage reads or writes expires."""
    (rule,) = properties(template, "PayloadBucket")["LifecycleConfiguration"]["Rules"]
    assert rule["Status"] == "Enabled"
    assert not {"Prefix", "Filter", "TagFilters", "ObjectSizeGreaterThan"} & set(rule)
    assert rule["ExpirationInDays"] == {"Ref": "PayloadExpirationDays"}
    assert parameter_default(template, "PayloadExpirationDays") == 14
    assert rule["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}


def test_the_payload_bucket_refuses_requests_without_tls(template: dict[str, Any]) -> None:
    policies = resources_of_type(template, "AWS::S3::BucketPolicy")
    (policy,) = (p["Properties"] for p in policies.values())
    assert policy["Bucket"] == {"Ref": "PayloadBucket"}
    deny_insecure = [
        statement
        for statement in policy["PolicyDocument"]["Statement"]
        if statement["Effect"] == "Deny"
        and statement.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
    ]
    assert len(deny_insecure) == 1
    statement = deny_insecure[0]
    assert statement["Principal"] == "*"
    assert as_list(statement["Action"]) == ["s3:*"]
    assert {reference_name(r) for r in as_list(statement["Resource"])} == {
        "PayloadBucket.Arn",
        "PayloadBucket.Arn/*",
    }


# ---------------------------------------------------------------------------- the worker


def test_the_task_runs_the_images_entrypoint_on_fargate(template: dict[str, Any]) -> None:
    task = properties(template, "TaskDefinition")
    container = worker_container(template)
    assert task["RequiresCompatibilities"] == ["FARGATE"]
    assert task["NetworkMode"] == "awsvpc"
    assert task["TaskRoleArn"] == {"Fn::GetAtt": ["TaskRole", "Arn"]}
    assert task["ExecutionRoleArn"] == {"Fn::GetAtt": ["TaskExecutionRole", "Arn"]}
    assert container["Image"] == {"Ref": "ContainerImage"}
    # The exec-form ENTRYPOINT/CMD of the image is what receives SIGTERM: nothing overrides it.
    assert "EntryPoint" not in container
    assert "Command" not in container
    assert container["LogConfiguration"]["LogDriver"] == "awslogs"


def test_ecs_kills_the_worker_only_after_its_stop_can_have_finished(
    template: dict[str, Any],
) -> None:
    """The stop waits for the long poll under way and the in-flight work, then makes its
    final calls: 42 s at the defaults (docs/RELIABILITY.md); Fargate allows up to 120."""
    container = worker_container(template)
    assert container["StopTimeout"] == 45
    assert container["StopTimeout"] >= kill_after_seconds(container_environment(template)) == 42


def test_the_task_environment_points_at_the_stacks_resources(template: dict[str, Any]) -> None:
    env = container_environment(template)
    for name, reference in ENV_FROM_RESOURCE.items():
        assert env[name] == reference, name
    for name, parameter in ENV_FROM_PARAMETER.items():
        assert env[name] == {"Ref": parameter}, name
    assert env["LOG_FORMAT"] == "json"
    assert env["SHUTDOWN_GRACE_SECONDS"] == "20"
    assert env["AWS_REGION"] == {"Ref": "AWS::Region"}


def test_the_task_writes_emf_metrics(template: dict[str, Any]) -> None:
    assert container_environment(template)["METRICS"] == "emf"


def test_ecs_replaces_a_task_whose_loops_stop_beating(template: dict[str, Any]) -> None:
    """The container health check is `worker health`: it fails once the receive loop or
    the lease heartbeat has been silent past the worker's bound, never for an idle worker."""
    check = worker_container(template)["HealthCheck"]
    assert check["Command"] == ["CMD", "worker", "health"]
    assert check["Retries"] == 3
    assert check["Timeout"] >= 10
    assert check["Interval"] >= check["Timeout"]
    bound = settings_default("health_max_silence_seconds")
    assert bound > settings_default("receive_wait_seconds")


def test_a_task_counts_as_healthy_only_once_its_start_up_checks_passed(
    template: dict[str, Any],
) -> None:
    """`worker health` fails while the worker checks its resources; the start period covers
    the checks' bound, the process's start and one write of the health file, so a task that
    starts is never counted unhealthy for starting, and one whose checks fail exits (2) and is
    never counted healthy: the circuit breaker rolls such a deploy back."""
    check = worker_container(template)["HealthCheck"]
    assert check["StartPeriod"] >= settings_default("startup_timeout_seconds") + 10 + 5
    breaker = properties(template, "Service")["DeploymentConfiguration"]["DeploymentCircuitBreaker"]
    assert breaker == {"Enable": True, "Rollback": True}


def test_every_task_variable_is_one_the_worker_reads(template: dict[str, Any]) -> None:
    known = {field.upper() for field in Settings.model_fields} | AWS_VARIABLES
    assert set(container_environment(template)) <= known


def test_the_tunables_default_to_the_worker_settings_defaults(template: dict[str, Any]) -> None:
    for name, parameter in ENV_FROM_PARAMETER.items():
        default = settings_default(name.lower())
        if isinstance(default, bool):  # a String parameter: "false" is the worker's False
            default = str(default).lower()
        assert parameter_default(template, parameter) == default, name
    assert shutdown_grace_seconds(template) == settings_default("shutdown_grace_seconds") == 20


def test_the_service_starts_at_the_minimum_on_fargate(template: dict[str, Any]) -> None:
    service = properties(template, "Service")
    assert service["LaunchType"] == "FARGATE"
    assert service["DesiredCount"] == {"Ref": "MinTasks"}
    network = service["NetworkConfiguration"]["AwsvpcConfiguration"]
    assert network["Subnets"] == {"Ref": "Subnets"}
    assert network["SecurityGroups"] == {"Ref": "SecurityGroupIds"}


# ---------------------------------------------------------------------------- least privilege


def test_the_task_role_grants_exactly_the_stages_actions_on_exactly_its_resources(
    template: dict[str, Any],
) -> None:
    """Read for a concrete stack (the role's ARNs resolved), as IAM reads them."""
    role = properties(template, "TaskRole")
    assert "ManagedPolicyArns" not in role
    assert not resources_of_type(template, "AWS::IAM::Policy")
    assert not resources_of_type(template, "AWS::IAM::ManagedPolicy")
    (policy,) = STACK.resolve(STACK.template["Resources"]["TaskRole"]["Properties"]["Policies"])

    granted: dict[str, set[str]] = {}
    conditioned = []
    for statement in policy["PolicyDocument"]["Statement"]:
        assert statement["Effect"] == "Allow"
        assert not {"NotAction", "NotResource"} & set(statement)
        actions = as_list(statement["Action"])
        assert all("*" not in action for action in actions), actions
        for resource in as_list(statement["Resource"]):
            granted.setdefault(resource, set()).update(actions)
        if "Condition" in statement:
            conditioned.append(statement)

    assert granted == task_role_grants(STACK)
    # The one statement with a condition: the history table's UpdateItem.
    (update,) = conditioned
    assert as_list(update["Action"]) == ["dynamodb:UpdateItem"]
    assert update["Resource"] == STACK.joined()["HistoryTableArn"]


def test_a_stack_given_a_bucket_joins_it_creates_none_and_grants_the_same_on_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PayloadBucketName given: no bucket or bucket policy of the stack's (the owner's hold),
    the worker pointed at that bucket, and the role's S3 grants the same, on it."""
    joined = ConcreteStack(
        bucket="platform-payloads",
        parameters={**ConcreteStack().parameters, "PayloadBucketName": "platform-payloads"},
    )
    rendered = joined.conditions()
    assert rendered["CreatePayloadBucket"] is False
    resources = joined.template["Resources"]
    assert {"PayloadBucket", "PayloadBucketPolicy"} <= {
        logical_id
        for logical_id, resource in resources.items()
        if resource.get("Condition") == "CreatePayloadBucket"
    }
    (policy,) = joined.resolve(resources["TaskRole"]["Properties"]["Policies"])
    granted: dict[str, set[str]] = {}
    for statement in policy["PolicyDocument"]["Statement"]:
        for resource in as_list(statement["Resource"]):
            granted.setdefault(resource, set()).update(as_list(statement["Action"]))
    assert granted == task_role_grants(joined)
    assert task_settings(
        monkeypatch, {"PayloadBucketName": "platform-payloads"}
    ).payload_bucket == ("platform-payloads")


def test_the_history_table_may_be_updated_only_in_the_stages_state_attributes(
    template: dict[str, Any],
) -> None:
    """UpdateItem names only the key and the contract's state attributes of the stage (every
    attribute the request names, read by a condition or written: DynamoDB's
    ``dynamodb:Attributes``), and returns nothing beyond them (``ALL_OLD``/``ALL_NEW`` would
    return a whole item). As the DynamoDB Developer Guide writes such a statement; no put,
    delete, batch write or get on the table (test_task_role_as_aws_evaluates_it.py puts the
    calls to the evaluator)."""
    (policy,) = properties(template, "TaskRole")["Policies"]
    on_history = [
        s
        for s in policy["PolicyDocument"]["Statement"]
        if s["Resource"] == {"Ref": "HistoryTableArn"}
    ]
    assert sorted(a for s in on_history for a in as_list(s["Action"])) == [
        "dynamodb:Query",
        "dynamodb:UpdateItem",
    ]
    (update,) = [s for s in on_history if s["Action"] == "dynamodb:UpdateItem"]
    assert update["Condition"] == {
        "ForAllValues:StringEquals": {"dynamodb:Attributes": STATE_ATTRIBUTES_OF_THE_STAGE},
        "StringEqualsIfExists": {"dynamodb:ReturnValues": ["NONE", "UPDATED_OLD", "UPDATED_NEW"]},
    }
    (query,) = [s for s in on_history if s["Action"] == "dynamodb:Query"]
    assert "Condition" not in query


def test_the_execution_role_cannot_touch_the_stages_data(template: dict[str, Any]) -> None:
    role = properties(template, "TaskExecutionRole")
    actions = {
        action
        for policy in role["Policies"]
        for statement in policy["PolicyDocument"]["Statement"]
        for action in as_list(statement["Action"])
    }
    assert actions, "the execution role must at least pull the image and write logs"
    assert all(action.split(":")[0] in {"ecr", "logs"} for action in actions), actions


def execution_role_statements(template: dict[str, Any]) -> list[dict[str, Any]]:
    (policy,) = properties(template, "TaskExecutionRole")["Policies"]
    return list(policy["PolicyDocument"]["Statement"])


def test_only_ecr_sign_in_is_granted_on_every_resource(template: dict[str, Any]) -> None:
    """AWS gives ecr:GetAuthorizationToken no resource-level permission; everything else the
    execution role does names its resource."""
    on_everything = [s for s in execution_role_statements(template) if s["Resource"] == "*"]
    assert [as_list(s["Action"]) for s in on_everything] == [["ecr:GetAuthorizationToken"]]


def test_the_execution_role_pulls_from_the_images_repository_only(
    template: dict[str, Any],
) -> None:
    """The layer actions name the repository derived from ContainerImage (the derivation is
    evaluated for concrete images in test_task_role_as_aws_evaluates_it.py)."""
    (pull,) = [
        s
        for s in execution_role_statements(template)
        if "ecr:BatchGetImage" in as_list(s["Action"])
    ]
    assert set(as_list(pull["Action"])) == {
        "ecr:BatchCheckLayerAvailability",
        "ecr:GetDownloadUrlForLayer",
        "ecr:BatchGetImage",
    }
    pattern, variables = pull["Resource"]["Fn::Sub"]
    assert pattern == "arn:${AWS::Partition}:ecr:${Region}:${Account}:repository/${Repository}"
    assert "ContainerImage" in repr(variables)
    (logs,) = [
        s for s in execution_role_statements(template) if s is not pull and s["Resource"] != "*"
    ]
    assert logs["Resource"] == {"Fn::GetAtt": ["WorkerLogGroup", "Arn"]}


ECR = "123456789012.dkr.ecr.eu-west-1.amazonaws.com"
DIGEST = "@sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("image", "accepted"),
    [
        (f"{ECR}/mira-converse-worker:0.1.0", True),
        (f"{ECR}/mira-converse-worker:0.1.0{DIGEST}", True),
        (f"{ECR}/platform/mira-converse-worker{DIGEST}", True),
        (f"{ECR}/mira-converse-worker:latest-build", True),
        (f"{ECR}/mira-converse-worker", False),  # no tag: Docker pulls latest
        (f"{ECR}/mira-converse-worker:latest", False),
        (f"{ECR}/mira-converse-worker:latest{DIGEST}", False),
        ("mira-converse-worker:0.1.0", False),  # not ECR: the pull grant cannot be derived
        ("docker.io/library/python:3.11", False),
    ],
)
def test_the_image_parameter_takes_an_ecr_image_by_version_tag_or_digest(
    template: dict[str, Any], image: str, accepted: bool
) -> None:
    """The execution role's pull grant is derived from this parameter, so it must have the
    shape the derivation splits; and a missing or ``latest`` tag is never a pinned image."""
    pattern = template["Parameters"]["ContainerImage"]["AllowedPattern"]
    assert (re.fullmatch(pattern, image) is not None) is accepted


@pytest.mark.parametrize("role", ["TaskRole", "TaskExecutionRole"])
def test_only_ecs_tasks_of_this_account_may_assume_either_role(
    template: dict[str, Any], role: str
) -> None:
    (trust,) = properties(template, role)["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "ecs-tasks.amazonaws.com"}
    assert trust["Action"] == "sts:AssumeRole"
    assert trust["Condition"] == {
        "ArnLike": {
            "aws:SourceArn": {
                "Fn::Sub": "arn:${AWS::Partition}:ecs:${AWS::Region}:${AWS::AccountId}:*"
            }
        },
        "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}},
    }


# ---------------------------------------------------------------------------- scaling


def test_the_scalable_target_is_the_services_desired_count_within_the_parameters(
    template: dict[str, Any],
) -> None:
    target = properties(template, "ScalableTarget")
    assert target["ServiceNamespace"] == "ecs"
    assert target["ScalableDimension"] == "ecs:service:DesiredCount"
    assert target["ResourceId"] == {"Fn::Sub": "service/${Cluster}/${Service.Name}"}
    assert target["MinCapacity"] == {"Ref": "MinTasks"}
    assert target["MaxCapacity"] == {"Ref": "MaxTasks"}
    assert parameter_default(template, "MinTasks") == 1
    assert parameter_default(template, "MaxTasks") == 20


def test_the_scaling_policy_tracks_converse_backlog_per_running_task(
    template: dict[str, Any],
) -> None:
    policy = properties(template, "BacklogPerTaskScalingPolicy")
    assert policy["PolicyType"] == "TargetTrackingScaling"
    assert policy["ScalingTargetId"] == {"Ref": "ScalableTarget"}
    config = policy["TargetTrackingScalingPolicyConfiguration"]
    assert config["TargetValue"] == {"Ref": "BacklogPerTaskTarget"}
    assert parameter_default(template, "BacklogPerTaskTarget") == 100

    metrics = config["CustomizedMetricSpecification"]["Metrics"]
    without_labels = [{k: v for k, v in m.items() if k != "Label"} for m in metrics]
    assert without_labels == [
        {
            "Id": "m1",
            "ReturnData": False,
            "MetricStat": {
                "Stat": "Sum",
                "Metric": {
                    "Namespace": "AWS/SQS",
                    "MetricName": "ApproximateNumberOfMessagesVisible",
                    "Dimensions": [
                        {
                            "Name": "QueueName",
                            "Value": {"Fn::GetAtt": ["ConverseQueue", "QueueName"]},
                        }
                    ],
                },
            },
        },
        {
            "Id": "m2",
            "ReturnData": False,
            "MetricStat": {
                "Stat": "Average",
                "Metric": {
                    "Namespace": "ECS/ContainerInsights",
                    "MetricName": "RunningTaskCount",
                    "Dimensions": [
                        {"Name": "ClusterName", "Value": {"Ref": "Cluster"}},
                        {"Name": "ServiceName", "Value": {"Fn::GetAtt": ["Service", "Name"]}},
                    ],
                },
            },
        },
        {"Id": "e1", "Expression": "m1 / m2", "ReturnData": True},
    ]


def test_container_insights_is_on_so_running_task_count_exists(template: dict[str, Any]) -> None:
    settings = properties(template, "Cluster")["ClusterSettings"]
    assert {"Name": "containerInsights", "Value": "enabled"} in settings


def test_min_tasks_cannot_be_zero_because_the_metric_divides_by_running_tasks(
    template: dict[str, Any],
) -> None:
    assert int(template["Parameters"]["MinTasks"]["MinValue"]) >= 1


# ---------------------------------------------------------------------------- alarms and outputs


def alarms_on(template: dict[str, Any], metric: str, queue: str) -> list[dict[str, Any]]:
    return [
        alarm["Properties"]
        for alarm in resources_of_type(template, "AWS::CloudWatch::Alarm").values()
        if alarm["Properties"].get("Namespace") == "AWS/SQS"
        and alarm["Properties"]["MetricName"] == metric
        and alarm["Properties"]["Dimensions"]
        == [{"Name": "QueueName", "Value": {"Fn::GetAtt": [queue, "QueueName"]}}]
    ]


@pytest.mark.parametrize("dead_letter_queue", DEAD_LETTER_QUEUE_OF.values())
def test_any_message_in_a_dead_letter_queue_raises_an_alarm(
    template: dict[str, Any], dead_letter_queue: str
) -> None:
    (alarm,) = alarms_on(template, "ApproximateNumberOfMessagesVisible", dead_letter_queue)
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["Threshold"] == 0


def test_a_converse_dead_letter_left_waiting_raises_an_alarm_in_time_to_redrive_it(
    template: dict[str, Any],
) -> None:
    """Beside the depth alarm, the age of the oldest dead letter: one left unhandled for
    DeadLetterAgeAlarmSeconds raises an alarm that says how long it has left."""
    (alarm,) = alarms_on(template, "ApproximateAgeOfOldestMessage", "ConverseDeadLetterQueue")
    assert alarm["Statistic"] == "Maximum"
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["Threshold"] == {"Ref": "DeadLetterAgeAlarmSeconds"}
    assert parameter_default(template, "DeadLetterAgeAlarmSeconds") == 3 * 86_400
    assert alarm["TreatMissingData"] == "notBreaching"
    assert alarm["AlarmActions"] == {
        "Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]
    }
    description = alarm["AlarmDescription"]["Fn::Sub"]
    assert str(DEAD_LETTER_RETENTION_SECONDS) in description
    assert "${SourceRetentionSeconds}" in description
    assert "${DeadLetterAgeAlarmSeconds}" in description


def test_an_old_converse_command_raises_an_alarm(template: dict[str, Any]) -> None:
    (alarm,) = alarms_on(template, "ApproximateAgeOfOldestMessage", "ConverseQueue")
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["Threshold"] == {"Ref": "OldestMessageAgeAlarmSeconds"}
    assert parameter_default(template, "OldestMessageAgeAlarmSeconds") == 300


def stage_alarm(template: dict[str, Any], metric: str) -> dict[str, Any]:
    """The one alarm on one of the stage's own EMF metrics, with the worker's dimensions."""
    (alarm,) = [
        alarm["Properties"]
        for alarm in resources_of_type(template, "AWS::CloudWatch::Alarm").values()
        if alarm["Properties"].get("Namespace") == metrics.NAMESPACE
        and alarm["Properties"]["MetricName"] == metric
    ]
    assert alarm["Dimensions"] == [
        {"Name": metrics.SERVICE_DIMENSION, "Value": metrics.SERVICE},
        {
            "Name": metrics.QUEUE_DIMENSION,
            "Value": {"Fn::GetAtt": ["ConverseQueue", "QueueName"]},
        },
    ]
    assert alarm["AlarmActions"] == {
        "Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]
    }
    return dict(alarm)


@pytest.mark.parametrize("metric", [metrics.FOLD_GAP_MESSAGES, metrics.COMMANDS_REJECTED])
def test_a_single_fold_gap_message_or_rejected_command_raises_an_alarm(
    template: dict[str, Any], metric: str
) -> None:
    alarm = stage_alarm(template, metric)
    assert metric in metrics.COUNTERS
    assert (alarm["Statistic"], alarm["Period"], alarm["EvaluationPeriods"]) == ("Sum", 60, 1)
    assert (alarm["ComparisonOperator"], alarm["Threshold"]) == ("GreaterThanThreshold", 0)


def test_a_slow_p99_turn_latency_raises_an_alarm(template: dict[str, Any]) -> None:
    alarm = stage_alarm(template, metrics.TURN_LATENCY)
    assert alarm["ExtendedStatistic"] == "p99"
    assert alarm["Unit"] == metrics.DISTRIBUTIONS[metrics.TURN_LATENCY] == "Milliseconds"
    assert alarm["Threshold"] == {"Ref": "TurnLatencyP99AlarmMilliseconds"}
    assert parameter_default(template, "TurnLatencyP99AlarmMilliseconds") == 2000
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (5, 3)


def test_a_worker_that_stops_beating_or_stops_reporting_raises_an_alarm(
    template: dict[str, Any],
) -> None:
    """Every running task writes LivenessFailures each flush interval (0 or 1), so three
    minutes with no data at all mean no worker is alive to report: that breaches too."""
    alarm = stage_alarm(template, metrics.LIVENESS_FAILURES)
    assert alarm["Statistic"] == "Maximum"
    assert (alarm["ComparisonOperator"], alarm["Threshold"]) == ("GreaterThanThreshold", 0)
    assert alarm["TreatMissingData"] == "breaching"
    assert (
        alarm["Period"] * alarm["EvaluationPeriods"]
        >= 3 * Settings.model_fields["metrics_flush_seconds"].default
    )


def test_a_share_of_unexplained_cache_misses_held_for_three_hours_raises_an_alarm(
    template: dict[str, Any],
) -> None:
    """The checked bills' unexplained misses as a share of the checks, hour by hour, from the
    stage's own metrics with its dimensions; an hour of few checks does not count."""
    alarm = template["Resources"]["UnexplainedCacheMissAlarm"]["Properties"]
    queries = {query["Id"]: query for query in alarm["Metrics"]}
    worker = [
        {"Name": metrics.SERVICE_DIMENSION, "Value": metrics.SERVICE},
        {"Name": metrics.QUEUE_DIMENSION, "Value": {"Fn::GetAtt": ["ConverseQueue", "QueueName"]}},
    ]
    unexplained = queries["unexplained"]["MetricStat"]
    assert unexplained["Metric"] == {
        "Namespace": metrics.NAMESPACE,
        "MetricName": metrics.CACHE_MISSES,
        "Dimensions": [*worker, {"Name": metrics.CAUSE_DIMENSION, "Value": "unexplained"}],
    }
    checks = queries["checks"]["MetricStat"]
    assert checks["Metric"] == {
        "Namespace": metrics.NAMESPACE,
        "MetricName": metrics.CACHE_CHECKS,
        "Dimensions": worker,
    }
    assert metrics.CACHE_CHECKS in metrics.COUNTERS  # written every interval, zeros included
    assert (unexplained["Stat"], unexplained["Period"]) == (checks["Stat"], checks["Period"])
    assert (checks["Stat"], checks["Period"]) == ("Sum", 3600)
    assert queries["share"]["ReturnData"] is True
    assert queries["share"]["Expression"] == (
        "IF(checks >= 20, 100 * FILL(unexplained, 0) / checks, 0)"
    )
    assert not queries["unexplained"]["ReturnData"] and not queries["checks"]["ReturnData"]
    assert alarm["Threshold"] == {"Ref": "UnexplainedCacheMissAlarmPercent"}
    assert parameter_default(template, "UnexplainedCacheMissAlarmPercent") == 10
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (3, 3)
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["TreatMissingData"] == "notBreaching"


def test_the_outputs_name_everything_a_deployment_needs(template: dict[str, Any]) -> None:
    """The stage's own resources, and its role: the joined resources' owners name it in
    their queue, table and key policies."""
    assert set(template["Outputs"]) == STACK_OUTPUTS
    assert template["Outputs"]["TaskRoleArn"]["Value"] == {"Fn::GetAtt": ["TaskRole", "Arn"]}


def test_with_a_key_the_outputs_name_the_key_and_the_role_its_policy_must_admit(
    keyed: dict[str, Any],
) -> None:
    """Whoever writes the key policy needs the key, the worker's role, and what the other
    stages need on the key (the key's output says it, docs/DEPLOY.md spells the statements)."""
    outputs = keyed["Outputs"]
    assert set(outputs) == STACK_OUTPUTS | {"KmsKeyArn"}
    assert outputs["KmsKeyArn"]["Value"] == {"Ref": "KmsKeyArn"}
    assert outputs["TaskRoleArn"]["Value"] == {"Fn::GetAtt": ["TaskRole", "Arn"]}
    description = outputs["KmsKeyArn"]["Description"]
    for who in ("producers", "model stage", "compactor", "TaskRoleArn", "docs/DEPLOY.md"):
        assert who in description, who
    assert len(description) <= 1024  # CloudFormation's limit for an output's description


#: A concrete stack's parameters: the ones without a default given.
REQUIRED_PARAMETERS = ConcreteStack().parameters


def task_settings(monkeypatch: pytest.MonkeyPatch, given: Mapping[str, str]) -> Settings:
    """The worker's settings from the environment the task of a stack given ``given`` gets
    (resolved by tests/infra/cfn_stack.py); raises as the worker refuses to start."""
    stack = ConcreteStack(parameters={**ConcreteStack().parameters, **given})
    for variable in ENV_WHEN_GIVEN:
        monkeypatch.delenv(variable, raising=False)
    for name, value in stack.task_environment().items():
        monkeypatch.setenv(name, str(value))
    return Settings()


def test_the_cache_and_model_parameters_leave_the_worker_at_its_defaults(
    template: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """HistoryCacheTtl defaults to the worker's HISTORY_CACHE_TTL; MODEL_ID,
    PROMPT_CACHE_MIN_TOKENS and MODEL_PREFIX_TOKENS are left unset, so the worker takes its
    own defaults: without a model, a 1,024-token minimum and no 1h (the sliding mode, which
    needs neither)."""
    defaults = Settings.at_defaults()
    assert parameter_default(template, "HistoryCacheTtl") == defaults.history_cache_ttl
    assert not set(ENV_WHEN_GIVEN) & set(container_environment(template))
    settings = task_settings(monkeypatch, {})
    for variable in ENV_WHEN_GIVEN:
        assert getattr(settings, variable.lower()) == getattr(defaults, variable.lower())
    assert (settings.cache_min_tokens, settings.cache_offers_1h) == (DEFAULT_MIN_TOKENS, False)
    assert settings.history_window_mode == "sliding"


@pytest.mark.parametrize("variable", ENV_WHEN_GIVEN)
def test_a_model_setting_reaches_the_task_exactly_when_its_parameter_is_given(
    template: dict[str, Any], variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given, the variable is set to the parameter and nothing else changes; given its
    default (empty, or 0), the task is the default stack's, the variable unset."""
    parameter, value = ENV_WHEN_GIVEN[variable]
    at_defaults = container_environment(template)
    given = container_environment(as_a_stack_gets_it({parameter: value}))
    assert given == {**at_defaults, variable: {"Ref": parameter}}
    default = str(template["Parameters"][parameter]["Default"])
    assert container_environment(as_a_stack_gets_it({parameter: default})) == at_defaults
    settings = task_settings(monkeypatch, {parameter: value})
    assert str(getattr(settings, variable.lower())) == value


#: The parameters of the cache and the model: each value the template takes, the worker takes.
CACHE_PARAMETERS = ["HistoryCacheTtl", "ModelId", "PromptCacheMinTokens", "ModelPrefixTokens"]


def the_template_takes(parameter: dict[str, Any], value: str) -> bool:
    """Whether CloudFormation takes ``value`` for ``parameter``: its type's and constraints'
    checks (AllowedValues, AllowedPattern, Min/MaxLength, Min/MaxValue)."""
    if "AllowedValues" in parameter and value not in [str(v) for v in parameter["AllowedValues"]]:
        return False
    if "AllowedPattern" in parameter and re.fullmatch(parameter["AllowedPattern"], value) is None:
        return False
    if parameter["Type"] == "Number":
        number = float(value)
        return (
            float(parameter.get("MinValue", number))
            <= number
            <= float(parameter.get("MaxValue", number))
        )
    return (
        int(parameter.get("MinLength", 0))
        <= len(value)
        <= int(parameter.get("MaxLength", len(value)))
    )


def values_at_the_edges(parameter: dict[str, Any]) -> list[str]:
    """The parameter's default and allowed values, and the values at and just past each of its
    bounds (a number's value, a string's length)."""
    values = [str(parameter["Default"]), *(str(v) for v in parameter.get("AllowedValues", []))]
    if parameter["Type"] == "Number":
        bounds = [int(parameter[b]) for b in ("MinValue", "MaxValue") if b in parameter]
        return values + [str(n) for bound in bounds for n in (bound - 1, bound, bound + 1)]
    lengths = [int(parameter[b]) for b in ("MinLength", "MaxLength") if b in parameter]
    edges = [n for bound in lengths for n in (bound - 1, bound, bound + 1) if n >= 0]
    return [*values, "", "1d", *("x" * n for n in edges)]


@pytest.mark.parametrize("name", CACHE_PARAMETERS)
def test_the_cache_parameters_take_what_the_worker_takes_and_no_more(
    template: dict[str, Any], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At and past each bound of the parameter, the template takes a value exactly when the
    worker, given the environment that stack's task gets, starts with it: the stack offers
    nothing the worker would refuse, and refuses nothing it would take."""
    parameter = template["Parameters"][name]
    for value in values_at_the_edges(parameter):
        try:
            task_settings(monkeypatch, {name: value})
        except ValueError:
            worker_takes = False
        else:
            worker_takes = True
        assert the_template_takes(parameter, value) is worker_takes, (name, value)


@pytest.mark.parametrize(
    ("given", "rule"),
    [
        ({"HistoryWindowMode": "cache-aligned"}, ["CacheAlignedNeedsTheModel"]),
        (
            {"HistoryWindowMode": "cache-aligned", "HistoryCacheTtl": "1h"},
            ["CacheAlignedNeedsTheModel", "OneHourNeedsTheModel"],
        ),
        (
            {
                "HistoryWindowMode": "cache-aligned",
                "HistoryCacheTtl": "1h",
                "PromptCacheMinTokens": "2048",
            },
            ["OneHourNeedsTheModel"],
        ),
    ],
)
def test_the_template_refuses_what_the_worker_would_refuse_to_start_with(
    given: dict[str, str], rule: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache-aligned mode without a model, and 1h without a model: CloudFormation tells
    them by equality, so the stack is refused before any task starts; the worker refuses the
    same settings (checked here through the task's environment)."""
    template = load_template()
    assert rules_refusing(template, {**REQUIRED_PARAMETERS, **given}) == rule
    with pytest.raises(ValueError, match="HISTORY"):
        task_settings(monkeypatch, given)


@pytest.mark.parametrize(
    "given",
    [
        {},
        {"HistoryCacheTtl": "1h"},  # the sliding mode never reads it
        {"HistoryWindowMode": "cache-aligned", "PromptCacheMinTokens": "2048"},
        {
            "HistoryWindowMode": "cache-aligned",
            "ModelId": "eu.anthropic.claude-sonnet-4-5-20250929-v1:0",
        },
    ],
)
def test_the_template_takes_what_the_worker_starts_with(
    given: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert rules_refusing(load_template(), {**REQUIRED_PARAMETERS, **given}) == []
    task_settings(monkeypatch, given)


@pytest.mark.parametrize(
    ("model_id", "starts"),
    [
        ("eu.anthropic.claude-sonnet-4-5-20250929-v1:0", True),
        ("anthropic.claude-sonnet-4-20250514-v1:0", False),  # no 1h on Bedrock
        ("a-model-the-table-does-not-know", False),
    ],
)
def test_1h_with_a_model_that_does_not_take_it_is_refused_at_start_up(
    monkeypatch: pytest.MonkeyPatch, model_id: str, starts: bool
) -> None:
    """The pair of values the template cannot refuse: CloudFormation cannot tell which model
    takes 1h, so the worker refuses to start, and the circuit breaker rolls back
    (docs/DEPLOY.md, "Cross-parameter rules")."""
    given = {"HistoryWindowMode": "cache-aligned", "HistoryCacheTtl": "1h", "ModelId": model_id}
    assert rules_refusing(load_template(), {**REQUIRED_PARAMETERS, **given}) == []
    if starts:
        assert task_settings(monkeypatch, given).history_cache_ttl == "1h"
    else:
        with pytest.raises(ValueError, match="HISTORY_"):
            task_settings(monkeypatch, given)


# ---------------------------------------------------------------- a customer managed key

KEY = "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
QUEUES = [*DEAD_LETTER_QUEUE_OF, *DEAD_LETTER_QUEUE_OF.values()]


def refers_to(value: Any, name: str) -> bool:
    """Whether ``value`` holds a ``Ref`` to ``name`` or a ``${name}`` in a ``Fn::Sub``."""
    if isinstance(value, list):
        return any(refers_to(item, name) for item in value)
    if isinstance(value, dict):
        if value == {"Ref": name}:
            return True
        return any(refers_to(item, name) for item in value.values())
    return isinstance(value, str) and f"${{{name}}}" in value


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        ("", True),
        (KEY, True),
        ("arn:aws:kms:eu-west-1:111122223333:key/mrk-1234abcd12ab34cd56ef1234567890ab", True),
        ("arn:aws-us-gov:kms:us-gov-west-1:111122223333:key/1234abcd", True),
        ("arn:aws:kms:eu-west-1:111122223333:alias/mira", False),  # the grant needs the key
        ("1234abcd-12ab-34cd-56ef-1234567890ab", False),  # a bare key id names no account
        ("alias/aws/sqs", False),
        (f"{KEY} ", False),
    ],
)
def test_the_key_parameter_takes_nothing_or_a_key_arn(
    template: dict[str, Any], value: str, accepted: bool
) -> None:
    parameter = template["Parameters"]["KmsKeyArn"]
    assert parameter["Default"] == ""
    assert (re.fullmatch(parameter["AllowedPattern"], value) is not None) is accepted


def test_without_a_key_nothing_refers_to_it(template: dict[str, Any]) -> None:
    """Every use of the key sits behind HasKmsKey: without it, no resource or output names
    the key, so the stack is encrypted as it was before the parameter existed
    (test_kms_key_is_optional.py compares it with that template)."""
    assert not refers_to(template["Resources"], "KmsKeyArn")
    assert not refers_to(template["Outputs"], "KmsKeyArn")
    assert template["Conditions"] == {"HasAlarmTopic": template["Conditions"]["HasAlarmTopic"]}


@pytest.mark.parametrize("queue", QUEUES)
def test_with_a_key_every_queue_is_encrypted_with_it(keyed: dict[str, Any], queue: str) -> None:
    """SSE-KMS replaces SSE-SQS (a queue has one or the other). SQS reuses a data key for
    KmsDataKeyReusePeriodSeconds per caller and queue: 300 s, SQS's default, so a disabled key
    stops sends and receives within five minutes."""
    queue_properties = properties(keyed, queue)
    assert "SqsManagedSseEnabled" not in queue_properties
    assert queue_properties["KmsMasterKeyId"] == {"Ref": "KmsKeyArn"}
    assert queue_properties["KmsDataKeyReusePeriodSeconds"] == 300


def test_with_a_key_the_ledger_table_is_encrypted_with_it(keyed: dict[str, Any]) -> None:
    assert properties(keyed, "LedgerTable")["SSESpecification"] == {
        "SSEEnabled": True,
        "SSEType": "KMS",
        "KMSMasterKeyId": {"Ref": "KmsKeyArn"},
    }


def test_with_a_key_the_payload_bucket_encrypts_with_it_through_a_bucket_key(
    keyed: dict[str, Any],
) -> None:
    """A bucket key: S3 asks KMS for a bucket-level key now and then, not a data key per
    object, and the encryption context is the bucket's ARN."""
    assert properties(keyed, "PayloadBucket")["BucketEncryption"] == {
        "ServerSideEncryptionConfiguration": [
            {
                "ServerSideEncryptionByDefault": {
                    "SSEAlgorithm": "aws:kms",
                    "KMSMasterKeyID": {"Ref": "KmsKeyArn"},
                },
                "BucketKeyEnabled": True,
            }
        ]
    }


#: Each service through which the worker may use the key, and what its calls need there.
KEY_USE_BY_SERVICE = {
    "sqs": {"kms:GenerateDataKey", "kms:Decrypt"},
    "dynamodb": {"kms:Decrypt"},
    "s3": {"kms:GenerateDataKey", "kms:Decrypt"},
}


def test_with_a_key_the_role_uses_it_only_through_each_service_in_the_stacks_region(
    keyed: dict[str, Any],
) -> None:
    (policy,) = properties(keyed, "TaskRole")["Policies"]
    on_the_key = [
        statement
        for statement in policy["PolicyDocument"]["Statement"]
        if refers_to(statement, "KmsKeyArn")
    ]
    by_service = {}
    for statement in on_the_key:
        assert statement["Effect"] == "Allow"
        assert statement["Resource"] == {"Ref": "KmsKeyArn"}
        (operator,) = statement["Condition"]
        assert operator == "StringEquals"
        (via,) = statement["Condition"][operator].items()
        assert via[0] == "kms:ViaService"
        service, rest = via[1]["Fn::Sub"].split(".", 1)
        assert rest == "${AWS::Region}.${AWS::URLSuffix}"
        by_service[service] = set(as_list(statement["Action"]))
    assert by_service == KEY_USE_BY_SERVICE
    others = [s for s in policy["PolicyDocument"]["Statement"] if s not in on_the_key]
    assert not any(action.startswith("kms:") for s in others for action in as_list(s["Action"]))
