"""Deploy the converse stage's CloudFormation templates to a local moto server.

:func:`deploy_stack` is the one way tests put a whole stage up: the pipeline stack
(pipeline-resources.yaml: the history table, the model and compaction queues), then the
converse stack joined to it by its outputs. :func:`deploy_pipeline` and
:func:`deploy_converse` put up each alone, :func:`apply_stack` creates or updates one. The
infra tests check what they create, and a worker-side test can run the real worker against
their outputs.

moto's CloudFormation leaves some resource types out (Application Auto Scaling, the bucket
policy) with a ``UserWarning``; the project turns warnings into errors, so the deploy ignores
exactly that warning. It leaves CloudWatch alarms out too, and then refuses the dashboard,
whose body names each alarm's ARN: :class:`StackAlarm` teaches it to put them, through
moto's own CloudWatch, so the stack deploys whole and a test reads its alarms back.
:func:`register_backlog_scaling` then puts the template's scaling policy in through the
Application Auto Scaling API, which moto does serve.

One more thing moto's CloudFormation does otherwise than CloudFormation: an update that
removes a resource deletes it even when its ``DeletionPolicy`` is ``Retain``
(``ResourceMap.update`` deletes every removed resource; only a stack's deletion reads the
policy). CloudFormation leaves it in place (CloudFormation User Guide, "DeletionPolicy
attribute"), and the move to the split stacks rests on that, so :func:`_retained_on_removal`
makes moto do the same.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import boto3
from moto.cloudformation.parsing import (
    ResourceMap,
    get_model_list,
    get_model_map,
    get_name_type_map,
)
from moto.core.common_models import CloudFormationModel

from tests.infra.cfn_outputs import JOINED
from tests.infra.cfn_yaml import (
    PIPELINE_TEMPLATE_PATH,
    TEMPLATE_PATH,
    load_template,
    resolve_intrinsics,
)

REGION = "us-east-1"


class StackAlarm(CloudFormationModel):
    """``AWS::CloudWatch::Alarm`` for moto's CloudFormation: the alarm put with moto's
    CloudWatch under the name CloudFormation gives it; ``Ref`` is its name, ``Fn::GetAtt
    … Arn`` its ARN. A metric-math alarm is put without its queries (moto stores, never
    evaluates them)."""

    def __init__(self, alarm: Any) -> None:
        self.alarm = alarm

    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::CloudWatch::Alarm"

    @staticmethod
    def cloudformation_name_type() -> str:
        return "AlarmName"

    @classmethod
    def has_cfn_attr(cls, attr: str) -> bool:
        return attr == "Arn"

    def get_cfn_attribute(self, attribute_name: str) -> str:
        return str(self.alarm.alarm_arn)

    @property
    def physical_resource_id(self) -> str:
        return str(self.alarm.name)

    @classmethod
    def create_from_cloudformation_json(  # type: ignore[override]
        cls,
        resource_name: str,
        cloudformation_json: Any,
        account_id: str,
        region_name: str,
        **kwargs: Any,
    ) -> StackAlarm:
        from moto.cloudwatch.models import cloudwatch_backends

        given = cloudformation_json["Properties"]
        alarm = cloudwatch_backends[account_id][region_name].put_metric_alarm(
            name=resource_name,
            namespace=given.get("Namespace", ""),
            metric_name=given.get("MetricName", ""),
            comparison_operator=given["ComparisonOperator"],
            evaluation_periods=int(given["EvaluationPeriods"]),
            datapoints_to_alarm=int(given.get("DatapointsToAlarm", given["EvaluationPeriods"])),
            period=int(given.get("Period", 60)),
            threshold=float(given["Threshold"]),
            statistic=given.get("Statistic", ""),
            extended_statistic=given.get("ExtendedStatistic"),
            description=given.get("AlarmDescription", ""),
            dimensions=given.get("Dimensions", []),
            alarm_actions=given.get("AlarmActions", []),
            treat_missing_data=given.get("TreatMissingData"),
            unit=given.get("Unit"),
        )
        return cls(alarm)


# moto lists the models CloudFormation knows once, the first time it needs them.
for _cached in (get_model_list, get_model_map, get_name_type_map):
    _cached.cache_clear()

_delete_resource = ResourceMap._delete_resource


def _retained_on_removal(self: ResourceMap, parsed_resource: Any, resource_json: Any) -> None:
    """moto's deletion of one resource, but a resource whose DeletionPolicy is Retain stays
    (a stack's deletion never gets here with one: it leaves them out first)."""
    if resource_json.get("DeletionPolicy") == "Retain":
        return
    _delete_resource(self, parsed_resource, resource_json)


ResourceMap._delete_resource = _retained_on_removal  # type: ignore[method-assign]
#: The stack name doubles as the resource prefix, as `worker bootstrap --prefix` does.
DEFAULT_STACK_NAME = "mira"
#: An ECR image by version tag, as the ContainerImage parameter's pattern requires (moto's
#: account); moto's ECS never pulls it.
DEFAULT_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/mira-converse-worker:0.1.0"

#: moto's warning for a resource type its CloudFormation does not create.
MOTO_SKIPPED_RESOURCE_WARNING = r"Tried to parse AWS::.* but it's not supported by moto"


def aws_client(service: str, endpoint_url: str) -> Any:
    """A boto3 client for the local server, with moto's dummy credentials."""
    return boto3.client(
        service,
        endpoint_url=endpoint_url,
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def create_task_network(endpoint_url: str) -> tuple[str, str]:
    """A VPC with one subnet and one security group for the Fargate service; (subnet, group)."""
    ec2 = aws_client("ec2", endpoint_url)
    vpc_id = ec2.create_vpc(CidrBlock="10.42.0.0/16")["Vpc"]["VpcId"]
    subnet_id = ec2.create_subnet(VpcId=vpc_id, CidrBlock="10.42.1.0/24")["Subnet"]["SubnetId"]
    group_id = ec2.create_security_group(
        GroupName="mira-converse-worker", Description="converse worker tasks", VpcId=vpc_id
    )["GroupId"]
    return subnet_id, group_id


def apply_stack(
    endpoint_url: str,
    operation: Literal["create", "update"],
    *,
    stack_name: str,
    template: Path | str,
    parameters: Mapping[str, str],
) -> dict[str, str]:
    """Create one stack from ``template`` (a path, or the body itself), or update one to it
    with ``parameters`` (all of them); its outputs by key.

    Raises ``RuntimeError`` with the stack's events if it does not reach CREATE_COMPLETE
    (UPDATE_COMPLETE).
    """
    body = template.read_text(encoding="utf-8") if isinstance(template, Path) else template
    cloudformation = aws_client("cloudformation", endpoint_url)
    # The filter is process-wide while it is in place, which is what reaches moto's server
    # thread; it is lifted as soon as the stack is up.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=MOTO_SKIPPED_RESOURCE_WARNING)
        getattr(cloudformation, f"{operation}_stack")(
            StackName=stack_name,
            TemplateBody=body,
            Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in parameters.items()],
            Capabilities=["CAPABILITY_IAM"],
        )
        cloudformation.get_waiter(f"stack_{operation}_complete").wait(
            StackName=stack_name, WaiterConfig={"Delay": 1, "MaxAttempts": 30}
        )
    return _outputs_when(cloudformation, stack_name, f"{operation.upper()}_COMPLETE")


def _outputs_when(cloudformation: Any, stack_name: str, status: str) -> dict[str, str]:
    stack = cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0]
    if stack["StackStatus"] != status:
        events = cloudformation.describe_stack_events(StackName=stack_name)["StackEvents"]
        raise RuntimeError(f"stack {stack_name} is {stack['StackStatus']}: {events!r}")
    return {output["OutputKey"]: output["OutputValue"] for output in stack.get("Outputs", [])}


