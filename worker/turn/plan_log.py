"""What a turn logs of its plan: ids, seqs, counts and times, never content.

Every line here describes a :class:`~worker.planning.TurnPlan`; the stage logs it once the
plan is made and its prompt sent (or its send failed).
"""

from __future__ import annotations

from collections import Counter

from worker.logs import get_logger
from worker.planning import TurnPlan

log = get_logger()


def log_plan(plan: TurnPlan) -> None:
    """The memory's work on this turn's history and, in the cache-aligned mode, the anchor.
    The newest stored bill's check is logged once the prompt is out (:func:`log_observed`):
    a send that fails and is tried again does not check the same answer twice."""
    log_memory(plan)
    log_anchor(plan)


def log_memory(plan: TurnPlan) -> None:
    """Entries left out of the page, bills dropped and attributes read as absent, the window
    when it dropped or read further back (in
    the cache-aligned mode, how it was chosen), any fold gap, and messages the Converse
    view leaves out."""
    page, window, aligned, view, gap = plan.page, plan.window, plan.aligned, plan.view, plan.gap
    if page.malformed:
        log.warning(
            "clerk.converse_history_entries_dropped",
            count=len(page.malformed),
            reasons=dict(Counter(page.malformed)),
        )
    for bill in page.bills_dropped:
        log.warning(
            "clerk.converse_bill_dropped",
            seq=bill.seq,
            attribute=bill.attribute,
            reason=bill.reason,
        )
    for ignored in page.ignored:
        where = {"seq": ignored.seq} if ignored.seq is not None else {"item": "state"}
        log.warning(
            "clerk.converse_stored_attribute_ignored",
            attribute=ignored.attribute,
            reason=ignored.reason,
            **where,
        )
    if window.dropped or page.queries > 1:
        anchor: dict[str, str] = {} if aligned is None else {"anchor": aligned.outcome}
        if aligned is not None and aligned.reason is not None:
            anchor["anchor_reason"] = aligned.reason
        log.info(
            "clerk.converse_history_window_bounded",
            dropped=window.dropped,
            kept=window.kept,
            trimmed=window.trimmed,
            estimated_tokens=window.estimated_tokens,
            floor_overrode_budget=window.floor_overrode_budget,
            extra_queries=page.queries - 1,
            **anchor,
        )
    if gap is not None:
        log.warning(
            "clerk.converse_history_fold_gap",
            unfolded_dropped=gap.count,
            first_seq=gap.first_seq,
            last_seq=gap.last_seq,
        )
    if view.left_out:
        log.info(
            "clerk.converse_messages_left_out",
            count=len(view.left_out),
            reasons=dict(Counter(left.reason for left in view.left_out)),
        )


def log_anchor(plan: TurnPlan) -> None:
    """The cache-aligned window's choice, every turn of that mode: kept, re-anchored (and
    why) or fell back; the anchor in force after the turn, the one the ``state`` item held,
    and whether this turn stores a new one; the summary shown (its mark, how far the newest
    fold is past it, whether a snapshot is held); the TTL of each cache point and why (the
    gaps read, the chances of a gap within 5 minutes and 1 hour, the prefix expected to be
    read)."""
    aligned, ttls = plan.aligned, plan.ttls
    if aligned is None:
        return
    after, stored = aligned.anchor, plan.page.anchor
    pace = ttls.pace if ttls is not None else None
    log.info(
        "clerk.converse_window_anchor",
        summary_folded_through=aligned.shown.folded_through,
        summary_behind=aligned.behind,
        snapshot=after is not None and after.snapshot is not None,
        ttls=[ttl or "none" for ttl in ttls.ttls] if ttls is not None else None,
        ttl_why=ttls.why if ttls is not None else None,
        pace_gaps=len(pace.gaps) if pace is not None else 0,
        pace_newest_gap_s=round(pace.gaps[-1]) if pace is not None and pace.gaps else None,
        pace_p5=round(pace.p5, 3) if pace is not None else None,
        pace_p60=round(pace.p60, 3) if pace is not None else None,
        expected_read=ttls.read if ttls is not None else None,
        outcome=aligned.outcome,
        reason=aligned.reason,
        anchor_seq=after.seq if after is not None else None,
        anchor_folded_through=after.folded_through if after is not None else None,
        stored_seq=stored.seq if stored is not None else None,
        stored_folded_through=stored.folded_through if stored is not None else None,
        write=plan.anchor_to_write is not None,
    )


def log_observed(plan: TurnPlan) -> None:
    """The newest answer with a stored bill, checked against what its prompt expected: the
    expected and observed tokens, the cause of a miss (a warning when nothing the stage
    knows explains it), and the conversation's calibration and cache state now."""
    observed = plan.observed
    check = observed.check
    if check is None:
        return
    calibration = observed.calibration
    fields = {
        "answer_seq": check.seq,
        "answer_command_id": check.command_id,
        "expected_read": check.expected_read,
        "expected_read_tokens": check.expected_read_tokens,
        "read_tokens": check.read_tokens,
        "write_tokens": check.write_tokens,
        "written_5m": check.written_5m,
        "written_1h": check.written_1h,
        "billed_units": round(check.billed_units, 1),
        "cause": check.cause,
        "downgraded": check.downgraded,
        "details_known": check.details_known,
        "calibration_ratio": round(calibration.ratio, 3),
        "calibration_offset": round(calibration.offset),
        "calibration_samples": calibration.samples,
        "calibration_rejected": calibration.rejected,
        "calibration_reset": calibration.reset,
        "calibration_error": round(calibration.error, 4),
        "clock_offset_s": round(observed.clock.seconds),
        "min_tokens": observed.min_tokens,
        "min_raised": observed.raised,
        "spaced": observed.spaced,
        "alive": [entry.prefix for entry in observed.alive] if observed.alive is not None else None,
        "cold": observed.cold,
    }
    if check.cause == "unexplained":
        log.warning("clerk.converse_cache_observed", **fields)
    else:
        log.info("clerk.converse_cache_observed", **fields)
