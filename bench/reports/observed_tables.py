"""Part 10's tables, from the figures :mod:`bench.parts.observed_bill` measured: the model
classes, the deviations' bills with the loop and without, and, per class measured under the
deviations, the miss causes, the stage's predictions and its token calibration."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.reports.sections import table

SLIDING, WITHOUT, WITH = "sliding", "cache-aligned, no bill", "cache-aligned, bill"
NEVER_EXPIRED = f"{WITH}, no entry expired"
CAUSES = ("no miss", "expired", "stage_changed_prefix", "below_minimum", "ttl_downgraded",
          "unexplained")  # fmt: skip
VARIANTS = {
    "prior": "MODEL_ID and MODEL_PREFIX_TOKENS set",
    "no prior": "MODEL_ID set, MODEL_PREFIX_TOKENS not",
}


def share(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


def by_key(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["key"]: c for c in doc["classes"]}


def _pct(figures: dict[str, Any] | None, name: str = "billed_share") -> str:
    return f"{figures[name]:.1%}" if figures else "–"


def _above(figures: dict[str, Any] | None) -> str:
    return f"{figures['above_own_sliding_count']}" if figures else "–"


def classes_table(doc: dict[str, Any]) -> list[str]:
    """One row per model class: % of sliding's bill, the history seen, the conversations
    billed above their own sliding bill."""
    rows = []
    for c in doc["classes"]:
        f = c["contenders"]
        rows.append([
            f"{c['min_tokens']:,} / {c['prefix_tokens']:,}", c["model"], f"`{c['model_id']}`",
            f"{f[SLIDING]['billed_per_turn']:,.0f}", _pct(f[WITHOUT]), f"**{_pct(f[WITH])}**",
            _pct(f.get(NEVER_EXPIRED)),
            f"{_pct(f[WITHOUT], 'history_share')} / {_pct(f[WITH], 'history_share')}",
            f"{_above(f[WITHOUT])} / {_above(f[WITH])}",
        ])  # fmt: skip
    heads = ["minimum / model prefix", "a model of the class", "the stage's MODEL_ID",
             "sliding, billed units / turn", "cache-aligned, no bill: % of sliding",
             "cache-aligned, bill: % of sliding", "the same windows, no entry expired",
             "history seen (no bill / bill)",
             "conversations above their own sliding bill (no bill / bill)"]  # fmt: skip
    return table(heads, rows)


def paces_table(doc: dict[str, Any]) -> list[str]:
    """Per class and pace profile (% of that profile's sliding bill): where the cache is
    cold, the loop and the lack of it show most."""
    rows = []
    for c in doc["classes"]:
        for pace, f in c["by_pace"].items():
            shares = [_pct(f.get(n)) for n in (WITHOUT, WITH)]
            rows.append([c["key"], pace, *shares, f"{_above(f[WITHOUT])} / {_above(f[WITH])}"])
    return table(["class", "pace", "no bill", "bill",
                  "above their own sliding bill (no bill / bill)"], rows)  # fmt: skip


def deviations_table(doc: dict[str, Any]) -> list[str]:
    """Each deviation: the bill with the loop against without it, per class measured."""
    measured = [c for c in doc["classes"] if c["deviations"]]
    names: dict[str, str] = {}
    for c in measured:
        names.update((r["key"], r["name"]) for r in c["deviations"])
    heads = ["deviation"]
    for c in measured:
        heads += [f"{c['key']}: no bill", f"{c['key']}: bill", f"{c['key']}: bill / no bill"]
    rows = []
    for key, name in names.items():
        row = [name]
        for c in measured:
            found = {r["key"]: r for r in c["deviations"]}.get(key)
            if found is None:
                row += ["–"] * 3
                continue
            f = found["contenders"]
            ratio = share(f[WITH]["billed_share"], f[WITHOUT]["billed_share"])
            mark = f"**{ratio:.1%}**" if ratio > 1 else f"{ratio:.1%}"
            row += [_pct(f[WITHOUT]), _pct(f[WITH]), mark]
        rows.append(row)
    return table(heads, rows)


def bills_table(c: dict[str, Any]) -> list[str]:
    rows = []
    for r in c["deviations"]:
        f = r["contenders"]
        older, loop = f[WITHOUT], f[WITH]
        rows.append([
            r["name"], f"{f[SLIDING]['billed_per_turn']:,.0f}", _pct(older), f"**{_pct(loop)}**",
            f"{_pct(loop, 'history_share')} / {_pct(older, 'history_share')}",
            f"{_pct(loop, 'read_share')} / {_pct(older, 'read_share')}",
            f"{loop['reanchors_per_turn']:.3f} / {older['reanchors_per_turn']:.3f}",
        ])  # fmt: skip
    return table(["deviation", "sliding, billed units / turn", "cache-aligned, no bill: % of "
                  "sliding", "cache-aligned, bill: % of sliding", "history seen (bill / no bill)",
                  "read from cache (bill / no bill)", "re-anchors / turn (bill / no bill)"],
                 rows)  # fmt: skip


def right_cause(row: dict[str, Any], on: str | None = None) -> tuple[int, int]:
    """(answers reported with the deviation's cause, answers judged): those it affected
    (``affected``: read short because of it) or those the stand-in flags (``flagged``); by
    default the set the deviation's target is judged on."""
    answers = row["attribution"]["affected" if (on or row["judged_on"]) == "short" else "flagged"]
    return answers.get(row["cause"], 0), sum(answers.values())


def unexplained(row: dict[str, Any]) -> tuple[int, int]:
    """(unaffected answers reported ``unexplained``, unaffected answers checked)."""
    unaffected = row["attribution"]["unaffected"]
    return unaffected.get("unexplained", 0), sum(unaffected.values())


def _judged(row: dict[str, Any], on: str) -> str:
    right, judged = right_cause(row, on)
    if row["cause"] is None or not judged:
        return "–"
    return f"{share(right, judged):.1%} of {judged:,}"


def _spread(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {counts[k]:,}" for k in CAUSES if counts.get(k)) or "–"


def causes_table(c: dict[str, Any]) -> list[str]:
    rows = []
    for r in c["deviations"]:
        a = r["attribution"]
        wrong, unaffected = unexplained(r)
        misses = {k: v for k, v in a["unaffected"].items() if k != "no miss"}
        rows.append([
            r["name"], f"{a['checked']:,}", f"{a['short']:,}", _judged(r, "short"),
            _judged(r, "flagged"), f"{share(wrong, unaffected):.2%} ({wrong:,} of {unaffected:,})",
            f"{a['downgraded_without_details']:,}", _spread(a["affected"]), _spread(a["flagged"]),
            _spread(misses),
        ])  # fmt: skip
    return table(["deviation", "answers checked", "read short of the expected prefix",
                  "affected: right cause", "flagged: right cause",
                  "unaffected reported `unexplained`", "`ttl_downgraded` on a bill without "
                  "`cacheDetails`", "causes on the affected", "causes on the flagged",
                  "causes on the unaffected misses"], rows)  # fmt: skip


def kept_below(counts: dict[str, int]) -> float:
    return share(counts.get("kept_below", 0), counts.get("kept", 0))


def missed(counts: dict[str, int]) -> float:
    """The share of the points judged below the minimum whose real prefix reaches it."""
    return share(counts.get("judged_below_reaches", 0), counts["points"] - counts.get("kept", 0))


def predictions_table(c: dict[str, Any]) -> list[str]:
    rows = []
    for r in c["deviations"]:
        minimum = r["minimum"]

        def pair(of: Callable[[dict[str, int]], float], m: dict[str, Any] = minimum) -> str:
            return f"{of(m[WITHOUT]):.1%} / {of(m[WITH]):.1%}"

        rows.append([
            r["name"], f"{minimum[WITH]['points']:,}", pair(kept_below), pair(missed),
            pair(lambda m: share(m["expected_reads"], m["answers"])),
            pair(lambda m: share(m["short"], m["answers"])),
            pair(lambda m: share(m["unexpected"], m["answers"]))
            + f" ({pair(lambda m: share(m['unexpected_tokens'], m['read_tokens']))})",
            pair(lambda m: share(m.get("off_view", 0), m["answers"])),
        ])  # fmt: skip
    return table(["deviation", "cache points", "kept as cacheable, below the minimum",
                  "judged below, reaching it", "answers expecting a read",
                  "read short of the expected prefix",
                  "read more than expected (tokens: % of all read)",
                  "expected a read of a prefix the view does not hold"], rows)  # fmt: skip


def _errors(calibration: dict[str, Any], answers: list[str]) -> list[str]:
    return [f"{calibration[n]['calibrated']:.1%} ({calibration[n]['estimate']:.1%})"
            if n in calibration else "–" for n in answers]  # fmt: skip


def calibration_table(doc: dict[str, Any]) -> list[str]:
    """Per class and variant: the calibration's mean error after N answers."""
    answers = sorted({n for c in doc["classes"] for v in c["calibration"].values() for n in v},
                     key=int)  # fmt: skip
    rows = [[c["key"], VARIANTS[variant], *_errors(cal, answers)]
            for c in doc["classes"] for variant, cal in c["calibration"].items()]  # fmt: skip
    return table(["class", "settings", *(f"after {n}" for n in answers)], rows)


def deviation_calibration_table(c: dict[str, Any]) -> list[str]:
    answers = sorted({n for r in c["deviations"] for n in r["calibration"]}, key=int)
    rows = [[r["name"], *_errors(r["calibration"], answers)] for r in c["deviations"]]
    return table(["deviation", *(f"after {n}" for n in answers)], rows)


def worker_lines(run: dict[str, Any]) -> list[str]:
    rows = run["rows"]
    differ = [f"{r['conversation_id']} from turn {r['first_different_payload']}" for r in rows
              if r["first_different_payload"] is not None]  # fmt: skip
    turns = sum(r["turns"] for r in rows)
    same = sum(r["same_payloads"] for r in rows)
    bills = sum(r["same_bills"] for r in rows)
    checks = sum(r["checks"] for r in rows)
    causes = sum(r["same_causes"] for r in rows)
    return [
        f"{run['conversations']} conversations × {run['turns']} turns through `worker run` "
        f"(`HISTORY_WINDOW_MODE=cache-aligned`, a moto server; {run['seconds']:.0f} s): "
        f"**{same} of {turns} payloads, {bills} of {turns} bills and {causes} of {checks} "
        "miss checks the same as the in-memory replay's.**"
        + (" Payloads differ: " + ", ".join(differ) + "." if differ else ""),
        "",
        *table(["conversation", "pace", "turns", "same payload", "same bill", "same check",
                "billed units: worker / replay"],
               [[r["conversation_id"], r["pace"], r["turns"], r["same_payloads"], r["same_bills"],
                 f"{r['same_causes']} of {r['checks']}",
                 f"{r['worker_billed']:,.0f} / {r['replay_billed']:,.0f}"] for r in rows]),
    ]  # fmt: skip