def deploy_pipeline(
    endpoint_url: str,
    *,
    prefix: str = DEFAULT_STACK_NAME,
    stack_name: str | None = None,
    parameters: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The pipeline stack (``<prefix>-pipeline``): the resources the converse stage joins,
    named under ``prefix``; its outputs."""
    return apply_stack(
        endpoint_url,
        "create",
        stack_name=stack_name or f"{prefix}-pipeline",
        template=PIPELINE_TEMPLATE_PATH,
        parameters={"NamePrefix": prefix, **(parameters or {})},
    )


def converse_parameters(
    endpoint_url: str, joined: Mapping[str, str], parameters: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The converse stack's parameters: the joined ARNs (``JOINED`` keys of ``joined``), a
    fresh VPC's network, the image, then ``parameters`` over them."""
    subnet_id, group_id = create_task_network(endpoint_url)
    return {
        **{name: joined[name] for name in JOINED},
        "ContainerImage": DEFAULT_IMAGE,
        "Subnets": subnet_id,
        "SecurityGroupIds": group_id,
        **(parameters or {}),
    }


def deploy_converse(
    endpoint_url: str,
    *,
    joined: Mapping[str, str],
    stack_name: str = DEFAULT_STACK_NAME,
    parameters: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The converse stack alone, joined to the resources ``joined`` names by ARN; its
    outputs."""
    return apply_stack(
        endpoint_url,
        "create",
        stack_name=stack_name,
        template=TEMPLATE_PATH,
        parameters=converse_parameters(endpoint_url, joined, parameters),
    )


def deploy_stack(
    endpoint_url: str,
    *,
    stack_name: str = DEFAULT_STACK_NAME,
    parameters: Mapping[str, str] | None = None,
    pipeline_parameters: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """A whole stage: the pipeline stack named after ``stack_name`` (its resources under the
    same prefix), then the converse stack joined to it; both stacks' outputs together.

    ``parameters`` are the converse stack's, ``pipeline_parameters`` the pipeline stack's.
    """
    joined = deploy_pipeline(endpoint_url, prefix=stack_name, parameters=pipeline_parameters)
    converse = deploy_converse(
        endpoint_url, joined=joined, stack_name=stack_name, parameters=parameters
    )
    return {**joined, **converse}


def backlog_scaling_policy() -> dict[str, Any]:
    """The template's target-tracking scaling policy resource, as written."""
    return dict(load_template()["Resources"]["BacklogPerTaskScalingPolicy"])


def register_backlog_scaling(endpoint_url: str, outputs: Mapping[str, str]) -> dict[str, Any]:
    """Register the template's scalable target and scaling policy through the API.

    Values the template takes from parameters are their defaults; references resolve to the
    deployed stack's outputs. Returns the policy as ``describe_scaling_policies`` reports it.
    """
    template = load_template()
    defaults = {
        name: parameter["Default"]
        for name, parameter in template["Parameters"].items()
        if "Default" in parameter
    }
    queue_name = outputs["ConverseQueueUrl"].rstrip("/").rsplit("/", 1)[-1]
    refs: dict[str, Any] = {
        **{name: _number(value) for name, value in defaults.items()},
        "AWS::StackName": DEFAULT_STACK_NAME,
        "ConverseQueue.QueueName": queue_name,
        "Cluster": outputs["ClusterName"],
        "Service.Name": outputs["ServiceName"],
    }
    target = template["Resources"]["ScalableTarget"]["Properties"]
    policy = template["Resources"]["BacklogPerTaskScalingPolicy"]["Properties"]
    resource_id = f"service/{outputs['ClusterName']}/{outputs['ServiceName']}"
    policy_name = "mira-converse-backlog-per-task"

    autoscaling = aws_client("application-autoscaling", endpoint_url)
    autoscaling.register_scalable_target(
        ServiceNamespace=target["ServiceNamespace"],
        ResourceId=resource_id,
        ScalableDimension=target["ScalableDimension"],
        MinCapacity=resolve_intrinsics(target["MinCapacity"], refs),
        MaxCapacity=resolve_intrinsics(target["MaxCapacity"], refs),
    )
    autoscaling.put_scaling_policy(
        PolicyName=policy_name,
        ServiceNamespace=target["ServiceNamespace"],
        ResourceId=resource_id,
        ScalableDimension=target["ScalableDimension"],
        PolicyType=policy["PolicyType"],
        TargetTrackingScalingPolicyConfiguration=resolve_intrinsics(
            policy["TargetTrackingScalingPolicyConfiguration"], refs
        ),
    )
    described = autoscaling.describe_scaling_policies(
        ServiceNamespace=target["ServiceNamespace"], ResourceId=resource_id
    )["ScalingPolicies"]
    matching = [p for p in described if p["PolicyName"] == policy_name]
    if len(matching) != 1:
        raise RuntimeError(f"expected one policy {policy_name}, moto has {described!r}")
    return dict(matching[0])


def _number(value: Any) -> Any:
    """Parameter defaults as the API wants them: numbers for numeric strings."""
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return value
