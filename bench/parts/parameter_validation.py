"""What botocore's client-side parameter validation costs the worker, per call and per command.

``parameter_validation`` (``worker.app.runtime.aws_clients``) decides one thing: whether
botocore wraps a client's serializer in ``ParamValidationDecorator``, which walks each
request against the service model before serializing it (``botocore.serialize.
create_serializer``, as aiobotocore's client factory calls it). So the cost is measured
where it is paid: ``serialize_to_request`` of the worker's own requests (built by the
adapters' own builders), with and without the decorator, against the service models of the
installed botocore. No network: a round trip would bury microseconds under milliseconds.

Rounds alternate the two configurations (with, without, with, ...); each figure is the
best round's mean, the least disturbed by other processes on a shared machine. The per
command figure weighs each operation by its calls per command in docs/BENCHMARKS.md
(part 3a, "Calls per command by operation", the worker's column) and is compared with the
worker's own CPU per command there (3.24 ms) and with all processes' (11.0 ms).

Run: ``.venv/bin/python -m bench.parts.parameter_validation [--rounds 9] [--calls 400]``
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import botocore.session
from botocore.serialize import create_serializer
from botocore.validate import ParamValidator

from worker.adapters.dynamodb import fold_claim_request, history_page_query
from worker.adapters.ledger import claim_request, done_marks_request
from worker.adapters.sqs import OutboundMessage, delete_entries, receive_request, send_entries
from worker.delivery.done_marks import DoneMark
from worker.memory import FoldState

#: The worker's own CPU per command and every process's (docs/BENCHMARKS.md, part 3a).
WORKER_CPU_MS_PER_COMMAND = 3.24
ALL_CPU_MS_PER_COMMAND = 11.0
#: The share of a command's CPU under which a saving is noise, not a reason to keep it off.
REAL_SAVING = 0.01

QUEUE = "https://sqs.eu-west-1.amazonaws.com/123456789012/mira-model"
TABLE = "mira-history"
NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
TRACE = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
#: A receipt handle as SQS writes them: a few hundred base64 characters.
RECEIPT = "AQEB" + "Zm9sZC1yZWNlaXB0LWhhbmRsZQ" * 14


@dataclass(frozen=True, slots=True)
class Call:
    """One of the worker's requests, and how many of it a command costs."""

    label: str
    service: str
    operation: str
    params: Mapping[str, Any]
    per_command: float


