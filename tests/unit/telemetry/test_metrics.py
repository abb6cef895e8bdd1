"""Metrics as EMF: one document per interval and dimension set, exact counts, the
specification's limits, a final flush at stop; on virtual time."""

from __future__ import annotations

import asyncio
import io
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.conftest import captured_logs
from tests.emf import check_document, documents, samples, totals
from tests.unit.clock import FakeClock
from worker.caching.diagnosis import CacheCheck, Cause
from worker.ports import ReceivedMessage
from worker.telemetry import hooks as telemetry
from worker.telemetry import metrics as m
from worker.telemetry.hooks import Telemetry
from worker.telemetry.metrics import EmfFlusher, MetricsBook, emf_documents

DIMENSIONS = {m.SERVICE_DIMENSION: m.SERVICE, m.QUEUE_DIMENSION: "mira-converse"}
#: The wall clock of these tests, stopped (time is injected, never read).
NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
WALL = NOW.timestamp()
RECEIVED = ReceivedMessage("m-1", "r-1", "{}", receive_count=1)


def parse(text: str) -> list[dict[str, Any]]:
    return documents(text.splitlines())


def test_an_interval_is_one_document_with_every_counter_zeros_included() -> None:
    book = MetricsBook()
    book.count(m.COMMANDS_SERVED, 3)
    book.observe(m.TURN_LATENCY, 12.5)
    [line] = emf_documents(book.take(), DIMENSIONS, NOW)
    document = json.loads(line)
    check_document(document)
    directive = document["_aws"]["CloudWatchMetrics"][0]
    assert directive["Namespace"] == m.NAMESPACE
    assert directive["Dimensions"] == [[m.SERVICE_DIMENSION, m.QUEUE_DIMENSION]]
    assert document["_aws"]["Timestamp"] == round(NOW.timestamp() * 1000)
    assert {d["Name"] for d in directive["Metrics"]} == {*m.COUNTERS, m.TURN_LATENCY}
    assert document[m.COMMANDS_SERVED] == 3
    assert document[m.COMMANDS_REJECTED] == 0
    assert document[m.TURN_LATENCY] == 12.5


def test_rejections_are_counted_in_all_and_in_one_document_per_kind() -> None:
    book = MetricsBook()
    for kind in ("invalid_json", "invalid_json", "blank_message"):
        book.rejected(kind)
    docs = parse("\n".join(emf_documents(book.take(), DIMENSIONS, NOW)))
    assert len(docs) == 3
    main, *by_kind = docs
    assert main[m.COMMANDS_REJECTED] == 3
    assert {d[m.REASON_DIMENSION]: d[m.COMMANDS_REJECTED] for d in by_kind} == {
        "invalid_json": 2,
        "blank_message": 1,
    }
    for document in by_kind:
        assert document["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [
            [m.SERVICE_DIMENSION, m.QUEUE_DIMENSION, m.REASON_DIMENSION]
        ]


def test_a_distribution_over_100_values_continues_in_documents_of_at_most_100() -> None:
    """The specification caps an array at 100 numbers and has no Counts: 250 latencies
    leave as 100 + 100 + 50, every one of them, counters only in the first document."""
    book = MetricsBook()
    latencies = [float(i) for i in range(250)]
    for value in latencies:
        book.observe(m.TURN_LATENCY, value)
    book.count(m.COMMANDS_SERVED, 250)
    docs = parse("\n".join(emf_documents(book.take(), DIMENSIONS, NOW)))
    assert [len(d[m.TURN_LATENCY]) for d in docs] == [100, 100, 50]
    assert samples(docs, m.TURN_LATENCY) == latencies
    assert totals(docs)[m.COMMANDS_SERVED] == 250
    assert [m.COMMANDS_SERVED in d for d in docs] == [True, False, False]


def test_take_starts_the_book_again_empty() -> None:
    book = MetricsBook()
    book.count(m.FOLD_REQUESTS_SENT)
    book.observe(m.WINDOW_KEPT, 24)
    book.take()
    tally = book.take()
    assert not tally.counts and not tally.values and not tally.rejected


async def test_the_flusher_writes_each_interval_and_once_more_at_stop() -> None:
    clock = FakeClock()
    out = io.StringIO()
    book = MetricsBook()
    started = WALL
    flusher = EmfFlusher(
        book,
        dimensions=DIMENSIONS,
        interval=60,
        clock=clock,
        wall=lambda: started + clock.now,
        out=out,
    )
    done = asyncio.Event()
    task = asyncio.create_task(flusher.run(done))
    book.count(m.COMMANDS_SERVED, 2)
    await clock.advance(60)
    book.count(m.COMMANDS_SERVED, 5)
    await clock.advance(30)
    done.set()  # a scale-in, half way through the second interval
    await clock.run_until_done(task)
    docs = parse(out.getvalue())
    assert [d[m.COMMANDS_SERVED] for d in docs] == [2, 5]
    assert [d["_aws"]["Timestamp"] for d in docs] == [
        round(started * 1000),
        round((started + 60) * 1000),
    ]


