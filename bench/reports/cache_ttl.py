"""Issue 24's tables from the study's and the play's figures
(``docs/benchmarks/cache_ttl_study.json``, ``cache_ttl_play.json``): the page
``docs/benchmarks/cache_ttl_study.md`` and the done-when verdicts. Run::

    .venv/bin/python -m bench.reports.cache_ttl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[2] / "docs" / "benchmarks"
NAMES = {
    "sliding": "sliding (the default mode)",
    "today": "cache-aligned as before issue 24 (re-anchor at fold, 5m)",
    "lagged": "fold-lagged summary alone (5m)",
    "adaptive": "adaptive TTLs alone (re-anchor at fold)",
    "both": "**both: the new default**",
    "1h": "lagged, 1h on every point",
    "1h-summary": "lagged, 1h on the summary's point only",
    "stepped": "the stepped peer (2,000-token grid, 5m)",
    "oracle": "oracle TTL (knows the next gap), lagged",
}
PACES = ("mixed", "sessions", "interrupted", "cold", "brisk-sessions", "deliberate")
PACE_NAMES = {
    "mixed": "mixed (the baseline)", "sessions": "sessions (part 8's baseline)",
    "interrupted": "interrupted", "cold": "cold", "brisk-sessions": "one long session",
    "deliberate": "deliberate",
}  # fmt: skip


def _case(study: dict[str, Any], name: str) -> dict[str, Any]:
    [row] = [r for r in study["cases"] if r["case"] == name]
    return row


def main_table(study: dict[str, Any]) -> str:
    row = _case(study, "mixed (the baseline)")
    lines = [
        "| contender | billed units / turn | % of sliding | read from cache | history seen "
        "| re-anchors / turn | fold-gap turns | conversations above their own sliding bill "
        "| worst ratio |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, f in row["contenders"].items():
        lines.append(
            f"| {NAMES[name]} | {f['billed_per_turn']:,.0f} | {f['billed_share']:.1%} "
            f"| {f['read_share']:.1%} | {f['history_share']:.1%} | {f['reanchors_per_turn']:.3f} "
            f"| {f['fold_gap_turns']} | {f['above_own_sliding']:.1%} | {f['worst_ratio']:.2f} |"
        )
    return "\n".join(lines)


def pace_table(study: dict[str, Any]) -> str:
    rows = {r["pauses"]: r for r in study["cases"] if r["case"] in PACE_NAMES.values()}
    names = list(_case(study, "mixed (the baseline)")["contenders"])
    lines = [
        "| contender (% of sliding) | " + " | ".join(PACE_NAMES[p] for p in PACES) + " |",
        "| --- |" + " ---: |" * len(PACES),
    ]
    for name in names:
        cells = " | ".join(
            f"{rows[p]['contenders'][name]['billed_share']:.1%}" for p in PACES if p in rows
        )
        lines.append(f"| {NAMES[name]} | {cells} |")
    return "\n".join(lines)


def profile_table(study: dict[str, Any]) -> str:
    row = _case(study, "mixed (the baseline)")
    names = list(row["contenders"])
    lines = [
        "| profile (% of its sliding bill) | " + " | ".join(names) + " |",
        "| --- |" + " ---: |" * len(names),
    ]
    for profile, figures in row["by_profile"].items():
        cells = " | ".join(f"{figures[n]['billed_share']:.1%}" for n in names)
        lines.append(f"| {profile} | {cells} |")
    return "\n".join(lines)


def sensitivity_table(study: dict[str, Any]) -> str:
    cases = ["mixed (the baseline)"] + [
        r["case"] for r in study["cases"] if r["case"].startswith("mixed,")
    ]
    names = list(_case(study, cases[-1])["contenders"])
    header = "| case (% of sliding) | " + " | ".join(names)
    lines = [
        header + " | both: above own sliding / worst |",
        "| --- |" + " ---: |" * (len(names) + 1),
    ]
    for case in cases:
        f = _case(study, case)["contenders"]
        cells = " | ".join(f"{f[n]['billed_share']:.1%}" for n in names)
        both = f["both"]
        lines.append(
            f"| {case} | {cells} | {both['above_own_sliding']:.1%} / {both['worst_ratio']:.2f} |"
        )
    return "\n".join(lines)


def verdicts(study: dict[str, Any], play: dict[str, Any] | None, today_calls: float) -> list[str]:
    def share(case: str, name: str = "both") -> float:
        return float(_case(study, case)["contenders"][name]["billed_share"])

    mixed = _case(study, "mixed (the baseline)")["contenders"]
    out = []

    def say(ok: bool, text: str) -> None:
        out.append(f"- {'met' if ok else '**missed**'}: {text}")

    say(share("mixed (the baseline)") <= 0.52 and mixed["both"]["history_share"] >= 0.80,
        f"mixed {share('mixed (the baseline)'):.1%} of sliding (<= 52%), history "
        f"{mixed['both']['history_share']:.1%} (>= 80%)")  # fmt: skip
    for case, goal in (("sessions (part 8's baseline)", 0.42), ("interrupted", 0.60),
                       ("cold", 0.75)):  # fmt: skip
        say(share(case) <= goal, f"{case} {share(case):.1%} (<= {goal:.0%})")
    sensitivity = [r for r in study["cases"] if r["case"].startswith("mixed")]
    worst = max(float(r["contenders"]["both"]["billed_share"]) for r in sensitivity)
    say(worst <= 1.0, f"no sensitivity row above 100% (the highest: {worst:.1%})")
    say(mixed["both"]["above_own_sliding"] <= 0.05 and mixed["both"]["worst_ratio"] <= 1.10,
        f"mixed: {mixed['both']['above_own_sliding']:.1%} of conversations above their own "
        f"sliding bill (<= 5%), worst {mixed['both']['worst_ratio']:.2f} (<= 1.10)")  # fmt: skip
    for case in PACE_NAMES.values():
        f = _case(study, case)["contenders"]
        peers = {n: f[n]["billed_share"] for n in ("stepped", "1h", "1h-summary")}
        below = all(f["both"]["billed_share"] < v for v in peers.values())
        tied = all(f["both"]["billed_share"] <= v + 0.0005 for v in peers.values())
        label = "below" if below else ("level with (within 0.05 points)" if tied else "above")
        others = ", ".join(f"{n} {v:.1%}" for n, v in peers.items())
        say(below, f"{case}: both {f['both']['billed_share']:.1%} {label} {others}")
    gap = mixed["both"]["billed_share"] - mixed["oracle"]["billed_share"]
    say(gap <= 0.06, f"within 6 points of the oracle on mixed ({gap * 100:.1f} points)")
    say(mixed["both"]["fold_gap_turns"] <= mixed["sliding"]["fold_gap_turns"],
        f"fold-gap turns {mixed['both']['fold_gap_turns']} (sliding "
        f"{mixed['sliding']['fold_gap_turns']})")  # fmt: skip
    if play is not None:
        per = play["calls_per_command_by_operation"]
        say(per.get("dynamodb.Query turn") == 1.0, "one Query a turn (the worker's own calls)")
        calls = play["calls_per_command"]
        say(
            calls <= today_calls + 0.05,
            f"calls per command {calls:.3f} (before: {today_calls:.3f})",
        )
        say(play["identical_views"] == play["turns"],
            f"the worker's payloads = the pure pipeline's: {play['identical_views']:,} of "
            f"{play['turns']:,} views byte for byte")  # fmt: skip
    return out


BEGIN = "<!-- issue 24: begin -->"
END = "<!-- issue 24: end -->"


def section(study: dict[str, Any], play: dict[str, Any] | None, today_calls: float) -> str:
    """Issue 24's part of BENCHMARKS.md part 8."""
    played = (
        f"The new default was also played through the real `worker run` "
        f"(`python -m bench.parts.cache_ttl_play`, {play['seconds'] / 60:.0f} min of play): "
        f"{play['identical_views']:,} of its {play['turns']:,} payloads' `converse` views are "
        "byte for byte the pure pipeline's (TTLs included), so the pure pipeline's figures are "
        "the worker's; its own AWS calls: "
        f"{play['calls_per_command']:.3f} a command (the cache-aligned mode before: "
        f"{today_calls:.3f}), one Query a turn, "
        f"{play['calls_per_command_by_operation'].get('dynamodb.UpdateItem anchor', 0):.3f} "
        "UpdateItem of the anchor a command."
        if play is not None
        else "The worker play is missing."
    )
    return "\n\n".join([
        BEGIN,
        "### Issue 24: the fold-lagged summary and cache lifetimes chosen per turn",
        f"Reproduce: `{study['command']}` ({study['seconds'] / 60:.0f} min here; figures "
        "[`benchmarks/cache_ttl_study.json`](benchmarks/cache_ttl_study.json), page "
        "[`benchmarks/cache_ttl_study.md`](benchmarks/cache_ttl_study.md)). The tables above "
        "were measured with issue 19's defaults (headroom 1,000 / 6, re-anchor at each fold "
        "landing, every point 5m); this part measures issue 24's contenders on the same 200 "
        f"conversations ({study['turns']:,} turns), the same scripted compactor and the same "
        "cost model, now with a TTL per point (2x up to the last 1-hour point written, 1.25x "
        "after it; a read renews an entry for the TTL it was written with), through the pure "
        "pipeline (`bench/parts/cache_ttl_study.py`: the worker's own memory functions, fed "
        "as the stage feeds them). The pace population is *mixed*: "
        + study["pause_models"]["mixed"] + ". Headroom "
        f"{study['headroom']['tokens']:,} / {study['headroom']['messages']} for every row.",
        played,
        "**The mixed paces (the baseline).**", main_table(study),
        "**Every pace** (% of sliding's billed input).", pace_table(study),
        "**The mixed population by profile.**", profile_table(study),
        "**Sensitivity** (the mixed paces; `PROMPT_CACHE_MIN_TOKENS` set to each minimum).",
        sensitivity_table(study),
        "**Done when** (issue 24):", "\n".join(verdicts(study, play, today_calls)),
        END,
    ])  # fmt: skip


