"""The Extended Client pointer, parsed and sized without any network."""

from __future__ import annotations

import json

import pytest

from worker.delivery.pointers import (
    LEGACY_POINTER_CLASS,
    POINTER_CLASS,
    attributes_size,
    message_size,
    parse_pointer,
    pointer_body,
)
from worker.errors import RejectedCommand
from worker.turn.payloads import payload_key


def test_the_pointer_is_written_as_the_python_extended_client_writes_it() -> None:
    assert pointer_body("b", "k") == (
        '["software.amazon.payloadoffloading.PayloadS3Pointer", '
        '{"s3BucketName": "b", "s3Key": "k"}]'
    )


@pytest.mark.parametrize("cls", [POINTER_CLASS, LEGACY_POINTER_CLASS])
@pytest.mark.parametrize("separators", [(", ", ": "), (",", ":")])
@pytest.mark.parametrize(
    "attributes", [{}, {"ExtendedPayloadSize": "10"}, {"SQSLargePayloadSize": "10"}]
)
def test_pointers_are_recognised_in_every_dialect(
    cls: str, separators: tuple[str, str], attributes: dict[str, str]
) -> None:
    body = json.dumps([cls, {"s3BucketName": "b", "s3Key": "k/1.json"}], separators=separators)
    assert parse_pointer(body, attributes) == ("b", "k/1.json")


@pytest.mark.parametrize(
    "body",
    [
        json.dumps({"type": "converse"}),
        json.dumps(["something.Else", {"s3BucketName": "b", "s3Key": "k"}]),
        json.dumps([POINTER_CLASS, {"s3BucketName": "b"}]),
        '["not json',
    ],
)
def test_other_bodies_are_not_pointers(body: str) -> None:
    assert parse_pointer(body, {}) is None


def test_a_size_attribute_on_a_body_that_is_no_pointer_is_rejected() -> None:
    with pytest.raises(RejectedCommand, match="not an S3 pointer"):
        parse_pointer('{"type": "converse"}', {"ExtendedPayloadSize": "5"})


def test_sizes_count_utf8_bytes_and_attributes_as_sqs_does() -> None:
    assert message_size("é") == 2
    # name + data type + value: "ExtendedPayloadSize" (19) + "Number" (6) + "1234" (4)
    assert attributes_size({"ExtendedPayloadSize": 1234}) == 29
    assert attributes_size({"R": "ab"}) == 1 + 6 + 2
    assert message_size("ab", {"R": "ab"}) == 11


def test_payload_keys_are_deterministic_and_under_the_prefix() -> None:
    key = payload_key("matter-1", "c-1")
    assert key == payload_key("matter-1", "c-1")
    assert key != payload_key("matter-1", "c-2")
    assert key.startswith("payloads/")
    assert key.endswith(".json")
