"""docs/BENCHMARKS.md, part 4: latency at a fixed offered load, in both regimes; with the
injected latency the light loads of a firm beside the naive consumer, the critical path's
floor, and the light-load targets."""

from __future__ import annotations

from typing import Any

from bench.reports.sections import NAMES, ms, table

#: The light loads' targets: the worker's p50 at most the naive consumer's, its p99 at most
#: this many times the naive consumer's, in the same run.
P99_RATIO = 1.3
#: The loads the light-load targets judge, as part 4 names them.
LIGHT_LOADS = ("light", "low")


def _row(lat: dict[str, Any], kind: str, load: str) -> dict[str, Any] | None:
    return next((r for r in lat["results"] if r["kind"] == kind and r["load"] == load), None)


def _spread(result: dict[str, Any], key: str) -> str:
    rounds = result.get("per_round") or []
    return ", ".join(ms(r[key]) for r in rounds)


def targets(doc: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """With the injected latency, at each light load: the worker's p50 and p99 against the
    naive consumer's in the same run."""
    far = doc.get("latency_delayed")
    if not far:
        return []
    out = []
    for load in LIGHT_LOADS:
        worker, naive = _row(far, "worker", load), _row(far, "naive", load)
        if worker is None or naive is None:
            continue
        rate = f"{far['rates'][load]:g}/s"
        rounds = worker.get("rounds", 1)
        out.append(
            (
                f"a lone question waits for nothing: with the injected latency at {rate}, the "
                "worker's p50 at most the naive consumer's",
                f"{ms(worker['p50_ms'])} against {ms(naive['p50_ms'])} ms over {rounds} "
                f"round(s) (per round: {_spread(worker, 'p50_ms')} against "
                f"{_spread(naive, 'p50_ms')})",
                worker["p50_ms"] <= naive["p50_ms"],
            )
        )
        ratio = worker["p99_ms"] / naive["p99_ms"]
        out.append(
            (
                f"… and its p99 at most {P99_RATIO:g}× the naive consumer's at {rate}",
                f"{ms(worker['p99_ms'])} against {ms(naive['p99_ms'])} ms: {ratio:.2f}× "
                f"(per round: {_spread(worker, 'p99_ms')} against {_spread(naive, 'p99_ms')})",
                ratio <= P99_RATIO,
            )
        )
    return out


def latency_table(lat: dict[str, Any]) -> list[str]:
    heads = ["consumer", "offered /s", "achieved /s", "commands", "p50 ms", "p95 ms", "p99 ms",
             "max ms", "p50 / p99 per round", "calls / command", "CPU ms / command"]  # fmt: skip
    rows = [
        [NAMES[r["kind"]], f"{r['offered_per_second']:g}", f"{r['achieved_per_second']:.1f}",
         f"{r['commands']:,}", ms(r["p50_ms"]), ms(r["p95_ms"]), ms(r["p99_ms"]), ms(r["max_ms"]),
         " · ".join(f"{ms(x['p50_ms'])} / {ms(x['p99_ms'])}" for x in r.get("per_round", [])),
         f"{sum(r['calls_per_command'].values()):.2f}", f"{r['cpu_ms_per_command']:.2f}"]
        for r in lat["results"]
    ]  # fmt: skip
    floor = lat.get("floor")
    if floor:
        rows.append(
            [
                "the floor: the critical path's three calls alone (measured)",
                "–",
                "–",
                f"{floor['samples']}",
                ms(floor["p50_ms"]),
                "–",
                ms(floor["p99_ms"]),
                "–",
                "–",
                "3",
                "–",
            ]
        )
    return table(heads, rows)


def floor_note(floor: dict[str, Any], trips: dict[str, float]) -> list[str]:
    return [
        f"The floor row is measured: a poll parked through the proxy returns the command the "
        f"benchmark sends, then the Query of its page and the send of its payload follow, "
        f"through the proxy, in sequence, with nothing between them ({floor['samples']} "
        f"samples; medians: the poll's return {ms(floor['receive_ms'])} ms, the Query "
        f"{ms(floor['query_ms'])} ms, the send to its arrival {ms(floor['send_ms'])} ms). Of "
        f"it, the proxy injects {floor['injected_ms']:g} ms (computed from its delays): the "
        f"poll's answer, half an SQS round trip ({trips['sqs_ms'] / 2:g} ms); the Query's "
        f"round trip ({trips['dynamodb_ms']:g} ms); the send's request, half an SQS round trip "
        f"({trips['sqs_ms'] / 2:g} ms), after which the payload is on the queue. A consumer "
        f"that waits for each call's answer in full waits {floor['round_trips_ms']:g} ms of "
        "round trips; the rest of the floor is the servers' and the client's own time.",
    ]


def section(doc: dict[str, Any], rel: str) -> list[str]:
    lat = doc["latency"]
    lines = [
        "## 4. Latency at a fixed offered load",
        "",
        f"Open-loop load; loads {lat['rates']['low']:g}/s (half the naive consumer's measured "
        f"throughput, run by both) and {lat['rates']['high']:g}/s (40% of the worker's); "
        f"{lat.get('rounds', 1)} round(s), the rows interleaved in each, figures over every "
        "round's commands.",
        "",
        *latency_table(lat),
        "",
        f"![latency]({rel}/latency.png)",
    ]
    far = doc.get("latency_delayed")
    if not far:
        return lines
    t = far["round_trips"] or {}
    rates = far["rates"]
    lines += [
        "",
        f"With the injected latency (SQS {t.get('sqs_ms', 0):g} ms, DynamoDB "
        f"{t.get('dynamodb_ms', 0):g} ms a round trip): a firm's loads, "
        f"{rates.get('light', 0):g}/s (one counsel asking now and then: every command alone) "
        f"and {rates['low']:g}/s, each run by the naive consumer and the worker, and "
        f"{rates['high']:g}/s (40% of the worker's throughput in that regime); "
        f"{far.get('rounds', 1)} round(s), the rows interleaved in each (distributions: the "
        "plot beside part 3b). Where a lone command's time goes, call by call: "
        f"[`{rel}/light_load.md`]({rel}/light_load.md).",
        "",
        *latency_table(far),
    ]
    if far.get("floor"):
        lines += ["", *floor_note(far["floor"], t)]
    return lines
