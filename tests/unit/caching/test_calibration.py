"""The calibration: real tokens from the stage's estimate, learned from the bills without being
misled by few of them: a prior (MODEL_PREFIX_TOKENS, a ratio of 1), bounds, outliers left out,
a reset when the model stage's prefix jumps, and its own measured error.

Each bill is made on an exact line (``real = offset + ratio x estimate``) unless a case says
otherwise, so the figures expected are the line's own."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from worker.caching.bills import CacheExpectation, ExpectedPoint, ModelUsage
from worker.caching.calibration import (
    CALIBRATION_SAMPLES,
    RATIO_BOUNDS,
    Calibration,
    calibrate,
    prior,
)

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def billed(seq: int, estimate: int, real: int) -> ModelUsage:
    """An answer whose prompt the stage estimated at ``estimate`` and Bedrock billed ``real``."""
    expected = CacheExpectation(estimate, 0, (ExpectedPoint("5m", estimate - 50),))
    return ModelUsage(seq, real, 0, 0, 0, 0, T0, f"c-{seq}", expected)


def on_line(estimates: list[int], *, offset: float, ratio: float) -> list[ModelUsage]:
    """Bills on the line, newest first (the first estimate is the newest answer's)."""
    n = len(estimates)
    return [billed(2 * (n - i), e, round(offset + ratio * e)) for i, e in enumerate(estimates)]


def test_without_bills_the_prior_stands_and_without_a_prior_the_estimate() -> None:
    assert calibrate([]) == Calibration() == prior(0)
    assert Calibration().tokens(1_234) == 1_234
    assert calibrate([], prior_offset=2_500).tokens(1_234) == 3_734
    unexpected = ModelUsage(2, 1_500, 0, 0, 0, 0, T0)  # an answer whose payload had no cache
    assert calibrate([unexpected]) == Calibration()


def test_one_bill_over_its_estimate_moves_the_offset_not_the_ratio() -> None:
    """GIVEN one bill of 4,000 estimated tokens billed 6,500 (a 2,500-token model stage
    prompt), THEN the calibration says 2,500 + 1.0 x estimate: one bill cannot tell a prefix
    from a tokenizer, and tokenizers differ little; the ratio it used to fold the prefix into
    (1.625 here) would put a 1,000-token prefix at 1,625 real tokens instead of 3,500."""
    calibration = calibrate([billed(2, 4_000, 6_500)])
    assert calibration.ratio == pytest.approx(1.0, abs=0.01)
    assert calibration.offset == pytest.approx(2_500, abs=40)
    assert calibration.tokens(1_000) == pytest.approx(3_500, abs=40)


def test_one_bill_under_its_estimate_lowers_the_ratio_never_the_offset_below_zero() -> None:
    """chars/4 overcounts a tokenizer of 4.68 characters a token: 1,000 estimated, 855 real."""
    calibration = calibrate([billed(2, 1_000, 855)])
    assert calibration.offset == 0.0
    assert calibration.ratio == pytest.approx(0.855, abs=0.01)


def test_bills_that_spread_give_back_the_line_they_were_made_on() -> None:
    usages = on_line([3_000, 2_200, 1_500, 1_000], offset=300, ratio=1.1)
    calibration = calibrate(usages)
    assert calibration.ratio == pytest.approx(1.1, abs=0.01)
    assert calibration.offset == pytest.approx(300, abs=15)
    assert (calibration.samples, calibration.rejected, calibration.reset) == (4, 0, False)
    assert calibration.error < 0.005


def test_the_prior_holds_the_offset_the_deployment_named_until_the_bills_say_otherwise() -> None:
    """With MODEL_PREFIX_TOKENS = 2,500 a bill billed exactly on it changes nothing; bills
    that spread, made with 2,000, move the offset there."""
    on_prior = calibrate([billed(2, 4_000, 6_500)], prior_offset=2_500)
    assert on_prior.offset == pytest.approx(2_500, abs=1)
    assert on_prior.ratio == pytest.approx(1.0, abs=0.001)
    moved = calibrate(
        on_line([4_000, 3_000, 2_000, 1_500, 1_000, 800], offset=2_000, ratio=1.0),
        prior_offset=2_500,
    )
    assert moved.offset == pytest.approx(2_000, abs=60)


def test_a_setting_the_bills_contradict_gives_way_at_the_first_bill() -> None:
    """GIVEN MODEL_PREFIX_TOKENS = 2,500 while the model stage puts 60 tokens before the view
    and its tokenizer reads 4.68 characters a token (chars / 4 overcounts by 17%), WHEN one
    bill arrives, THEN the calibration counts a 4,000-token estimate as the model does (60 +
    4,000 / 1.17 = 3,479) to 1%, its ratio near the tokenizer's: a prior held as firmly as a
    quarter of the setting pinned the ratio at its lower bound and undercounted by 7%, and
    then kept points as cacheable that the model put below its minimum."""
    real = 60 + 4_000 / 1.17
    for estimates in ([3_000], [3_000, 2_800]):
        calibration = calibrate(on_line(estimates, offset=60, ratio=1 / 1.17), prior_offset=2_500)
        assert calibration.tokens(4_000) == pytest.approx(real, rel=0.01)
        assert calibration.ratio == pytest.approx(1 / 1.17, abs=0.05)


def test_only_the_newest_bills_are_fitted() -> None:
    newest = [billed(100 - i, 2_000 + 100 * i, 2_000 + 100 * i) for i in range(CALIBRATION_SAMPLES)]
    older = [billed(50 - i, 2_000, 4_000) for i in range(5)]
    calibration = calibrate([*newest, *older])
    assert calibration.samples == CALIBRATION_SAMPLES
    assert calibration.tokens(2_000) == pytest.approx(2_000, abs=10)


def test_a_bill_far_off_the_line_of_the_others_is_left_out() -> None:
    usages = on_line([3_000, 2_600, 2_200, 1_800, 1_400, 1_000], offset=300, ratio=1.0)
    usages[3] = billed(usages[3].seq, 1_800, 9_000)  # a writer's slip
    calibration = calibrate(usages)
    assert (calibration.samples, calibration.rejected) == (5, 1)
    assert calibration.tokens(2_000) == pytest.approx(2_300, abs=15)


def test_a_jump_of_the_model_stages_prompt_resets_the_calibration_to_the_bills_since() -> None:
    """GIVEN six bills with a 300-token model stage prompt, then two with a 1,300-token one
    (the model stage changed its prompt), THEN the calibration is the new line's."""
    before = on_line([3_000, 2_600, 2_200, 1_800, 1_400, 1_000], offset=300, ratio=1.0)
    after = [billed(20, 3_400, 4_700), billed(18, 3_200, 4_500)]
    calibration = calibrate([*after, *before])
    assert calibration.reset
    assert calibration.samples == 2
    assert calibration.tokens(3_300) == pytest.approx(4_600, abs=30)


def test_the_ratio_stays_within_its_bounds_whatever_the_bills() -> None:
    low, high = RATIO_BOUNDS
    assert calibrate([billed(2, 2_000, 100)]).ratio == pytest.approx(low)
    steep = on_line([3_000, 2_000, 1_000], offset=0, ratio=3.0)
    assert calibrate(steep).ratio == pytest.approx(high)
