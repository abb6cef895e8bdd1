"""The claim-cost study's parts: the unclaimed worker's ledger and the figures' summary."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bench.contenders import contenders
from bench.contenders.worker_process import grant_claims_unasked
from bench.parts import runs
from bench.parts.claim_cost import CONTENDERS, differences, table
from bench.parts.latency import pooled
from worker.adapters.ledger import DynamoCommandLedger
from worker.ports import CommandHold


def test_an_unclaimed_ledger_grants_a_claim_without_a_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(DynamoCommandLedger, "begin", DynamoCommandLedger.begin)  # restored after
    grant_claims_unasked()
    ledger = DynamoCommandLedger(None, "ledger")  # type: ignore[arg-type]  # any call would fail
    hold = CommandHold("conv-1", "cmd-1", "owner")
    claim = asyncio.run(
        ledger.begin(hold, lease=timedelta(minutes=5), now=datetime.now(UTC), message="question")
    )
    assert claim.state == "started"
    assert claim.digest is not None
    assert claim.digest.matches("question")
    assert not claim.digest.matches("another question")


def test_the_unclaimed_contender_runs_the_worker_with_the_study_switched_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[tuple[dict[str, str], str]] = []

    def worker(env: dict[str, str], workdir: Any, name: str, **_: Any) -> str:
        made.append((env, name))
        return name

    monkeypatch.setattr(contenders, "worker", worker)
    runs.make("worker-unclaimed", {"A": "1"}, "study", {}, [])
    runs.make("worker", {"A": "1"}, "stage", {}, [])
    assert made == [({"A": "1", contenders.UNCLAIMED_ENV: "1"}, "study"), ({"A": "1"}, "stage")]


def _run(latencies: list[float], calls: dict[str, int], cpu: float) -> dict[str, Any]:
    """One round of one row, as :func:`bench.parts.latency.one_row` returns it."""
    return {
        "kind": "worker",
        "load": "low",
        "achieved_per_second": 8.0,
        "latencies_ms": latencies,
        "calls": calls,
        "cpu_seconds": cpu,
    }


def test_a_rows_line_pools_the_rounds_and_keeps_each_rounds_median() -> None:
    rounds = [
        _run([10.0, 20.0, 30.0, 40.0], {"sqs.ReceiveMessage": 4, "dynamodb.Query": 4}, 0.04),
        _run([50.0, 60.0, 70.0, 80.0], {"sqs.ReceiveMessage": 4, "dynamodb.Query": 4}, 0.08),
    ]
    row = pooled(rounds, 8.0)
    results = {"loads": {"low": {"per_second": 8.0, **dict.fromkeys(CONTENDERS, row)}}}
    # 8 commands: p50 40, p99 80; the rounds' p50s 20 and 60; 16 calls; 120 ms of CPU
    assert (
        table(results).splitlines()[2]
        == "| 8/s | naive | 40.0 | 80.0 | 20.0 / 60.0 | 2.00 | 15.0 |"
    )


def test_the_table_has_a_line_per_contender_and_load() -> None:
    row = pooled([_run([1.0, 2.0], {"x": 2}, 0.002)], 2.0)
    results = {
        "loads": {
            "light": {"per_second": 2.0, **dict.fromkeys(CONTENDERS, row)},
            "low": {"per_second": 8.0, **dict.fromkeys(CONTENDERS, row)},
        }
    }
    lines = table(results).splitlines()
    assert len(lines) == 2 + 2 * len(CONTENDERS)
    assert lines[2] == "| 2/s | naive | 1.0 | 2.0 | 1.0 | 1.00 | 1.0 |"
    assert lines[-1].startswith("| 8/s | worker-unclaimed |")


def test_the_claims_cost_is_the_median_of_the_rounds_differences() -> None:
    def rounds(*p50s: float) -> dict[str, Any]:
        return pooled([_run([p50], {}, 0.0) for p50 in p50s], 8.0)

    naive, worker, unclaimed = (
        rounds(10.0, 20.0, 40.0),
        rounds(15.0, 30.0, 41.0),
        rounds(12.0, 22.0, 44.0),
    )
    # per round, the claim: 3, 8, -3; the rest: 2, 2, 4
    assert differences(naive, worker, unclaimed) == {"claim_ms": 3.0, "rest_ms": 2.0}
