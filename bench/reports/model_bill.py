"""Part 8's section of docs/BENCHMARKS.md and its targets, from the figures
:mod:`bench.parts.model_bill` measured. What is priced and why is written once, in
docs/benchmarks/model_bill.md."""

from __future__ import annotations

from typing import Any

from bench.reports.sections import table

NAMES = {
    "sliding": "sliding (the default mode)",
    "cache-aligned": "**cache-aligned** (`HISTORY_CACHE_TTL=adaptive`, the default)",
    "cache-aligned, 5m": "cache-aligned, `HISTORY_CACHE_TTL=5m`",
    "cache-aligned, 1h": "cache-aligned, `HISTORY_CACHE_TTL=1h`",
    "stepped": "the stepped peer (2,000-token grid, 5m)",
}
#: The same, as column heads.
COLUMNS = {
    "sliding": "sliding",
    "cache-aligned": "cache-aligned",
    "cache-aligned, 5m": "cache-aligned, 5m",
    "cache-aligned, 1h": "cache-aligned, 1h",
    "stepped": "stepped peer",
}
COLOURS = {
    "sliding": "tab:gray",
    "cache-aligned": "tab:blue",
    "cache-aligned, 5m": "tab:cyan",
    "cache-aligned, 1h": "tab:purple",
    "stepped": "tab:green",
}
#: The cache-aligned mode's bill at most, as a share of sliding's, by pace.
PACE_TARGETS = {"mixed": 0.52, "sessions": 0.42, "interrupted": 0.60, "cold": 0.75}
HISTORY_MIN, ABOVE_MAX, WORST_MAX = 0.80, 0.05, 1.10


