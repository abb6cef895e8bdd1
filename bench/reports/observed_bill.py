"""docs/benchmarks/observed_bill.md, part 10's page, its section of docs/BENCHMARKS.md, its
targets and the headline a focused run prints, from the figures
:mod:`bench.parts.observed_bill` measured (the tables: :mod:`bench.reports.observed_tables`)."""

from __future__ import annotations

from typing import Any

from bench.reports.observed_tables import (
    WITH,
    WITHOUT,
    bills_table,
    calibration_table,
    causes_table,
    classes_table,
    deviation_calibration_table,
    deviations_table,
    kept_below,
    paces_table,
    predictions_table,
    right_cause,
    share,
    unexplained,
    worker_lines,
)
from bench.reports.sections import VERDICTS

#: The loop's bill at most, as a share of sliding's, on the documented rules, by class.
BILL_MAX = {"1024/300": 0.436, "4096/2500": 0.55}
#: Without bills, MODEL_ID and MODEL_PREFIX_TOKENS set, at most.
NO_BILL_MAX = {"4096/2500": 0.65}
HISTORY_MIN = 0.80
RIGHT_CAUSE_MIN = 0.95
UNEXPLAINED_MAX = 0.01
KEPT_BELOW_MAX = 0.01
TOKENIZERS = ("overcount", "overcount-short", "undercount")

Target = tuple[str, str, bool | None]


def _class_targets(c: dict[str, Any]) -> list[Target]:
    f, k = c["contenders"], c["key"]
    loop, older = f[WITH], f[WITHOUT]
    out: list[Target] = []
    if k in BILL_MAX:
        out.append((f"{k}: cache-aligned with the bill ≤ {BILL_MAX[k]:.1%} of sliding's",
                    f"{loop['billed_share']:.1%}",
                    loop["billed_share"] <= BILL_MAX[k]))  # fmt: skip
    if k in NO_BILL_MAX:
        out.append((f"{k}: without bills, MODEL_ID and MODEL_PREFIX_TOKENS set, ≤ "
                    f"{NO_BILL_MAX[k]:.0%} of sliding's and no conversation above its own "
                    "sliding bill", f"{older['billed_share']:.1%}, "
                    f"{older['above_own_sliding_count']} above",
                    older["billed_share"] <= NO_BILL_MAX[k]
                    and older["above_own_sliding_count"] == 0))  # fmt: skip
    if k in BILL_MAX:
        seen = min(loop["history_share"], older["history_share"])
        out.append((f"{k}: ≥ {HISTORY_MIN:.0%} of sliding's history seen, with and without "
                    "bills", f"{loop['history_share']:.1%} / {older['history_share']:.1%}",
                    seen >= HISTORY_MIN))  # fmt: skip
    return out


def _deviation_targets(c: dict[str, Any]) -> list[Target]:
    k, rows = c["key"], c["deviations"]
    higher = [r["key"] for r in rows if r["contenders"][WITH]["billed_share"]
              > r["contenders"][WITHOUT]["billed_share"]]  # fmt: skip
    out: list[Target] = [
        (f"{k}: under each deviation the loop bills no more than without it",
         "more under: " + ", ".join(higher) if higher else f"no more under all {len(rows)}",
         not higher),
    ]  # fmt: skip
    false = sum(r["attribution"]["downgraded_without_details"] for r in rows)
    out.append((f"{k}: `ttl_downgraded` never on a bill without `cacheDetails`",
                f"{false:,} times", false == 0))  # fmt: skip
    worst = max(rows, key=lambda r: share(*unexplained(r)))
    out.append((f"{k}: `unexplained` on ≤ {UNEXPLAINED_MAX:.0%} of the answers no deviation "
                "affected, under every deviation",
                f"the most: {worst['key']} {share(*unexplained(worst)):.2%}",
                share(*unexplained(worst)) <= UNEXPLAINED_MAX))  # fmt: skip
    for r in rows:
        if r["cause"] is None:
            continue
        right, judged = right_cause(r)
        on = "affected" if r["judged_on"] == "short" else "flagged"
        target = f"{k}, {r['name']}: ≥ {RIGHT_CAUSE_MIN:.0%} of the {on} answers reported " \
                 f"`{r['cause']}`"  # fmt: skip
        if judged:
            out.append((target, f"{share(right, judged):.1%} of {judged:,}",
                        share(right, judged) >= RIGHT_CAUSE_MIN))  # fmt: skip
        else:
            out.append((target, f"no answer {on}", None))
    for r in rows:
        if r["key"] in TOKENIZERS:
            m = r["minimum"]
            out.append((f"{k}, {r['name']}: ≤ {KEPT_BELOW_MAX:.0%} of the points kept as "
                        "cacheable below the minimum by the real count, with the loop",
                        f"{kept_below(m[WITH]):.1%} (without: {kept_below(m[WITHOUT]):.1%})",
                        kept_below(m[WITH]) <= KEPT_BELOW_MAX))  # fmt: skip
    return out


