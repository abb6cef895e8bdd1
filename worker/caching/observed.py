"""The bill, observed: what a conversation's stored answers teach the next turn.

``docs/CONTRACT.md``, "The bill, observed". From values the turn already read (the answers
on its page carry ``model_usage`` when the writer stores it), :func:`observe` gives the turn's
:class:`Observation`: the conversation's token calibration (:mod:`worker.caching.calibration`),
which cache entries are alive at the command's ``sent_at`` (:mod:`worker.caching.history`),
whether the cache is cold, whether the conversation's ``1h`` writes come back as ``5m``, and
the check of the newest answer's bill (:mod:`worker.caching.diagnosis`). Pure: no I/O, no
logging.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import pairwise

from worker.caching.bills import ExpectedPoint, ModelUsage
from worker.caching.calibration import Calibration, calibrate, prior
from worker.caching.clocks import NO_OFFSET, ClockOffset, reconcile
from worker.caching.diagnosis import CacheCheck, check
from worker.caching.history import (
    ALIVE_MARGIN,
    AnswerReplay,
    CacheHistory,
    Entry,
    is_prefix,
    replay,
)
from worker.caching.prices import LONGEST_TTL
from worker.memory.history_window import HistoryMessage

#: The answers on a page whose ``1h`` writes came back ``5m`` before ``1h`` is no longer
#: offered: two, so that one point the calibration misjudged near the minimum (not written
#: at all, rather than downgraded) does not end ``1h`` for the conversation.
DOWNGRADES_TO_STOP_1H = 2
#: The most a conversation's bills may raise the model's minimum: a calibration gone wrong
#: must not shut the cache.
MINIMUM_RAISE_CAP = 4


@dataclass(frozen=True, slots=True)
class Observation:
    """What a turn learns from the answers on its page.

    ``alive``: the entries alive at the command's ``sent_at`` (None: not known, the newest
    answer carries no bill or there is no ``sent_at``). ``cold``: every entry is dead by the
    evidence: the longest life the newest answer's call wrote or renewed has passed since it
    (on the producers' clock), or more than the longest TTL has; or, as without its bill, the
    newest question is more than the longest TTL older than ``sent_at`` (and the bills say
    nothing is alive). ``no_1h``: the model takes
    no ``1h``, or the conversation's ``1h`` writes came back ``5m``
    (:data:`DOWNGRADES_TO_STOP_1H` times on the page; only bills with ``cacheDetails`` say).
    ``min_tokens``: the model's minimum as the bills show it (a point that reached the
    configured one and wrote nothing raises it); ``spaced``: a point past a cached prefix
    reached it and did not write (each further checkpoint needs the minimum more). ``check``:
    the newest answer's bill against its own prompt, when the newest answer carries one.
    """

    calibration: Calibration = field(default_factory=Calibration)
    alive: tuple[Entry, ...] | None = None
    cold: bool = False
    no_1h: bool = False
    check: CacheCheck | None = None
    min_tokens: int = 0
    spaced: bool = False
    clock: ClockOffset = NO_OFFSET
    configured_min_tokens: int = 0

    def readable(self, shared: int, points: Sequence[ExpectedPoint]) -> int | None:
        """The longest prefix of the view whose points are ``points``, of at most ``shared``
        estimated tokens, alive in the cache; 0 for none; None when the bills do not say.
        Without ``points`` (nothing to match identities against) by length alone."""
        if self.alive is None:
            return None
        return max(
            (
                e.prefix
                for e in self.alive
                if e.prefix <= shared and (not points or is_prefix(e, points))
            ),
            default=0,
        )

    @property
    def raised(self) -> bool:
        """Whether the bills raised the model's minimum above the configured one."""
        return self.min_tokens > self.configured_min_tokens


NOTHING_OBSERVED = Observation()


def observe(
    usages: Sequence[ModelUsage],
    messages: Sequence[HistoryMessage],
    *,
    newest_answer_seq: int | None,
    sent_at: datetime | None,
    min_tokens: int,
    offers_1h: bool = True,
    model_prefix_tokens: int = 0,
) -> Observation:
    """The page's answers' bills (``usages``, newest first), its messages (newest first), the
    seq of its newest answer (billed or not), and the command's ``sent_at``: one clock
    reconciliation, one calibration and one replay of the bills, read by everything else."""
    newest_question = next((m for m in messages if m.role == "user"), None)
    asked = newest_question.created_at if newest_question is not None else None
    unbilled_cold = sent_at is not None and asked is not None and sent_at - asked > LONGEST_TTL
    if not usages:
        return Observation(
            calibration=prior(model_prefix_tokens),
            cold=unbilled_cold,
            no_1h=not offers_1h,
            min_tokens=min_tokens,
            configured_min_tokens=min_tokens,
        )
    clock = reconcile(usages, messages, sent_at)
    on_clock = [clock.on_producers_clock(usage) for usage in usages]
    calibration = calibrate(on_clock, prior_offset=model_prefix_tokens)
    history = replay(list(reversed(on_clock)), calibration, min_tokens=min_tokens)
    evidence = [a.unwritten for a in history.answers if a.unwritten is not None]
    working = min(max([min_tokens, *(e + 1 for e in evidence)]), MINIMUM_RAISE_CAP * min_tokens)
    newest = history.of(on_clock[0].seq) if on_clock[0].seq == newest_answer_seq else None
    alive: tuple[Entry, ...] | None = None
    cold = unbilled_cold
    if newest is not None and sent_at is not None and newest.usage.answered_at is not None:
        alive = history.alive_at(sent_at)
        since = sent_at - newest.usage.answered_at
        lives = timedelta(seconds=newest.lives)
        # Dead by the lives the newest call wrote or renewed, or by the longest life; or, as
        # without bills, the newest question more than the longest life ago and nothing alive.
        cold = (
            (newest.lives > 0 and since > lives + ALIVE_MARGIN)
            or since > LONGEST_TTL + ALIVE_MARGIN
            or (unbilled_cold and not alive)
        )
    downgrades = sum(a.downgraded for a in history.answers)
    return Observation(
        calibration=calibration,
        alive=alive,
        cold=cold,
        no_1h=not offers_1h or downgrades >= DOWNGRADES_TO_STOP_1H,
        check=(
            check(newest, _before(history, newest, messages), calibration, min_tokens=working)
            if newest is not None
            else None
        ),
        min_tokens=working,
        spaced=any(a.spaced for a in history.answers),
        clock=clock,
        configured_min_tokens=min_tokens,
    )


def _before(
    history: CacheHistory, answer: AnswerReplay, messages: Sequence[HistoryMessage]
) -> AnswerReplay | None:
    """The replayed answer just before ``answer``: the page's previous answer, when its bill
    is there (an answer stored without one between them leaves the previous prompt unknown)."""
    ordered = sorted(messages, key=lambda m: m.seq)
    earlier = [
        later.seq
        for first, later in pairwise(ordered)
        if first.role == "user" and later.role == "assistant" and later.seq < answer.usage.seq
    ]
    return history.of(earlier[-1]) if earlier else None
