"""The bill, observed, of a stored conversation, and the sliding window's estimate beside it
(``worker bill``).

An operator's answer to "what did this conversation cost, and did the cache do what the stage
expected?". It reads the whole history (Query pages, newest first) and lists, turn by turn
from the stored answers' ``model_usage``: when the model call was made, the command it
answered, the uncached input, the cache's reads and writes by TTL, the input as billed (1x,
0.1x, 1.25x for 5-minute writes, 2x for 1-hour ones), the read the prompt expected, and a miss
with its cause. Each answer is checked as the stage checks the newest one on its page
(:func:`worker.caching.diagnosis.check`): against the answers before it, with the calibration
of the answers up to and including it. Answers stored without a bill are listed as such, and
answers whose bill is malformed as dropped, with the attribute and why.

Beside the observed totals stands an ESTIMATE: what the sliding window would have been billed
for the same turns (:mod:`worker.cli.bill_estimate`).

Prints ids, counts and causes only: never message content or the summary.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from worker.caching.bills import ModelUsage
from worker.caching.calibration import Calibration, calibrate
from worker.caching.diagnosis import CAUSES, CacheCheck
from worker.caching.observed import observe
from worker.cli.bill_estimate import SlidingEstimate, sliding_estimate
from worker.memory import HistoryMessage
from worker.planning import PlanConfig
from worker.ports import HistoryPage, HistoryStore

#: Items a Query of ``worker bill`` asks for: the whole history is read, a page at a time.
BILL_PAGE_ITEMS = 200


@dataclass(frozen=True, slots=True)
class BilledAnswer:
    """A stored answer with its bill, and its check (None: its prompt said nothing it
    expected of the cache)."""

    usage: ModelUsage
    check: CacheCheck | None


@dataclass(frozen=True, slots=True)
class Unbilled:
    """A run of answers stored without ``model_usage`` (from ``first`` to ``last`` seq)."""

    first: int
    last: int
    count: int


@dataclass(frozen=True, slots=True)
class Dropped:
    """An answer whose stored bill is malformed: which attribute, and why (never a value);
    it counts as an answer without a bill everywhere else."""

    seq: int
    attribute: str
    reason: str


Row = BilledAnswer | Unbilled | Dropped


@dataclass(frozen=True, slots=True)
class ConversationBill:
    """What ``worker bill`` prints: the answers in seq order, the conversation's calibration,
    the summary's fold mark the estimate used, and the sliding window's estimate."""

    conversation_id: str
    messages: int
    queries: int
    rows: tuple[Row, ...]
    calibration: Calibration
    folded_through: int
    has_summary: bool
    sliding: SlidingEstimate
    #: A ``state`` attribute no reading makes safe (the stage refuses the conversation's
    #: commands until it is fixed), as ``attribute: reason``.
    state_refused: str | None = None

    @property
    def billed(self) -> tuple[BilledAnswer, ...]:
        return tuple(row for row in self.rows if isinstance(row, BilledAnswer))

    @property
    def dropped(self) -> tuple[Dropped, ...]:
        return tuple(row for row in self.rows if isinstance(row, Dropped))


async def read_bill(
    store: HistoryStore, conversation_id: str, config: PlanConfig
) -> ConversationBill:
    """Read the conversation's whole history (reads only) and make its bill."""
    page = await store.load_page(conversation_id, BILL_PAGE_ITEMS)
    while page.older is not None:
        older = await store.load_page(conversation_id, BILL_PAGE_ITEMS, older_than=page.older)
        page = page.extended_by(older)
    return conversation_bill(page, conversation_id, config)