def targets(doc: dict[str, Any]) -> list[Target]:
    """(target, measured, met); met None: nothing to judge it on."""
    out: list[Target] = []
    for c in doc["classes"]:
        out += _class_targets(c)
    for c in doc["classes"]:
        if c["deviations"] and c.get("deviation_class", True):
            out += _deviation_targets(c)
    return out


def _sampled(doc: dict[str, Any]) -> str:
    if doc["every"] == 1:
        return "all of the workload's"
    return f"every {doc['every']}th of the workload's"


def section(doc: dict[str, Any], rel: str = "benchmarks") -> list[str]:
    """The part's section of docs/BENCHMARKS.md: the bill per model class and under each
    deviation; the rest is on its page."""
    return [
        "## 10. The bill, observed",
        "",
        f"Reproduce alone: `{doc['command']} --write` ({doc['seconds'] / 60:.1f} min here, "
        f"measured {doc['measured_at']}). {doc['conversations']} conversations "
        f"({_sampled(doc)}), {doc['turns']:,} turns at part 8's mixed paces, "
        "each answered and billed by the prompt-cache stand-in (`localaws/bedrock_cache.py`) "
        "under the documented rules and under one deviation from them at a time; the bill "
        "goes back to the stage on the next turn's page. What is measured, the miss causes, "
        "the stage's predictions, its token calibration and the run through the real worker: "
        f"[`{rel}/observed_bill.md`]({rel}/observed_bill.md).",
        "",
        "**Per model class** (the cache's minimum / the model stage's own prefix, in tokens; "
        "% of sliding's billed input):",
        "",
        *classes_table(doc),
        "",
        "**Under each deviation** (% of sliding's billed input under the same deviation):",
        "",
        *deviations_table(doc),
    ]


def headline(doc: dict[str, Any]) -> list[str]:
    """What a focused run prints: the classes, the deviations, the calibration, the targets."""
    lines = [
        f"{doc['conversations']} conversations ({_sampled(doc)}), {doc['turns']:,} turns; "
        f"replay {doc['replay_seconds']:.0f} s in {doc['jobs']} processes",
        "",
        *classes_table(doc),
        "",
        *paces_table(doc),
        "",
    ]
    if any(c["deviations"] for c in doc["classes"]):
        lines += [*deviations_table(doc), ""]
    lines += [*calibration_table(doc), ""]
    if "worker" in doc:
        lines += [worker_lines(doc["worker"])[0], ""]
    lines += [f"- {VERDICTS[m]}: {t}: {f}" for t, f, m in targets(doc)]
    return lines


