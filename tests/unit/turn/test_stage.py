"""ConverseStage over in-memory fakes: the ledger's states, marking done through an outage,
and the fold-gap warning. No network, no wall clock."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.conftest import captured_logs
from tests.conftest import settings as placeholder_settings
from tests.unit.fakes import NOW, MemoryQueue, memory_stage
from worker.delivery.outcomes import Done, Rejected, Retry
from worker.errors import StoreUnavailable
from worker.memory import FoldState, HistoryMessage
from worker.ports import (
    CommandClaim,
    CommandHold,
    DoneMark,
    HistoryPage,
    MessageDigest,
    ReceivedMessage,
)
from worker.turn.stage import FINISH_RETRY_DELAYS

LEASE = timedelta(seconds=60)


@dataclass
class Record:
    status: str
    owner: str
    lease_until: datetime
    digest: MessageDigest | None = None


@dataclass
class MemoryLedger:
    """The contract's ledger in memory: another message's digest → reused; new or expired
    → started; done; else busy."""

    records: dict[tuple[str, str], Record] = field(default_factory=dict)
    finish_failures: int = 0

    async def begin(
        self, hold: CommandHold, *, lease: timedelta, now: datetime, message: str
    ) -> CommandClaim:
        record = self.records.get(key(hold))
        if record is not None and record.digest and not record.digest.matches(message):
            return CommandClaim(state="reused")
        if record is not None and record.status == "done":
            return CommandClaim(state="done")
        if record is not None and record.lease_until >= now:
            return CommandClaim(state="busy", lease_until=record.lease_until)
        digest = record.digest if record is not None else MessageDigest.drawn(message)
        self.records[key(hold)] = Record("in_progress", hold.owner, now + lease, digest)
        return CommandClaim(state="started", digest=digest)

    async def renew(self, hold: CommandHold, *, lease: timedelta, now: datetime) -> bool:
        record = self._held(hold)
        if record is None:
            return False
        record.lease_until = now + lease
        return True

    async def finish(self, mark: DoneMark) -> None:
        if self.finish_failures:
            self.finish_failures -= 1
            raise StoreUnavailable("dynamodb.UpdateItem failed: ThrottlingException (HTTP 400)")
        self.records[key(mark)] = Record("done", mark.owner, mark.now, mark.digest)

    async def abandon(self, hold: CommandHold) -> None:
        record = self._held(hold)
        if record is not None:
            record.lease_until = datetime.fromtimestamp(0, UTC)

    def _held(self, hold: CommandHold) -> Record | None:
        record = self.records.get(key(hold))
        if record is None or record.status != "in_progress" or record.owner != hold.owner:
            return None
        return record


def key(command: CommandHold | DoneMark) -> tuple[str, str]:
    return command.conversation_id, command.command_id


@dataclass
class MemoryHistory:
    """One page per conversation; every fold claim is declined (these tests are about the
    turn, not the fold request)."""

    pages: dict[str, HistoryPage] = field(default_factory=dict)
    error: Exception | None = None

    async def load_page(self, conversation_id: str, limit: int) -> HistoryPage:
        if self.error is not None:
            raise self.error
        return self.pages.get(conversation_id, HistoryPage(state=FoldState(), messages=()))

    async def claim_compaction(self, *args: object, **kwargs: object) -> bool:
        return False

    async def release_compaction(self, *args: object, **kwargs: object) -> None:
        return None


@dataclass
class Turn:
    ledger: MemoryLedger = field(default_factory=MemoryLedger)
    history: MemoryHistory = field(default_factory=MemoryHistory)
    model_queue: MemoryQueue = field(default_factory=MemoryQueue)
    slept: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        async def sleep(seconds: float) -> None:
            self.slept.append(seconds)

        self.stage = memory_stage(
            history=self.history, ledger=self.ledger, model_queue=self.model_queue, sleep=sleep
        )

    def record(self) -> Record:
        return self.ledger.records["matter-1", "c-1"]


def delivery(receive_count: int = 1, **fields: Any) -> ReceivedMessage:
    command = {
        "type": "converse",
        "command_id": "c-1",
        "conversation_id": "matter-1",
        "message": "What does clause 14.2 say?",
        **fields,
    }
    return ReceivedMessage("m-1", "r-1", json.dumps(command), receive_count=receive_count)


@pytest.fixture
def turn() -> Turn:
    return Turn()


async def test_a_new_command_is_claimed_forwarded_once_and_marked_done(turn: Turn) -> None:
    assert await turn.stage.handle(delivery()) == Done()
    [payload] = turn.model_queue.sent
    assert (payload["command_id"], payload["conversation_id"]) == ("c-1", "matter-1")
    assert turn.record().status == "done"


async def test_a_command_the_ledger_has_as_done_is_deleted_without_a_second_forward(
    turn: Turn,
) -> None:
    turn.ledger.records["matter-1", "c-1"] = Record("done", "earlier/m-0/1", NOW)
    with captured_logs() as logs:
        assert await turn.stage.handle(delivery(receive_count=2)) == Done()
    assert turn.model_queue.sent == []
    assert "clerk.converse_command_duplicate" in [e["event"] for e in logs]


async def test_a_command_in_progress_elsewhere_comes_back_after_the_rest_of_its_lease(
    turn: Turn,
) -> None:
    """Busy under a lease with 30 s to run: back in 31 s, not counted as a failure."""
    held = Record("in_progress", "other/m-0/1", NOW + timedelta(seconds=30))
    turn.ledger.records["matter-1", "c-1"] = held
    outcome = await turn.stage.handle(delivery())
    assert outcome == Retry("in progress elsewhere", delay=31.0, failure=False)
    assert turn.model_queue.sent == []
    assert turn.record() == held


async def test_a_command_whose_owner_let_its_lease_expire_is_taken_over(turn: Turn) -> None:
    turn.ledger.records["matter-1", "c-1"] = Record(
        "in_progress", "dead/m-0/1", NOW - timedelta(seconds=1)
    )
    assert await turn.stage.handle(delivery(receive_count=2)) == Done()
    assert len(turn.model_queue.sent) == 1
    assert turn.record().status == "done"
    assert turn.record().owner.endswith("/m-1/2")
    renewed = await turn.ledger.renew(
        CommandHold("matter-1", "c-1", "dead/m-0/1"), lease=LEASE, now=NOW
    )
    assert renewed is False  # the old owner has lost it


@pytest.mark.parametrize("fails", ["history", "send"])
async def test_a_failure_before_the_prompt_is_out_abandons_the_claim_at_once(
    turn: Turn, fails: str
) -> None:
    """The message is retried, and the ledger lease is expired now, so the redelivery is
    taken over at once instead of waiting out a lease nobody holds."""
    error = StoreUnavailable("sqs.SendMessage failed: ServiceUnavailable (HTTP 503)")
    if fails == "history":
        turn.history.error = error
    else:
        turn.model_queue.error = error
    outcome = await turn.stage.handle(delivery())
    assert outcome == Retry(str(error))
    assert turn.record().status == "in_progress"
    assert turn.record().lease_until < NOW
    turn.history.error = turn.model_queue.error = None
    assert await turn.stage.handle(delivery(receive_count=2)) == Done()
    assert len(turn.model_queue.sent) == 1


async def test_marking_done_is_retried_through_a_short_outage(turn: Turn) -> None:
    turn.ledger.finish_failures = 2
    assert await turn.stage.handle(delivery()) == Done()
    assert turn.slept == [0.25, 0.5]
    assert turn.record().status == "done"
    assert len(turn.model_queue.sent) == 1


async def test_when_marking_done_keeps_failing_the_command_is_done_all_the_same(
    turn: Turn,
) -> None:
    """The prompt is out: a retry would forward it twice. Every pause is taken, the
    failure is logged, and the message is deleted."""
    turn.ledger.finish_failures = len(FINISH_RETRY_DELAYS) + 1
    with captured_logs() as logs:
        assert await turn.stage.handle(delivery()) == Done()
    assert turn.slept == list(FINISH_RETRY_DELAYS)
    assert len(turn.model_queue.sent) == 1
    [failed] = [e for e in logs if e["event"] == "clerk.converse_command_finish_failed"]
    assert failed["command_id"] == "c-1"


async def test_an_invalid_command_is_rejected_without_touching_the_ledger(turn: Turn) -> None:
    message = ReceivedMessage("m-1", "r-1", '{"type": "converse"}')
    outcome = await turn.stage.handle(message)
    assert isinstance(outcome, Rejected)
    assert outcome.reason.startswith("invalid command: command_id: Field required")
    assert turn.ledger.records == {}


@dataclass
class UnreadHistory(MemoryHistory):
    """Counts the pages read: a refusal before the read leaves it at zero."""

    reads: int = 0

    async def load_page(self, conversation_id: str, limit: int) -> HistoryPage:
        self.reads += 1
        return await super().load_page(conversation_id, limit)


@pytest.mark.parametrize(
    ("chars", "fits"), [(4 * (200_000 - 2_500), True), (4 * (200_000 - 2_500) + 1, False)]
)
async def test_a_message_that_cannot_fit_the_context_window_is_rejected_before_anything_is_read(
    chars: int, fits: bool
) -> None:
    """GIVEN MODEL_ID a 200,000-token model and a 2,500-token model stage prefix, WHEN a
    message of ``chars`` characters comes in, THEN one that cannot fit is rejected at once
    with its sizes and the model (never its text): no ledger claim, no history read, nothing
    sent; one a character shorter is served."""
    history, ledger, model_queue = UnreadHistory(), MemoryLedger(), MemoryQueue()
    stage = memory_stage(
        history=history,
        ledger=ledger,
        model_queue=model_queue,
        settings=placeholder_settings(
            model_id="anthropic.claude-sonnet-4-5-20250929-v1:0", model_prefix_tokens=2_500
        ),
    )
    outcome = await stage.handle(delivery(message="privileged " + "x" * (chars - 11)))
    if fits:
        assert outcome == Done() and len(model_queue.sent) == 1 and history.reads == 1
        return
    assert outcome == Rejected(
        "message is larger than the model's context window: ~197,501 tokens estimated plus "
        "the model stage's 2,500 (MODEL_PREFIX_TOKENS), Claude Sonnet 4.5 takes 200,000"
    )
    assert (ledger.records, history.reads, model_queue.sent) == ({}, 0, [])


async def test_without_a_context_window_no_message_is_refused_for_its_size(turn: Turn) -> None:
    """Neither MODEL_ID nor MODEL_CONTEXT_TOKENS: the stage knows no window to refuse by."""
    assert await turn.stage.handle(delivery(message="x" * 1_000_000)) == Done()
    assert len(turn.model_queue.sent) == 1


async def test_renew_extends_the_leases_of_turns_in_hand_and_reports_those_lost(
    turn: Turn,
) -> None:
    turn.model_queue.gate = asyncio.Event()
    handling = asyncio.create_task(turn.stage.handle(delivery()))
    await turn.model_queue.reached.wait()  # the turn is in hand, its prompt on its way
    assert await turn.stage.renew(["m-1", "m-unknown"]) == []
    turn.record().owner = "someone-else"
    assert await turn.stage.renew(["m-1"]) == ["m-1"]
    turn.model_queue.gate.set()
    assert await handling == Done()


def conversation(last_seq: int) -> tuple[HistoryMessage, ...]:
    """Newest first: questions on odd seqs, answers on even ones, ten tokens each."""
    return tuple(
        HistoryMessage(seq=s, role="user" if s % 2 else "assistant", content="w" * 40)
        for s in range(last_seq, 0, -1)
    )


@pytest.mark.parametrize(
    ("folded_through", "gap"),
    [(10, {"unfolded_dropped": 6, "first_seq": 11, "last_seq": 16}), (16, None)],
)
async def test_unfolded_messages_left_out_of_the_window_are_reported_as_a_fold_gap(
    turn: Turn, folded_through: int, gap: dict[str, int] | None
) -> None:
    """40 messages: the window keeps the newest 24 (seqs 17-40, whole exchanges within 25).
    Folded through 10, seqs 11-16 are held by neither window nor fold: a warning with
    their count and range. Folded through 16, nothing is lost, and nothing is said."""
    turn.history.pages["matter-1"] = HistoryPage(
        state=FoldState(folded_through=folded_through, summary="The fold so far."),
        messages=conversation(40)[:26],
    )
    with captured_logs() as logs:
        assert await turn.stage.handle(delivery()) == Done()
    [payload] = turn.model_queue.sent
    assert [m["seq"] for m in payload["history"]] == list(range(17, 41))
    warnings = [e for e in logs if e["event"] == "clerk.converse_history_fold_gap"]
    if gap is None:
        assert warnings == []
    else:
        [warning] = warnings
        assert {k: warning[k] for k in gap} == gap
        assert (warning["log_level"], warning["command_id"]) == ("warning", "c-1")


@dataclass
class GatedLedger(MemoryLedger):
    """A ledger whose claims wait for ``gate``; ``claiming`` is set once one is under way."""

    gate: asyncio.Event = field(default_factory=asyncio.Event)
    claiming: asyncio.Event = field(default_factory=asyncio.Event)

    async def begin(
        self, hold: CommandHold, *, lease: timedelta, now: datetime, message: str
    ) -> CommandClaim:
        self.claiming.set()
        await self.gate.wait()
        return await super().begin(hold, lease=lease, now=now, message=message)


@dataclass
class WatchedHistory(MemoryHistory):
    """Counts the pages read and those whose read ran to its end; ``gate``, if given, holds
    each read."""

    reads: int = 0
    finished: int = 0
    gate: asyncio.Event | None = None

    async def load_page(self, conversation_id: str, limit: int) -> HistoryPage:
        self.reads += 1
        if self.gate is not None:
            await self.gate.wait()
        page = await super().load_page(conversation_id, limit)
        self.finished += 1
        return page


def gated_turn(history: WatchedHistory) -> tuple[GatedLedger, MemoryQueue, Any]:
    ledger, model_queue = GatedLedger(), MemoryQueue()
    stage = memory_stage(history=history, ledger=ledger, model_queue=model_queue)
    return ledger, model_queue, stage


async def test_the_history_is_read_while_the_claim_is_under_way_and_the_prompt_waits_for_it() -> (
    None
):
    """GIVEN a claim the ledger has not answered, THEN the history page is already read,
    and nothing is sent until the claim is the turn's; then the prompt leaves once."""
    history = WatchedHistory()
    ledger, model_queue, stage = gated_turn(history)
    handling = asyncio.create_task(stage.handle(delivery()))
    await ledger.claiming.wait()
    for _ in range(5):  # every step the turn could take without the claim
        await asyncio.sleep(0)
    assert (history.reads, history.finished, model_queue.sent) == (1, 1, [])
    ledger.gate.set()
    assert await handling == Done()
    assert len(model_queue.sent) == 1
    assert ledger.records["matter-1", "c-1"].status == "done"


