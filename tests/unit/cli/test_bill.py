"""``worker bill`` over a hand-built history table: each answer's bill, its check and its
miss's cause, the totals, and the sliding window's estimate beside them, every figure worked
out by hand from the contract's prices (1x uncached, 0.1x read, 1.25x written for 5m, 2x
for 1h); and no content in what it prints."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from localaws.model_stage import attribute
from tests.conftest import settings as make_settings
from worker.adapters.dynamodb import history_page
from worker.cli import bill_report
from worker.cli.bill_report import bill_json, bill_lines, read_bill
from worker.ports import HistoryPage

SECRET = "PRIVILEGED"
CONVERSATION = "matter-9"
#: The model's minimum prefix, low enough that the summary (100 tokens) can be cached.
SETTINGS = make_settings(prompt_cache_min_tokens=100)


@dataclass
class ItemTable:
    """One conversation's items as DynamoDB holds them; a Query is answered as the service
    answers the stage's (newest first, ``state`` first, at most ``limit`` items, the next
    page's start in ``LastEvaluatedKey``) and parsed by the stage's own adapter."""

    items: list[dict[str, Any]] = field(default_factory=list)
    queries: list[str | None] = field(default_factory=list)

    async def load_page(
        self, conversation_id: str, limit: int, *, older_than: str | None = None
    ) -> HistoryPage:
        self.queries.append(older_than)
        ours = [i for i in self.items if i["pk"]["S"] == conversation_id]
        newest_first = sorted(ours, key=lambda i: i["sk"]["S"], reverse=True)
        below = [i for i in newest_first if older_than is None or i["sk"]["S"] < older_than]
        read = below[:limit]
        response: dict[str, Any] = {"Items": read}
        if len(read) == limit:
            response["LastEvaluatedKey"] = {"pk": {"S": conversation_id}, "sk": read[-1]["sk"]}
        return history_page(response)  # type: ignore[arg-type]


def message(seq: int, role: str, chars: int, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    item = {
        "pk": {"S": CONVERSATION},
        "sk": {"S": f"msg#{seq:012d}"},
        "seq": {"N": str(seq)},
        "role": {"S": role},
        "content": {"S": f"{SECRET} {role} {seq} ".ljust(chars, "x")},
    }
    if usage is not None:
        item["model_usage"] = attribute(usage)
    return item


def bill(
    at: str,
    command: str,
    *,
    uncached: int,
    read: int,
    written: int,
    ttl: str = "5m",
    expected: tuple[int, int, list[int]] | None = None,
) -> dict[str, Any]:
    """A ``model_usage`` as the writer stores it; ``expected``: the payload's prompt tokens,
    expected read and its (5m) points' prefixes."""
    usage: dict[str, Any] = {
        "inputTokens": uncached,
        "cacheReadInputTokens": read,
        "cacheWriteInputTokens": written,
        "cacheDetails": [{"ttl": ttl, "inputTokens": written}] if written else [],
        "answered_at": at,
        "command_id": command,
    }
    if expected is not None:
        prompt, want, points = expected
        usage["expected"] = {
            "prompt_tokens": prompt,
            "expected_read_tokens": want,
            "points": [{"ttl": "5m", "prefix_tokens": p} for p in points],
        }
    return usage