WHAT_IS_MEASURED = """\
Part 8 prices the stage's views with the stage's own model of the cache \
(`worker/caching/bill_model.py`). Here the biller is the stand-in \
(`localaws/bedrock_cache.py`), written from Bedrock's documentation apart from the stage, and \
its bill goes back to the stage as the contract lays it out ("The bill, observed"). Each turn: \
the stage reads its page and plans (`worker/planning.py`); its prompt payload \
(`worker/turn/commands.py`, with the plan's `cache`) is answered by the model stage stand-in \
(`localaws/model_stage.py`: its own prefix first, with a cache point of its own; one cache per \
conversation) 2-8 s after the command's `sent_at`; the answer item (`answer_item`: the \
workload's answer, Converse's `usage`, `answered_at`, `command_id`, the payload's `cache`) is \
stored, and the next turn's page carries the bills parsed by the stage's own reader \
(`worker/adapters/stored_bills.py`; a bill it refuses is dropped whole).

**Model classes** (`bench/parts/observed_world.py`): the cache's minimum, 1,024 (Claude \
Sonnet 4.5), 2,048 (Sonnet 4.6) or 4,096 (Opus 4.5/4.6, Haiku 4.5), and the model stage's own \
prefix before the view, 300 tokens (a system prompt) or 2,500 (1,500 of tool definitions and \
a 1,000-token system prompt; `localaws/model_prefix.py` sizes both under the stand-in's \
tokenizer). The stage runs as a deployment configures it: `MODEL_ID` a model of the class, \
`MODEL_PREFIX_TOKENS` the prefix (the cache-aligned mode does not start without `MODEL_ID` \
or `PROMPT_CACHE_MIN_TOKENS`).

**Contenders.** *sliding*, the default mode (its view depends on neither the bill nor the \
model: planned once, billed under each class); *cache-aligned, no bill*: \
`HISTORY_WINDOW_MODE=cache-aligned` (`HISTORY_CACHE_TTL=adaptive`) with the answers stored by \
an older writer, without `model_usage`; *cache-aligned, bill*: the same mode, the answers \
stored with `model_usage`: the loop. The plans without the loop do not depend on the bill, so \
they are made once and billed under every deviation; the loop is replayed under each.

**Deviations**, each on its own, at 1,024 / 300 and 4,096 / 2,500: the stand-in's tokenizer \
at 4.68 characters a token (`chars / 4` overcounts real legal English by 17%), also with the \
model stage's prefix at 60 tokens while `MODEL_PREFIX_TOKENS` says the class's, and at 3.4 \
(it undercounts); `1h` written and reported as `5m`; the model stage's system prompt changed \
once, at the middle call of each conversation; a tenth of the cache entries evicted at a \
random moment of their life (seeded); Bedrock's per-checkpoint minimum (each point that \
caches holds the minimum more than the last one that does: the guide's "at least 1,024 \
tokens per cache checkpoint … your second cache checkpoint can be defined after 2,048 \
tokens"; measured also at 1,024 / 2,500, where the model stage's own point caches and the \
view's first is a second checkpoint: at the other two classes one point a request caches); \
the model stage's clock 2 h or 5 min ahead of or behind the producers' (the \
`answered_at` it stamps; the cache runs on true time); the writer on a botocore before \
1.42.31 (no `cacheDetails`); the writer stamping `answered_at` in local time without a zone \
(the stage's reader drops such a bill whole).

**Billed units**: the stand-in's `usage` priced 1× uncached, 0.1× read, 1.25× written for 5 \
minutes, 2× for an hour, the model stage's prefix and the current message included; each \
contender as a share of sliding's bill under the same class and deviation. **History seen**: \
the window's estimated tokens against sliding's (part 8's definition). **Above their own \
sliding bill**: conversations whose bill is higher than sliding's on the same conversation.

**Causes** (the loop only: without `model_usage` nothing is checked). Each answer whose \
prompt carried `cache` is checked by the next turn's plan (`worker/caching/diagnosis.py`); a \
conversation's last answer is never checked. The *expected prefix* is the prefix of the view \
the stage expected to read, counted by the stand-in (the model stage's prefix included); an \
answer is *short* when it read less. *Affected*: short answers the deviation caused, by the \
stand-in's ground truth: the entry evicted early, the system prompt changed on that call, the \
same requests billed under the documented rules would have read the expected prefix (a twin \
stand-in fed the same requests: the downgrade, the per-checkpoint minimum), the expected \
prefix below the minimum by the stand-in's count (the tokenizers). *Flagged*: the answers \
the stand-in marks (`evicted`, `system_prompt_changed`, `downgraded`; for the tokenizers, \
the expected prefix on the other side of the minimum from the stage's calibrated count), \
short or not. The downgrade's target is judged on the flagged answers (the bill itself shows \
it), the others' on the affected ones. *Unaffected*: every other checked answer that \
expected a read; `unexplained` there is a false alarm.

**Predictions.** Each cache point of the cache-aligned views judged against the class's \
minimum as the stage judges it (its estimate, calibrated by what its page taught it) and as \
the stand-in counts it; and each payload's expected read against the read billed.

**Calibration.** After N answers (at turn N + 1 of each conversation, with the loop): \
|calibrated − real| / real of the prompt's tokens, the stage's estimate of its view calibrated \
by the page's bills against the stand-in's count of the whole request; in brackets the \
estimate's own error. With `MODEL_PREFIX_TOKENS` set (the prior), without it (the loop's \
first 21 turns replayed again)."""


