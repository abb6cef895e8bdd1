"""The light-load path, call by call: when each AWS call of a command's turn began and ended,
from the command's send to its delete.

A contender (the worker, or the naive sequential consumer) runs a network away (the latency
proxy: SQS 12 ms, DynamoDB 5 ms a round trip) and logs every call it makes
(:mod:`bench.contenders.calllog`); the benchmark sends commands open-loop at ``--rate`` and
records when each send began. Each command's timeline is then read off the calls that
served it, all on the wall clock, in milliseconds from its send:

- ``receive``: the ReceiveMessage that brought it (it began before the send: a parked poll);
- ``claim``: the ledger's UpdateItem of its ``cmd#`` record (the worker only);
- ``query``: the first Query of its conversation after the receive;
- ``send``: the SendMessage(Batch) carrying its payload; ``arrival``: the payload's
  ``SentTimestamp`` on the model queue (SQS's clock, milliseconds);
- ``mark``: the BatchWriteItem of its done record (the worker only);
- ``delete``: the DeleteMessage(Batch) of its message.

::

    .venv/bin/python -m bench.parts.timeline                      # both contenders, 2/s
    .venv/bin/python -m bench.parts.timeline --rate 8 --commands 160
    .venv/bin/python -m bench.parts.timeline --only worker --json .bench/timeline.json
    .venv/bin/python -m bench.parts.timeline --only worker --loop-trace   # what a turn waits for

It starts its own moto, dynalite and proxy on 127.0.0.1. It prints, per contender, the median
(and 90th percentile) start and end of each step, the calls per command, and one command's
timeline drawn a character a millisecond. The findings: docs/benchmarks/light_load.md.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.contenders.calllog import CALL_LOG_ENV, Call, read_call_log
from bench.contenders.looptrace import (
    LOOP_TRACE_ENV,
    Busy,
    idle_seconds,
    read_loop_trace,
    step_at,
)
from bench.load.traffic import draining, feed_at_rate
from bench.load.workload import Command, make_commands
from bench.parts.runs import WORK_DIR, make, queues, seeded, warmed_up, write_json
from bench.servers.servers import DELAYED, DIRECT, Servers, both_regimes
from worker.app.runtime import aws_clients

#: The steps of a turn, in order; the naive consumer has no claim and no mark.
STEPS = ("receive", "claim", "query", "send", "arrival", "mark", "delete")
#: Which call is which step: (step, operations).
_OPERATIONS = (
    ("receive", ("sqs.ReceiveMessage",)),
    ("claim", ("dynamodb.UpdateItem",)),
    ("send", ("sqs.SendMessageBatch", "sqs.SendMessage")),
    ("mark", ("dynamodb.BatchWriteItem",)),
    ("delete", ("sqs.DeleteMessageBatch", "sqs.DeleteMessage")),
)


@dataclass(frozen=True, slots=True)
class Span:
    """One step of one command: ms from the command's send; ``shared`` commands in its call."""

    began: float
    ended: float
    shared: int = 1


def command_timeline(
    command: Command, sent_at: float, arrived_ms: int, calls: Sequence[Call]
) -> dict[str, Span]:
    """The steps of ``command`` (sent at ``sent_at``, epoch seconds) from the calls that served
    it; a step it did not take is absent."""

    def span(call: Call) -> Span:
        ended = call.ended if call.ended is not None else call.began
        return Span(
            1000 * (call.began - sent_at), 1000 * (ended - sent_at), max(1, len(call.commands))
        )

    steps: dict[str, Span] = {}
    for step, operations in _OPERATIONS:
        if (call := first_call(command, calls, operations)) is not None:
            steps[step] = span(call)
    received = steps.get("receive")
    query = first_query(command, calls, after=sent_at + (received.ended / 1000 if received else 0))
    if query is not None:
        steps["query"] = span(query)
    arrival = arrived_ms - 1000 * sent_at
    steps["arrival"] = Span(arrival, arrival)
    return steps


def first_call(command: Command, calls: Sequence[Call], operations: Sequence[str]) -> Call | None:
    """The first call of one of ``operations`` that served the command."""
    mine = [c for c in calls if c.operation in operations and command.command_id in c.commands]
    return min(mine, key=lambda c: c.began) if mine else None


def first_query(command: Command, calls: Sequence[Call], *, after: float) -> Call | None:
    """The first Query of the command's conversation begun at or after ``after``."""
    queries = [
        c
        for c in calls
        if c.operation == "dynamodb.Query"
        and command.conversation_id in c.conversations
        and c.began >= after
    ]
    return min(queries, key=lambda c: c.began) if queries else None


