"""docs/benchmarks/observed_bill.md, part 10's page, its section of docs/BENCHMARKS.md and
its targets, from the figures :mod:`bench.parts.observed_bill` measured."""

from __future__ import annotations

from typing import Any

from bench.reports.sections import VERDICTS

CONTENDERS = ("sliding", "cache-aligned, no bill", "cache-aligned, bill")
#: The loop's bill at most, as a share of sliding's, on the documented rules.
BILL_MAX = 0.45
HISTORY_MIN = 0.80
RIGHT_CAUSE_MIN = 0.95
UNEXPLAINED_MAX = 0.01
KEPT_BELOW_MAX = 0.01
CAUSES = ("no miss", "expired", "stage_changed_prefix", "below_minimum", "ttl_downgraded",
          "unexplained")  # fmt: skip


def _share(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


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


def kept_below(counts: dict[str, int]) -> float:
    return _share(counts.get("kept_below", 0), counts.get("kept", 0))


def targets(doc: dict[str, Any]) -> list[tuple[str, str, bool | None]]:
    """(target, measured, met); met None: nothing to judge it on."""
    rows = {row["key"]: row for row in doc["deviations"]}
    base = rows["none"]["contenders"]
    loop, older = base["cache-aligned, bill"], base["cache-aligned, no bill"]
    out: list[tuple[str, str, bool | None]] = [
        (f"the bill, observed, on the documented rules: cache-aligned with the bill ≤ "
         f"{BILL_MAX:.0%} of sliding's",
         f"{loop['billed_share']:.1%}", loop["billed_share"] <= BILL_MAX),
        ("… and ≤ its bill without it (an older writer)",
         f"{loop['billed_share']:.1%} against {older['billed_share']:.1%}",
         loop["billed_share"] <= older["billed_share"]),
        (f"… seeing ≥ {HISTORY_MIN:.0%} of sliding's history tokens",
         f"{loop['history_share']:.1%}", loop["history_share"] >= HISTORY_MIN),
    ]  # fmt: skip
    for row in doc["deviations"]:
        right, affected = right_cause(row)
        if row["cause"] is None:
            continue
        judged = "affected" if row["judged_on"] == "short" else "flagged"
        target = f"{row['name']}: ≥ {RIGHT_CAUSE_MIN:.0%} of the {judged} answers reported " \
                 f"`{row['cause']}`"  # fmt: skip
        if affected:
            out.append((target, f"{_share(right, affected):.1%} of {affected:,}",
                        _share(right, affected) >= RIGHT_CAUSE_MIN))  # fmt: skip
        else:
            out.append((target, f"no answer {judged}", None))
    worst = max(doc["deviations"], key=lambda r: _share(*unexplained(r)))
    out.append((f"`unexplained` on ≤ {UNEXPLAINED_MAX:.0%} of the answers no deviation "
                "affected, under every deviation",
                ", ".join(f"{r['key']} {_share(*unexplained(r)):.2%}" for r in doc["deviations"]),
                _share(*unexplained(worst)) <= UNEXPLAINED_MAX))  # fmt: skip
    down = rows["downgrade"]["contenders"]
    out.append(
        (
            "`1h` honoured as `5m`: the bill with the loop below the bill without",
            f"{down['cache-aligned, bill']['billed_share']:.1%} against "
            f"{down['cache-aligned, no bill']['billed_share']:.1%}",
            down["cache-aligned, bill"]["billed_share"]
            < down["cache-aligned, no bill"]["billed_share"],
        )
    )
    for key in ("overcount", "overcount-short", "undercount"):
        minimum = rows[key]["minimum"]
        share = kept_below(minimum["cache-aligned, bill"])
        out.append((f"{rows[key]['name']}: ≤ {KEPT_BELOW_MAX:.0%} of the points kept as "
                    "cacheable below the minimum by the real count, with the loop",
                    f"{share:.1%} (without: {kept_below(minimum['cache-aligned, no bill']):.1%})",
                    share <= KEPT_BELOW_MAX))  # fmt: skip
    return out


def section(doc: dict[str, Any], rel: str = "benchmarks") -> list[str]:
    """The part's section of docs/BENCHMARKS.md: the bill under each deviation; the rest is
    on its page."""
    lines = [
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
        "| deviation | sliding, billed units / turn | cache-aligned, no bill: % of sliding "
        "| cache-aligned, bill: % of sliding | history seen, bill |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for row in doc["deviations"]:
        c = row["contenders"]
        loop = c["cache-aligned, bill"]
        lines.append(
            f"| {row['name']} | {c['sliding']['billed_per_turn']:,.0f} "
            f"| {c['cache-aligned, no bill']['billed_share']:.1%} "
            f"| **{loop['billed_share']:.1%}** | {loop['history_share']:.1%} |"
        )
    return lines


def _bills(doc: dict[str, Any]) -> list[str]:
    lines = [
        "| deviation | sliding, billed units / turn | cache-aligned, no bill: % of sliding "
        "| cache-aligned, bill: % of sliding | history seen (bill / no bill) "
        "| read from cache (bill / no bill) | re-anchors / turn (bill / no bill) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in doc["deviations"]:
        c = row["contenders"]
        older, loop = c["cache-aligned, no bill"], c["cache-aligned, bill"]
        lines.append(
            f"| {row['name']} | {c['sliding']['billed_per_turn']:,.0f} "
            f"| {older['billed_share']:.1%} | **{loop['billed_share']:.1%}** "
            f"| {loop['history_share']:.1%} / {older['history_share']:.1%} "
            f"| {loop['read_share']:.1%} / {older['read_share']:.1%} "
            f"| {loop['reanchors_per_turn']:.3f} / {older['reanchors_per_turn']:.3f} |"
        )
    return lines


def _causes(doc: dict[str, Any]) -> list[str]:
    lines = [
        "| deviation | answers checked | read short of the expected prefix "
        "| affected: right cause | flagged: right cause | unaffected reported `unexplained` "
        "| causes on the affected | causes on the flagged | causes on the unaffected misses |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |",
    ]
    for row in doc["deviations"]:
        a = row["attribution"]
        wrong, unaffected = unexplained(row)
        misses = {k: v for k, v in a["unaffected"].items() if k != "no miss"}
        judged = [_judged(row, on) for on in ("short", "flagged")]
        lines.append(
            f"| {row['name']} | {a['checked']:,} "
            f"| {a['short']:,} | {judged[0]} | {judged[1]} "
            f"| {_share(wrong, unaffected):.2%} ({wrong:,} of {unaffected:,}) "
            f"| {_spread(a['affected'])} | {_spread(a['flagged'])} | {_spread(misses)} |"
        )
    return lines


def _judged(row: dict[str, Any], on: str) -> str:
    right, judged = right_cause(row, on)
    if row["cause"] is None or not judged:
        return "–"
    return f"{_share(right, judged):.1%} of {judged:,}"


def _spread(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {counts[k]:,}" for k in CAUSES if counts.get(k)) or "–"


def _predictions(doc: dict[str, Any]) -> list[str]:
    lines = [
        "| deviation | cache points | kept as cacheable, below the minimum "
        "| judged below, reaching it | answers expecting a read | read short of the "
        "expected prefix | read more than expected (tokens: % of all read) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in doc["deviations"]:
        minimum = row["minimum"]

        def pair(share: Any, counts: dict[str, Any] = minimum) -> str:
            older, loop = counts["cache-aligned, no bill"], counts["cache-aligned, bill"]
            return f"{share(older):.1%} / {share(loop):.1%}"

        loop = minimum["cache-aligned, bill"]
        lines.append(
            f"| {row['name']} | {loop['points']:,} | {pair(kept_below)} | {pair(missed)} "
            f"| {pair(lambda c: _share(c['expected_reads'], c['answers']))} "
            f"| {pair(lambda c: _share(c['short'], c['answers']))} "
            f"| {pair(lambda c: _share(c['unexpected'], c['answers']))} "
            f"({pair(lambda c: _share(c['unexpected_tokens'], c['read_tokens']))}) |"
        )
    return lines


def missed(counts: dict[str, int]) -> float:
    """The share of the points judged below the minimum whose real prefix reaches it."""
    return _share(counts.get("judged_below_reaches", 0), counts["points"] - counts.get("kept", 0))


def _calibration(doc: dict[str, Any]) -> list[str]:
    turns = list(doc["deviations"][0]["calibration"])
    lines = [
        "| deviation | " + " | ".join(f"turn {t}" for t in turns) + " |",
        "| --- |" + " ---: |" * len(turns),
    ]
    for row in doc["deviations"]:
        cal = row["calibration"]
        lines.append(
            f"| {row['name']} | "
            + " | ".join(
                f"{cal[t]['calibrated']:.1%} ({cal[t]['estimate']:.1%})" if t in cal else "–"
                for t in turns
            )
            + " |"
        )
    return lines


def _worker(run: dict[str, Any]) -> list[str]:
    rows = run["rows"]
    differ = [f"{r['conversation_id']} from turn {r['first_different_payload']}" for r in rows
              if r["first_different_payload"] is not None]  # fmt: skip
    turns = sum(r["turns"] for r in rows)
    same = sum(r["same_payloads"] for r in rows)
    bills = sum(r["same_bills"] for r in rows)
    checks = sum(r["checks"] for r in rows)
    causes = sum(r["same_causes"] for r in rows)
    lines = [
        f"{run['conversations']} conversations × {run['turns']} turns through `worker run` "
        f"(`HISTORY_WINDOW_MODE=cache-aligned`, a moto server; {run['seconds']:.0f} s): "
        f"**{same} of {turns} payloads, {bills} of {turns} bills and {causes} of {checks} "
        "miss checks the same as the in-memory replay's.**"
        + (" Payloads differ: " + ", ".join(differ) + "." if differ else ""),
        "",
        "| conversation | pace | turns | same payload | same bill | same check | billed units: "
        "worker / replay |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['conversation_id']} | {r['pace']} | {r['turns']} | {r['same_payloads']} "
            f"| {r['same_bills']} | {r['same_causes']} of {r['checks']} "
            f"| {r['worker_billed']:,.0f} / {r['replay_billed']:,.0f} |"
        )
    return lines


def _sampled(doc: dict[str, Any]) -> str:
    if doc["every"] == 1:
        return "all of the workload's"
    return f"every {doc['every']}th of the workload's, `--quick`"


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
        + (
            " with uncommitted changes to " + ", ".join(f"`{p}`" for p in tree["changed"])
            if tree["changed"]
            else ""
        )
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
        "Part 8 prices the stage's views with the stage's own model of the cache "
        "(`worker/caching/bill_model.py`). Here the biller is the stand-in "
        "(`localaws/bedrock_cache.py`), written from Bedrock's documentation apart from the "
        'stage, and its bill goes back to the stage as the contract lays it out ("The bill, '
        'observed"). Each turn: the stage reads its page and plans (`worker/planning.py`); '
        "its prompt payload (`worker/turn/commands.py`, with the plan's `cache`) is answered "
        "by the model stage stand-in (`localaws/model_stage.py`: its own system prompt of "
        f"{doc['system_prompt_tokens']} estimated tokens first, with a cache point of its "
        "own; one cache per conversation) 2-8 s after the command's `sent_at`; the answer "
        "item (`answer_item`: the workload's answer, Converse's `usage`, `answered_at`, "
        "`command_id`, the payload's `cache`) is stored, and the next turn's page carries "
        "the bills parsed by the stage's own reader (`worker.adapters.dynamodb.model_usage`).",
        "",
        "**Contenders.** *sliding*, the default mode; *cache-aligned, no bill*: "
        "`HISTORY_WINDOW_MODE=cache-aligned` (`HISTORY_CACHE_TTL=adaptive`) with the answers "
        "stored by an older writer, without `model_usage`: part 8's plans exactly; "
        "*cache-aligned, bill*: the same mode, the answers stored with `model_usage`: the "
        "loop. The plans without the loop do not depend on the bill, so they are made once "
        "and billed under every deviation; the loop is replayed under each.",
        "",
        "**Deviations**, each on its own: the stand-in's tokenizer at 4.68 characters a "
        "token (`chars / 4` overcounts real legal English by 17%, `PROMPT-CACHE.md`), with "
        "the model stage's system prompt as above and with a short one (which lifts every "
        "prefix less: a prefix the stage estimates at 1,024 tokens holds about 1,127 real "
        "ones after the long prompt, about 928 after the short), and at 3.4 (it "
        "undercounts); `1h` written and reported as `5m`; the model stage's system "
        "prompt changed once, at the middle call of each conversation; a tenth of the "
        "cache entries evicted at a random moment of their life (seeded).",
        "",
        "**Billed units**: the stand-in's `usage` priced 1× uncached, 0.1× read, 1.25× "
        "written for 5 minutes, 2× for an hour, the model stage's system prompt and the "
        "current message included; each contender as a share of sliding's bill under the "
        "same deviation. **History seen**: the window's estimated tokens against sliding's "
        "(part 8's definition).",
        "",
        "**Causes** (the loop only: without `model_usage` nothing is checked). Each answer "
        "whose prompt carried `cache` is checked by the next turn's plan "
        "(`worker/caching/diagnosis.py`, `check`); a conversation's last answer is never "
        "checked. The *expected prefix* is the prefix of the view the stage expected to "
        "read, counted by the stand-in (system prompt included); an answer is *short* when "
        "it read less. *Affected*: short answers the deviation caused, by the stand-in's "
        "ground truth: the entry evicted early (`ModelAnswer.evicted`), the system prompt "
        "changed on that call (`system_prompt_changed`), the same requests billed with `1h` "
        "honoured would have read the expected prefix (a twin stand-in fed the same "
        "requests), the expected prefix below the minimum by the stand-in's count (the "
        "tokenizers). *Flagged*: the answers the stand-in marks (`evicted`, "
        "`system_prompt_changed`, `downgraded`: `1h` asked, `5m` written; for the "
        "tokenizers, the expected prefix on the other side of the minimum from the stage's "
        "calibrated count), short or not. The right cause: `unexplained` (eviction, system "
        "prompt), `ttl_downgraded`, `below_minimum`. A target is judged on the affected "
        "answers, except the downgrade's, judged on the flagged ones: the bill itself shows "
        "it (`cacheDetails`), and a stage that knows it expects no read it would deny. "
        "*Unaffected*: every other checked answer that expected a read; `unexplained` there "
        "is a false alarm.",
        "",
        "**Predictions.** Each cache point of the cache-aligned views judged against the "
        f"minimum ({doc['min_tokens']:,}) as the stage judges it (its estimate of the prefix, "
        "calibrated by what its page taught it) and as the stand-in counts it; and each "
        "payload's expected read (its `cache`) against the read billed: short of the "
        "expected prefix (a miss) or more than it (a read the stage did not count on, so "
        "did not plan for).",
        "",
        "**Calibration.** At turns 1, 2, 5, 10 and 20 of each conversation (with the "
        "loop): |calibrated − real| / real of the prompt's tokens, the stage's estimate of "
        "its view calibrated by the page's bills against the stand-in's count of the whole "
        "request; in brackets the estimate's own error.",
        "",
        "## The bill",
        "",
        *_bills(doc),
        "",
        "## Miss causes",
        "",
        *_causes(doc),
        "",
        "## The stage's predictions against the stand-in (no bill / bill)",
        "",
        *_predictions(doc),
        "",
        "## Token calibration: mean error after N turns (the estimate's own in brackets)",
        "",
        *_calibration(doc),
    ]
    if "worker" in doc:
        lines += ["", "## Through the real worker", "", *_worker(doc["worker"])]
    return "\n".join(lines) + "\n"