async def test_a_failed_flush_is_logged_and_the_next_interval_still_flushes() -> None:
    clock = FakeClock()
    out = io.StringIO()
    book = MetricsBook()
    flusher = EmfFlusher(
        book, dimensions=DIMENSIONS, interval=10, clock=clock, wall=lambda: WALL, out=out
    )
    book.observe(m.TURN_LATENCY, float("nan"))  # refused by the library's validation
    done = asyncio.Event()
    with captured_logs() as logs:
        task = asyncio.create_task(flusher.run(done))
        await clock.advance(10)
        book.count(m.COMMANDS_SERVED)
        await clock.advance(10)
        done.set()
        await clock.run_until_done(task)
    assert [e["event"] for e in logs] == ["clerk.converse_metrics_flush_failed"]
    assert [d[m.COMMANDS_SERVED] for d in parse(out.getvalue())] == [1, 0]


class RefusingOut(io.StringIO):
    """stdout that refuses the next ``refusals`` writes, as a full or closed pipe would."""

    def __init__(self, refusals: int) -> None:
        super().__init__()
        self.refusals = refusals

    def write(self, text: str) -> int:
        if self.refusals:
            self.refusals -= 1
            raise BrokenPipeError(32, "quoting nothing")
        return super().write(text)


async def test_documents_stdout_refused_are_written_at_the_next_flush() -> None:
    clock = FakeClock()
    out = RefusingOut(refusals=1)
    book = MetricsBook()
    started = WALL
    flusher = EmfFlusher(
        book, dimensions=DIMENSIONS, interval=60, clock=clock, wall=lambda: started + clock.now,
        out=out,
    )  # fmt: skip
    done = asyncio.Event()
    with captured_logs() as logs:
        task = asyncio.create_task(flusher.run(done))
        book.count(m.COMMANDS_SERVED, 3)
        await clock.advance(60)  # refused: held
        book.count(m.COMMANDS_SERVED, 4)
        await clock.advance(60)  # written, the held interval first
        done.set()
        await clock.run_until_done(task)
    assert [(e["event"], e["error_type"], e["held_documents"]) for e in logs] == [
        ("clerk.converse_metrics_flush_failed", "BrokenPipeError", 1)
    ]
    docs = parse(out.getvalue())
    assert [d[m.COMMANDS_SERVED] for d in docs] == [3, 4, 0]
    assert [d["_aws"]["Timestamp"] for d in docs] == [
        round((started + 60 * i) * 1000) for i in range(3)
    ]