def claim_wait(command: Command, calls: Sequence[Call], busy: Sequence[Busy]) -> dict[str, float]:
    """What the worker's turn did between its Query's answer and its claim's, in ms: the
    rest of the loop step the Query's answer was parsed in (the page read, the plan, the
    payload), the claim's answer after that step, and the loop's idle time in between (none:
    the claim's answer was in before the turn's own work was done). Empty when the command
    has no claim, or its Query answered after the claim."""
    answered = [c for c in calls if c.ended is not None]
    claim = first_call(command, answered, ("dynamodb.UpdateItem",))
    receive = first_call(command, answered, ("sqs.ReceiveMessage",))
    query = first_query(command, calls, after=(receive.ended or 0) if receive is not None else 0)
    # (claim.ended is never None here: its check is for the type checker)
    if claim is None or claim.ended is None or query is None or query.ended is None:
        return {}
    if query.ended > claim.ended:
        return {}
    step = step_at(busy, query.ended)
    step_end = step.ended if step is not None else query.ended
    return {
        "page_work_ms": 1000 * (step_end - query.ended),
        "claim_after_work_ms": 1000 * (claim.ended - step_end),
        "idle_ms": 1000 * idle_seconds(busy, query.ended, claim.ended),
        "claim_after_query_ms": 1000 * (claim.ended - query.ended),
    }


def summarise(timelines: Sequence[dict[str, Span]]) -> dict[str, dict[str, float]]:
    """Per step: median and 90th percentile of its start and end, mean commands per call."""
    out: dict[str, dict[str, float]] = {}
    for step in STEPS:
        spans = [t[step] for t in timelines if step in t]
        if not spans:
            continue
        began = sorted(s.began for s in spans)
        ended = sorted(s.ended for s in spans)
        out[step] = {
            "began_p50": statistics.median(began),
            "began_p90": began[int(0.9 * (len(began) - 1))],
            "ended_p50": statistics.median(ended),
            "ended_p90": ended[int(0.9 * (len(ended) - 1))],
            "shared": statistics.fmean(s.shared for s in spans),
            "commands": len(spans),
        }
    return out


def draw(timeline: dict[str, Span], width: int = 100) -> list[str]:
    """One command's steps a character a millisecond from its send (``=``: the call under
    way, ``|``: the arrival; a parked receive is drawn from 0)."""
    lines = []
    for step in STEPS:
        if step not in timeline:
            continue
        s = timeline[step]
        start, end = max(0, round(s.began)), max(0, round(s.ended))
        if step == "arrival":
            bar = " " * min(end, width) + "|"
        else:
            bar = " " * min(start, width) + "=" * max(1, min(end, width) - min(start, width))
        label = f"{s.began:6.1f} → {s.ended:6.1f}" if step != "arrival" else f"{s.ended:15.1f}"
        lines.append(f"{step:>8} {label} ms  {bar}")
    return lines


def table(kind: str, summary: dict[str, dict[str, float]]) -> list[str]:
    lines = [
        f"{kind}: ms from the command's send, median (90th percentile)",
        "| step | begins | ends | commands a call |",
        "| --- | ---: | ---: | ---: |",
    ]
    for step, s in summary.items():
        began = "–" if step == "arrival" else f"{s['began_p50']:.1f} ({s['began_p90']:.1f})"
        lines.append(
            f"| {step} | {began} | {s['ended_p50']:.1f} ({s['ended_p90']:.1f}) "
            f"| {s['shared']:.2f} |"
        )
    return lines