def conversation_bill(
    page: HistoryPage, conversation_id: str, config: PlanConfig
) -> ConversationBill:
    """The bill of the history ``page`` holds (all of it, newest first). Pure."""
    messages = sorted(page.messages, key=lambda m: m.seq)
    bills = {usage.seq: usage for usage in page.usage}
    dropped = {defect.seq: defect for defect in page.bills_dropped}
    observed: list[ModelUsage] = []  # oldest first
    rows: list[Row] = []
    previous: HistoryMessage | None = None
    for message in messages:
        usage = bills.get(message.seq) if message.role == "assistant" else None
        if message.role == "assistant" and (defect := dropped.get(message.seq)) is not None:
            rows.append(Dropped(message.seq, defect.attribute, defect.reason))
        elif usage is not None:
            # As the turn after it checked it: the page up to it, the next question's time.
            newest_first = [usage, *reversed(observed)]
            up_to = [m for m in reversed(messages) if m.seq <= message.seq]
            asked = next(
                (m.created_at for m in messages if m.seq > message.seq and m.role == "user"), None
            )
            seen = observe(
                newest_first,
                up_to,
                newest_answer_seq=usage.seq,
                sent_at=asked,
                min_tokens=config.min_tokens,
                offers_1h=config.offers_1h,
                model_prefix_tokens=config.model_prefix_tokens,
            )
            rows.append(BilledAnswer(usage, seen.check))
            observed.append(usage)
        elif message.role == "assistant" and previous is not None and previous.role == "user":
            last = rows[-1] if rows else None
            if isinstance(last, Unbilled):
                rows[-1] = Unbilled(last.first, message.seq, last.count + 1)
            else:
                rows.append(Unbilled(message.seq, message.seq, 1))
        previous = message
    calibration = calibrate(list(reversed(observed)), prior_offset=config.model_prefix_tokens)
    return ConversationBill(
        conversation_id=conversation_id,
        messages=len(messages),
        queries=page.queries,
        rows=tuple(rows),
        calibration=calibration,
        folded_through=page.state.folded_through,
        has_summary=page.state.summary is not None,
        sliding=sliding_estimate(page, messages, observed, calibration, config),
        state_refused=page.refusal.describe() if page.refusal is not None else None,
    )


HEADER = (
    "     seq  answered_at           command        input     read  wrote 5m  wrote 1h"
    "      billed  exp. read  miss"
)


def bill_lines(bill: ConversationBill) -> list[str]:
    """The lines ``worker bill`` prints: ids, numbers and causes, never content."""
    billed = bill.billed
    unbilled = sum(row.count for row in bill.rows if isinstance(row, Unbilled))
    dropped = f", {len(bill.dropped)} dropped as malformed" if bill.dropped else ""
    lines = [
        f"conversation {bill.conversation_id}: the bill, observed (the model_usage stored with "
        "each answer; nothing sent, nothing written)",
        f"history: {bill.messages} messages read in {bill.queries} "
        + ("Query" if bill.queries == 1 else "Queries")
        + f"; {len(billed)} answers with a bill, {unbilled} without{dropped}",
        _calibration_line(bill.calibration),
    ]
    if bill.state_refused is not None:
        lines.append(
            f"state item malformed ({bill.state_refused}): the stage refuses this "
            "conversation's commands until it is fixed; the estimate below reads no summary"
        )
    if not bill.rows:
        return [*lines, "no answers stored"]
    lines.append(HEADER)
    for row in bill.rows:
        lines.append(_row(row))
    lines += _totals(bill)
    return lines


def _calibration_line(calibration: Calibration) -> str:
    if not calibration.samples:
        return "calibration: none (no stored answer says what its prompt expected)"
    return (
        f"calibration: real tokens = {calibration.ratio:.3f} x estimate + "
        f"{calibration.offset:,.0f} (from {calibration.samples} answers)"
    )


def _row(row: Row) -> str:
    if isinstance(row, Dropped):
        return f"{row.seq:>8}  bill dropped: {row.attribute}: {row.reason}"
    if isinstance(row, Unbilled):
        seqs = str(row.first) if row.count == 1 else f"{row.first}-{row.last}"
        answers = "1 answer" if row.count == 1 else f"{row.count} answers"
        return f"{seqs:>8}  no bill stored ({answers})"
    usage, checked = row.usage, row.check
    answered = _time(usage.answered_at) if usage.answered_at is not None else "-"
    if checked is None:
        expected, miss = "-", "no expectation stored"
    else:
        expected = f"{checked.expected_read_tokens:,}"
        miss = checked.cause or "-"
        if checked.downgraded:
            miss += "; 1h written as 5m"
    return (
        f"{usage.seq:>8}  {answered:<20}  {usage.command_id or '-':<12}"
        f" {usage.input_tokens:>7,} {usage.read_tokens:>8,} {usage.written_5m:>9,}"
        f" {usage.written_1h:>9,} {usage.billed_units:>11,.2f} {expected:>10}  {miss}"
    )


