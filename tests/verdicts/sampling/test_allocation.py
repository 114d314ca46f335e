"""Where a sequential run spends its next seeds (`equiv.verdicts.sampling.allocation`), on
simulated prompts through the real sampler chain: prompts whose rows spread their mass carry
the temperature's information; prompts whose top token is all but certain carry none.

Seeded numpy draws: the same samples on every machine, no near-tie involved.
"""

import dataclasses

import numpy as np
import pytest
from simulated_chain import sample_path

from equiv.config import SamplingConfig
from equiv.verdicts.sampling.allocation import (
    MIN_SHARE,
    information,
    information_per_token,
    informative,
)
from equiv.verdicts.sampling.samples import Sample

SAMPLING = SamplingConfig(temp=0.8, top_k=0, top_p=1.0, min_p=0.0)
VOCAB = 16


def _path(rng, logits, n=24):
    return sample_path(rng, logits, n, SAMPLING)


def _prompt(index, certain, seeds=4):
    """A prompt whose logits spread the mass over the vocabulary, or (``certain``) leave one
    token of each row 30 nats ahead of the rest, all but all the mass."""
    rng = np.random.default_rng([index, 7])
    logits = rng.normal(0.0, 1.5, size=(VOCAB, VOCAB))
    if certain:
        logits[np.arange(VOCAB), rng.integers(0, VOCAB, VOCAB)] += 30.0
    logits = logits.astype(np.float32)
    key = f"sim/p{index}"
    return key, [
        Sample(f"{key}::sampling::seed{s}", _path(rng, logits), _path(rng, logits))
        for s in range(seeds)
    ]


@pytest.fixture(scope="module")
def mixed():
    """Two prompts that can tell something, six that cannot."""
    return dict(_prompt(i, certain=i >= 2) for i in range(8))


def test_information_per_token_is_near_zero_where_the_top_token_is_certain(mixed):
    rates = {key: information_per_token(s, "chain_pit") for key, s in mixed.items()}
    assert min(rates["sim/p0"], rates["sim/p1"]) > 0.05
    for key in list(mixed)[2:]:
        assert rates[key] < 1e-3 * rates["sim/p0"], rates
    total, tokens = information(mixed["sim/p0"], "chain_pit")
    assert tokens == 4 * 24  # the placebo's tokens: 4 seeds x 24
    assert total / tokens == rates["sim/p0"]


def test_the_next_round_goes_to_the_prompts_that_carry_the_information(mixed):
    chosen = informative(mixed, has_logits=True)
    # the two informative prompts tell far more per token than the run's mean; a quarter of 8
    # is 2
    assert MIN_SHARE * len(mixed) == 2
    assert chosen == {"sim/p0", "sim/p1"}


def test_at_least_a_share_of_the_prompts_keeps_sampling():
    one = dict(_prompt(i, certain=i > 0) for i in range(8))
    chosen = informative(one, has_logits=True)
    assert "sim/p0" in chosen
    assert len(chosen) == 2  # MIN_SHARE of 8, though one prompt carries nearly all


def test_the_chosen_tell_at_least_the_runs_mean_per_token_and_the_others_less():
    alike = dict(_prompt(i, certain=False) for i in range(8))
    chosen = informative(alike, has_logits=True)
    found = [information(s, "chain_pit") for s in alike.values()]
    mean = sum(i for i, _ in found) / sum(n for _, n in found)
    rates = {key: information_per_token(s, "chain_pit") for key, s in alike.items()}
    assert 2 <= len(chosen) < 8
    assert all(rates[key] >= mean for key in chosen)
    assert all(rates[key] < mean for key in set(alike) - chosen)


def test_the_choice_reads_the_placebo_alone(mixed):
    """The speculative samples (what the tests judge) do not move the choice: swapping every
    prompt's speculative samples for another prompt's leaves it as it was."""
    keys = list(mixed)
    swapped = {
        key: [
            dataclasses.replace(s, speculative=other.speculative)
            for s, other in zip(mixed[key], mixed[keys[-1 - i]], strict=True)
        ]
        for i, key in enumerate(keys)
    }
    assert informative(swapped, has_logits=True) == informative(mixed, has_logits=True)


def test_every_prompt_keeps_sampling_where_the_rows_derivatives_are_missing(mixed):
    """Records written before equiv kept the sensitivities, or not re-scored: nothing to
    choose by, so nothing is paused."""
    old = dict(mixed)
    old["sim/p5"] = [
        dataclasses.replace(s, baseline=dataclasses.replace(s.baseline, sensitivities={}))
        for s in mixed["sim/p5"]
    ]
    assert information_per_token(old["sim/p5"], "chain_pit") is None
    assert informative(old, has_logits=True) == set(mixed)
    assert informative(mixed, has_logits=False) == set(mixed)  # no target_pit re-scored
