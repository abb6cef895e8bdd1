"""The conversation's real tokens from the stage's estimate, learned from its bills.

Each bill pairs the stage's estimate of a prompt's view (``expected.prompt_tokens``) with the
prompt's real tokens (input + read + written), which include what the model stage puts before
the view (its system prompt and tools): ``real = offset + ratio x estimate``. The line is
fitted so that few bills cannot mislead it:

- **a prior**: before any bill, the offset is ``MODEL_PREFIX_TOKENS`` and the ratio 1; the
  fit is pulled towards them (the ratio firmly: tokenizers differ from ``chars/4`` by a fifth
  at most; the offset loosely, by as much as the setting says, so a wrong setting gives way),
  so one or two bills whose estimates barely differ move the offset, not the ratio;
- **bounds**: the ratio within :data:`RATIO_BOUNDS`, the offset never negative;
- **outliers rejected**: a bill far off the line of the others (by :data:`OUTLIER_SCALES`
  robust scales) is left out;
- **a reset**: when the newest bills sit together off the line of all the older ones (the
  model stage's prompt changed), the older ones are forgotten;
- **its error**: the fitted bills' root-mean-square error, relative to their real tokens.

Pure: plain values in, a :class:`Calibration` out.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from worker.caching.bills import ModelUsage

#: The answers the calibration is fitted on: about one page's.
CALIBRATION_SAMPLES = 12
#: The ratio's bounds: tokenizers read legal English at 3.4 to 4.7 characters a token.
RATIO_BOUNDS = (0.6, 1.6)
#: The prior's spread: the ratio's, and the offset's when MODEL_PREFIX_TOKENS is set (as much
#: as the setting itself, at least a few tokens: a setting the bills contradict must give way
#: within a bill or two) or not (wide: the bills decide).
RATIO_SPREAD = 0.25
OFFSET_SPREAD_SHARE = 1.0
OFFSET_SPREAD_MIN = 50.0
OFFSET_SPREAD_UNKNOWN = 20_000.0
#: A bill's own noise: a share of its real tokens, at least a few.
BILL_NOISE_SHARE = 0.01
BILL_NOISE_MIN = 10
#: A bill this many robust scales off the line is an outlier; the newest this many bills
#: off it together, the same way, are a reset.
OUTLIER_SCALES = 4.0
RESET_AFTER = 2


@dataclass(frozen=True, slots=True)
class Calibration:
    """Real tokens from the stage's estimate: ``offset + ratio * estimate``. ``samples``: the
    bills it was fitted on (0: the prior alone), ``rejected`` the outliers left out, ``reset``
    whether older bills were forgotten, ``error`` the fitted bills' relative RMS error."""

    ratio: float = 1.0
    offset: float = 0.0
    samples: int = 0
    rejected: int = 0
    reset: bool = False
    error: float = 0.0

    def tokens(self, estimate: int) -> int:
        return round(self.offset + self.ratio * estimate)


def prior(model_prefix_tokens: int) -> Calibration:
    """The calibration before any bill: the model stage's own prefix, a ratio of 1."""
    return Calibration(offset=float(model_prefix_tokens))


@dataclass(frozen=True, slots=True)
class _Sample:
    estimate: float
    real: float

    @property
    def weight(self) -> float:
        noise = max(BILL_NOISE_MIN, BILL_NOISE_SHARE * self.real)
        return 1.0 / (noise * noise)


def calibrate(usages: Sequence[ModelUsage], *, prior_offset: int = 0) -> Calibration:
    """The calibration from the answers (newest first) whose payload said what it expected."""
    samples = [
        _Sample(float(u.expected.prompt_tokens), float(u.prompt_tokens))
        for u in usages[:CALIBRATION_SAMPLES]
        if u.expected is not None and u.expected.prompt_tokens > 0 and u.prompt_tokens > 0
    ]
    if not samples:
        return prior(prior_offset)
    kept, reset = _since_reset(samples, prior_offset)
    ratio, offset = _fit(kept, prior_offset)
    scale = _robust_scale(kept, ratio, offset)
    inliers = [s for s in kept if abs(_residual(s, ratio, offset)) <= OUTLIER_SCALES * scale]
    if inliers and len(inliers) < len(kept):
        ratio, offset = _fit(inliers, prior_offset)
    fitted = inliers or kept
    error = math.sqrt(statistics.fmean((_residual(s, ratio, offset) / s.real) ** 2 for s in fitted))
    return Calibration(ratio, offset, len(fitted), len(kept) - len(fitted), reset, error)


def _since_reset(samples: Sequence[_Sample], prior_offset: int) -> tuple[list[_Sample], bool]:
    """The newest samples, cut where a jump of the offset left the older ones off their line:
    the newest :data:`RESET_AFTER` fitted alone, every older one off it the same way."""
    if len(samples) <= RESET_AFTER:
        return list(samples), False
    newest, older = samples[:RESET_AFTER], samples[RESET_AFTER:]
    ratio, offset = _fit(newest, prior_offset)
    scale = _robust_scale(samples, *_fit(samples, prior_offset))
    off = [_residual(s, ratio, offset) for s in older]
    same_way = all(r > 0 for r in off) or all(r < 0 for r in off)
    if same_way and all(abs(r) > OUTLIER_SCALES * scale for r in off):
        return list(newest), True
    return list(samples), False


def _fit(samples: Sequence[_Sample], prior_offset: int) -> tuple[float, float]:
    """The weighted least-squares line pulled towards the prior (a ratio of 1, the offset
    ``prior_offset``), within the bounds: (ratio, offset)."""
    offset_spread = (
        max(OFFSET_SPREAD_MIN, OFFSET_SPREAD_SHARE * prior_offset)
        if prior_offset > 0
        else OFFSET_SPREAD_UNKNOWN
    )
    pull_offset = 1.0 / (offset_spread * offset_spread)
    pull_ratio = 1.0 / (RATIO_SPREAD * RATIO_SPREAD)
    # The normal equations of: sum w (real - offset - ratio * estimate)^2
    #   + pull_offset (offset - prior_offset)^2 + pull_ratio (ratio - 1)^2.
    sw = sum(s.weight for s in samples) + pull_offset
    swe = sum(s.weight * s.estimate for s in samples)
    swee = sum(s.weight * s.estimate * s.estimate for s in samples) + pull_ratio
    swr = sum(s.weight * s.real for s in samples) + pull_offset * prior_offset
    swer = sum(s.weight * s.estimate * s.real for s in samples) + pull_ratio
    determinant = sw * swee - swe * swe
    ratio = (sw * swer - swe * swr) / determinant
    low, high = RATIO_BOUNDS
    if not low <= ratio <= high:
        ratio = min(high, max(low, ratio))
    offset = (swr - swe * ratio) / sw
    if offset < 0:  # no negative prefix: the ratio alone, refitted
        offset = 0.0
        ratio = min(high, max(low, swer / swee))
    return ratio, offset


def _residual(sample: _Sample, ratio: float, offset: float) -> float:
    return sample.real - (offset + ratio * sample.estimate)


def _robust_scale(samples: Sequence[_Sample], ratio: float, offset: float) -> float:
    """The residuals' spread, from their median absolute deviation, never below a bill's own
    noise (so that bills on one line exactly reject none)."""
    residuals = [_residual(s, ratio, offset) for s in samples]
    middle = statistics.median(residuals)
    mad = statistics.median(abs(r - middle) for r in residuals)
    noise = max(BILL_NOISE_MIN, BILL_NOISE_SHARE * statistics.median(s.real for s in samples))
    return max(1.4826 * mad, noise)