def test_documents_held_past_the_bound_drop_the_oldest_and_say_how_many(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(m, "MAX_HELD_DOCUMENTS", 2)
    out = RefusingOut(refusals=3)
    book = MetricsBook()
    flusher = EmfFlusher(
        book, dimensions=DIMENSIONS, interval=60, clock=FakeClock(), wall=lambda: WALL, out=out
    )
    with captured_logs() as logs:
        for served in (1, 2, 3, 4):
            book.count(m.COMMANDS_SERVED, served)
            flusher.flush()
    assert [(e["held_documents"], e["dropped_documents"]) for e in logs] == [
        (1, 0), (2, 0), (2, 1),
    ]  # fmt: skip
    assert [d[m.COMMANDS_SERVED] for d in parse(out.getvalue())] == [2, 3, 4]


@pytest.mark.parametrize("name", [*m.COUNTERS, *m.DISTRIBUTIONS])
def test_every_metric_name_is_a_valid_cloudwatch_name(name: str) -> None:
    assert 1 <= len(name) <= 255 and name.isascii() and name.isidentifier()


def test_re_anchors_are_written_in_all_and_per_reason_only_in_intervals_that_had_any() -> None:
    book = MetricsBook()
    for reason in ("fold_moved", "overflow", "fold_moved", "first_turn"):
        book.reanchored(reason)
    book.rejected("invalid_json")
    docs = parse("\n".join(emf_documents(book.take(), DIMENSIONS, NOW)))
    main = [d for d in docs if m.REASON_DIMENSION not in d]
    assert [d[m.WINDOW_REANCHORS] for d in main] == [4]
    by_reason = totals([d for d in docs if m.REASON_DIMENSION in d], by=m.REASON_DIMENSION)
    assert by_reason == {
        (m.COMMANDS_REJECTED, "invalid_json"): 1,
        (m.WINDOW_REANCHORS, "fold_moved"): 2,
        (m.WINDOW_REANCHORS, "overflow"): 1,
        (m.WINDOW_REANCHORS, "first_turn"): 1,
    }
    # An interval without one (the sliding mode's every interval) does not name it.
    book.count(m.COMMANDS_SERVED)
    [quiet] = parse("\n".join(emf_documents(book.take(), DIMENSIONS, NOW)))
    assert m.WINDOW_REANCHORS not in quiet
    assert m.WINDOW_REANCHORS not in m.COUNTERS
    assert m.WINDOW_REANCHORS.isidentifier()


def test_cache_point_ttls_are_counted_per_ttl_only_in_intervals_that_had_any() -> None:
    book = MetricsBook()
    book.ttl_chosen("1h", 2)
    book.ttl_chosen("5m", 1)
    book.ttl_chosen("1h", 1)
    book.ttl_chosen("none", 1)
    docs = parse("\n".join(emf_documents(book.take(), DIMENSIONS, NOW)))
    assert totals([d for d in docs if m.TTL_DIMENSION in d], by=m.TTL_DIMENSION) == {
        (m.CACHE_POINT_TTLS, "1h"): 3,
        (m.CACHE_POINT_TTLS, "5m"): 1,
        (m.CACHE_POINT_TTLS, "none"): 1,
    }
    book.count(m.COMMANDS_SERVED)
    assert all(
        m.CACHE_POINT_TTLS not in d
        for d in parse("\n".join(emf_documents(book.take(), DIMENSIONS, NOW)))
    )


def cache_check(cause: Cause | None, *, read: int, billed: float) -> CacheCheck:
    """The newest answer's bill checked: 2,000 tokens expected read, ``read`` made."""
    return CacheCheck(
        seq=8,
        command_id="c-4",
        expected_read=1_900,
        expected_read_tokens=2_000,
        read_tokens=read,
        write_tokens=400,
        written_5m=400,
        written_1h=0,
        billed_units=billed,
        cause=cause,
        downgraded=False,
    )


def test_a_checked_bill_writes_the_checks_the_misses_by_cause_and_three_distributions() -> None:
    """GIVEN three turns that checked a bill (one read as expected, one expired, one
    unexplained), WHEN the interval is written, THEN CacheChecks counts all three,
    CacheMisses the two misses in all and one document per Cause, and the billed input
    units (to 0.1) and the expected and observed reads are one value per check."""
    book = MetricsBook()
    checks = [
        cache_check(None, read=2_000, billed=750.0),
        cache_check("expired", read=0, billed=2_550.04),
        cache_check("unexplained", read=0, billed=2_549.96),
    ]
    for checked in checks:
        with Telemetry(metrics=book, clock=FakeClock()).turn(RECEIVED, received_at=0.0):
            telemetry.cache_observed(checked)
    telemetry.cache_observed(checks[1])  # outside a turn: recorded nowhere
    docs = parse("\n".join(emf_documents(book.take(), DIMENSIONS, NOW)))
    for document in docs:
        check_document(document)
    main = [d for d in docs if m.CAUSE_DIMENSION not in d]
    assert totals(main)[m.CACHE_CHECKS] == 3
    assert totals(main)[m.CACHE_MISSES] == 2
    by_cause = [d for d in docs if m.CAUSE_DIMENSION in d]
    assert totals(by_cause, by=m.CAUSE_DIMENSION) == {
        (m.CACHE_MISSES, "expired"): 1,
        (m.CACHE_MISSES, "unexplained"): 1,
    }
    for document in by_cause:
        assert document["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [
            [m.SERVICE_DIMENSION, m.QUEUE_DIMENSION, m.CAUSE_DIMENSION]
        ]
    assert samples(main, m.OBSERVED_BILLED_INPUT_UNITS) == [750.0, 2_550.0, 2_550.0]
    assert samples(main, m.EXPECTED_CACHE_READ_TOKENS) == [2_000, 2_000, 2_000]
    assert samples(main, m.OBSERVED_CACHE_READ_TOKENS) == [2_000, 0, 0]


def test_an_interval_of_checks_without_a_miss_names_no_cache_miss() -> None:
    book = MetricsBook()
    with Telemetry(metrics=book, clock=FakeClock()).turn(RECEIVED, received_at=0.0):
        telemetry.cache_observed(cache_check(None, read=2_000, billed=750.0))
    [document] = parse("\n".join(emf_documents(book.take(), DIMENSIONS, NOW)))
    assert document[m.CACHE_CHECKS] == 1
    assert m.CACHE_MISSES not in document
    book.count(m.COMMANDS_SERVED)
    [quiet] = parse("\n".join(emf_documents(book.take(), DIMENSIONS, NOW)))
    assert quiet[m.CACHE_CHECKS] == 0  # a counter: written every interval, for the share
    assert m.OBSERVED_BILLED_INPUT_UNITS not in quiet
