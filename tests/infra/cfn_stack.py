"""The template as CloudFormation would resolve it for one concrete stack: an account, a
region, a stack name, a generated bucket name and parameter values.

:class:`ConcreteStack` gives every ``Ref`` and ``Fn::GetAtt`` the value CloudFormation gives it
for the resource types the stage uses (queue URLs and ARNs, table and bucket ARNs, the log
group's ARN), and :meth:`ConcreteStack.resolve` evaluates ``Ref``, ``Fn::GetAtt``, ``Fn::Sub``
(both forms), ``Fn::Select``, ``Fn::Split`` and ``Fn::Join`` over them, after deciding each
``Fn::If`` by the template's conditions for the stack's parameters (``AWS::NoValue`` removed:
tests/infra/cfn_conditions.py). Anything else raises: a policy check must know every value it
evaluates.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.infra.cfn_conditions import evaluate_conditions, parameter_values, render_value
from tests.infra.cfn_yaml import load_template

_SUB_VARIABLE = re.compile(r"\$\{([^}!][^}]*)\}")


@dataclass(frozen=True)
class ConcreteStack:
    account: str = "111122223333"
    region: str = "eu-west-1"
    partition: str = "aws"
    name: str = "mira"
    #: S3 names are global, so the template lets CloudFormation generate the bucket's.
    bucket: str = "mira-payloadbucket-1a2b3c4d5e6f"
    parameters: Mapping[str, str] = field(
        default_factory=lambda: {
            "ContainerImage": (
                "111122223333.dkr.ecr.eu-west-1.amazonaws.com/mira-converse-worker:0.1.0"
            )
        }
    )
    template: Mapping[str, Any] = field(default_factory=load_template)

    # ------------------------------------------------------------------ values

    def joined(self) -> dict[str, str]:
        """The ARNs of what the converse stack joins, as a pipeline stack named after it in
        the same account and Region makes them (pipeline-resources.yaml): ``mira-history``,
        ``mira-model``, ``mira-compaction``."""
        regional = f"arn:{self.partition}:%s:{self.region}:{self.account}"
        return {
            "HistoryTableArn": f"{regional % 'dynamodb'}:table/{self.name}-history",
            "ModelQueueArn": f"{regional % 'sqs'}:{self.name}-model",
            "CompactionQueueArn": f"{regional % 'sqs'}:{self.name}-compaction",
        }

    def given(self) -> dict[str, str]:
        """The parameters given: ``parameters``, over :meth:`joined` where the template
        takes them."""
        taken = self.template["Parameters"]
        return {
            **{name: arn for name, arn in self.joined().items() if name in taken},
            **{name: value for name, value in self.parameters.items() if name in taken},
        }

    def conditions(self) -> dict[str, bool]:
        """Each of the template's conditions, for this stack's parameters."""
        return evaluate_conditions(self.template, parameter_values(self.template, self.given()))

    def values(self) -> dict[str, Any]:
        """Every name a ``Ref`` or ``Fn::GetAtt`` can take: ``X`` and ``X.Attribute``."""
        values: dict[str, Any] = {
            "AWS::AccountId": self.account,
            "AWS::Region": self.region,
            "AWS::Partition": self.partition,
            "AWS::StackName": self.name,
            "AWS::URLSuffix": "amazonaws.com",
        }
        given = self.given()
        for name, parameter in self.template["Parameters"].items():
            if name in given:
                values[name] = given[name]
            elif "Default" in parameter:
                values[name] = parameter["Default"]
        conditions = self.conditions()
        for logical_id, resource in self.template["Resources"].items():
            if conditions.get(resource.get("Condition", ""), True):
                rendered = render_value(resource, conditions)
                values.update(self._resource_values(logical_id, rendered, values))
        return values

    def _resource_values(
        self, logical_id: str, resource: Mapping[str, Any], known: Mapping[str, Any]
    ) -> dict[str, Any]:
        properties = resource.get("Properties", {})
        arn = f"arn:{self.partition}"
        regional = f"{self.region}:{self.account}"
        generated = f"{self.name}-{logical_id}-1A2B3C4D5E6F"
        match resource["Type"]:
            case "AWS::SQS::Queue":
                name = self._resolve(properties.get("QueueName", generated), known)
                return {
                    logical_id: f"https://sqs.{self.region}.amazonaws.com/{self.account}/{name}",
                    f"{logical_id}.Arn": f"{arn}:sqs:{regional}:{name}",
                    f"{logical_id}.QueueName": name,
                }
            case "AWS::DynamoDB::Table":
                name = self._resolve(properties.get("TableName", generated), known)
                return {
                    logical_id: name,
                    f"{logical_id}.Arn": f"{arn}:dynamodb:{regional}:table/{name}",
                }
            case "AWS::S3::Bucket":
                return {logical_id: self.bucket, f"{logical_id}.Arn": f"{arn}:s3:::{self.bucket}"}
            case "AWS::Logs::LogGroup":
                return {
                    logical_id: generated,
                    f"{logical_id}.Arn": f"{arn}:logs:{regional}:log-group:{generated}:*",
                }
            case "AWS::IAM::Role":
                return {
                    logical_id: generated,
                    f"{logical_id}.Arn": f"{arn}:iam::{self.account}:role/{generated}",
                }
            case "AWS::CloudWatch::Alarm":
                return {
                    logical_id: generated,
                    f"{logical_id}.Arn": f"{arn}:cloudwatch:{regional}:alarm:{generated}",
                }
            case "AWS::ECS::Service":
                return {
                    logical_id: f"{arn}:ecs:{regional}:service/{generated}",
                    f"{logical_id}.Name": generated,
                }
            case _:
                return {logical_id: generated}

    def task_environment(self) -> dict[str, Any]:
        """The worker container's environment in the task definition, resolved: name ->
        value."""
        task = self.template["Resources"]["TaskDefinition"]["Properties"]
        (container,) = self.resolve(task["ContainerDefinitions"])
        return {entry["Name"]: entry["Value"] for entry in container["Environment"]}

    # ------------------------------------------------------------------ resolution

    def resolve(self, value: Any) -> Any:
        """``value`` with every intrinsic function evaluated for this stack."""
        return self._resolve(render_value(value, self.conditions()), self.values())

    def _resolve(self, value: Any, values: Mapping[str, Any]) -> Any:
        if isinstance(value, list):
            return [self._resolve(item, values) for item in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, argument),) = value.items()
            if key == "Ref":
                return _lookup(values, argument)
            if key == "Fn::GetAtt":
                logical_id, attribute = argument
                return _lookup(values, f"{logical_id}.{attribute}")
            if key == "Fn::Sub":
                return self._sub(argument, values)
            if key == "Fn::Select":
                index, items = argument
                return self._resolve(items, values)[int(index)]
            if key == "Fn::Split":
                delimiter, source = argument
                return str(self._resolve(source, values)).split(delimiter)
            if key == "Fn::Join":
                delimiter, items = argument
                return delimiter.join(str(item) for item in self._resolve(items, values))
            if key.startswith("Fn::"):
                raise NotImplementedError(f"{key} is not resolved here: {value!r}")
        return {key: self._resolve(item, values) for key, item in value.items()}

    def _sub(self, argument: Any, values: Mapping[str, Any]) -> str:
        if isinstance(argument, str):
            text, local = argument, {}
        else:
            text, variables = argument
            local = {name: self._resolve(item, values) for name, item in variables.items()}

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            return str(local[name] if name in local else _lookup(values, name))

        return _SUB_VARIABLE.sub(replace, text).replace("${!", "${")


def _lookup(values: Mapping[str, Any], name: str) -> Any:
    if name not in values:
        raise KeyError(f"{name} has no value in this stack (unknown resource or attribute)")
    return values[name]


def queue_arn_from_url(url: str, partition: str = "aws") -> str:
    """The ARN SQS authorises a call on: ``https://sqs.<region>.amazonaws.com/<account>/<name>``
    names the queue ``arn:<partition>:sqs:<region>:<account>:<name>``."""
    match = re.fullmatch(r"https://sqs\.([a-z0-9-]+)\.amazonaws\.com/(\d{12})/([\w-]+)", url)
    if match is None:
        raise ValueError(f"not an SQS queue URL: {url!r}")
    region, account, name = match.groups()
    return f"arn:{partition}:sqs:{region}:{account}:{name}"