@pytest.mark.parametrize(
    ("status", "lease", "outcome"),
    [
        ("done", -1, Done()),
        ("in_progress", 30, Retry("in progress elsewhere", delay=31.0, failure=False)),
    ],
)
async def test_a_claim_refused_sends_nothing_and_the_read_beside_it_is_cancelled(
    status: str, lease: int, outcome: Any
) -> None:
    """A duplicate, or a command busy elsewhere: the read begun beside the claim is cancelled
    unfinished, and nothing is sent."""
    history = WatchedHistory(gate=asyncio.Event())
    ledger, model_queue, stage = gated_turn(history)
    until = NOW + timedelta(seconds=lease)
    ledger.records["matter-1", "c-1"] = Record(status, "other/m-0/1", until)
    ledger.gate.set()
    assert await stage.handle(delivery()) == outcome
    assert (history.reads, history.finished, model_queue.sent) == (1, 0, [])


async def test_a_read_failing_before_the_claim_is_answered_waits_for_it_then_abandons_it() -> None:
    """The read fails first: the claim is not cut short (a write cut off might still land),
    it is let finish, then given up at once, and the message is retried."""
    history = WatchedHistory()
    history.error = StoreUnavailable("dynamodb.Query failed: ThrottlingException (HTTP 400)")
    ledger, model_queue, stage = gated_turn(history)
    handling = asyncio.create_task(stage.handle(delivery()))
    await ledger.claiming.wait()
    await asyncio.sleep(0)
    assert not handling.done()
    ledger.gate.set()
    assert await handling == Retry(str(history.error))
    record = ledger.records["matter-1", "c-1"]
    assert (record.status, record.lease_until < NOW, model_queue.sent) == ("in_progress", True, [])


