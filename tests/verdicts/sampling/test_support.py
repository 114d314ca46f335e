"""The support test: which tokens outside the chain's support rounding could explain, and the
binomial tests of the two counts (`equiv.verdicts.sampling.support`)."""

from __future__ import annotations

import numpy as np
import pytest

from equiv.config import SamplingConfig
from equiv.engines.chain import chain_distribution
from equiv.verdicts.sampling.support import (
    FAR_TOLERANCE,
    LOGIT_SLACK,
    MASS_SLACK,
    beyond_rounding,
    far_outside,
    support_against_rows,
    support_vs_placebo,
)

ALPHA = 0.005


def _inside(row, token, sampling):
    ids, probs = chain_distribution(np.asarray(row, dtype=np.float32), [], sampling)
    return bool(np.any((ids == token) & (probs > 0)))


def test_a_token_just_past_top_k_is_rounding_one_well_past_it_is_not():
    sampling = SamplingConfig(temp=0.8, top_k=2, top_p=1.0, min_p=0.0)
    row = [5.0, 4.0, 4.0 - LOGIT_SLACK / 4, 1.0]
    assert not _inside(row, 2, sampling)
    assert not _inside(row, 3, sampling)
    assert not beyond_rounding(np.float32(row), [], 2, sampling)  # a hair below the 2nd
    assert beyond_rounding(np.float32(row), [], 3, sampling)


def test_a_token_at_min_ps_threshold_within_rounding_is_not_beyond_it():
    sampling = SamplingConfig(temp=0.8, top_k=0, top_p=1.0, min_p=0.1)
    cut = float(np.log(0.1))  # min-p keeps logits >= max + log(min_p)
    row = [0.0, cut - LOGIT_SLACK / 2, cut - 3 * LOGIT_SLACK, -9.0]
    assert not any(_inside(row, t, sampling) for t in (1, 2, 3))
    assert [beyond_rounding(np.float32(row), [], t, sampling) for t in (1, 2, 3)] == [
        False,
        True,
        True,
    ]


def test_a_token_at_top_ps_boundary_within_rounding_is_not_beyond_it():
    """Top-p keeps the most probable tokens until their mass reaches ``top_p``: the next token
    is outside, but within `MASS_SLACK` of the cut it is rounding's."""
    probs = np.array([0.5, 0.3, 0.15, 0.05])
    row = np.log(probs).astype(np.float32)
    at = SamplingConfig(temp=1.0, top_k=0, top_p=0.8 - MASS_SLACK / 2, min_p=0.0)
    far = SamplingConfig(temp=1.0, top_k=0, top_p=0.5, min_p=0.0)
    assert not _inside(row, 2, at)
    assert not _inside(row, 2, far)
    assert not beyond_rounding(row, [], 2, at)
    assert beyond_rounding(row, [], 2, far)


def test_a_token_tied_with_top_ks_last_but_ranked_after_it_is_rounding():
    """Top-k keeps ties at its boundary by id; an engine may order a tie either way."""
    sampling = SamplingConfig(temp=0.8, top_k=2, top_p=1.0, min_p=0.0)
    row = np.float32([5.0, 4.0, 4.0, 1.0])
    assert not _inside(row, 2, sampling)
    assert not beyond_rounding(row, [], 2, sampling)


def test_a_token_the_engines_row_gives_no_logit_is_beyond_rounding():
    sampling = SamplingConfig(temp=0.8)
    row = np.array([3.0, 2.0, -np.inf, 1.0], dtype=np.float32)
    assert beyond_rounding(row, [], 2, sampling)


def test_far_outside_runs_the_chain_again_only_where_the_token_had_probability_0():
    sampling = SamplingConfig(temp=0.8, top_k=2, top_p=1.0, min_p=0.0)
    rows = np.float32([[5.0, 4.0, 0.0], [5.0, 4.0, 0.0], [5.0, 4.0, 4.0 - LOGIT_SLACK / 4]])
    # position 0's token is beyond rounding under its row, but its entry says it was inside
    pits = [[1.0, 0.2, 0.6], [1.0, 0.0, 0.6], [1.0, 0.0, 0.6]]
    assert far_outside(rows, [2, 2, 2], pits, sampling) == [1]


def test_under_typical_p_nothing_is_counted_beyond_rounding():
    """Typical-p ranks by the distance from the entropy: a tie there is cut by id, and raising
    the token's logit does not bring it back, so no loosening bounds rounding."""
    sampling = SamplingConfig(temp=0.8, top_k=0, top_p=1.0, min_p=0.0, typical_p=0.3)
    row = np.float32([2.0, 2.0, 0.5, -1.0])
    assert not _inside(row, 1, sampling)
    assert far_outside(row[None, :], [1], [[1.0, 0.0, 0.5]], sampling) is None


def test_the_support_test_against_rows_is_the_binomial_at_the_tolerance():
    assert support_against_rows(0, 500, alpha=ALPHA).p_value == 1.0
    p_two = support_against_rows(2, 500, alpha=ALPHA, tolerance=0.001).p_value
    assert p_two == pytest.approx(1 - 0.999**500 - 500 * 0.001 * 0.999**499)
    assert support_against_rows(0, 0, alpha=ALPHA).p_value == 1.0


def test_one_token_beyond_rounding_convicts_a_run_of_a_few_hundred_tokens():
    """At 1e-4 a token one outside in 500 is p 0.049; beyond rounding it is 2 x 500 x 1e-6."""
    count_only = support_against_rows(1, 500, alpha=ALPHA)
    assert not count_only.rejects
    one_far = support_against_rows(1, 500, alpha=ALPHA, far=(1, 500))
    assert one_far.p_value == pytest.approx(2 * (1 - (1 - FAR_TOLERANCE) ** 500))
    assert one_far.rejects
    # none beyond rounding: the count's p-value, doubled for the test of the two
    none_far = support_against_rows(1, 500, alpha=ALPHA, far=(0, 500))
    assert none_far.p_value == pytest.approx(min(1.0, 2 * count_only.p_value))
    assert "0 of them beyond rounding" in none_far.detail
    # counted on part of the run (older records beside newer): over the tokens counted
    part = support_against_rows(1, 500, alpha=ALPHA, far=(1, 100))
    assert part.p_value == pytest.approx(2 * (1 - (1 - FAR_TOLERANCE) ** 100))


@pytest.mark.parametrize(
    ("outside", "tokens", "far"),
    [(3, 2, None), (1, 500, (2, 500)), (2, 500, (1, 0)), (-1, 5, None)],
)
def test_counts_out_of_order_are_refused_naming_them(outside, tokens, far):
    with pytest.raises(ValueError, match="support counts out of order"):
        support_against_rows(outside, tokens, alpha=ALPHA, far=far)


def test_support_violations_are_an_exact_test_of_the_two_paths_counts():
    assert support_vs_placebo((0, 4000), (0, 4000), alpha=ALPHA).p_value == 1.0
    five = support_vs_placebo((5, 4000), (0, 4000), alpha=ALPHA)
    assert five.p_value == pytest.approx(0.5**5)  # all 5 on one path of two equal halves
    assert not five.rejects  # 0.031 > 0.005
    assert support_vs_placebo((12, 4000), (0, 4000), alpha=ALPHA).rejects
    assert not support_vs_placebo((0, 4000), (12, 4000), alpha=ALPHA).rejects  # one-sided
