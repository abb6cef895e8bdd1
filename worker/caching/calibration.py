"""The conversation's real tokens from the stage's estimate, learned from its bills: observed
prompt tokens (input + read + written) against the estimate of the same prompt, with the model
stage's fixed system-prompt offset."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from worker.caching.bills import ModelUsage

#: The answers the calibration is fitted on: about one page's.
CALIBRATION_SAMPLES = 12


@dataclass(frozen=True, slots=True)
class Calibration:
    """Real tokens from the stage's estimate: ``offset + ratio * estimate`` (the offset is the
    model stage's own system prompt, before every prefix). ``samples`` 0: none observed,
    the estimate stands."""

    ratio: float = 1.0
    offset: float = 0.0
    samples: int = 0

    def tokens(self, estimate: int) -> int:
        if self.samples == 0:
            return estimate
        return round(self.offset + self.ratio * estimate)


#: The estimates' spread, relative to their mean, from which an offset is fitted beside the
#: ratio: closer together, the two cannot be told apart and the ratio alone is used.
_FIT_SPREAD = 0.2


def calibrate(usages: Sequence[ModelUsage]) -> Calibration:
    """The calibration from the answers (newest first) whose payload said what it expected:
    a least-squares line through (estimate, observed prompt tokens) when the estimates
    spread enough to tell an offset from a ratio, else the ratio of their sums."""
    pairs = [
        (float(u.expected.prompt_tokens), float(u.prompt_tokens))
        for u in usages[:CALIBRATION_SAMPLES]
        if u.expected is not None and u.expected.prompt_tokens > 0 and u.prompt_tokens > 0
    ]
    if not pairs:
        return Calibration()
    estimates = [e for e, _ in pairs]
    mean_e = sum(estimates) / len(pairs)
    mean_o = sum(o for _, o in pairs) / len(pairs)
    spread = max(estimates) - min(estimates)
    if len(pairs) >= 2 and spread >= _FIT_SPREAD * mean_e:
        var = sum((e - mean_e) ** 2 for e in estimates)
        ratio = sum((e - mean_e) * (o - mean_o) for e, o in pairs) / var
        offset = mean_o - ratio * mean_e
        if ratio > 0 and offset >= 0:
            return Calibration(ratio, offset, len(pairs))
    return Calibration(mean_o / mean_e, 0.0, len(pairs))
