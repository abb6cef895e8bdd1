"""What the ledger's claim costs a lone command: part 4's light loads with the latency, run
by the naive consumer, the worker, and the worker with its claims granted without the call
(``worker-unclaimed``, :mod:`bench.contenders.worker_process`: a study, never the stage; it
gives up what the claim buys).

The three run interleaved in each round (naive, worker, unclaimed, at each load in turn), each
on fresh queues after its warm-up, as part 4 runs its rows; a row's figures pool its rounds.
The difference between the worker and the unclaimed worker is what the claim costs the
path on this machine; the difference between the unclaimed worker and the naive consumer is
what the rest of the stage costs it. The findings: docs/benchmarks/light_load.md.

::

    .venv/bin/python -m bench.parts.claim_cost              # 2/s and 8/s, 3 rounds
    .venv/bin/python -m bench.parts.claim_cost --loads low --rounds 4
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from collections.abc import Sequence
from typing import Any

from bench.parts.latency import FIRM_LOADS, interleaved, pooled
from bench.parts.runs import WORK_DIR, Progress, seeded, write_json
from bench.servers.servers import DELAYED, both_regimes

#: The contenders, in the order each round runs them at a load.
CONTENDERS = ("naive", "worker", "worker-unclaimed")


def differences(
    naive: dict[str, Any], worker: dict[str, Any], unclaimed: dict[str, Any]
) -> dict[str, float]:
    """What the claim and the rest of the stage add to the p50, from three rows pooled by
    :func:`bench.parts.latency.pooled`: each the median over the rounds of one round's
    difference (the contenders of a round run minutes apart at most, so a slower stretch of
    the shared machine falls on all three and cancels)."""

    def p50s(row: dict[str, Any]) -> list[float]:
        return [r["p50_ms"] for r in row["per_round"]]

    return {
        "claim_ms": statistics.median(
            w - u for w, u in zip(p50s(worker), p50s(unclaimed), strict=True)
        ),
        "rest_ms": statistics.median(
            u - n for u, n in zip(p50s(unclaimed), p50s(naive), strict=True)
        ),
    }


async def measure(loads: Sequence[str], rounds: int, seconds: float) -> dict[str, Any]:
    from worker.app.runtime import aws_clients

    say = Progress()

    with both_regimes(say) as fleets:
        far = fleets[DELAYED]
        async with aws_clients(pool_size=64) as clients:
            history = await seeded(clients, 200)
            runs = await interleaved(
                clients, far, history.conversations, history.text,
                rows=[(kind, load) for load in loads for kind in CONTENDERS], loads=FIRM_LOADS,
                seconds=seconds, rounds=rounds, tag="claim-{kind}-{load}-r{round}", say=say,
            )  # fmt: skip
    pooled_rows = {
        (load, kind): pooled(row, FIRM_LOADS[load]) for (kind, load), row in runs.items()
    }
    return {
        "rounds": rounds,
        "round_trips": far.round_trips_ms(),
        "loads": {
            load: {
                "per_second": FIRM_LOADS[load],
                **{kind: pooled_rows[load, kind] for kind in CONTENDERS},
                **differences(*(pooled_rows[load, kind] for kind in CONTENDERS)),
            }
            for load in loads
        },
    }


def table(results: dict[str, Any]) -> str:
    """The findings as a markdown table."""
    lines = [
        "| load | contender | p50 ms | p99 ms | p50 per round | calls / command "
        "| CPU ms / command |",
        "| --- | --- | ---: | ---: | --- | ---: | ---: |",
    ]
    for row in results["loads"].values():
        for kind in CONTENDERS:
            r = row[kind]
            spread = " / ".join(f"{x['p50_ms']:.1f}" for x in r["per_round"])
            calls = sum(r["calls_per_command"].values())
            lines.append(
                f"| {row['per_second']:g}/s | {kind} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
                f"{spread} | {calls:.2f} | {r['cpu_ms_per_command']:.1f} |"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--loads", type=lambda text: text.split(","), default=list(FIRM_LOADS),
                        help="of light, low (both)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="rounds, interleaved (3)")
    parser.add_argument("--seconds", type=float, default=20.0, help="per row at low (20)")
    args = parser.parse_args(argv)
    unknown = set(args.loads) - set(FIRM_LOADS)
    if unknown:
        parser.error(f"unknown loads: {', '.join(sorted(unknown))}")
    results = asyncio.run(measure(args.loads, args.rounds, args.seconds))
    write_json(WORK_DIR / "claim_cost.json", results)
    print(table(results))
    for load, row in results["loads"].items():
        claim, rest = row["claim_ms"], row["rest_ms"]
        print(f"{load}: at p50, the claim {claim:+.1f} ms, the rest of the stage {rest:+.1f} ms "
              "(medians of the rounds' differences)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
