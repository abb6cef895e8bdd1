"""Deploy the converse stage's CloudFormation template to a local moto server.

:func:`deploy_stack` is the one way tests put the stack up: the infra tests check what it
creates, and a worker-side test can run the real worker against its outputs.

moto's CloudFormation leaves some resource types out (Application Auto Scaling, CloudWatch
alarms, the bucket policy) with a ``UserWarning``; the project turns warnings into errors, so
the deploy ignores exactly that warning. :func:`register_backlog_scaling` then puts the
template's scaling policy in through the Application Auto Scaling API, which moto does serve.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import boto3

from tests.infra.cfn_yaml import TEMPLATE_PATH, load_template, resolve_intrinsics

REGION = "us-east-1"
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


def deploy_stack(
    endpoint_url: str,
    *,
    stack_name: str = DEFAULT_STACK_NAME,
    parameters: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Create the stack on the moto server at ``endpoint_url``; return its outputs by key.

    The network parameters come from a fresh VPC; ``parameters`` override or add others.
    Raises ``RuntimeError`` with the stack's events if it does not reach CREATE_COMPLETE.
    """
    subnet_id, group_id = create_task_network(endpoint_url)
    values = {
        "ContainerImage": DEFAULT_IMAGE,
        "Subnets": subnet_id,
        "SecurityGroupIds": group_id,
        **(parameters or {}),
    }
    cloudformation = aws_client("cloudformation", endpoint_url)
    # The filter is process-wide while it is in place, which is what reaches moto's server
    # thread; it is lifted as soon as the stack is up.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=MOTO_SKIPPED_RESOURCE_WARNING)
        cloudformation.create_stack(
            StackName=stack_name,
            TemplateBody=TEMPLATE_PATH.read_text(encoding="utf-8"),
            Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in values.items()],
            Capabilities=["CAPABILITY_IAM"],
        )
        cloudformation.get_waiter("stack_create_complete").wait(
            StackName=stack_name, WaiterConfig={"Delay": 1, "MaxAttempts": 30}
        )
    stack = cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0]
    if stack["StackStatus"] != "CREATE_COMPLETE":
        events = cloudformation.describe_stack_events(StackName=stack_name)["StackEvents"]
        raise RuntimeError(f"stack {stack_name} is {stack['StackStatus']}: {events!r}")
    return {output["OutputKey"]: output["OutputValue"] for output in stack.get("Outputs", [])}


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
