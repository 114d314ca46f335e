"""Over HTTP, who is to blame when the speculative samples are not draws from the target's rows?

The one-sample tests of the speculative path read the target's single-token rows (re-scored on
the baseline server), but a correct speculative server samples from the rows verification
computes, in a batch. At a low temperature the small logit differences between the two become
visible. These tests simulate exactly that: rows verification sees = single-token rows + drift;
a correct sampler draws from the former, a greedy-ish one too but keeps the top token more often.
"""

from __future__ import annotations

import numpy as np
import pytest

from equiv.config import SamplingConfig
from equiv.verdicts.classify import classify_sampling, needs_batched_evidence
from equiv.verdicts.labels import Label
from equiv.verdicts.sampling_evidence import (
    _chain,
    analyze_prompt,
    batched_consistency,
    chain_pit,
    chain_sensitivity,
)

COOL = SamplingConfig(temp=0.2, top_k=40, top_p=0.95, min_p=0.05)
ALPHA = 0.01


def _draw(rng, row, sampling):
    ids, p = _chain(row, [], sampling)
    return int(ids[p > 0][rng.choice(np.count_nonzero(p), p=p[p > 0])])


def _records(rng, *, greedy=0.0, seeds=60, length=32, drift=0.25):
    """Seed records as a run over HTTP writes them, plus the batched re-scoring the runner asks
    for when the single-token tests reject (``batched_pit``, ``batched_sensitivity``)."""
    out = []
    for seed in range(1, seeds + 1):
        single = rng.standard_normal((length, 50)).astype(np.float32)
        single[:, 0] = single.max(axis=1) + rng.exponential(0.6, length)
        batched = (single + rng.normal(0, drift, single.shape)).astype(np.float32)
        base_tokens = [_draw(rng, row, COOL) for row in single]
        spec_tokens = []
        for row in batched:
            token = _draw(rng, row, COOL)
            if rng.random() < greedy:
                token = int(np.argmax(row))
            spec_tokens.append(token)
        out.append(
            {
                "key": f"s/p::seed{seed}",
                "baseline": {
                    "tokens": base_tokens,
                    "chain_pit": chain_pit(single, base_tokens, COOL),
                    "chain_sensitivity": chain_sensitivity(single, base_tokens, COOL),
                },
                "speculative": {
                    "tokens": spec_tokens,
                    "target_pit": chain_pit(single, spec_tokens, COOL),
                    "target_sensitivity": chain_sensitivity(single, spec_tokens, COOL),
                    "batched_pit": chain_pit(batched, spec_tokens, COOL),
                    "batched_sensitivity": chain_sensitivity(batched, spec_tokens, COOL),
                },
            }
        )
    return out


def _verdict(records, *, batched=True):
    analysis = analyze_prompt(records, alpha=ALPHA, has_logits=False)
    if batched and needs_batched_evidence(analysis):  # as the runner asks for it
        analysis["batched"] = {"tests": batched_consistency(records, alpha=ALPHA)}
    return analysis, classify_sampling(analysis, has_logits=False)


def test_drift_that_the_batched_rows_explain_is_numeric_drift():
    analysis, verdict = _verdict(_records(np.random.default_rng(3)))
    rejected = [t["name"] for t in analysis["tests"] if t["p_adjusted"] < ALPHA]
    assert any(name.endswith(":speculative") for name in rejected), rejected  # single-token
    assert needs_batched_evidence(analysis)
    assert verdict.label is Label.NUMERIC_DRIFT, verdict.reason
    assert "batched rows" in verdict.reason
    assert verdict.evidence["batched"]["rejected"] == []


def test_a_greedy_sampler_is_a_sampler_bug_against_batched_rows_too():
    _, verdict = _verdict(_records(np.random.default_rng(4), greedy=0.3))
    assert verdict.label is Label.SAMPLER_BUG, verdict.reason
    assert "numeric drift does not explain it" in verdict.reason
    assert verdict.evidence["batched"]["rejected"]


def test_without_batched_evidence_a_rejection_stays_a_sampler_bug_and_says_why():
    _, verdict = _verdict(_records(np.random.default_rng(3)), batched=False)
    assert verdict.label is Label.SAMPLER_BUG
    assert "could not be checked" in verdict.reason


@pytest.mark.parametrize("seed", [5, 6])
def test_no_drift_and_a_correct_sampler_is_no_rejection(seed):
    analysis, verdict = _verdict(_records(np.random.default_rng(seed), drift=0.0))
    assert verdict.label in (Label.EQUIVALENT, Label.INCONCLUSIVE), verdict.reason
    assert not [t for t in analysis["tests"] if t["p_adjusted"] < ALPHA]
    assert not needs_batched_evidence(analysis)
    assert "batched" not in analysis
