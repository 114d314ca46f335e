"""Per-token evidence and the per-prompt tests of sampling mode, on rows with known answers."""

import numpy as np
import pytest

from equiv.classify import classify_sampling
from equiv.config import SamplingConfig
from equiv.distribution import analyze_prompt, chain_pit
from equiv.sampling import chain_probs, pit_position
from equiv.verdict import Label


def test_chain_pit_matches_the_full_vocabulary_computation():
    rng = np.random.default_rng(1)
    rows = (rng.normal(size=(12, 5000)) * 3).astype(np.float32)
    rows[3, 5] = rows[3, 9] = rows[3].max()  # a tie at the top, broken by id
    sampling = SamplingConfig(temp=0.8, top_k=40, top_p=0.9, min_p=0.05)
    tokens = [int(np.argsort(-r)[i % 5]) for i, r in enumerate(rows)]
    tokens[4] = int(np.argsort(-rows[4])[-1])  # the least likely token: outside the top-k
    pits = chain_pit(rows, tokens, sampling)
    for row, token, (mass, p, p_top) in zip(rows, tokens, pits, strict=True):
        probs = chain_probs(row, temp=0.8, top_k=40, top_p=0.9, min_p=0.05)
        want_mass, want_p = pit_position(probs, token)
        assert mass == pytest.approx(want_mass, abs=1e-7)
        assert p == pytest.approx(want_p, abs=1e-7)
        assert p_top == pytest.approx(float(probs.max()), abs=1e-7)


def _records(rng, biased: bool, seeds: int = 40, length: int = 30):
    """Seed records whose speculative tokens are drawn from their stated distributions, or
    with a greedy bias (the top token emitted more often than its probability)."""
    out = []
    for seed in range(seeds):
        paths = {}
        for path in ("baseline", "speculative"):
            pits, tokens = [], []
            for _ in range(length):
                probs = rng.dirichlet(np.full(6, 0.7))
                token = int(rng.choice(6, p=probs))
                if biased and path == "speculative" and rng.random() < 0.4:
                    token = int(np.argmax(probs))
                mass, p = pit_position(probs, token)
                pits.append([mass, p, float(probs.max())])
                tokens.append(token)
            paths[path] = {"tokens": tokens, "chain_pit": pits}
        out.append({"key": f"s/p::seed{seed + 1}", **paths})
    return out


def test_a_greedy_bias_is_a_sampler_bug_and_honest_draws_are_not():
    rng = np.random.default_rng(7)
    honest = analyze_prompt(_records(rng, biased=False), alpha=0.01)
    biased = analyze_prompt(_records(rng, biased=True), alpha=0.01)
    assert classify_sampling(honest).label is not Label.SAMPLER_BUG
    verdict = classify_sampling(biased)
    assert verdict.label is Label.SAMPLER_BUG
    assert "speculative" in verdict.reason


def test_too_few_tokens_is_inconclusive_and_says_how_many_more():
    rng = np.random.default_rng(3)
    analysis = analyze_prompt(_records(rng, biased=False, seeds=3, length=10), alpha=0.01)
    verdict = classify_sampling(analysis)
    assert verdict.label is Label.INCONCLUSIVE
    assert "tokens would reach" in verdict.reason


def test_every_test_is_holm_adjusted_within_the_prompt():
    rng = np.random.default_rng(5)
    analysis = analyze_prompt(_records(rng, biased=False, seeds=10), alpha=0.01)
    for test in analysis["tests"]:
        assert test["p_adjusted"] >= test["p_value"]
    assert {t["name"] for t in analysis["tests"]} >= {
        "sampler-consistency:speculative",
        "top-token:speculative",
        "first-token:two-sample",
    }