def served_conversation() -> ItemTable:
    """Five exchanges (questions 10 tokens, answers 20) under a 100-token summary; the first
    answer came from an older writer (no bill). The prompts were cache-aligned: each one
    expected to read the previous prompt's history point. Real prompt tokens are the
    estimate + 60 (the model stage's own system prompt)."""
    table = ItemTable()
    table.items += [
        message(1, "user", 40),
        message(2, "assistant", 80),
        message(3, "user", 40),
        message(
            4,
            "assistant",
            80,
            bill(
                "2026-11-30T09:00:00Z",
                "c-2",
                uncached=10,
                read=0,
                written=190,
                expected=(140, 0, [100, 130]),
            ),
        ),
        message(5, "user", 40),
        message(
            6,
            "assistant",
            80,
            bill(
                "2026-11-30T09:02:00Z",
                "c-3",
                uncached=10,
                read=190,
                written=30,
                expected=(170, 130, [100, 160]),
            ),
        ),
        message(7, "user", 40),
        # 18 minutes later: every 5m entry is dead.
        message(
            8,
            "assistant",
            80,
            bill(
                "2026-11-30T09:20:00Z",
                "c-4",
                uncached=10,
                read=0,
                written=250,
                expected=(200, 160, [100, 190]),
            ),
        ),
        message(9, "user", 40),
        # A writer that passed the bill on but not the payload's expectation; written 1h.
        message(
            10,
            "assistant",
            80,
            bill("2026-11-30T09:21:00Z", "c-5", uncached=10, read=250, written=30, ttl="1h"),
        ),
        {
            "pk": {"S": CONVERSATION},
            "sk": {"S": "state"},
            "fold_summary": {"S": f"{SECRET} summary ".ljust(400, "s")},
        },
    ]
    return table


async def test_each_answer_its_bill_its_miss_and_the_totals_beside_the_sliding_estimate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """GIVEN a served conversation read a page of 4 items at a time, WHEN the operator asks
    for its bill, THEN every answer is a line with its observed figures, the one miss is
    `expired`, and the sliding window's estimate stands beside the observed totals."""
    monkeypatch.setattr(bill_report, "BILL_PAGE_ITEMS", 4)
    table = served_conversation()

    lines = bill_lines(await read_bill(table, CONVERSATION, SETTINGS.plan_config))

    # Billed units, by hand: uncached + 0.1 x read + 1.25 x written 5m + 2 x written 1h.
    billed = [
        10 + 1.25 * 190,  # 247.50
        10 + 0.1 * 190 + 1.25 * 30,  # 66.50
        10 + 1.25 * 250,  # 322.50
        10 + 0.1 * 250 + 2 * 30,  # 95.00
    ]
    assert sum(billed) == 731.5
    # The sliding window's estimate: the same turns, each prompt = the model stage's system
    # prompt (60, the calibration's offset) + the summary (100) + the history before the
    # question + the question; the summary's point (160 tokens) is the only one. Written
    # at 09:00 (0 s), read at 09:02 (120 s, alive until 300), dead at 09:20 (1,200 s: it
    # lived until 420), written again, read at 09:21 (1,260 s).
    prompts = [60 + 100 + 10 + 20 + 10, 230, 260, 290]
    sliding = [
        (prompts[0] - 160) + 1.25 * 160,  # 240
        (prompts[1] - 160) + 0.1 * 160,  # 86
        (prompts[2] - 160) + 1.25 * 160,  # 300
        (prompts[3] - 160) + 0.1 * 160,  # 146
    ]
    assert sum(sliding) == 772
    # The calibration when each answer was checked: from two answers (140 and 170 estimated,
    # 200 and 230 billed) the line 1 x estimate + 60, the ratio held near 1 by its prior so
    # that two close estimates do not fold the model stage's prompt into it: 130 -> 190; then
    # the line through all three, 1 x estimate + 60 again: 160 -> 220.
    assert lines == [
        "conversation matter-9: the bill, observed (the model_usage stored with each answer; "
        "nothing sent, nothing written)",
        "history: 10 messages read in 3 Queries; 4 answers with a bill, 1 without",
        "calibration: real tokens = 1.000 x estimate + 60 (from 3 answers)",
        "     seq  answered_at           command        input     read  wrote 5m  wrote 1h"
        "      billed  exp. read  miss",
        "       2  no bill stored (1 answer)",
        "       4  2026-11-30T09:00:00Z  c-2               10        0       190         0"
        "      247.50          0  -",
        "       6  2026-11-30T09:02:00Z  c-3               10      190        30         0"
        "       66.50        190  -",
        "       8  2026-11-30T09:20:00Z  c-4               10        0       250         0"
        "      322.50        220  expired",
        "      10  2026-11-30T09:21:00Z  c-5               10      250         0        30"
        "       95.00          -  no expectation stored",
        "observed, 4 answers: input 40, read 440, written 470 (5m) + 30 (1h); billed 731.50 "
        "input-token units (980 tokens without a cache)",
        "misses: 1 of 3 checked (expired 1)",
        "sliding window, ESTIMATED for the same 4 turns (chars/4 scaled by the calibration; the "
        "stage's cache model at the answers' times; today's summary (fold mark 0)): read 320, "
        "written 320 (5m), uncached 340; billed 772.00 input-token units",
        f"observed / sliding estimate: {731.5 / 772:.2f}",
    ]
    assert table.queries == [None, "msg#000000000008", "msg#000000000004"]


