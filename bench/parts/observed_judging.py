"""What part 10 counts of a replayed conversation: each contender's bill, and the stage's
predictions and miss causes against what the stand-in knows and the bill does not say.

Figures are keyed by the model class (``1024/300``), the contender and the deviation. The
stage is read only through its plan (:class:`worker.planning.TurnPlan`: the window, the
view, the payload's ``cache``, and what its page's bills taught it, ``observed``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.load.answered import AnsweredTurn, RequestTokens, billed_units, request_tokens
from bench.load.model_classes import ModelClass
from bench.parts.cache_bill import Tally
from bench.parts.observed_world import Deviation, prefix_tokens_at
from localaws.model_stage import ModelAnswer
from worker.caching.bill_model import TurnCost
from worker.caching.expectation import view_tokens
from worker.planning import TurnPlan

#: The answers after which the token calibration's error is reported (at the next turn).
CALIBRATION_ANSWERS = (0, 1, 2, 3, 5, 10, 20)
#: The turns a calibration-only replay needs.
CALIBRATION_REPLAY_TURNS = max(CALIBRATION_ANSWERS) + 1

Key = tuple[str, str, str]  # (class, contender, deviation)
#: A request's tokens, the real tokens of the prefix its payload expected to read (0: none),
#: and whether that prefix ends on one of the view's block boundaries (a read the stage
#: expects of a prefix this view does not hold is counted as the longest one it holds).
Expected = tuple[RequestTokens, int, bool]


@dataclass
class Attribution:
    """The miss causes the stage reported (the next turn's check of each answer) against what
    the stand-in knows: the causes on the answers the deviation affected, on those the
    stand-in flags, and on the others that expected a read (:func:`attribute`); and the
    ``ttl_downgraded`` reported on a bill stored without ``cacheDetails``."""

    affected: Counter[str] = field(default_factory=Counter)
    flagged: Counter[str] = field(default_factory=Counter)
    unaffected: Counter[str] = field(default_factory=Counter)
    flags: Counter[str] = field(default_factory=Counter)
    short: int = 0
    checked: int = 0
    downgraded_without_details: int = 0

    def merge(self, other: Attribution) -> None:
        for name in ("affected", "flagged", "unaffected", "flags"):
            getattr(self, name).update(getattr(other, name))
        self.short += other.short
        self.checked += other.checked
        self.downgraded_without_details += other.downgraded_without_details


@dataclass
class Figures:
    """One conversation's figures, or the sum of several."""

    tallies: dict[Key, Tally] = field(default_factory=dict)
    #: (class, contender, pace profile) -> the tally under the documented rules
    paces: dict[Key, Tally] = field(default_factory=dict)
    #: (class, deviation) -> the causes against the ground truth
    attribution: dict[tuple[str, str], Attribution] = field(default_factory=dict)
    #: (class, contender, deviation) -> counts (:func:`judge`)
    minimum: dict[Key, Counter[str]] = field(default_factory=dict)
    #: (class, variant, deviation, answers) -> [(calibrated error, estimate's error)]
    calibration: dict[tuple[str, str, str, int], list[tuple[float, float]]] = field(
        default_factory=dict
    )
    turns: int = 0
    conversations: int = 0
    #: One conversation's pace profile (its figures' only).
    pace: str = ""

    def merge(self, other: Figures) -> None:
        for mine, theirs in ((self.tallies, other.tallies), (self.paces, other.paces)):
            for key, tally in theirs.items():
                into = mine.setdefault(key, Tally())
                for name in ("turns", "billed", "read", "written", "uncached", "history",
                             "fold_gap_turns", "reanchors"):  # fmt: skip
                    setattr(into, name, getattr(into, name) + getattr(tally, name))
                into.per_conversation.update(tally.per_conversation)
        for key, attribution in other.attribution.items():
            self.attribution.setdefault(key, Attribution()).merge(attribution)
        for key, counts in other.minimum.items():
            self.minimum.setdefault(key, Counter()).update(counts)
        for key, errors in other.calibration.items():
            self.calibration.setdefault(key, []).extend(errors)
        self.turns += other.turns
        self.conversations += other.conversations


def cost(usage: dict[str, Any]) -> TurnCost:
    read = usage.get("cacheReadInputTokens", 0)
    written = usage.get("cacheWriteInputTokens", 0)
    return TurnCost(read, written, usage["inputTokens"], billed_units(usage))


def tally(
    figures: Figures, key: Key, cid: str, plans: Sequence[TurnPlan], answers: Sequence[ModelAnswer]
) -> None:
    """Add the turns to ``key``'s tally, and under the documented rules to the pace's."""
    into = [figures.tallies.setdefault(key, Tally())]
    if key[2] == "none" and figures.pace:
        into.append(figures.paces.setdefault((key[0], key[1], figures.pace), Tally()))
    for plan, answer in zip(plans, answers, strict=True):
        reanchored = plan.aligned is not None and plan.aligned.outcome == "reanchored"
        for mine in into:
            mine.add(cid, cost(answer.usage), plan.window, gap=plan.gap is not None,
                     reanchored=reanchored)  # fmt: skip


def calibrated(plan: TurnPlan, estimated: int) -> int:
    """The stage's count of a prefix it estimates at ``estimated``, as its page taught it."""
    return plan.observed.calibration.tokens(estimated)


def expected_prefixes(
    turns: Sequence[AnsweredTurn], model: ModelClass, deviation: Deviation
) -> list[Expected]:
    """Each turn's request tokens as the stand-in counts them under ``deviation``, and what
    its payload expected to read (:data:`Expected`)."""
    calls, out = len(turns), []
    for turn in turns:
        prefix = prefix_tokens_at(model, deviation, calls, turn.turn)
        tokens = request_tokens(turn.payload["converse"], prefix, deviation.count_tokens)
        expected = turn.payload.get("cache")
        want = expected["expected_read_tokens"] if expected else 0
        boundary = tokens.floor_of(want)
        out.append((tokens, tokens.real[boundary] if want else 0,
                    tokens.estimated[boundary] == want))  # fmt: skip
    return out


def judge(
    figures: Figures,
    key: Key,
    minimum: int,
    turns: Sequence[AnsweredTurn],
    answers: Sequence[ModelAnswer],
    prefixes: Sequence[Expected],
) -> None:
    """The stage's predictions against the stand-in's count and bill: each cache point of
    the views judged against the minimum as the stage judges it (its estimate of the prefix,
    calibrated by what its page taught it) and as the stand-in counts it; and each expected
    read against the read billed (short: less; unexpected: more; ``off_view``: of a prefix
    the view does not hold)."""
    counts = figures.minimum.setdefault(key, Counter())
    for turn, answer, (tokens, want, on_view) in zip(turns, answers, prefixes, strict=True):
        for boundary in tokens.points:
            kept = calibrated(turn.plan, tokens.estimated[boundary]) >= minimum
            reaches = tokens.real[boundary] >= minimum
            counts["points"] += 1
            counts["kept"] += kept
            counts["kept_below"] += kept and not reaches
            counts["judged_below_reaches"] += not kept and reaches
        read = answer.usage.get("cacheReadInputTokens", 0)
        counts["answers"] += 1
        counts["expected_reads"] += want > 0
        counts["off_view"] += not on_view
        counts["short"] += read < want
        counts["unexpected"] += read > want
        counts["read_tokens"] += read
        counts["short_tokens"] += max(0, want - read)
        counts["unexpected_tokens"] += max(0, read - want)


def calibration_errors(
    figures: Figures, key: tuple[str, str, str], turns: Sequence[AnsweredTurn]
) -> None:
    """After ``n`` answers (at turn ``n + 1``): |calibrated - real| / real of the prompt's
    tokens, and the estimate's own error; ``key`` is (class, variant, deviation)."""
    for n in CALIBRATION_ANSWERS:
        if n >= len(turns):
            continue
        turn = turns[n]
        usage = turn.answer.usage
        real = usage["inputTokens"] + usage.get("cacheReadInputTokens", 0)
        real += usage.get("cacheWriteInputTokens", 0)
        estimate = view_tokens(turn.plan.view)
        errors = figures.calibration.setdefault((*key, n), [])
        errors.append((abs(calibrated(turn.plan, estimate) - real) / real,
                       abs(estimate - real) / real))  # fmt: skip


def _flagged(how: str | None, answer: ModelAnswer, want: int, judged: bool, minimum: int) -> bool:
    if how == "other_side":
        return want > 0 and judged != (want >= minimum)
    return how is not None and bool(getattr(answer, how))


def _affected(
    how: str | None, answer: ModelAnswer, want: int, twin: int | None, minimum: int
) -> bool:
    if how == "real_minimum":
        return want < minimum
    if how == "twin":
        return twin is not None and twin >= want
    return how is not None and bool(getattr(answer, how))


def attribute(
    figures: Figures,
    key: tuple[str, str],
    deviation: Deviation,
    minimum: int,
    turns: Sequence[AnsweredTurn],
    prefixes: Sequence[Expected],
    twin_reads: Sequence[int] | None,
) -> None:
    """Each answer the next turn checked, against the stand-in's ground truth: *affected*
    when it read short of its expected prefix because of the deviation, *flagged* when the
    stand-in marks the deviation on it, *unaffected* otherwise (:class:`Deviation`)."""
    attribution = figures.attribution.setdefault(key, Attribution())
    for index, turn in enumerate(turns):
        answer = turn.answer
        for flag in ("evicted", "downgraded", "system_prompt_changed"):
            attribution.flags[flag] += getattr(answer, flag)
        if index + 1 >= len(turns):
            continue  # no turn after it: never checked
        check = turns[index + 1].plan.observed.check
        if check is None:
            continue
        assert check.seq == 2 * turn.turn
        attribution.checked += 1
        cause = check.cause or "no miss"
        stored = turn.item.get("model_usage", {}).get("M", {})
        attribution.downgraded_without_details += (
            cause == "ttl_downgraded" and "cacheDetails" not in stored
        )
        want = prefixes[index][1]
        estimated = turn.payload["cache"]["expected_read_tokens"]
        judged = calibrated(turn.plan, estimated) >= minimum
        flagged = _flagged(deviation.flags, answer, want, judged, minimum)
        short = answer.usage.get("cacheReadInputTokens", 0) < want
        attribution.short += short
        twin = twin_reads[index] if twin_reads is not None else None
        affected = short and _affected(deviation.affects, answer, want, twin, minimum)
        if flagged:
            attribution.flagged[cause] += 1
        if affected:
            attribution.affected[cause] += 1
        elif not flagged and want > 0:
            attribution.unaffected[cause] += 1
