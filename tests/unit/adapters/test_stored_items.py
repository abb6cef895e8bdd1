"""The one reader of stored items: every attribute the table declares is read as declared, and
anything else is refused with a reason that names the attribute, never raised.

Items are spelled as botocore's parser hands them over (``{"N": "42"}``); the bills through
boto3's own serializer (:func:`tests.stored.typed`), as a writer on boto3 stores them.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.stored import USAGE, bill_from, typed
from worker.adapters.stored_attributes import ATTRIBUTES, BY_NAME, MAX_TOKENS, StoredAttribute
from worker.adapters.stored_items import MessageReading, read_message, read_state
from worker.caching.anchor import SummarySnapshot, WindowAnchor
from worker.caching.bills import CacheExpectation, ExpectedPoint, ModelUsage
from worker.memory import FoldState, HistoryMessage
from worker.ports import StoredDefect

T0 = datetime(2026, 11, 30, 9, 0, 42, tzinfo=UTC)
BLOCK = CacheExpectation(
    prompt_tokens=2_290,
    expected_read_tokens=2_100,
    points=(ExpectedPoint("1h", 1_000), ExpectedPoint("5m", 1_160)),
)
BILL = ModelUsage(
    seq=6,
    input_tokens=50,
    read_tokens=1_000,
    write_tokens=700,
    written_5m=200,
    written_1h=500,
    answered_at=T0,
    command_id="c-8f2e",
    expected=BLOCK,
)


def answer_item(**changes: Any) -> dict[str, Any]:
    item: dict[str, Any] = {
        "pk": {"S": "matter-1187"},
        "sk": {"S": "msg#000000000006"},
        "seq": {"N": "6"},
        "role": {"S": "assistant"},
        "content": {"S": "Clause 14.2 allows termination on thirty days' notice."},
        "created_at": {"S": "2026-11-30T09:00:50Z"},
        "model_usage": typed(USAGE),
    }
    return {**item, **changes}


STATE: dict[str, Any] = {
    "pk": {"S": "matter-1187"},
    "sk": {"S": "state"},
    "folded_through": {"N": "40"},
    "fold_summary": {"S": "The matter so far."},
    "compaction_requested_through": {"N": "52"},
    "compaction_requested_at": {"S": "2026-11-30T08:59:00Z"},
    "compaction_request_version": {"N": "3"},
    "window_anchor": {"N": "41"},
    "window_anchor_folded_through": {"N": "40"},
    "window_summary": {"S": "The matter, as the anchor saw it."},
    "window_summary_folded_through": {"N": "38"},
}


# --- bills -----------------------------------------------------------------------------------


def test_a_bill_splits_the_writes_by_ttl_as_cache_details_bill_them() -> None:
    assert bill_from(USAGE) == BILL
    assert BILL.prompt_tokens == 1_750


def test_without_cache_details_every_write_is_5m_and_what_they_leave_out_is_5m_too() -> None:
    """Bedrock's default TTL is 5 minutes: no details, every written token is priced as a 5m
    one, and the bill says its split is unknown; a write the details do not cover counts as
    5m as well."""
    bare = {k: v for k, v in USAGE.items() if k != "cacheDetails"}
    assert bill_from(bare) == ModelUsage(
        **{**_fields(BILL), "written_5m": 700, "written_1h": 0, "details_known": False}
    )
    short = {**USAGE, "cacheDetails": [{"ttl": "1h", "inputTokens": 300}]}
    assert bill_from(short) == ModelUsage(**{**_fields(BILL), "written_5m": 400, "written_1h": 300})


def test_a_prompt_without_a_cache_point_has_no_cache_members_and_its_bill_reads_zero() -> None:
    uncached = bill_from({"inputTokens": 900, "outputTokens": 40})
    assert uncached == ModelUsage(6, 900, 0, 0, 0, 0, details_known=False)


def test_an_older_writers_answer_and_a_null_bill_have_no_bill_and_no_defect() -> None:
    assert bill_from(None) is None
    reading = read_message({k: v for k, v in answer_item().items() if k != "model_usage"})
    assert isinstance(reading, MessageReading)
    assert (reading.bill, reading.dropped_bill) == (None, None)


def _fields(usage: ModelUsage) -> dict[str, Any]:
    return {name: getattr(usage, name) for name in usage.__slots__}


def _dropped(plain: object) -> tuple[str, str]:
    read = bill_from(plain)
    assert isinstance(read, StoredDefect), read
    assert read.seq == 6
    return read.attribute, read.reason


@pytest.mark.parametrize(
    ("plain", "attribute", "reason"),
    [
        # The writer's bill that stopped whole matters: the ttl stored as a list.
        (
            {**USAGE, "cacheDetails": [{"ttl": ["5m"], "inputTokens": 500}]},
            "model_usage.cacheDetails[].ttl",
            "a list, not a string",
        ),
        ({**USAGE, "inputTokens": -1}, "model_usage.inputTokens", "outside 0 to 2,000,000"),
        (
            {**USAGE, "cacheReadInputTokens": -1000},
            "model_usage.cacheReadInputTokens",
            "outside 0 to 2,000,000",
        ),
        (
            {**USAGE, "cacheWriteInputTokens": 10**30},
            "model_usage.cacheWriteInputTokens",
            "outside 0 to 2,000,000",
        ),
        ({**USAGE, "inputTokens": 50.5}, "model_usage.inputTokens", "not a whole number"),
        ({**USAGE, "inputTokens": "50"}, "model_usage.inputTokens", "a string, not a number"),
        ({**USAGE, "inputTokens": True}, "model_usage.inputTokens", "a boolean, not a number"),
        ({k: v for k, v in USAGE.items() if k != "inputTokens"}, "model_usage.inputTokens",
         "missing"),
        ({**USAGE, "answered_at": "2026-11-30T09:00:42"}, "model_usage.answered_at",
         "not an RFC 3339 time with a zone"),
        ({**USAGE, "answered_at": "9999-12-31T23:59:45Z"}, "model_usage.answered_at",
         "outside 2000 to 2100"),
        ({**USAGE, "answered_at": "0001-01-01T00:00:00+01:00"}, "model_usage.answered_at",
         "outside 2000 to 2100"),
        ({**USAGE, "answered_at": "at nine"}, "model_usage.answered_at",
         "not an RFC 3339 time with a zone"),
        ({**USAGE, "command_id": 7}, "model_usage.command_id", "a number, not a string"),
        ({**USAGE, "command_id": "c" * 129}, "model_usage.command_id", "not 1 to 128 characters"),
        ({**USAGE, "cacheDetails": [{"ttl": "2h", "inputTokens": 5}]},
         "model_usage.cacheDetails[].ttl", "neither 5m nor 1h"),
        ({**USAGE, "cacheDetails": [{"ttl": "1h", "inputTokens": 701}]}, "model_usage.cacheDetails",
         "adds up to more than cacheWriteInputTokens"),
        ({**USAGE, "cacheDetails": {"ttl": "1h"}}, "model_usage.cacheDetails",
         "a map, not a list"),
        ({**USAGE, "expected": {"x": 1}}, "model_usage.expected.prompt_tokens", "missing"),
        ({**USAGE, "expected": {**BLOCK.as_json(), "expected_read_tokens": 2_291}},
         "model_usage.expected.expected_read_tokens", "outside 0 to 2,290"),
        ({**USAGE, "expected": {**BLOCK.as_json(), "points": "none"}},
         "model_usage.expected.points", "a string, not a list"),
        ({**USAGE, "expected": {**BLOCK.as_json(), "points": [{"ttl": "5m"}] * 5}},
         "model_usage.expected.points", "more than 4"),
        ({**USAGE, "expected": {**BLOCK.as_json(), "points": [{"ttl": "5m"}]}},
         "model_usage.expected.points[].prefix_tokens", "missing"),
        ("a bill", "model_usage", "a string, not a map"),
        ([USAGE], "model_usage", "a list, not a map"),
    ],
)  # fmt: skip
def test_a_malformed_bill_is_dropped_whole_with_the_attribute_and_why(
    plain: object, attribute: str, reason: str
) -> None:
    assert _dropped(plain) == (attribute, reason)


def test_a_count_at_dynamodbs_limits_is_refused_not_computed_with() -> None:
    usage = typed(USAGE)
    for huge in ("9.9999999999999999999999999999999999999E+125", "1E-130", "-0.5", "1E+30"):
        usage["M"]["inputTokens"] = {"N": huge}
        read = read_message(answer_item(model_usage=usage))
        assert isinstance(read, MessageReading) and read.bill is None
        assert read.dropped_bill is not None
        assert read.dropped_bill.attribute == "model_usage.inputTokens"


def test_the_largest_real_count_is_a_count() -> None:
    top = bill_from({"inputTokens": MAX_TOKENS})
    assert isinstance(top, ModelUsage) and top.input_tokens == MAX_TOKENS


# --- messages --------------------------------------------------------------------------------


def test_an_answer_reads_with_its_bill() -> None:
    read = read_message(answer_item())
    assert read == MessageReading(
        HistoryMessage(6, "assistant", answer_item()["content"]["S"], T0.replace(second=50)),
        bill=BILL,
    )


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"sk": {"S": "msg#abc"}}, "sk: not a message key (a stray item)"),
        ({"sk": {"S": "note#000000000006"}}, "sk: not a message key (a stray item)"),
        ({"sk": {"S": "msg#000000000000"}, "seq": {"N": "0"}}, "sk: seq 0 (seqs start at 1)"),
        ({"seq": {"N": "7"}}, "seq: not the key's own"),
        ({"seq": {"N": "6.5"}}, "seq: not a whole number"),
        ({"seq": {"S": "6"}}, "seq: a string, not a number"),
        ({"role": {"S": "system"}}, "role: neither user nor assistant"),
        ({"role": {"SS": ["user"]}}, "role: a string set, not a string"),
        ({"role": {"NULL": True}}, "role: missing"),
        ({"content": {"B": b"clause"}}, "content: a binary, not a string"),
        ({"content": {"L": [{"S": "clause"}]}}, "content: a list, not a string"),
    ],
)
def test_a_malformed_message_is_left_out_with_its_reason(
    changes: dict[str, Any], reason: str
) -> None:
    assert read_message(answer_item(**changes)) == reason


def test_a_message_without_its_seq_takes_the_keys() -> None:
    item = {k: v for k, v in answer_item().items() if k != "seq"}
    read = read_message(item)
    assert isinstance(read, MessageReading) and read.message.seq == 6


@pytest.mark.parametrize(
    "created_at",
    [
        {"S": "2026-11-30T09:00:50"},  # no zone: local time stamped as UTC is the common bug
        {"S": "0001-01-01T00:00:00Z"},
        {"S": "9999-12-31T23:59:59Z"},
        {"N": "1764493250"},
    ],
    ids=["no zone", "year 1", "year 9999", "a number"],
)
def test_a_malformed_created_at_keeps_the_message_and_reads_as_no_time(
    created_at: dict[str, str],
) -> None:
    read = read_message(answer_item(created_at=created_at))
    assert isinstance(read, MessageReading)
    assert read.message.created_at is None
    assert [d.attribute for d in read.ignored] == ["created_at"]
    assert read.ignored[0].seq == 6
    assert read.bill == BILL


def test_a_zone_other_than_utc_is_the_same_moment_in_utc() -> None:
    read = read_message(answer_item(created_at={"S": "2026-11-30T10:30:50+01:30"}))
    assert isinstance(read, MessageReading)
    assert read.message.created_at == datetime(2026, 11, 30, 9, 0, 50, tzinfo=UTC)


# --- the state item --------------------------------------------------------------------------


def test_a_state_item_reads_its_fold_state_and_anchor() -> None:
    reading = read_state(STATE)
    assert reading.state == FoldState(
        folded_through=40,
        summary="The matter so far.",
        requested_through=52,
        requested_at=datetime(2026, 11, 30, 8, 59, tzinfo=UTC),
        request_version=3,
    )
    assert reading.anchor == WindowAnchor(
        41, 40, snapshot=SummarySnapshot("The matter, as the anchor saw it.", 38)
    )
    assert (reading.ignored, reading.refusal) == ((), None)


def test_null_attributes_of_the_state_item_read_as_absent() -> None:
    nulls = {name: {"NULL": True} for name in STATE if name not in ("pk", "sk")}
    reading = read_state({**STATE, **nulls})
    assert (reading.state, reading.anchor, reading.ignored, reading.refusal) == (
        FoldState(),
        None,
        (),
        None,
    )


@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        ("folded_through", {"S": "40"}, "a string, not a number"),
        ("folded_through", {"N": "-1"}, "outside 0 to 999,999,999,999"),
        ("folded_through", {"N": "1E+30"}, "outside 0 to 999,999,999,999"),
        ("folded_through", {"N": "40.5"}, "not a whole number"),
        ("fold_summary", {"L": [{"S": "The matter so far."}]}, "a list, not a string"),
        ("fold_summary", {"B": b"The matter"}, "a binary, not a string"),
    ],
)
def test_the_fold_mark_or_summary_malformed_refuses_the_command_naming_it(
    name: str, value: dict[str, Any], reason: str
) -> None:
    """No reading of them is safe: the mark says what the summary covers, and the summary is
    the conversation's older memory."""
    assert read_state({**STATE, name: value}).refusal == StoredDefect(name, reason)


