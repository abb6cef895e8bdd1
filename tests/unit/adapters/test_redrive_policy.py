"""A converse queue's RedrivePolicy is read at start-up; one SQS did not write stops the
worker with a one-line reason instead of a traceback."""

from __future__ import annotations

import json

import pytest

from worker.adapters.sqs import dead_letter_target
from worker.errors import ConfigError


def test_the_dead_letter_queue_is_read_from_the_policy_sqs_writes() -> None:
    policy = json.dumps(
        {
            "deadLetterTargetArn": "arn:aws:sqs:eu-west-1:123456789012:mira-converse-dlq",
            "maxReceiveCount": "5",
        }
    )
    assert dead_letter_target(policy) == ("123456789012", "mira-converse-dlq")


@pytest.mark.parametrize(
    ("policy", "reason"),
    [
        ("not json", "no readable deadLetterTargetArn"),
        ('{"maxReceiveCount": "5"}', "no readable deadLetterTargetArn"),
        ('["arn:aws:sqs:eu-west-1:1:q"]', "no readable deadLetterTargetArn"),
        ('{"deadLetterTargetArn": 7}', "not an SQS queue's ARN"),
        ('{"deadLetterTargetArn": "mira-converse-dlq"}', "not an SQS queue's ARN"),
        ('{"deadLetterTargetArn": "arn:aws:sns:eu-west-1:1:topic"}', "not an SQS queue's ARN"),
        ('{"deadLetterTargetArn": "arn:aws:sqs:eu-west-1::q"}', "not an SQS queue's ARN"),
    ],
)
def test_a_policy_sqs_did_not_write_is_a_one_line_config_error(policy: str, reason: str) -> None:
    with pytest.raises(ConfigError) as raised:
        dead_letter_target(policy)
    message = str(raised.value)
    assert message.startswith("CONVERSE_QUEUE_URL: ")
    assert reason in message
    assert "\n" not in message
    assert raised.value.__cause__ is None