async def one_contender(
    clients: Any,
    far: Servers,
    kind: str,
    conversations: dict[str, Any],
    text: Any,
    *,
    rate: float,
    count: int,
    tag: str,
    loop_trace: bool = False,
) -> dict[str, Any]:
    """One contender at ``rate``: its per-command timelines, summary and calls per command;
    with ``loop_trace`` (the worker only), what its turns waited for after the Query."""
    log_path = WORK_DIR / f"{tag}.calls.jsonl"
    trace_path = WORK_DIR / f"{tag}.loop.jsonl"
    log_path.unlink(missing_ok=True)
    trace_path.unlink(missing_ok=True)
    env, child = await queues(clients, far, tag, **{CALL_LOG_ENV: str(log_path)})
    traced = loop_trace and kind == "worker"
    if traced:
        child[LOOP_TRACE_ENV] = str(trace_path)
    pool = list(conversations.values())
    warmup = make_commands(f"{tag}-w", pool, 20, text, seed=7)
    commands = make_commands(tag, pool, count, text, seed=8)
    contender = make(kind, child, tag, conversations, [*warmup, *commands])
    sent_at: dict[str, float] = {}
    async with draining(clients.sqs, env["MODEL_QUEUE_URL"], tasks=1, pause=0.1) as drain:
        try:
            await warmed_up(contender, clients.sqs, env["CONVERSE_QUEUE_URL"], drain, warmup)
            await feed_at_rate(
                clients.sqs, env["CONVERSE_QUEUE_URL"], commands, rate=rate, sent_at=sent_at
            )
            if not await drain.wait_for([c.command_id for c in commands], within=60):
                raise RuntimeError(f"{tag}: not every payload arrived")
            await asyncio.sleep(1.0)  # the deletes (they linger) and the marks
        finally:
            await contender.stop()
    calls = read_call_log(str(log_path))
    timelines = [
        command_timeline(c, sent_at[c.command_id], drain.arrivals[c.command_id].arrived_ms, calls)
        for c in commands
    ]
    first = min(sent_at[c.command_id] for c in commands)
    measured = [c for c in calls if c.began >= first - 0.001]
    per_operation: dict[str, float] = {}
    for call in measured:
        per_operation[call.operation] = per_operation.get(call.operation, 0) + 1 / len(commands)
    ordered = sorted(timelines, key=lambda t: t["arrival"].ended)
    example, slowest = ordered[len(ordered) // 2], ordered[-1]
    arrivals = [t["arrival"].ended for t in ordered]
    waits = []
    if traced:
        busy = read_loop_trace(str(trace_path))
        waits = [w for c in commands if (w := claim_wait(c, calls, busy))]
    return {
        "kind": kind,
        "rate": rate,
        "claim_waits": {
            key: statistics.median(w[key] for w in waits) for key in (waits[0] if waits else {})
        },
        "claim_waits_counted": len(waits),
        "commands": len(commands),
        "summary": summarise(timelines),
        "calls_per_command": per_operation,
        "arrival_ms": {
            q: arrivals[min(len(arrivals) - 1, int(q / 100 * len(arrivals)))] for q in (50, 90, 99)
        },
        "example": {step: [s.began, s.ended, s.shared] for step, s in example.items()},
        "drawn": draw(example),
        "slowest": draw(slowest),
        "timelines": [
            {step: [round(s.began, 2), round(s.ended, 2), s.shared] for step, s in t.items()}
            for t in timelines
        ],
    }


async def measure(
    servers: Servers,
    far: Servers,
    kinds: Sequence[str],
    *,
    rate: float,
    count: int,
    runs: int,
    loop_trace: bool = False,
) -> list[dict[str, Any]]:
    del servers
    async with aws_clients(pool_size=16) as clients:
        history = await seeded(clients, 30, prefix="tl")
        conversations, text = history.conversations, history.text
        results = []
        for run in range(1, runs + 1):
            for kind in kinds:
                tag = f"tl-{kind}-{round(rate)}-r{run}"
                results.append(
                    await one_contender(
                        clients,
                        far,
                        kind,
                        conversations,
                        text,
                        rate=rate,
                        count=count,
                        tag=tag,
                        loop_trace=loop_trace,
                    )
                )
        return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--only", choices=("worker", "naive"), help="one contender")
    parser.add_argument("--rate", type=float, default=2.0, help="commands a second (2)")
    parser.add_argument("--commands", type=int, default=40, help="measured per run (40)")
    parser.add_argument("--runs", type=int, default=1, help="runs per contender, interleaved")
    parser.add_argument("--json", type=Path, help="write the results here too")
    parser.add_argument(
        "--loop-trace", action="store_true", help="what the worker's turns wait for after a Query"
    )
    args = parser.parse_args(argv)
    kinds = [args.only] if args.only else ["naive", "worker"]
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    with both_regimes(print) as fleets:
        results = asyncio.run(
            measure(fleets[DIRECT], fleets[DELAYED], kinds, rate=args.rate,
                    count=args.commands, runs=args.runs, loop_trace=args.loop_trace)
        )  # fmt: skip
    for result in results:
        print()
        print(*table(f"{result['kind']} at {result['rate']:g}/s", result["summary"]), sep="\n")
        calls = result["calls_per_command"]
        print(f"calls per command: {sum(calls.values()):.2f} "
              + ", ".join(f"{k} {v:.2f}" for k, v in sorted(calls.items())))  # fmt: skip
        if waits := result["claim_waits"]:
            print(f"after the Query's answer (medians of {result['claim_waits_counted']} turns): "
                  f"the turn's own work on the page {waits['page_work_ms']:.2f} ms, the claim's "
                  f"answer {waits['claim_after_work_ms']:.2f} ms after it, the loop idle "
                  f"{waits['idle_ms']:.2f} ms of the {waits['claim_after_query_ms']:.2f} between "
                  "the two answers")  # fmt: skip
        print("a median command:")
        print(*result["drawn"], sep="\n")
        print("the slowest command:")
        print(*result["slowest"], sep="\n")
    if args.json:
        write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
