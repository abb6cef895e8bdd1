"""Part 8's page (``docs/benchmarks/model_bill.md``), its section of docs/BENCHMARKS.md, its
plot and its verdicts, from the figures :mod:`bench.parts.model_bill` measured."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

TTL_WORDS = {"5m": "5-minute", "1h": "1-hour"}
NAMES = {
    "sliding": "sliding (the worker, default mode)",
    "sliding+point": "sliding + a history cache point (rendered)",
    "cache-aligned": "**cache-aligned (the worker)**",
    "stepped": "stepped peer, 2,000-token grid (rendered)",
}
SHORT = {
    "sliding": "sliding",
    "sliding+point": "sliding + history point",
    "cache-aligned": "cache-aligned",
    "stepped": "stepped peer",
}
COLOURS = {
    "sliding": "tab:gray",
    "sliding+point": "tab:orange",
    "cache-aligned": "tab:blue",
    "stepped": "tab:green",
}
#: Issue 19's targets.
BILLED_MAX, HISTORY_MIN, CALLS_MAX = 0.55, 0.80, 2.75
#: Part 3's calls per command (the worker, sliding, full batches), in all and for fold
#: requests, when the run has no part 3 of its own: docs/BENCHMARKS.md as of issue 14.
PART3_CALLS, PART3_FOLD_CALLS = 2.45, 0.042

SOURCES = [
    "Amazon Bedrock User Guide, *Prompt caching for faster model inference* "
    "(docs.aws.amazon.com/bedrock/latest/userguide/prompt-caching.html): a `cachePoint` "
    "block caches the prompt's prefix up to it, matched exactly; at most 4 cache points a "
    "request; a minimum number of tokens before a point, per model (Claude Sonnet 4 / 3.7 "
    "and Opus 4: 1,024; Claude 3.5 Haiku: 2,048; Claude Haiku 4.5 and Opus 4.5: 4,096), "
    "below which nothing is cached and the request still succeeds; a hit is looked for at a "
    "point and about 20 blocks before it; a 5-minute TTL, reset by each hit; a 1-hour TTL "
    "for the Claude models that offer it, at a higher write price.",
    "Anthropic, *Pricing* (anthropic.com/pricing; docs.claude.com, *Pricing*) and Amazon "
    "Bedrock pricing (aws.amazon.com/bedrock/pricing), Claude Sonnet 4 / 4.5: input $3 per "
    "million tokens; a cache write 1.25x ($3.75) with the 5-minute TTL, 2x ($6) with the "
    "1-hour TTL; a cache read 0.1x ($0.30). Output tokens are the same in every contender "
    "and are not priced here.",
]


def _rows(doc: dict[str, Any], case: str = "baseline") -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = next(
        c["contenders"] for c in doc["cases"] if c["case"] == case
    )
    return found


def calls_target(doc: dict[str, Any], part3: dict[str, float] | None = None) -> dict[str, Any]:
    """Calls per command in both modes, what the anchor adds, and the target's reading on
    part 3's workload (``part3``: its worker's calls per command by label)."""
    plays = doc["plays"]
    sliding, aligned = plays["sliding"], plays["cache-aligned"]

    def purpose(calls: dict[str, float], name: str) -> float:
        return float(sum(v for k, v in calls.items() if k.endswith(f" {name}")))

    base = float(sum(part3.values())) if part3 else PART3_CALLS
    anchor = purpose(aligned["calls_per_command"], "anchor")
    return {
        "sliding": sliding["calls_in_all_per_command"],
        "aligned": aligned["calls_in_all_per_command"],
        "difference": aligned["calls_in_all_per_command"] - sliding["calls_in_all_per_command"],
        "anchor": anchor,
        "sliding_anchor": purpose(sliding["calls_per_command"], "anchor"),
        "fold": purpose(sliding["calls_per_command"], "compaction"),
        "fold_requests": sum(v for k, v in sliding["calls_per_command"].items()
                             if k.startswith("sqs.SendMessage") and k.endswith(" compaction")),
        "fold_claims": sum(v for k, v in sliding["calls_per_command"].items()
                           if k.startswith("dynamodb.UpdateItem") and k.endswith(" compaction")),
        "receives": sum(v for k, v in sliding["calls_per_command"].items()
                        if k.startswith("sqs.ReceiveMessage")),
        "part3": base,
        "part3_fold": purpose(part3, "compaction") if part3 else PART3_FOLD_CALLS,
        "part3_aligned": base + anchor,
    }  # fmt: skip


def targets(
    doc: dict[str, Any], part3: dict[str, float] | None = None
) -> list[tuple[str, str, bool]]:
    """(target, measured, met) for issue 19's "done when", at the baseline."""
    rows = _rows(doc)
    aligned, sliding, stepped = rows["cache-aligned"], rows["sliding"], rows["stepped"]
    calls = calls_target(doc, part3)
    holds = [
        c["case"]
        for c in doc["cases"]
        if c["contenders"]["cache-aligned"]["billed_share"] <= BILLED_MAX
    ]
    return [
        (
            "cache-aligned billed input ≤ 55% of sliding's (issue 19)",
            f"{aligned['billed_share']:.1%} at the baseline; ≤ 55% in {len(holds)} of "
            f"{len(doc['cases'])} cases (sensitivity below)",
            aligned["billed_share"] <= BILLED_MAX,
        ),
        (
            "… with ≥ 80% of sliding's history tokens seen",
            f"{aligned['history_share']:.1%}",
            aligned["history_share"] >= HISTORY_MIN,
        ),
        (
            "… below the stepped peer's billed input, at no less history seen",
            f"{aligned['billed_share']:.1%} against {stepped['billed_share']:.1%} billed; "
            f"{aligned['history_share']:.1%} against {stepped['history_share']:.1%} of the history",
            aligned["billed_per_turn"] < stepped["billed_per_turn"]
            and aligned["history_per_turn"] >= stepped["history_per_turn"],
        ),
        (
            "no more fold-gap turns than sliding",
            f"{aligned['fold_gap_turns']} against {sliding['fold_gap_turns']}",
            aligned["fold_gap_turns"] <= sliding["fold_gap_turns"],
        ),
        (
            "AWS calls per command ≤ 2.75 in cache-aligned mode",
            f"{calls['part3_aligned']:.2f} on part 3's workload (its {calls['part3']:.2f} + the "
            f"anchor's own writes, {calls['anchor']:.3f}); on these growing conversations "
            f"{calls['aligned']:.2f} against sliding's {calls['sliding']:.2f}, which sends a "
            f"fold request every {1 / max(1e-9, calls['fold_requests']):.1f} turns",
            calls["part3_aligned"] <= CALLS_MAX,
        ),
        (
            "… and unchanged in sliding mode",
            f"no anchor call; one Query a turn; `state` updates {calls['fold_claims']:.3f} a "
            f"turn, one per fold request sent ({calls['fold_requests']:.3f})",
            calls["sliding_anchor"] == 0
            and abs(calls["fold_claims"] - calls["fold_requests"]) < 1e-9
            and doc["plays"]["sliding"]["calls_per_command"].get("dynamodb.Query turn") == 1.0,
        ),
    ]


