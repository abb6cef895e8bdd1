"""The bill, observed: what a conversation's stored answers teach the next turn.

``../shared/CONTRACT.md``, "The bill, observed". From values the turn already read (the answers
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
from datetime import datetime

from worker.caching.bills import ModelUsage
from worker.caching.calibration import Calibration, calibrate
from worker.caching.diagnosis import CacheCheck, check
from worker.caching.history import alive_prefixes, replay
from worker.caching.prices import LONGEST_TTL

#: The answers on a page whose ``1h`` writes came back ``5m`` before ``1h`` is no longer
#: offered: two, so that one point the calibration misjudged near the minimum (not written
#: at all, rather than downgraded) does not end ``1h`` for the conversation.
DOWNGRADES_TO_STOP_1H = 2


@dataclass(frozen=True, slots=True)
class Observation:
    """What a turn learns from the answers on its page.

    ``alive``: the prefixes (estimated tokens) whose entries are alive at the command's
    ``sent_at`` (None: not known, the newest answer carries no bill or there is no
    ``sent_at``). ``cold``: every entry is dead (none is alive by the bills, and the newest
    answer's prompt made some, or the newest question is over an hour older than
    ``sent_at``; without bills, the latter alone). ``no_1h``: the conversation's
    ``1h`` writes came back as ``5m`` (:data:`DOWNGRADES_TO_STOP_1H` times on the page).
    """

    calibration: Calibration = field(default_factory=Calibration)
    alive: tuple[int, ...] | None = None
    cold: bool = False
    no_1h: bool = False
    check: CacheCheck | None = None

    def readable(self, shared: int) -> int | None:
        """The longest prefix of at most ``shared`` estimated tokens alive in the cache, 0
        for none; None when the bills do not say."""
        if self.alive is None:
            return None
        return max((prefix for prefix in self.alive if prefix <= shared), default=0)


NOTHING_OBSERVED = Observation()


def observe(
    usages: Sequence[ModelUsage],
    *,
    newest_answer_seq: int | None,
    newest_question_at: datetime | None,
    sent_at: datetime | None,
    min_tokens: int,
) -> Observation:
    """The page's answers' bills (``usages``, newest first), the seq of its newest answer
    (observed or not), when its newest question was asked, and the command's ``sent_at``."""
    unbilled_cold = (
        sent_at is not None
        and newest_question_at is not None
        and sent_at - newest_question_at > LONGEST_TTL
    )
    if not usages:
        return Observation(cold=unbilled_cold)
    calibration = calibrate(usages)
    alive: tuple[int, ...] | None = None
    cold = unbilled_cold
    if usages[0].seq == newest_answer_seq and sent_at is not None:
        alive, made = alive_prefixes(usages, sent_at, calibration, min_tokens=min_tokens)
        cold = not alive and (made or unbilled_cold)
    downgrades: frozenset[int] = frozenset()
    times = [usage.answered_at for usage in usages if usage.answered_at is not None]
    if times:
        timed = [usage for usage in usages if usage.answered_at is not None]
        downgrades = replay(
            list(reversed(timed)), max(times), calibration, min_tokens=min_tokens
        ).downgraded
    return Observation(
        calibration=calibration,
        alive=alive,
        cold=cold,
        no_1h=len(downgrades) >= DOWNGRADES_TO_STOP_1H,
        check=check(usages[0], usages[1:], calibration, min_tokens=min_tokens),
    )