async def test_the_json_bill_holds_the_same_figures_and_marks_the_estimate() -> None:
    bill_ = bill_json(await read_bill(served_conversation(), CONVERSATION, SETTINGS.plan_config))
    text = json.dumps(bill_)
    assert SECRET not in text
    assert [a["seq"] for a in bill_["answers"]] == [4, 6, 8, 10]  # type: ignore[index]
    assert bill_["unbilled"] == [{"first_seq": 2, "last_seq": 2, "count": 1}]
    assert bill_["answers"][2]["cause"] == "expired"  # type: ignore[index]
    assert bill_["answers"][2]["expected_read"] == 160  # type: ignore[index]
    assert bill_["answers"][2]["expected_read_calibrated"] == 220  # type: ignore[index]
    assert bill_["sliding_estimate"] == {
        "estimate": True,
        "turns": 4,
        "read": pytest.approx(320.0, rel=1e-5),
        "written": pytest.approx(320.0, rel=1e-5),
        "uncached": pytest.approx(340.0, rel=1e-5),
        "billed_units": pytest.approx(772.0, rel=1e-5),
        "without_question": 0,
    }


async def test_no_content_is_printed_and_an_unknown_conversation_has_no_answers() -> None:
    table = served_conversation()
    text = "\n".join(bill_lines(await read_bill(table, CONVERSATION, SETTINGS.plan_config)))
    assert SECRET not in text and "xxxx" not in text and "ssss" not in text
    empty = bill_lines(await read_bill(table, "matter-none", SETTINGS.plan_config))
    assert empty[-1] == "no answers stored"
    assert empty[2] == "calibration: none (no stored answer says what its prompt expected)"


async def test_a_malformed_bill_is_listed_as_dropped_with_its_reason_and_counts_as_none() -> None:
    """GIVEN the answer at seq 6 stored its ttl as a list and the one at 8 a negative count,
    THEN ``worker bill`` lists both as dropped with the attribute and why, in seq order; the
    bills left are the conversation's, and no figure of the dropped ones enters the totals."""
    table = served_conversation()
    by_seq = {int(i["seq"]["N"]): i for i in table.items if "seq" in i}
    by_seq[6]["model_usage"]["M"]["cacheDetails"] = {
        "L": [{"M": {"ttl": {"L": [{"S": "5m"}]}, "inputTokens": {"N": "30"}}}]
    }
    by_seq[8]["model_usage"]["M"]["cacheReadInputTokens"] = {"N": "-1"}

    bill_ = await read_bill(table, CONVERSATION, SETTINGS.plan_config)
    lines = bill_lines(bill_)

    assert lines[1] == (
        "history: 10 messages read in 1 Query; 2 answers with a bill, 1 without, "
        "2 dropped as malformed"
    )
    assert "       6  bill dropped: model_usage.cacheDetails[].ttl: a list, not a string" in lines
    assert "       8  bill dropped: model_usage.cacheReadInputTokens: outside 0 to 2,000,000" in (
        lines
    )
    assert [row.usage.seq for row in bill_.billed] == [4, 10]
    assert bill_json(bill_)["dropped"] == [
        {"seq": 6, "attribute": "model_usage.cacheDetails[].ttl", "reason": "a list, not a string"},
        {
            "seq": 8,
            "attribute": "model_usage.cacheReadInputTokens",
            "reason": "outside 0 to 2,000,000",
        },
    ]
