"""The dead-letter tool's pure parts: age buckets and the copy a redrive sends."""

from __future__ import annotations

import pytest

from worker.cli.dlq import age_bucket, copy_of
from worker.ports import ReceivedMessage

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("age_seconds", "bucket"),
    [(0, "< 1 h"), (3_599, "< 1 h"), (3_600, "1 h – 1 d"), (86_400, "1 d – 7 d"),
     (7 * 86_400, ">= 7 d"), (-5, "< 1 h")],
)  # fmt: skip
def test_messages_fall_in_age_buckets_by_when_they_were_first_sent(
    age_seconds: int, bucket: str
) -> None:
    assert age_bucket(int((NOW - age_seconds) * 1000), NOW) == bucket


def test_a_message_without_a_sent_timestamp_has_an_unknown_age() -> None:
    assert age_bucket(None, NOW) == "unknown"


def test_a_redriven_copy_keeps_body_and_attributes_and_drops_the_stages_own() -> None:
    message = ReceivedMessage(
        "m-1",
        "r-1",
        '["software.amazon.payloadoffloading.PayloadS3Pointer", {}]',
        attributes={
            "ExtendedPayloadSize": "2000000",
            "RejectionReason": "body is not valid JSON",
            "RejectedMessageId": "m-0",
            "Custom": "kept",
        },
    )
    copy = copy_of(message)
    assert copy.body == message.body
    assert copy.attributes == {"ExtendedPayloadSize": 2_000_000, "Custom": "kept"}