def calls_before(model_bill: dict[str, Any]) -> float:
    """Part 8's cache-aligned play: its AWS calls a command (the mode before issue 24)."""
    return float(model_bill["plays"]["cache-aligned"]["calls_in_all_per_command"])


def doc_section(figures: dict[str, Any], model_bill: dict[str, Any]) -> str:
    """Issue 24's section of BENCHMARKS.md from ``results.json``'s ``cache_ttl`` entry."""
    return section(figures["study"], figures.get("play"), calls_before(model_bill))


def page(study: dict[str, Any], play: dict[str, Any] | None, calls: float) -> str:
    """``cache_ttl_study.md``: the tables and verdicts on a page of their own."""
    return "\n\n".join([
        "# Issue 24: the fold-lagged summary and cache lifetimes chosen per turn",
        f"Figures: `cache_ttl_study.json` ({study['command']}, {study['turns']:,} turns, "
        f"{study['seconds'] / 60:.0f} min) and `cache_ttl_play.json` (the worker).",
        "## The mixed pace population (the baseline)", main_table(study),
        "## Every pace", pace_table(study),
        "## The mixed population by profile", profile_table(study),
        "## Sensitivity (the mixed population)", sensitivity_table(study),
        "## Done when", "\n".join(verdicts(study, play, calls)),
    ]) + "\n"  # fmt: skip