async def test_a_claim_that_fails_sends_nothing_and_its_read_is_cancelled() -> None:
    history = WatchedHistory(gate=asyncio.Event())
    ledger, model_queue, stage = gated_turn(history)
    error = StoreUnavailable("dynamodb.UpdateItem failed: ThrottlingException (HTTP 400)")

    async def failing(*args: object, **kwargs: object) -> CommandClaim:
        raise error

    ledger.begin = failing  # type: ignore[method-assign]
    assert await stage.handle(delivery()) == Retry(str(error))
    assert (history.reads, history.finished, model_queue.sent, ledger.records) == (1, 0, [], {})


async def test_the_claims_request_is_made_once_the_querys_is_written() -> None:
    """The Query's request goes first and the claim's is built only after the Query's bytes
    are written: aiohttp writes a request's body from a task of its own, the pass after the
    request is made (mimicked here), so a claim built at once would go out first."""
    order: list[str] = []

    @dataclass
    class WritingHistory(MemoryHistory):
        async def load_page(self, conversation_id: str, limit: int) -> HistoryPage:
            order.append("query made")

            async def write() -> None:  # aiohttp's writer: the bytes go in its first step
                order.append("query written")

            await asyncio.create_task(write())
            return await super().load_page(conversation_id, limit)

    @dataclass
    class OrderedLedger(MemoryLedger):
        async def begin(
            self, hold: CommandHold, *, lease: timedelta, now: datetime, message: str
        ) -> CommandClaim:
            order.append("claim made")
            return await super().begin(hold, lease=lease, now=now, message=message)

    model_queue = MemoryQueue()
    stage = memory_stage(history=WritingHistory(), ledger=OrderedLedger(), model_queue=model_queue)
    assert await stage.handle(delivery()) == Done()
    assert order == ["query made", "query written", "claim made"]
    assert len(model_queue.sent) == 1