def verdicts(doc: dict[str, Any], part3: dict[str, float] | None = None) -> list[str]:
    return [
        f"{'MET ' if met else 'MISSED'}  {target}: {figure}"
        for target, figure, met in targets(doc, part3)
    ]


# -- tables ------------------------------------------------------------------------------------


def headline_table(doc: dict[str, Any]) -> list[str]:
    rows = _rows(doc)
    lines = [
        "| contender | billed units / turn | % of sliding | input read from cache "
        "| history tokens / turn | % of sliding | messages fewer than sliding p50 / p90 / max "
        "| fold-gap turns | re-anchors / turn | anchor writes / turn | $ / 1,000 turns |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in ("sliding", "sliding+point", "cache-aligned", "stepped"):
        r = rows[name]
        fewer = r["fewer_messages"]
        lines.append(
            f"| {NAMES[name]} | {r['billed_per_turn']:,.0f} | {r['billed_share']:.1%} "
            f"| {r['read_share']:.1%} | {r['history_per_turn']:,.0f} | {r['history_share']:.1%} "
            f"| {fewer['p50']} / {fewer['p90']} / {fewer['max']} | {r['fold_gap_turns']:,} "
            f"| {r['reanchors_per_turn']:.3f} | {r['anchor_writes_per_turn']:.3f} "
            f"| ${r['dollars_per_1000_turns']:.2f} |"
        )
    return lines


def sensitivity_table(doc: dict[str, Any]) -> list[str]:
    lines = [
        "| case | sliding units / turn | cache-aligned: units / turn | % of sliding "
        "| read from cache | $ / 1,000 turns (sliding → aligned) | stepped peer % "
        "| sliding + point % | ≤ 55%? |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for case in doc["cases"]:
        c = case["contenders"]
        aligned = c["cache-aligned"]
        met = aligned["billed_share"] <= BILLED_MAX
        name = f"**{case['case']}**" if case["case"] == "baseline" else case["case"]
        lines.append(
            f"| {name} | {c['sliding']['billed_per_turn']:,.0f} "
            f"| {aligned['billed_per_turn']:,.0f} | {aligned['billed_share']:.1%} "
            f"| {aligned['read_share']:.1%} "
            f"| ${c['sliding']['dollars_per_1000_turns']:.2f} → "
            f"${aligned['dollars_per_1000_turns']:.2f} "
            f"| {c['stepped']['billed_share']:.1%} | {c['sliding+point']['billed_share']:.1%} "
            f"| {'yes' if met else '**no**'} |"
        )
    return lines


def calls_table(doc: dict[str, Any]) -> list[str]:
    plays = doc["plays"]
    labels = sorted(set(plays["sliding"]["calls_per_command"]) | set(
        plays["cache-aligned"]["calls_per_command"]))  # fmt: skip
    lines = [
        "| call (purpose) | sliding | cache-aligned |",
        "| --- | ---: | ---: |",
    ]
    for label in labels:
        values = [
            plays[m]["calls_per_command"].get(label, 0.0) for m in ("sliding", "cache-aligned")
        ]
        lines.append(f"| {label} | " + " | ".join(f"{v:.3f}" if v else "–" for v in values) + " |")
    lines.append(
        "| **in all** | "
        + " | ".join(
            f"**{plays[m]['calls_in_all_per_command']:.2f}**" for m in ("sliding", "cache-aligned")
        )
        + " |"
    )
    return lines


# -- the page and the section -----------------------------------------------------------------


def section(doc: dict[str, Any], rel: str, *, heading: str = "##",
            part3: dict[str, float] | None = None, apart: bool = False) -> list[str]:  # fmt: skip
    """The part's text: docs/BENCHMARKS.md's section 8 and the body of its own page."""
    work, base = doc["workload"], doc["baseline"]
    rules = base["rules"]
    checks = doc["checks"]
    rows = _rows(doc)
    aligned, sliding, stepped = rows["cache-aligned"], rows["sliding"], rows["stepped"]
    calls = calls_target(doc, part3)
    plays = doc["plays"]
    identical = all(c["identical_views"] == c["turns"] for c in checks.values())
    settings = doc["settings"]
    pauses = doc["pause_models"]
    return [
        f"{heading} 8. The model's bill: input tokens under the prompt cache (issue 19)",
        "",
        f"Reproduce alone: `{doc['command']}` ({doc['seconds'] / 60:.1f} min here, measured "
        f"{doc['measured_at']}; `--quick`: every tenth conversation, into `.bench/quick/`). "
        f"Figures: [`{rel}/model_bill.json`]({rel}/model_bill.json), page "
        f"[`{rel}/model_bill.md`]({rel}/model_bill.md)."
        + (
            " **Measured in a run of its own**, not in the run the rest of this page "
            "reports: its comparisons are all within that run; part 3's figures are this "
            "page's."
            if apart
            else ""
        ),
        "",
        f"**What was played.** {work['described'].capitalize()}: {work['turns']:,} turns, "
        "each replayed from its first message through the real worker (`worker run`, its AWS "
        "calls counted; SQS on moto, the history table on dynalite), once in `sliding` and "
        "once in `cache-aligned` mode, with the default window (4,000 tokens, 25 messages, "
        f"floor 10), fold trigger ({settings['fold_min_tokens']:,} tokens or 12 messages) and "
        f"anchor headroom ({settings['headroom']['tokens']:,} tokens, "
        f"{settings['headroom']['messages']} messages). Turn *t* sends counsel's question "
        "2*t*−1; the benchmark waits for the prompt on the model queue, then stores the "
        "question and its scripted answer as the writer stage would. A scripted compactor "
        "answers each fold request 1–3 turns later (seeded per request) with the fold mark and "
        "a 300–600-token summary. "
        f"{work['lanes']} conversations at a time, each one sequential (closed loop: moto's SQS "
        f"slows with deep queues): {plays['sliding']['commands_per_second']:.0f} and "
        f"{plays['cache-aligned']['commands_per_second']:.0f} turns/s.",
        "",
        "**What was priced.** Every payload's `converse` view, turn by turn, with the prompt-cache "
        "model of `worker/caching/bill_model.py`: one cache per conversation; the request is "
        "the model stage's own system prompt, then the view's `system`, then its `messages`. "
        "The stepped peer (`../shared/PROMPT-CACHE.md`: the window's start moves on a grid of "
        f"{settings['step']:,} tokens of history, then to the next question, never past the "
        "floor) and the sliding window with the history's cache points are not modes of the "
        "worker: the pure pipeline (the worker's own memory functions over the same histories "
        "and fold schedule) renders them. "
        + (
            f"It renders both modes too, and its views were byte-identical to the worker's "
            f"payloads on every turn ({checks['sliding']['identical_views']:,} of "
            f"{checks['sliding']['turns']:,} sliding, "
            f"{checks['cache-aligned']['identical_views']:,} of "
            f"{checks['cache-aligned']['turns']:,} cache-aligned), so the four contenders are "
            "priced on one footing."
            if identical
            else "**Its views differed from the worker's**: "
            + ", ".join(
                f"{m} {c['identical_views']:,} of {c['turns']:,} identical"
                for m, c in checks.items()
            )
            + "; the worker's own payloads are priced for its two modes."
        ),
        "",
        "**The cost model's rules, and where they are stated:**",
        "",
        *(f"- {source}" for source in SOURCES),
        "- Assumed beyond the sources: tokens are the stage's estimate (`ceil(chars / 4)`), not "
        "Claude's tokenizer, so the figures compare prompt shapes, not exact bills; a hit "
        "refreshes only the entry it read; each conversation's cache is its own (a system prompt "
        "shared by all conversations would be cached more often, which helps every contender "
        "alike).",
        "",
        "**The baseline, and why.** Claude Sonnet 4 (minimum "
        f"{rules['min_prefix_tokens']:,} tokens, $3 per million input tokens); the default "
        f"{TTL_WORDS[rules['ttl']]} TTL (the view's cache points ask for it); the model "
        f"stage's own system prompt, {rules['system_prompt_tokens']} tokens, first, with a "
        "cache point of its own (the contract leaves it one of Bedrock's four; 300 tokens is "
        "below the minimum, so it caches only as part of a longer prefix); and counsel's "
        f"pauses: {pauses[base['pauses']]}. That is the rhythm of a legal question-and-answer "
        "session — read a 150–600-token answer, type a 20–80-token question — with a break "
        "now and then; the sensitivity below prices the same payloads with long pauses.",
        "",
        f"Per turn, at the baseline ({work['turns']:,} turns of each contender):",
        "",
        *headline_table(doc),
        "",
        "- *Billed units*: input tokens weighted as billed (read 0.1×, written 1.25×, the rest "
        "1×), the system prompt and the current message included. *History tokens*: the "
        "window's estimate. *Messages fewer*: the sliding window's count minus the "
        "contender's, turn by turn. *Fold-gap turns*: turns with an unfolded message outside "
        "the window. *Re-anchors*: turns whose cache-aligned window moved its start (the "
        "worker's own `clerk.converse_window_anchor` lines); *anchor writes*: turns that stored "
        "a new anchor, in a write of its own or riding the turn's fold claim. *$ / 1,000 "
        "turns*: input only, at $3 per million units.",
        f"- Cache-aligned bills {aligned['billed_share']:.0%} of the sliding window's input and "
        f"sees {aligned['history_share']:.0%} of its history tokens; it reads "
        f"{aligned['read_share']:.0%} of its input from the cache, against "
        f"{sliding['read_share']:.0%} for sliding, whose start moves on most turns, so no "
        "history prefix repeats, and whose summary behind a 300-token system prompt stays under "
        "the minimum. The stepped peer bills "
        f"{stepped['billed_share']:.0%} but sees only {stepped['history_share']:.0%} of the "
        f"history and leaves unfolded messages out on {stepped['fold_gap_turns']:,} turns: its "
        "start steps over the fold mark.",
        "",
        "**Sensitivity**: the same recorded payloads priced again under each case (one "
        "change from the baseline a row, two in the last rows). The history seen does not "
        "change: it is the windows'.",
        "",
        *sensitivity_table(doc),
        "",
        *pause_notes(doc),
        "",
        "![billed input per turn by contender and case](" + rel + "/model_bill.png)",
        "",
        "**AWS calls per command**, each worker process's own calls over the played turns "
        "(warm-up excluded):",
        "",
        *calls_table(doc),
        "",
        f"The cache-aligned mode's only new call is the anchor's write of its own (an "
        f"`UpdateItem` of the `state` item): {calls['anchor']:.3f} per command; of its "
        f"{aligned['anchor_writes_per_turn']:.3f} anchor writes a turn, the other "
        f"{aligned['anchor_writes_per_turn'] - calls['anchor']:.3f} rode the turn's fold claim "
        f"at no extra call. In all it made {calls['difference']:.3f} more calls per command "
        "than sliding"
        + (
            ""
            if abs(calls["difference"] - calls["anchor"]) < 0.01
            else " (the rest of the difference is batch fill, which varies from run to run)"
        )
        + f". Both modes' receives brought {1 / max(1e-9, calls['receives']):.1f} commands on "
        f"average ({work['lanes']} conversations at a time). The absolute figures are above "
        f"part 3's ({calls['part3']:.2f}) by the fold requests: every conversation here grows "
        "an exchange a turn, as in use, so a fold request (a claim and a send) leaves every "
        f"{1 / max(1e-9, calls['fold_requests']):.1f} turns, {calls['fold']:.3f} calls per "
        "command, where part 3's commands mostly find the fold done "
        f"({calls['part3_fold']:.3f} calls per command). "
        f"On part 3's workload the anchor's writes would give at most "
        f"**{calls['part3_aligned']:.2f}** (fewer, in fact: its conversations do not grow, so "
        "they keep their anchors). In sliding mode no anchor call appears: one Query a turn, "
        "and `state` updates only for fold claims, as before the mode existed.",
        "",
        "**Targets (issue 19), at the baseline:**",
        "",
        "| target | measured | |",
        "| --- | --- | --- |",
        *(
            f"| {target} | {figure} | {'met' if met else '**missed**'} |"
            for target, figure, met in targets(doc, part3)
        ),
        "",
        *holds_and_fails(doc),
        "",
        "**Checks.** "
        + "; ".join(
            f"{mode}: fold marks and fold requests as the pure pipeline's on "
            f"{c['same_fold_mark']:,} and {c['same_fold_request']:,} of {c['turns']:,} turns, "
            f"{c['unexpected_requests']} fold request(s) the trigger did not call for, "
            f"{c['duplicate_payloads']} duplicate payload(s), {c['offloaded_payloads']} "
            f"offloaded to S3, worker exit code {c['exit_code']}"
            + (
                f"; the worker's logged anchor choice (outcome, reason, write) the pipeline's on "
                f"{c['same_anchor_choice']:,} of {c['turns']:,} turns"
                if c.get("same_anchor_choice") is not None
                else ""
            )
            for mode, c in checks.items()
        )
        + ".",
        "",
        "**What a live Bedrock run would confirm.** The model prices estimated tokens; "
        "Converse reports `usage.cacheReadInputTokens` and `usage.cacheWriteInputTokens` per "
        "request. Sending a few conversations of this replay through the model stage in each "
        "mode, with the pauses compressed to seconds, and comparing those two fields turn by "
        "turn with this model's read and written tokens would confirm the prefix matching, the "
        "minimum and the lookback; the pauses need the TTL itself.",
    ]


def pause_notes(doc: dict[str, Any]) -> list[str]:
    """What each pause model of the sensitivity means, under the name its case gives it."""
    baseline = doc["baseline"]["pauses"]
    labels: dict[str, str] = {}
    for case in doc["cases"]:
        name = case["case"]
        if case["pauses"] != baseline and name.startswith("pauses: "):
            labels.setdefault(case["pauses"], name.removeprefix("pauses: "))
    notes = []
    for model, label in labels.items():
        text = doc["pause_models"][model]
        notes.append(f"- Pauses *{label}*: {text.removeprefix(f'{label}: ')}.")
    return notes


def _fold_requests(doc: dict[str, Any]) -> float:
    """Fold requests sent per command, sliding mode."""
    calls = doc["plays"]["sliding"]["calls_per_command"]
    return float(sum(v for k, v in calls.items() if k.startswith("sqs.SendMessage compaction")))


def holds_and_fails(doc: dict[str, Any]) -> list[str]:
    """Where each comparison of the baseline holds across the cases, and why not."""
    cases = doc["cases"]

    def share(case: dict[str, Any], name: str) -> float:
        return float(case["contenders"][name]["billed_share"])

    under = [c["case"] for c in cases if share(c, "cache-aligned") <= BILLED_MAX]
    over = [c for c in cases if share(c, "cache-aligned") > BILLED_MAX]
    behind = [c for c in cases if share(c, "cache-aligned") >= share(c, "stepped")]
    by_name = {c["case"]: c for c in cases}
    lines = [
        "**Where the saving holds, and where it does not.** The windows (and so the history "
        "seen, the fold gaps and the calls) are the same in every case; only the bill moves.",
        "",
        "- At or under 55% of sliding's input: " + ", ".join(under) + ".",
    ]
    if over:
        lines.append(
            "- Over 55%: "
            + "; ".join(f"{c['case']} ({share(c, 'cache-aligned'):.0%})" for c in over)
            + ". The saving is cache reads: it needs the next question within the TTL of the "
            "last. A pause beyond it costs the cache-aligned prompt a fresh write of its "
            "history at 1.25× where the sliding prompt, cached nowhere, pays 1× as always — "
            "with every pause cold, cache-aligned costs more than sliding. "
            + _ttl_sentence(by_name)
            + " A model whose minimum is 4,096 tokens caches a "
            "4,000-token window only when the summary and system prompt push it over. A "
            "1,500-token system prompt with its own point is cached for every contender, "
            "sliding included, so the history is a smaller share of everyone's bill"
            + (
                f" (the saving per 1,000 turns: "
                f"${_saving(by_name['system prompt 1,500 tokens']):.2f}, against "
                f"${_saving(by_name['baseline']):.2f} at the baseline)."
                if "system prompt 1,500 tokens" in by_name and "baseline" in by_name
                else "."
            )
        )
    if behind:
        lines.append(
            "- Not below the stepped peer's bill: "
            + "; ".join(
                f"{c['case']} ({share(c, 'cache-aligned'):.1%} against {share(c, 'stepped'):.1%})"
                for c in behind
            )
            + ". The peer sees less history in every case (the same windows as at the "
            "baseline), and a shorter prompt loses less to a cold cache."
        )
    return lines


def _ttl_sentence(by_name: dict[str, dict[str, Any]]) -> str:
    """What the 1-hour TTL did to cache-aligned's share, pause model by pause model."""
    pairs = [
        ("the baseline's pauses", "baseline", "TTL 1 hour"),
        ("interrupted pauses", "pauses: interrupted", "TTL 1 hour, pauses interrupted"),
        ("cold pauses", "pauses: cold", "TTL 1 hour, pauses cold"),
    ]
    found = [(label, by_name[a], by_name[b]) for label, a, b in pairs
             if a in by_name and b in by_name]  # fmt: skip
    if not found:
        return ""

    def share(case: dict[str, Any]) -> str:
        return f"{case['contenders']['cache-aligned']['billed_share']:.0%}"

    return (
        "The 1-hour TTL doubles every write and keeps an entry through pauses of up to an "
        "hour: cache-aligned's share went "
        + ", ".join(f"from {share(a)} to {share(b)} with {label}" for label, a, b in found)
        + ". It pays only where most pauses are longer than 5 minutes and shorter than an "
        "hour, which is why the view's points keep the default TTL."
    )


def _saving(case: dict[str, Any]) -> float:
    c = case["contenders"]
    return float(
        c["sliding"]["dollars_per_1000_turns"] - c["cache-aligned"]["dollars_per_1000_turns"]
    )


def page(doc: dict[str, Any], part3: dict[str, float] | None = None) -> str:
    lines = [
        "<!-- generated by bench/parts/model_bill.py; edit the script, not this file -->",
        "",
        *section(doc, ".", heading="#", part3=part3),
    ]
    box = doc["machine"]
    lines += [
        "",
        f"Measured {doc['measured_at']} on {box['cores']} cores ({box['cpu']}), Python "
        f"{box['python']}, moto {box['moto']}, dynalite.",
    ]
    return "\n".join(lines) + "\n"


def part3_calls(results: Path) -> dict[str, float] | None:
    """Part 3's calls per command by label (the worker, sliding, full batches) in a run's
    ``results.json``, or None."""
    import json

    try:
        document = json.loads(results.read_text(encoding="utf-8"))
        calls: dict[str, float] = document["throughput"]["summary"]["worker"]["calls_per_command"]
    except (OSError, ValueError, KeyError):
        return None
    return calls


HEADING = "## 8. The model's bill"
NEXT_HEADING = "## What these figures show"


def insert_section(doc: dict[str, Any], path: Path, out_dir: Path) -> None:
    """Put the section and its target rows into an already generated docs/BENCHMARKS.md
    (as :mod:`bench.reports.report` would write them), replacing an earlier copy."""
    text = path.read_text(encoding="utf-8")
    rel = os.path.relpath(out_dir, path.parent)
    part3 = part3_calls(out_dir / "results.json")
    lines = text.split("\n")
    # The target rows: replace ours, else append them to the table under "## Targets".
    rows = [f"| {t} | {f} | {'met' if m else '**missed**'} |" for t, f, m in targets(doc, part3)]
    names = {row.split(" | ")[0] for row in rows}
    start = lines.index("## Targets")
    end = next(i for i in range(start + 4, len(lines)) if not lines[i].startswith("|"))
    table = [line for line in lines[start:end] if line.split(" | ")[0] not in names]
    lines[start:end] = table + rows
    # The section: replace ours, else insert it before the closing notes.
    body = section(doc, rel, part3=part3, apart=True)
    begin = next((i for i, line in enumerate(lines) if line.startswith(HEADING)), None)
    if begin is None:
        at = next(i for i, line in enumerate(lines) if line.startswith(NEXT_HEADING))
        lines[at:at] = [*body, ""]
    else:
        stop = next(i for i in range(begin + 1, len(lines)) if lines[i].startswith("## "))
        lines[begin:stop] = [*body, ""]
    path.write_text("\n".join(lines), encoding="utf-8")


# -- the plot ---------------------------------------------------------------------------------


def plot(doc: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = doc["cases"]
    names = ("sliding", "sliding+point", "cache-aligned", "stepped")
    fig, axis = plt.subplots(figsize=(10, 0.55 * len(cases) + 1.8), dpi=130)
    height = 0.2
    for k, name in enumerate(names):
        values = [c["contenders"][name]["billed_per_turn"] for c in cases]
        positions = [i + (k - 1.5) * height for i in range(len(cases))]
        axis.barh(positions, values, height=height, color=COLOURS[name], label=SHORT[name])
        if name == "cache-aligned":
            for pos, case, value in zip(positions, cases, values, strict=True):
                share = case["contenders"][name]["billed_share"]
                axis.annotate(f"{share:.0%}", (value, pos), textcoords="offset points",
                              xytext=(3, -3), fontsize=7, color=COLOURS[name])  # fmt: skip
    axis.set_yticks(range(len(cases)), [c["case"] for c in cases], fontsize=8)
    axis.invert_yaxis()
    axis.set_xlabel("billed input units per turn (read 0.1×, written 1.25× or 2×, the rest 1×)")
    axis.set_title(
        f"The model's input bill per turn, {doc['workload']['turns']:,} turns per contender "
        "(the worker's own payloads in both modes)\n"
        "label: cache-aligned as a share of sliding",
        fontsize=10,
    )
    axis.legend(fontsize=8, loc="upper right")
    axis.grid(True, axis="x", alpha=0.4)
    fig.text(0.99, 0.01, f"{doc['machine']['cores']} cores, moto {doc['machine']['moto']}, "
             "dynalite; tokens estimated (chars / 4)", ha="right", va="bottom", fontsize=7,
             color="0.4")  # fmt: skip
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path)
    plt.close(fig)
