"""The score test of the effective temperature, on draws whose distribution is known exactly.

Each simulated "sample" is a sequence of positions with random logits; tokens are drawn from
the chain's distribution (H0), from a colder or hotter one, or by a greedy-ish sampler that
takes the top token with some probability. False positives are counted over independent runs.
"""

from __future__ import annotations

import numpy as np
import pytest

from equiv.config import SamplingConfig
from equiv.verdicts.sampling_evidence import chain_score
from equiv.verdicts.stats import temperature_score_test

ALPHA = 0.01
SAMPLING = SamplingConfig(temp=0.8, top_k=40, top_p=0.95, min_p=0.05)


def _draws(rng, n, *, temp_factor=1.0, greedy=0.0):
    """n positions of 200-token rows with a realistic spread; tokens drawn at the stated
    temperature x temp_factor, replaced by the top token with probability ``greedy``."""
    rows = (rng.standard_normal((n, 200)) * 2.5).astype(np.float32)
    tokens = []
    for row in rows:
        # the chain's distribution at the stated temperature, via the same chain equiv uses
        logits = row.astype(np.float64)
        top = np.argsort(-logits)[: SAMPLING.top_k]
        z = logits[top] / (SAMPLING.temp * temp_factor)
        p = np.exp(z - z.max())
        p /= p.sum()
        x = int(top[rng.choice(top.size, p=p)])
        if rng.random() < greedy:
            x = int(top[0])
        tokens.append(x)
    return rows, tokens


def _test(rng, n, **fault):
    rows, tokens = _draws(rng, n, **fault)
    arr = np.asarray(chain_score(rows, tokens, SAMPLING), dtype=np.float64)
    arr = arr[arr[:, 2] > 0]
    return temperature_score_test(arr[:, 0], arr[:, 1], alpha=ALPHA)


def test_false_positive_rate_is_at_most_alpha_over_independent_runs():
    rng = np.random.default_rng(2026)
    runs = 400
    rejected = sum(_test(rng, 200).rejects for _ in range(runs))
    # alpha 0.01 over 400 runs: 4 expected; P(X >= 12 | Bin(400, 0.01)) < 0.001
    assert rejected < 12, f"{rejected} of {runs} correct runs rejected at alpha {ALPHA}"


# fault, runs of 200 tokens (out of 50) that must reject; measured on this simulation: a
# greedy-ish sampler taking the top token 30% of the time is found in ~70% of runs of 200
# tokens, at 50% in all; a temperature off by 2x either way in all.
@pytest.mark.parametrize(
    ("fault", "at_least"),
    [
        ({"greedy": 0.3}, 25),
        ({"greedy": 0.5}, 45),
        ({"temp_factor": 0.5}, 45),
        ({"temp_factor": 2.0}, 45),
    ],
)
def test_each_fault_is_found_within_200_tokens(fault, at_least):
    rng = np.random.default_rng(11)
    found = sum(_test(rng, 200, **fault).rejects for _ in range(50))
    assert found >= at_least, f"{fault}: rejected in {found} of 50 runs of 200 tokens"


def test_direction_and_power_are_reported():
    rng = np.random.default_rng(5)
    colder = _test(rng, 200, temp_factor=0.5)
    hotter = _test(rng, 200, temp_factor=2.0)
    assert colder.statistic > 0
    assert hotter.statistic < 0
    assert "colder" in colder.detail
    assert 0 < colder.power <= 1


def test_near_certain_tokens_give_no_test():
    result = temperature_score_test([0.0] * 50, [0.001] * 50, alpha=ALPHA)
    assert not result.rejects
    assert "near-certain" in result.detail


def test_a_token_outside_the_chain_support_is_left_to_the_pit():
    row = np.array([10.0, 9.0, -50.0, -60.0], dtype=np.float32)
    (entry,) = chain_score(row[None, :], [3], SAMPLING)
    assert entry == [0.0, 0.0, 0.0]
