"""The dead-letter tool's pure parts: age buckets, the time each message has left, the copy
a redrive sends, the rate's bounds, an inspection's exact lines (over an in-memory queue, the
clock stopped), and how SQS's move task ending is reported (over an in-memory move-task API)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from worker.adapters.sqs_admin import MoveTask
from worker.cli import dlq_operations as dlq
from worker.cli import main
from worker.cli.arguments import redrive_rate
from worker.cli.dlq_operations import age_bucket, copy_of, expiry, seconds_left
from worker.ports import ReceivedMessage

NOW = 1_800_000_000.0
DAY, HOUR, MINUTE = 86_400, 3_600, 60
FOURTEEN_DAYS = 14 * DAY


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


@pytest.mark.parametrize(
    ("age_seconds", "shown"),
    [(0, "expires in 14d 00h"),
     (DAY, "expires in 13d 00h"),
     (10 * DAY + 19 * HOUR + 55 * MINUTE, "expires in 3d 04h"),
     (13 * DAY + 18 * HOUR + 52 * MINUTE + 30, "expires in 5h 07m"),
     (FOURTEEN_DAYS - 12 * MINUTE - 59, "expires in 12m"),
     (FOURTEEN_DAYS - 59, "expires in under a minute"),
     (FOURTEEN_DAYS, "expired: SQS deletes it any moment"),
     (FOURTEEN_DAYS + HOUR, "expired: SQS deletes it any moment")],
)  # fmt: skip
def test_the_time_left_counts_the_retention_from_the_first_send_rounded_down(
    age_seconds: int, shown: str
) -> None:
    """SQS deletes a dead letter the queue's retention after its ``SentTimestamp``; whole
    units, rounded down, never promise more time than is left."""
    sent_ms = int((NOW - age_seconds) * 1000)
    assert expiry(seconds_left(sent_ms, FOURTEEN_DAYS, NOW)) == shown


def test_a_message_without_a_sent_timestamp_has_an_unknown_expiry() -> None:
    assert seconds_left(None, FOURTEEN_DAYS, NOW) is None
    assert expiry(None) == "expiry unknown"


@dataclass
class DeadLetters:
    """A dead-letter queue in memory: one receive answers everything, the next nothing;
    what it was asked to release is kept."""

    messages: list[ReceivedMessage]
    released: list[str] = field(default_factory=list)
    url: str = "dlq"

    async def receive(
        self, max_messages: int, wait_seconds: int, *, visibility_timeout: int | None = None
    ) -> list[ReceivedMessage]:
        batch, self.messages = self.messages[:max_messages], self.messages[max_messages:]
        return batch

    async def change_visibility_batch(
        self, messages: list[ReceivedMessage], timeout_seconds: int
    ) -> list[object]:
        self.released += [m.message_id for m in messages]
        return []


def dead_letter(message_id: str, age_seconds: float | None, reason: str | None) -> ReceivedMessage:
    return ReceivedMessage(
        message_id,
        f"r-{message_id}",
        "PRIVILEGED body",
        attributes={"RejectionReason": reason} if reason else {},
        sent_timestamp_ms=None if age_seconds is None else int((NOW - age_seconds) * 1000),
    )


async def test_inspect_lists_each_messages_time_left_and_the_soonest_on_the_clock_given() -> None:
    queue = DeadLetters(
        [
            dead_letter("m-1", 2 * HOUR, "message is blank"),
            dead_letter("m-2", 10 * DAY + 19 * HOUR + 55 * MINUTE, None),
            dead_letter("m-3", None, "message is blank"),
        ]
    )
    inspection = await dlq.inspect(
        queue,  # type: ignore[arg-type]
        retention_seconds=FOURTEEN_DAYS,
        now=lambda: NOW,
    )
    assert inspection.lines(with_ids=True) == [
        "3 message(s) in the dead-letter queue",
        "by reason:",
        "       2  message is blank",
        "       1  (retry exhausted: no RejectionReason)",
        "by age (since first sent):",
        "       1  1 h – 1 d",
        "       1  >= 7 d",
        "       1  unknown",
        "the soonest expires in 3d 04h",
        "ids:",
        "  m-1  1 h – 1 d  expires in 13d 22h  message is blank",
        "  m-2  >= 7 d     expires in 3d 04h   (retry exhausted: no RejectionReason)",
        "  m-3  unknown    expiry unknown      message is blank",
    ]
    assert "the soonest expires in 3d 04h" in inspection.lines(with_ids=False)
    assert queue.released == ["m-1", "m-2", "m-3"]


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


@pytest.mark.parametrize("rate", ["0", "-5", "501", "100000", "abc", "2.5", "", "1e3"])
def test_a_rate_outside_1_to_500_is_refused_in_one_line_before_anything_runs(
    rate: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """No ZeroDivisionError after a first batch moved, no unthrottled run: argparse refuses
    the value (exit 2) before a queue is looked at (no CONVERSE_QUEUE_URL is needed)."""
    with pytest.raises(SystemExit) as exited:
        main(["dlq", "redrive", "--include-rejected", "--rate", rate])
    assert exited.value.code == 2
    error = capsys.readouterr().err.splitlines()[-1]
    assert error == (
        "worker dlq redrive: error: argument --rate: must be a whole number of messages a "
        f"second from 1 to 500 (SQS's move task takes no more), not {rate!r}"
    )


@pytest.mark.parametrize(("text", "rate"), [("1", 1), ("10", 10), ("500", 500)])
def test_rates_from_1_to_500_are_taken(text: str, rate: int) -> None:
    assert redrive_rate(text) == rate


@pytest.mark.parametrize("limit", ["0", "-1", "ten"])
def test_a_limit_below_1_is_refused(limit: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["dlq", "redrive", "--limit", limit])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"worker dlq redrive: error: argument --limit: must be a whole number from 1, not {limit!r}"
    )


@dataclass
class Queue:
    url: str


@dataclass
class Admin:
    """SQS's move-task API in memory: ``start_move`` answers ``handle`` (None: the endpoint
    has none), and each ``move_task`` call answers the next of ``listings``."""

    listings: list[MoveTask | None]
    handle: str | None = "task-1"
    started: list[tuple[str, str, int]] = field(default_factory=list)

    async def arn(self, queue_url: str) -> str:
        return f"arn:{queue_url}"

    async def start_move(
        self, source_arn: str, destination_arn: str, per_second: int
    ) -> str | None:
        self.started.append((source_arn, destination_arn, per_second))
        return self.handle

    async def move_task(self, source_arn: str, handle: str) -> MoveTask | None:
        return self.listings.pop(0)


def task(status: str, moved: int, reason: str | None = None) -> MoveTask:
    return MoveTask("task-1", status, moved, 5, failure_reason=reason)


async def move(admin: Admin) -> tuple[dlq.Redrive | None, list[float]]:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    result = await dlq.redrive_everything(
        admin,
        Queue("dlq"),
        Queue("converse"),
        per_second=50,
        sleep=sleep,  # type: ignore[arg-type]
    )
    return result, slept


async def test_a_completed_move_task_reports_what_it_moved_polling_once_a_second() -> None:
    admin = Admin([None, task("RUNNING", 2), task("COMPLETED", 5)])
    result, slept = await move(admin)
    assert result == dlq.Redrive(sent=5, via_move_task=True)
    assert admin.started == [("arn:dlq", "arn:converse", 50)]
    assert slept == [1.0, 1.0]


@pytest.mark.parametrize(
    ("ended", "failure"),
    [
        (
            task("FAILED", 3, "CouldNotDetermineMessageSource"),
            "FAILED: CouldNotDetermineMessageSource",
        ),
        (task("FAILED", 0), "FAILED"),
        (task("CANCELLED", 2), "CANCELLED"),
        (task("CANCELLING", 2), "CANCELLING"),
    ],
)
async def test_a_move_task_that_does_not_complete_is_reported_with_its_reason_not_replaced(
    ended: MoveTask, failure: str
) -> None:
    """The operator learns how the task ended and how many it moved; nothing else moves
    the rest (they stay in the dead-letter queue)."""
    result, _ = await move(Admin([task("RUNNING", 1), ended]))
    assert result == dlq.Redrive(sent=ended.moved, via_move_task=True, move_task_failure=failure)


async def test_an_endpoint_without_move_tasks_falls_back_to_the_loop_at_the_same_rate() -> None:
    result, slept = await move(Admin([], handle=None))
    assert (result, slept) == (None, [])


@pytest.mark.parametrize("per_second", [0, -1, 501])
async def test_the_redrive_functions_refuse_a_rate_outside_1_to_500_before_any_call(
    per_second: int,
) -> None:
    admin = Admin([])
    with pytest.raises(ValueError, match="per_second must be from 1 to 500"):
        await dlq.redrive_everything(
            admin,
            Queue("dlq"),
            Queue("converse"),
            per_second=per_second,  # type: ignore[arg-type]
        )
    with pytest.raises(ValueError, match="per_second must be from 1 to 500"):
        await dlq.redrive(
            Queue("dlq"),
            Queue("converse"),
            include_rejected=True,
            per_second=per_second,  # type: ignore[arg-type]
        )
    assert admin.started == []