def test_a_malformed_request_mark_reads_as_no_request() -> None:
    reading = read_state(
        {
            **STATE,
            "compaction_requested_through": {"N": "-52"},
            "compaction_requested_at": {"S": "2026-11-30T08:59:00"},
        }
    )
    assert (reading.state.requested_through, reading.state.requested_at) == (None, None)
    assert [d.attribute for d in reading.ignored] == [
        "compaction_requested_through",
        "compaction_requested_at",
    ]
    assert reading.refusal is None


@pytest.mark.parametrize(
    ("value", "as_stored"),
    [
        ({"N": "2.5"}, ("N", "2.5")),
        ({"N": "-3"}, ("N", "-3")),
        ({"S": "three"}, ("S", "three")),
        ({"L": [{"N": "3"}]}, ("L", None)),
        ({"BOOL": True}, ("BOOL", None)),
    ],
)
def test_an_unreadable_request_version_is_kept_as_stored_for_the_claims_condition(
    value: dict[str, Any], as_stored: tuple[str, str | None]
) -> None:
    reading = read_state({**STATE, "compaction_request_version": value})
    assert reading.state.request_version == 0
    assert reading.state.unreadable_version == as_stored
    assert [d.attribute for d in reading.ignored] == ["compaction_request_version"]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("window_anchor", {"N": "0"}),
        ("window_anchor", {"S": "41"}),
        ("window_anchor_folded_through", {"N": "-1"}),
    ],
)
def test_a_malformed_anchor_reads_as_none_the_window_re_anchors(
    name: str, value: dict[str, Any]
) -> None:
    reading = read_state({**STATE, name: value})
    assert reading.anchor is None
    assert [d.attribute for d in reading.ignored] == [name]
    assert reading.state == read_state(STATE).state