def _paces(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The cases that vary the pace alone (the baseline first), then the sensitivity."""
    return [c for c in doc["cases"] if not c["sensitivity"]]


def targets(doc: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(target, measured, met) at the mixed paces, and across the cases."""
    base = doc["cases"][0]["contenders"]
    aligned, sliding = base["cache-aligned"], base["sliding"]
    paces = {c["pauses"]: c["contenders"] for c in _paces(doc)}
    shares = {p: paces[p]["cache-aligned"]["billed_share"] for p in PACE_TARGETS if p in paces}
    behind = [c["case"] for c in _paces(doc) if not _ahead_of_stepped(c["contenders"])]
    highest = max(doc["cases"], key=lambda c: c["contenders"]["cache-aligned"]["billed_share"])
    top = highest["contenders"]["cache-aligned"]["billed_share"]
    return [
        ("cache-aligned billed input at or under its share of sliding's at each pace ("
         + ", ".join(f"{p} {t:.0%}" for p, t in PACE_TARGETS.items()) + ")",
         ", ".join(f"{p} {s:.1%}" for p, s in shares.items()),
         all(s <= PACE_TARGETS[p] for p, s in shares.items())),
        ("… with ≥ 80% of sliding's history tokens seen (mixed paces)",
         f"{aligned['history_share']:.1%}", aligned["history_share"] >= HISTORY_MIN),
        ("… below the stepped peer's bill at every pace, seeing more history",
         "below at every pace" if not behind else "not below: " + ", ".join(behind),
         not behind),
        ("… no more fold-gap turns than sliding",
         f"{aligned['fold_gap_turns']} against {sliding['fold_gap_turns']}",
         aligned["fold_gap_turns"] <= sliding["fold_gap_turns"]),
        ("… no case above sliding's bill", f"the highest: {top:.1%} ({highest['case']})",
         top <= 1.0),
        ("… ≤ 5% of conversations above their own sliding bill, none above 1.10× (mixed paces)",
         f"{aligned['above_own_sliding']:.1%}, worst {aligned['worst_ratio']:.2f}×",
         aligned["above_own_sliding"] <= ABOVE_MAX and aligned["worst_ratio"] <= WORST_MAX),
    ]  # fmt: skip


def _ahead_of_stepped(contenders: dict[str, Any]) -> bool:
    aligned, stepped = contenders["cache-aligned"], contenders["stepped"]
    return bool(
        aligned["billed_share"] < stepped["billed_share"]
        and aligned["history_share"] >= stepped["history_share"]
    )


def _shares(title: str, rows: list[tuple[str, dict[str, Any]]], names: list[str]) -> list[str]:
    """A table of billed shares: one row per ``rows`` entry, one column per contender."""
    return [
        f"| {title} | " + " | ".join(COLUMNS[n] for n in names) + " |",
        "| --- |" + " ---: |" * len(names),
        *(
            f"| {label} | " + " | ".join(f"{by[n]['billed_share']:.1%}" for n in names) + " |"
            for label, by in rows
        ),
    ]


def _classes(cases: list[dict[str, Any]], names: list[str]) -> list[str]:
    rows = []
    for c in cases:
        f, aligned = c["contenders"], c["contenders"]["cache-aligned"]
        rows.append([c["case"], f"{f['sliding']['billed_per_turn']:,.0f}",
                     *(f"{f[n]['billed_share']:.1%}" for n in names if n != "sliding"),
                     f"{aligned['history_share']:.1%}",
                     aligned.get("above_own_sliding_count", "–")])  # fmt: skip
    heads = ["class", "sliding, billed units / turn",
             *(COLUMNS[n] for n in names if n != "sliding"), "history seen",
             "above their own sliding bill"]  # fmt: skip
    return table(heads, rows)


def section(doc: dict[str, Any], rel: str = "benchmarks") -> list[str]:
    """The part's section of docs/BENCHMARKS.md."""
    names = list(NAMES)
    baseline = doc["cases"][0]
    paces = _paces(doc)
    classes = [c for c in doc["cases"] if c.get("model")]
    sensitivity = [c for c in doc["cases"] if c not in paces and c not in classes]
    lines = [
        "## 8. The model's bill: input tokens under the prompt cache",
        "",
        f"Reproduce alone: `{doc['command']}` ({doc['seconds'] / 60:.1f} min here, measured "
        f"{doc['measured_at']}; `--quick`: every fifth conversation). {doc['conversations']} "
        "conversations of the workload, "
        f"{doc['turns']:,} turns, each replayed from its first message and decided by the "
        "stage's own read and plan; anchor headroom "
        f"{doc['headroom']['tokens']:,} tokens / {doc['headroom']['messages']} messages. What "
        "is priced and why, the cost model's sources and the pause models: "
        f"[`{rel}/model_bill.md`]({rel}/model_bill.md).",
        "",
        "**The baseline: the mixed paces**, each conversation's pace drawn from four profiles "
        "(the pause models: the same page).",
        "",
        "| contender | billed units / turn | % of sliding | read from cache | history seen "
        "| re-anchors / turn | fold-gap turns | conversations above their own sliding bill "
        "| worst ratio |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in names:
        f = baseline["contenders"][name]
        lines.append(
            f"| {NAMES[name]} | {f['billed_per_turn']:,.0f} | {f['billed_share']:.1%} "
            f"| {f['read_share']:.1%} | {f['history_share']:.1%} "
            f"| {f['reanchors_per_turn']:.3f} | {f['fold_gap_turns']:,} "
            f"| {f['above_own_sliding']:.1%} | {f['worst_ratio']:.2f} |"
        )
    lines += [
        "",
        "**Every pace** (% of sliding's billed input).",
        "",
        *_shares("pace", [(c["case"], c["contenders"]) for c in paces], names),
        "",
        "**The mixed population by profile** (% of that profile's sliding bill).",
        "",
        *_shares("profile", list(baseline["by_profile"].items()), names),
        "",
        "**Sensitivity** (the mixed paces; % of sliding's billed input).",
        "",
        *_shares("case", [(c["case"], c["contenders"]) for c in sensitivity], names),
        "",
        "**Model classes** (the mixed paces; the cache's minimum / the model stage's own prefix, "
        "in tokens, the stage configured with `MODEL_ID` a model of the class and "
        "`MODEL_PREFIX_TOKENS` the prefix; % of sliding's billed input, "
        "history seen and conversations above their own sliding bill for the default "
        "cache-aligned mode).",
        "",
        *_classes(classes, names),
        "",
        f"![billed input per turn by contender and case]({rel}/model_bill.png)",
    ]
    return lines