def write(figures: dict[str, Any], model_bill: dict[str, Any], out_dir: Path) -> None:
    """``cache_ttl_study.json``, ``cache_ttl_play.json`` and ``cache_ttl_study.md`` into
    ``out_dir``, from a run's ``cache_ttl`` entry (``make bench``)."""
    (out_dir / "cache_ttl_study.json").write_text(json.dumps(figures["study"], indent=1) + "\n")
    if figures.get("play") is not None:
        (out_dir / "cache_ttl_play.json").write_text(json.dumps(figures["play"], indent=1) + "\n")
    calls = calls_before(model_bill)
    (out_dir / "cache_ttl_study.md").write_text(page(figures["study"], figures.get("play"), calls))


def main() -> int:
    """Standalone, after ``python -m bench.parts.cache_ttl_study --out …`` (and the play):
    the page, ``results.json``'s ``cache_ttl`` entry and BENCHMARKS.md re-rendered."""
    from bench.reports import report

    study = json.loads((OUT / "cache_ttl_study.json").read_text())
    play_path = OUT / "cache_ttl_play.json"
    play = json.loads(play_path.read_text()) if play_path.exists() else None
    results_path = OUT / "results.json"
    document = json.loads(results_path.read_text(encoding="utf-8"))
    document["cache_ttl"] = {"study": study, "play": play}
    results_path.write_text(
        json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    (OUT / "cache_ttl_study.md").write_text(page(study, play, calls_before(document["model_bill"])))
    benchmarks = OUT.parent / "BENCHMARKS.md"
    benchmarks.write_text(report.markdown(document, OUT, benchmarks), encoding="utf-8")
    print(f"wrote {results_path}, {OUT / 'cache_ttl_study.md'} and {benchmarks}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
