"""The Extended Client pointer, parsed and sized without any network."""

from __future__ import annotations

import json
import re
from typing import Unpack

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
from worker.ports import SendOptions
from worker.turn.payloads import (
    OffloadingSender,
    PayloadKind,
    conversation_of,
    conversation_prefix,
    kind_of_key,
    payload_key,
)


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


def test_a_conversations_objects_share_one_fixed_length_prefix_per_kind() -> None:
    """``payloads/<32 hex>/<kind>/<64 hex>.json``: one ListObjectsV2 prefix finds them."""
    prefix = conversation_prefix("matter-1187")
    assert re.fullmatch(r"payloads/[0-9a-f]{32}/", prefix)
    for kind in PayloadKind:
        key = payload_key("matter-1187", "c-1", kind)
        assert key.startswith(prefix)
        assert re.fullmatch(rf"{prefix}{kind}/[0-9a-f]{{64}}\.json", key)
        assert kind_of_key(key) is kind
    assert payload_key("matter-1187", "c-1", PayloadKind.PROMPT) != payload_key(
        "matter-1187", "c-1", PayloadKind.FOLD
    )


@pytest.mark.parametrize(("one", "other"), [("a", "a/b"), ("a", "ab"), ("a/", "a"), ("", "x")])
def test_no_conversations_prefix_is_the_start_of_anothers_objects(one: str, other: str) -> None:
    """Ids whose texts start alike (``a`` and ``a/b``) get prefixes neither of which a key of
    the other starts with: the owner segment has a fixed length and never holds ``/``."""
    for kind in PayloadKind:
        assert not payload_key(other, "c-1", kind).startswith(conversation_prefix(one))
        assert not payload_key(one, "c-1", kind).startswith(conversation_prefix(other))


def test_objects_of_no_known_conversation_have_a_prefix_of_their_own() -> None:
    key = payload_key(None, "m-1", PayloadKind.DEAD_LETTER)
    assert key.startswith("payloads/unattributed/dead-letter/")
    assert kind_of_key(key) is PayloadKind.DEAD_LETTER
    assert not key.startswith(conversation_prefix("unattributed"))


@pytest.mark.parametrize(
    "key",
    ["payloads/" + "a" * 64 + ".json", "payloads/x/prompt/k.json", "producers/uuid", "payloads/"],
)
def test_keys_outside_the_scheme_have_no_kind(key: str) -> None:
    assert kind_of_key(key) is None


@pytest.mark.parametrize(
    ("body", "conversation"),
    [
        ('{"type": "converse", "conversation_id": "m-1", "message": " "}', "m-1"),
        ('{"conversation_id": "m-1"}', "m-1"),
        ('  {"conversation_id": "m/2", "type": "prompt"}', "m/2"),
        ('{"conversation_id": ""}', None),
        ('{"conversation_id": 7}', None),
        ('["software.amazon.payloadoffloading.PayloadS3Pointer", {}]', None),
        ("not json", None),
        ('{"conversation_id": "m-1"', None),
        ('"m-1"', None),
    ],
)
def test_a_body_names_its_conversation_when_it_is_an_object_holding_one(
    body: str, conversation: str | None
) -> None:
    assert conversation_of(body) == conversation


async def test_each_kind_is_filed_under_the_conversation_its_message_belongs_to() -> None:
    """Prompts and fold requests by their FIFO group (the conversation); a dead letter by the
    conversation its body names (its group is its own message id), else as unattributed."""
    store = MemoryObjects()
    sent: list[str] = []

    class Queue:
        async def send(self, body: str, **options: Unpack[SendOptions]) -> str:
            sent.append(body)
            return "id"

    def sender(kind: PayloadKind) -> OffloadingSender:
        return OffloadingSender(Queue(), store, bucket="b", inline_max_bytes=1, kind=kind)

    command = json.dumps({"type": "converse", "conversation_id": "m-1", "message": "q"})
    await sender(PayloadKind.PROMPT).send("{}", group_id="m-1", deduplication_id="c-1")
    await sender(PayloadKind.FOLD).send("{}", group_id="m-1", deduplication_id="compact:m-1:4:0")
    await sender(PayloadKind.DEAD_LETTER).send(command, group_id="id-1", deduplication_id="id-1")
    await sender(PayloadKind.DEAD_LETTER).send("junk", group_id="id-2", deduplication_id="id-2")
    assert list(store.objects) == [
        payload_key("m-1", "c-1", PayloadKind.PROMPT),
        payload_key("m-1", "compact:m-1:4:0", PayloadKind.FOLD),
        payload_key("m-1", "id-1", PayloadKind.DEAD_LETTER),
        payload_key(None, "id-2", PayloadKind.DEAD_LETTER),
    ]
    pointers = [parse_pointer(body, {}) for body in sent]
    assert [pointer[1] for pointer in pointers if pointer] == list(store.objects)


class MemoryObjects:
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    async def put(self, bucket: str, key: str, data: bytes) -> None:
        self.objects[key] = data

    async def get(self, bucket: str, key: str, *, max_bytes: int) -> bytes:
        return self.objects[key]