def test_a_malformed_snapshot_leaves_the_anchor_without_one() -> None:
    for name, value in (("window_summary", {"N": "1"}), ("window_summary_folded_through", {})):
        reading = read_state({**STATE, name: value})
        assert reading.anchor == WindowAnchor(41, 40, snapshot=None), name
        assert [d.attribute for d in reading.ignored] == [name]


# --- the declaration -------------------------------------------------------------------------

WRONG_TYPE: dict[str, Any] = {"BOOL": True}


def _set(item: dict[str, Any], path: str, value: object) -> dict[str, Any]:
    """``item`` with the attribute at ``path`` (``a.b``, ``a[]`` for a list's first element,
    as the declaration names them) set to ``value``."""
    changed = copy.deepcopy(item)
    where: dict[str, Any] = changed
    parts = path.split(".")
    for part in parts[:-1]:
        member = where[part.removesuffix("[]")]
        where = member["L"][0]["M"] if part.endswith("[]") else member["M"]
    last = parts[-1]
    if last.endswith("[]"):
        where[last.removesuffix("[]")]["L"][0] = value
    else:
        where[last] = value
    return changed


def _found(attribute: StoredAttribute) -> set[str]:
    """The attributes the reader names when ``attribute`` holds a value of the wrong type."""
    if attribute.item == "state":
        reading = read_state(_set(STATE, attribute.name, WRONG_TYPE))
        named = [d.attribute for d in reading.ignored]
        return {*named, *([reading.refusal.attribute] if reading.refusal else [])}
    read = read_message(_set(answer_item(), attribute.name, WRONG_TYPE))
    if isinstance(read, str):
        return {read.split(":", 1)[0]}
    dropped = [read.dropped_bill.attribute] if read.dropped_bill else []
    return {*dropped, *(d.attribute for d in read.ignored)}


@pytest.mark.parametrize("attribute", ATTRIBUTES, ids=[f"{a.item}:{a.name}" for a in ATTRIBUTES])
def test_every_declared_attribute_is_read_and_a_wrong_type_is_named_as_declared(
    attribute: StoredAttribute,
) -> None:
    assert _found(attribute) == {attribute.name}
    assert BY_NAME[(attribute.item, attribute.name)] is attribute
