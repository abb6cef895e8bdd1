"""Part 4: latency from a command's send to its payload's arrival on the model queue, at a
fixed offered load below saturation.

The load is open-loop: one ``SendMessage`` every ``1/rate`` seconds on a fixed schedule,
whatever the consumer does. Arrival is SQS's own ``SentTimestamp`` of the payload on the
model queue (milliseconds), so the benchmark's polling does not add to the figures.

The rows, in both regimes: ``low`` (half the naive consumer's throughput in part 3), run by
it and the worker, and ``high`` (40% of the worker's), run by the worker and the replay. With
the injected latency the loads are a firm's: ``light`` 2/s and ``low`` 8/s, each run by the
naive consumer and the worker, beside ``high``; and the critical path's floor
(:func:`floor`): its three calls alone, in sequence, with nothing between them.

Each round runs every row once, in order, the contenders interleaved (A B A B …), each on
fresh queues after its warm-up; a row's figures pool its rounds' commands, and the spread is
its p50 and p99 round by round. Alone, against fresh servers::

    .venv/bin/python -m bench.parts.latency                   # both regimes, 3 rounds
    .venv/bin/python -m bench.parts.latency --regime delayed --write

``--write`` puts the figures into docs/benchmarks/results.json (the other parts' kept as they
are) and renders docs/BENCHMARKS.md from it; the ``high`` loads come from part 3's figures
there.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from bench.contenders import contenders
from bench.load.traffic import draining, feed_at_rate
from bench.load.workload import (
    Conversation,
    expected_payload,
    make_commands,
)
from bench.parts.runs import (
    TABLE,
    WORK_DIR,
    Progress,
    arrived,
    make,
    queues,
    seeded,
    warmed_up,
    write_json,
)
from bench.servers.servers import (
    DELAYED,
    DIRECT,
    Servers,
    both_regimes,
    create_bench_resources,
)

Say = Callable[[str], None]
#: (contender, load) of each row, by regime, in the order a round runs them.
ROWS = {
    DIRECT: (("naive", "low"), ("worker", "low"), ("worker", "high"), ("replay", "high")),
    DELAYED: (("naive", "light"), ("worker", "light"), ("naive", "low"), ("worker", "low"),
              ("worker", "high"), ("replay", "high")),
}  # fmt: skip
#: With the latency, a firm's loads: one counsel asking now and then, and a busier hour.
FIRM_LOADS = {"light": 2.0, "low": 8.0}
#: The light load runs longer: at 2/s a round's p99 needs commands.
LIGHT_SECONDS = 40.0
#: Floor samples (each a parked poll, a send, a Query and a send, in sequence).
FLOOR_SAMPLES = 40


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of ``values``."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def rates(summary: dict[str, Any] | None, regime: str = DIRECT) -> dict[str, float]:
    """The loads of ``regime``, from part 3's summary in the same regime (defaults without
    one); with the latency, ``light`` and ``low`` are :data:`FIRM_LOADS`."""
    if summary is None:
        loads = {"low": 10.0, "high": 40.0 if regime == DIRECT else 50.0}
    else:
        loads = {
            "low": max(5.0, round(0.5 * summary["naive"]["commands_per_second"])),
            "high": max(10.0, round(0.4 * summary["worker"]["commands_per_second"], -1)),
        }
    return {**loads, **FIRM_LOADS} if regime == DELAYED else loads


async def one_row(
    clients: Any,
    servers: Servers,
    conversations: dict[str, Conversation],
    text: Any,
    *,
    kind: str,
    load: str,
    rate: float,
    count: int,
    tag: str,
    say: Say,
    stops: list[asyncio.Task[Any]],
) -> dict[str, Any]:
    """One contender at one load, once: fresh queues, warm-up, ``count`` commands at ``rate``.
    Its stop is left under way in ``stops``: a worker lets its long poll return first (up to
    ``RECEIVE_WAIT_SECONDS``), idle on queues no other row uses."""
    pool = list(conversations.values())
    env, child = await queues(clients, servers, tag)
    warmup = make_commands(f"{tag}-w", pool, 20, text, seed=7)
    commands = make_commands(tag, pool, count, text, seed=8)
    contender = make(kind, child, tag, conversations, [*warmup, *commands])
    url = env["CONVERSE_QUEUE_URL"]
    async with draining(clients.sqs, env["MODEL_QUEUE_URL"], tasks=1, pause=0.1) as drain:
        try:
            before = await warmed_up(contender, clients.sqs, url, drain, warmup)
            sent_at: dict[str, float] = {}
            achieved = await feed_at_rate(clients.sqs, url, commands, rate=rate, sent_at=sent_at)
            await arrived(drain, commands, 60, tag)
            delta = contenders.diff(await contender.snapshot(), before)
        finally:
            stops.append(asyncio.create_task(contender.stop()))
    latencies = [
        drain.arrivals[c.command_id].arrived_ms - sent_at[c.command_id] * 1000 for c in commands
    ]
    sends = [[sent_at[c.command_id], round(x, 1)] for c, x in zip(commands, latencies, strict=True)]
    write_json(WORK_DIR / f"{tag}.latencies.json", sends)
    say(f"  {tag}: {count} commands at {rate:g}/s: p50 {percentile(latencies, 50):.1f} ms, "
        f"p99 {percentile(latencies, 99):.1f} ms")  # fmt: skip
    return {
        "kind": kind,
        "load": load,
        "achieved_per_second": achieved,
        "commands": count,
        "latencies_ms": latencies,
        "calls": delta["calls"],
        "cpu_seconds": delta["cpu_seconds"],
    }


def pooled(runs: Sequence[dict[str, Any]], rate: float) -> dict[str, Any]:
    """One row over its rounds: percentiles of every command, the spread round by round."""
    latencies = [x for r in runs for x in r["latencies_ms"]]
    n = len(latencies)
    calls: dict[str, float] = {}
    for r in runs:
        for label, count in r["calls"].items():
            calls[label] = calls.get(label, 0.0) + count / n
    return {
        "kind": runs[0]["kind"],
        "load": runs[0]["load"],
        "offered_per_second": rate,
        "achieved_per_second": statistics.fmean(r["achieved_per_second"] for r in runs),
        "commands": n,
        "rounds": len(runs),
        "p50_ms": percentile(latencies, 50),
        "p95_ms": percentile(latencies, 95),
        "p99_ms": percentile(latencies, 99),
        "max_ms": max(latencies),
        "per_round": [
            {
                "p50_ms": percentile(r["latencies_ms"], 50),
                "p99_ms": percentile(r["latencies_ms"], 99),
            }
            for r in runs
        ],
        "calls_per_command": calls,
        "cpu_ms_per_command": 1000 * sum(r["cpu_seconds"] for r in runs) / n,
        "latencies_ms": [round(x, 1) for x in sorted(latencies)],
    }


@contextlib.asynccontextmanager
async def clients_of(servers: Servers) -> AsyncIterator[tuple[Any, Any]]:
    """SQS and DynamoDB clients of this process pointed at ``servers`` (the proxy's ports)."""
    import aioboto3

    session = aioboto3.Session()
    async with (
        session.client("sqs", endpoint_url=servers.moto) as sqs,
        session.client("dynamodb", endpoint_url=servers.dynamodb) as dynamodb,
    ):
        yield sqs, dynamodb


async def floor(
    clients: Any,
    far: Servers,
    conversations: dict[str, Conversation],
    text: Any,
    *,
    samples: int = FLOOR_SAMPLES,
) -> dict[str, Any]:
    """The critical path's calls alone, measured: a poll parked through the proxy returns the
    command the benchmark sends (directly, as the feed does), then the Query of its page and
    the send of its payload, each through the proxy, in sequence, with nothing in between
    (payloads precomputed). Send → arrival as part 4 measures it, and each leg's median; and
    the share of it the proxy injects, computed: the poll's answer (half the SQS round trip),
    the Query's round trip, the send's request (half the SQS round trip)."""
    from worker.adapters.dynamodb import history_page_query

    pool = list(conversations.values())
    env = await create_bench_resources(clients, "lat-floor", TABLE)
    commands = make_commands("lat-floor", pool, samples, text, seed=9)
    bodies = {c.command_id: expected_payload(c, conversations[c.conversation_id]) for c in commands}
    legs: list[tuple[float, float, float, float]] = []
    async with (
        clients_of(far) as (sqs, dynamodb),
        draining(clients.sqs, env["MODEL_QUEUE_URL"], tasks=1, pause=0.1) as drain,
    ):
        for command in commands:
            poll = asyncio.ensure_future(
                sqs.receive_message(
                    QueueUrl=env["CONVERSE_QUEUE_URL"], MaxNumberOfMessages=1, WaitTimeSeconds=20
                )
            )
            await asyncio.sleep(0.3)  # parked
            began = time.time()
            await clients.sqs.send_message(
                QueueUrl=env["CONVERSE_QUEUE_URL"], MessageBody=command.body
            )
            [message] = (await poll)["Messages"]
            received = time.time()
            await dynamodb.query(**history_page_query(TABLE, command.conversation_id, 27))
            queried = time.time()
            await sqs.send_message(
                QueueUrl=env["MODEL_QUEUE_URL"], MessageBody=bodies[command.command_id]
            )
            await clients.sqs.delete_message(
                QueueUrl=env["CONVERSE_QUEUE_URL"], ReceiptHandle=message["ReceiptHandle"]
            )
            if not await drain.wait_for([command.command_id], within=10):
                raise RuntimeError("floor: a payload did not arrive")
            arrival = drain.arrivals[command.command_id].arrived_ms / 1000
            legs.append((began, received, queried, arrival))
    total = [1000 * (a - b) for b, _, _, a in legs]
    trips = far.round_trips_ms() or {"sqs_ms": 0.0, "dynamodb_ms": 0.0}
    return {
        "samples": samples,
        "p50_ms": percentile(total, 50),
        "p99_ms": percentile(total, 99),
        "receive_ms": statistics.median(1000 * (r - b) for b, r, _, _ in legs),
        "query_ms": statistics.median(1000 * (q - r) for _, r, q, _ in legs),
        "send_ms": statistics.median(1000 * (a - q) for _, _, q, a in legs),
        "injected_ms": trips["sqs_ms"] / 2 + trips["dynamodb_ms"] + trips["sqs_ms"] / 2,
        "round_trips_ms": 2 * trips["sqs_ms"] + trips["dynamodb_ms"],
    }


async def interleaved(
    clients: Any,
    servers: Servers,
    conversations: dict[str, Conversation],
    text: Any,
    *,
    rows: Sequence[tuple[str, str]],
    loads: Mapping[str, float],
    seconds: float,
    rounds: int,
    tag: str,
    say: Say,
) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Each (contender, load) of ``rows`` at its rate in ``loads``, ``rounds`` times, the rows
    in order in each round (the light load for :data:`LIGHT_SECONDS`, the others for
    ``seconds``): each row's rounds, once every contender has stopped. ``tag`` names a run,
    formatted with its ``kind``, ``load`` and ``round``."""
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {row: [] for row in rows}
    stops: list[asyncio.Task[Any]] = []
    for round_number in range(1, rounds + 1):
        for kind, load in rows:
            rate = loads[load]
            span = LIGHT_SECONDS if load == "light" else seconds
            result = await one_row(
                clients, servers, conversations, text, kind=kind, load=load, rate=rate,
                count=max(50, round(rate * span)), say=say, stops=stops,
                tag=tag.format(kind=kind, load=load, round=round_number),
            )  # fmt: skip
            runs[kind, load].append(result)
    exits = [document.get("exit_code") for document in await asyncio.gather(*stops)]
    if any(exits):
        raise RuntimeError(f"a contender exited with {exits}")
    return runs


async def run(
    clients: Any,
    servers: Servers,
    conversations: dict[str, Conversation],
    text: Any,
    *,
    loads: dict[str, float],
    seconds: float,
    rounds: int,
    say: Say,
    only: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Every row at its load (``only`` these loads, if given), ``rounds`` times interleaved:
    {rates, rounds, results, round_trips, floor (with the latency)}."""
    regime = DELAYED if servers.round_trips else DIRECT
    rows = [(kind, load) for kind, load in ROWS[regime] if only is None or load in only]
    far = "-lat" if servers.round_trips else ""
    say(f"part 4: latency at a fixed offered load{' with the latency' if far else ''}, "
        f"{rounds} round(s)")  # fmt: skip
    runs = await interleaved(
        clients, servers, conversations, text, rows=rows, loads=loads, seconds=seconds,
        rounds=rounds, tag="lat-{kind}-{load}" + far + "-r{round}", say=say,
    )  # fmt: skip
    out: dict[str, Any] = {
        "rates": loads,
        "rounds": rounds,
        "results": [pooled(r, loads[load]) for (_, load), r in runs.items()],
        "round_trips": servers.round_trips_ms(),
    }
    if servers.round_trips:
        say("  the floor: the critical path's calls alone")
        out["floor"] = await floor(clients, servers, conversations, text)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--regime", choices=(DIRECT, DELAYED), help="one regime (both)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, interleaved (3)")
    parser.add_argument("--seconds", type=float, default=20.0, help="per row and round (20)")
    parser.add_argument("--conversations", type=int, default=200, help="seeded (200)")
    parser.add_argument(
        "--loads",
        type=lambda text: text.split(","),
        help="only these loads, e.g. light,low (all); not with --write",
    )
    parser.add_argument("--write", action="store_true",
                        help="into docs/benchmarks/results.json, and render the pages")  # fmt: skip
    args = parser.parse_args(argv)
    if args.write and args.loads:
        parser.error("--write renders every row: give no --loads")
    from bench.reports import report

    document = json.loads(report.RESULTS.read_text(encoding="utf-8"))  # part 3's figures
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    say = Progress()

    async def measure(fleets: dict[str, Servers]) -> dict[str, Any]:
        from worker.app.runtime import aws_clients

        async with aws_clients(pool_size=64) as clients:
            history = await seeded(clients, args.conversations)
            conversations, text = history.conversations, history.text
            out = {}
            for regime in (args.regime,) if args.regime else (DIRECT, DELAYED):
                key = "throughput" + ("_delayed" if regime == DELAYED else "")
                loads = rates(document.get(key, {}).get("summary"), regime)
                out["latency" + ("_delayed" if regime == DELAYED else "")] = await run(
                    clients, fleets[regime], conversations, text, loads=loads,
                    seconds=args.seconds, rounds=args.rounds, say=say, only=args.loads,
                )  # fmt: skip
            return out

    with both_regimes(say) as fleets:
        results = asyncio.run(measure(fleets))
    for key, part in results.items():
        print(f"{key}:")
        for r in part["results"]:
            spread = ", ".join(f"{x['p50_ms']:.1f}/{x['p99_ms']:.1f}" for x in r["per_round"])
            print(f"  {r['kind']:>7} at {r['offered_per_second']:g}/s: p50 {r['p50_ms']:.1f} ms, "
                  f"p99 {r['p99_ms']:.1f} ms (p50/p99 per round: {spread}), "
                  f"{sum(r['calls_per_command'].values()):.2f} calls/command")  # fmt: skip
        if "floor" in part:
            f = part["floor"]
            print(f"  floor: p50 {f['p50_ms']:.1f} ms, p99 {f['p99_ms']:.1f} ms (receive "
                  f"{f['receive_ms']:.1f}, Query {f['query_ms']:.1f}, send {f['send_ms']:.1f}; "
                  f"injected {f['injected_ms']:g})")  # fmt: skip
    if args.write:
        for part in results.values():
            part["command"] = ".venv/bin/python -m bench.parts.latency " + " ".join(
                sys.argv[1:] if argv is None else argv
            )
            part["measured_at"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        report.rewrite_parts(results, capacity=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