def markdown(doc: dict[str, Any]) -> str:
    """The whole page."""
    tree = doc["tree"]
    lines = [
        "<!-- generated by bench/reports/observed_bill.py from bench/parts/observed_bill.py "
        "(--write); edit the scripts, not this file -->",
        "",
        "# The bill, observed: the stage's loop against the prompt-cache stand-in",
        "",
        f"Reproduce: `{doc['command']} --write` ({doc['seconds'] / 60:.1f} min here, the "
        f"replay {doc['replay_seconds'] / 60:.1f} min in {doc['jobs']} processes on "
        f"{doc['cores']} cores, {doc['replay_cpu_seconds'] / 60:.1f} CPU min; measured "
        f"{doc['measured_at']} on commit {tree['commit']}"
        + (" with uncommitted changes to " + ", ".join(f"`{p}`" for p in tree["changed"])
           if tree["changed"] else "")
        + "). Part 10 of `make bench`. "
        f"{doc['conversations']} conversations ({_sampled(doc)}), {doc['turns']:,} turns, at the "
        "*mixed* paces of part 8 ([`model_bill.md`](model_bill.md)): the same conversations, "
        "times and scripted compactor.",
        "",
        "## Targets",
        "",
        "| target | measured | |",
        "| --- | --- | --- |",
        *(f"| {t} | {f} | {VERDICTS[m]} |" for t, f, m in targets(doc)),
        "",
        "## What is measured",
        "",
        *WHAT_IS_MEASURED.split("\n"),
        "",
        "## The bill per model class",
        "",
        *classes_table(doc),
        "",
        "**By pace profile** (% of that profile's sliding bill):",
        "",
        *paces_table(doc),
        "",
        "## The bill under each deviation, with the loop and without",
        "",
        *deviations_table(doc),
        "",
        "## Token calibration: mean error after N answers (the estimate's own in brackets)",
        "",
        *calibration_table(doc),
    ]  # fmt: skip
    for c in (c for c in doc["classes"] if c["deviations"]):
        title = f"{c['min_tokens']:,} / {c['prefix_tokens']:,} ({c['model']})"
        lines += [
            "", f"## {title}: the bill", "", *bills_table(c),
            "", f"### {title}: miss causes", "", *causes_table(c),
            "", f"### {title}: the stage's predictions against the stand-in (no bill / bill)",
            "", *predictions_table(c),
            "", f"### {title}: token calibration under each deviation", "",
            *deviation_calibration_table(c),
        ]  # fmt: skip
    if "worker" in doc:
        lines += ["", "## Through the real worker", "", *worker_lines(doc["worker"])]
    return "\n".join(lines) + "\n"