def _time(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _totals(bill: ConversationBill) -> list[str]:
    billed = [row.usage for row in bill.billed]
    checks = [row.check for row in bill.billed if row.check is not None]
    causes = [c.cause for c in checks if c.cause is not None]
    by_cause = ", ".join(f"{cause} {causes.count(cause)}" for cause in CAUSES if cause in causes)
    units = sum(u.billed_units for u in billed)
    sliding = bill.sliding
    lines = [
        f"observed, {len(billed)} answers: input {sum(u.input_tokens for u in billed):,}, "
        f"read {sum(u.read_tokens for u in billed):,}, "
        f"written {sum(u.written_5m for u in billed):,} (5m) + "
        f"{sum(u.written_1h for u in billed):,} (1h); billed {units:,.2f} input-token units "
        f"({sum(u.prompt_tokens for u in billed):,} tokens without a cache)",
        f"misses: {len(causes)} of {len(checks)} checked" + (f" ({by_cause})" if by_cause else ""),
    ]
    if not sliding.turns:
        return [*lines, "sliding window, ESTIMATED: no turn to rebuild"]
    scale = "chars/4 scaled by the calibration" if bill.calibration.samples else "chars/4"
    summary = (
        f"today's summary (fold mark {bill.folded_through})" if bill.has_summary else "no summary"
    )
    skipped = (
        f"; {sliding.without_question} answers without a question left out"
        if sliding.without_question
        else ""
    )
    lines += [
        f"sliding window, ESTIMATED for the same {sliding.turns} turns ({scale}; the stage's "
        f"cache model at the answers' times; {summary}{skipped}): read {sliding.read:,.0f}, "
        f"written {sliding.written:,.0f} (5m), uncached {sliding.uncached:,.0f}; billed "
        f"{sliding.billed:,.2f} input-token units",
    ]
    if sliding.billed > 0 and sliding.turns == len(billed):
        lines.append(f"observed / sliding estimate: {units / sliding.billed:.2f}")
    return lines


def bill_json(bill: ConversationBill) -> dict[str, object]:
    """The same as a JSON object (``worker bill --json``)."""
    answers: list[dict[str, object]] = []
    unbilled: list[dict[str, int]] = []
    dropped: list[dict[str, object]] = []
    for row in bill.rows:
        if isinstance(row, Dropped):
            dropped.append({"seq": row.seq, "attribute": row.attribute, "reason": row.reason})
            continue
        if isinstance(row, Unbilled):
            unbilled.append({"first_seq": row.first, "last_seq": row.last, "count": row.count})
            continue
        usage, checked = row.usage, row.check
        answers.append(
            {
                "seq": usage.seq,
                "answered_at": _time(usage.answered_at) if usage.answered_at else None,
                "command_id": usage.command_id,
                "input_tokens": usage.input_tokens,
                "read_tokens": usage.read_tokens,
                "written_5m": usage.written_5m,
                "written_1h": usage.written_1h,
                "billed_units": usage.billed_units,
                "expected_read": checked.expected_read if checked else None,
                "expected_read_calibrated": checked.expected_read_tokens if checked else None,
                "cause": checked.cause if checked else None,
                "downgraded": checked.downgraded if checked else False,
            }
        )
    calibration, sliding = bill.calibration, bill.sliding
    return {
        "conversation_id": bill.conversation_id,
        "messages": bill.messages,
        "calibration": {
            "ratio": calibration.ratio,
            "offset": calibration.offset,
            "samples": calibration.samples,
        },
        "answers": answers,
        "unbilled": unbilled,
        "dropped": dropped,
        "state_refused": bill.state_refused,
        "sliding_estimate": {
            "estimate": True,
            "turns": sliding.turns,
            "read": sliding.read,
            "written": sliding.written,
            "uncached": sliding.uncached,
            "billed_units": sliding.billed,
            "without_question": sliding.without_question,
        },
    }