def prompt_body(size: int = 35_000) -> str:
    """A prompt payload's size and shape: JSON text of a legal conversation."""
    turn = (
        '{"seq": 131, "role": "user", "content": "Under clause 14.2 either party may '
        "terminate on 90 days' written notice; the notice period falls to 10 days on an "
        'insolvency event listed in clause 1.1."}, '
    )
    return ('{"type": "prompt", "history": [' + turn * (size // len(turn) + 1))[:size] + "]}"


def calls() -> list[Call]:
    """The turn's requests, as the adapters build them; weights from docs/BENCHMARKS.md."""
    body = prompt_body()
    prompts = [OutboundMessage(body, f"matter-{i}", f"c-{i}", None, TRACE) for i in range(10)]
    marks = [DoneMark(f"matter-{i}", f"c-{i}", "worker-1", NOW) for i in range(10)]
    lease = timedelta(seconds=60)
    return [
        Call("turn Query", "dynamodb", "Query", history_page_query(TABLE, "matter-1", 61), 1.0),
        Call(
            "ledger claim UpdateItem",
            "dynamodb",
            "UpdateItem",
            claim_request(TABLE, "matter-1", "c-1", owner="worker-1", lease=lease, now=NOW),
            1.0,
        ),
        Call(
            "fold claim UpdateItem",
            "dynamodb",
            "UpdateItem",
            fold_claim_request(TABLE, "matter-1", 57, seen=FoldState(folded_through=34), now=NOW),
            0.021,
        ),
        Call(
            "done marks BatchWriteItem (10)",
            "dynamodb",
            "BatchWriteItem",
            done_marks_request(TABLE, marks),
            0.100,
        ),
        Call("ReceiveMessage (10)", "sqs", "ReceiveMessage", receive_request(QUEUE, 10, 20), 0.100),
        Call(
            "prompts SendMessageBatch (10 × 35 KB)",
            "sqs",
            "SendMessageBatch",
            {"QueueUrl": QUEUE, "Entries": send_entries(prompts, fifo=False)},
            0.100,
        ),
        Call(
            "DeleteMessageBatch (10)",
            "sqs",
            "DeleteMessageBatch",
            {"QueueUrl": QUEUE, "Entries": delete_entries([RECEIPT] * 10)},
            0.100,
        ),
    ]


def best_mean(run: Callable[[], object], calls: int, rounds: list[float]) -> None:
    started = time.perf_counter()
    for _ in range(calls):
        run()
    rounds.append((time.perf_counter() - started) / calls)


def measure(call: Call, session: Any, *, rounds: int, calls_per_round: int) -> dict[str, float]:
    """Seconds per call, best round: validation alone, serialize with it, serialize without."""
    model = session.get_service_model(call.service)
    operation = model.operation_model(call.operation)
    with_validation = create_serializer(model.resolved_protocol, include_validation=True)
    without = create_serializer(model.resolved_protocol, include_validation=False)
    validator = ParamValidator()
    report = validator.validate(call.params, operation.input_shape)
    if report.has_errors():  # the measurement would time an error path
        raise SystemExit(f"{call.label}: fails validation:\n{report.generate_report()}")
    times: dict[str, list[float]] = {"validate": [], "with": [], "without": []}
    for _ in range(rounds):
        best_mean(
            lambda: validator.validate(call.params, operation.input_shape),
            calls_per_round,
            times["validate"],
        )
        best_mean(
            lambda: with_validation.serialize_to_request(call.params, operation),
            calls_per_round,
            times["with"],
        )
        best_mean(
            lambda: without.serialize_to_request(call.params, operation),
            calls_per_round,
            times["without"],
        )
    return {name: min(values) for name, values in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=400, help="calls per round")
    args = parser.parse_args(argv)
    session = botocore.session.get_session()
    print(f"botocore {botocore.__version__}; best of {args.rounds} rounds of {args.calls} calls")
    print(
        f"{'request':<40} {'validate µs':>12} {'serialize+val µs':>17} "
        f"{'serialize µs':>13} {'difference µs':>14} {'per command':>12}"
    )
    per_command = 0.0
    validate_per_command = 0.0
    for call in calls():
        t = measure(call, session, rounds=args.rounds, calls_per_round=args.calls)
        difference = t["with"] - t["without"]
        per_command += difference * call.per_command
        validate_per_command += t["validate"] * call.per_command
        print(
            f"{call.label:<40} {t['validate'] * 1e6:>12.1f} {t['with'] * 1e6:>17.1f} "
            f"{t['without'] * 1e6:>13.1f} {difference * 1e6:>14.1f} {call.per_command:>12.3f}"
        )
    worker_share = per_command * 1e3 / WORKER_CPU_MS_PER_COMMAND
    all_share = per_command * 1e3 / ALL_CPU_MS_PER_COMMAND
    print(
        f"\nper command: {per_command * 1e6:.1f} µs"
        f" (validation alone {validate_per_command * 1e6:.1f} µs)"
        f" = {worker_share:.2%} of the worker's own {WORKER_CPU_MS_PER_COMMAND} ms CPU"
        f" per command, {all_share:.2%} of all processes' {ALL_CPU_MS_PER_COMMAND} ms"
    )
    verdict = "real: keep it off" if worker_share > REAL_SAVING else "noise: turn it back on"
    print(f"saving by parameter_validation=False: {verdict} (threshold {REAL_SAVING:.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
