"""Over HTTP, who is to blame when the speculative samples differ from the placebo?

Both paths' samples are scored under the target's single-token rows re-scored on the baseline
server; a correct speculative server samples from the rows verification computes, in a batch, and
re-scoring is itself off by a little. These tests simulate exactly that: rows verification sees =
single-token rows + drift; re-scored rows = the rows sampled from + the instrument's error; a
correct sampler draws from its rows, a greedy-ish one keeps the top token more often.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from equiv.config import SamplingConfig
from equiv.engines.chain import chain_distribution
from equiv.records.verdict import Label
from equiv.verdicts.sampling.analysis_record import BatchedEvidence
from equiv.verdicts.sampling.pit_tests import batched_vs_placebo
from equiv.verdicts.sampling.prompt_analysis import analyze
from equiv.verdicts.sampling.samples import Sample
from equiv.verdicts.sampling.token_evidence import chain_pit, chain_sensitivity
from equiv.verdicts.sampling.verdict import MIN_POWER, classify_sampling, needs_batched_evidence
from equiv.verdicts.verdict_evidence import PowerEvidence, SamplingEvidence

COOL = SamplingConfig(temp=0.2, top_k=40, top_p=0.95, min_p=0.05)
ALPHA = 0.01


def _draw(rng, row, sampling):
    ids, p = chain_distribution(row, [], sampling)
    return int(ids[p > 0][rng.choice(np.count_nonzero(p), p=p[p > 0])])


def _records(rng, *, greedy=0.0, seeds=60, length=32, drift=0.25, instrument=0.0):
    """Seed records as a run over HTTP writes them (each path's sample re-scored single-token,
    ``target_pit``), plus the batched re-scoring the runner asks for when the comparison with
    the placebo rejects (``batched_pit``). ``instrument``: the re-scoring's own error (logits)."""
    out = []

    def scored(rows, tokens, key):
        return {
            f"{key}_pit": chain_pit(rows, tokens, COOL),
            f"{key}_sensitivity": chain_sensitivity(rows, tokens, COOL),
        }

    for seed in range(1, seeds + 1):
        single = rng.standard_normal((length, 50)).astype(np.float32)
        single[:, 0] = single.max(axis=1) + rng.exponential(0.6, length)
        batched = (single + rng.normal(0, drift, single.shape)).astype(np.float32)
        # each path's sample is re-scored by its own requests: its own instrument error
        rescored, rescored_placebo, rescored_batched = (
            (rows + rng.normal(0, instrument, single.shape)).astype(np.float32)
            for rows in (single, single, batched)
        )
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
                    **scored(single, base_tokens, "chain"),
                    **scored(rescored_placebo, base_tokens, "target"),
                },
                "speculative": {
                    "tokens": spec_tokens,
                    **scored(rescored, spec_tokens, "target"),
                    **scored(rescored_batched, spec_tokens, "batched"),
                },
            }
        )
    return out


def _verdict(records, *, batched=True):
    samples = [Sample.from_dict(r) for r in records]
    analysis = analyze(samples, alpha=ALPHA, has_logits=False)
    if batched and needs_batched_evidence(analysis):  # as the runner asks for it
        tests = batched_vs_placebo(samples, alpha=ALPHA)
        analysis = dataclasses.replace(analysis, batched=BatchedEvidence(tuple(tests)))
    return analysis, classify_sampling(analysis, has_logits=False)


def test_drift_that_the_batched_rows_explain_is_numeric_drift():
    analysis, verdict = _verdict(_records(np.random.default_rng(3), seeds=150))
    rejected = [t.name for t in analysis.tests if t.p_adjusted < ALPHA]
    assert any(name.endswith(":vs-placebo") for name in rejected), rejected  # single-token
    assert needs_batched_evidence(analysis)
    assert verdict.label is Label.NUMERIC_DRIFT, verdict.reason
    assert "re-scored batched" in verdict.reason
    batched = SamplingEvidence.from_dict(verdict.evidence).batched
    assert batched is not None
    assert batched.rejected == ()


def test_a_greedy_sampler_is_a_sampler_bug_against_batched_rows_too():
    _, verdict = _verdict(_records(np.random.default_rng(4), greedy=0.3, seeds=150))
    assert verdict.label is Label.SAMPLER_BUG, verdict.reason
    assert "numeric drift does not explain it" in verdict.reason
    batched = SamplingEvidence.from_dict(verdict.evidence).batched
    assert batched is not None
    assert batched.rejected


def test_a_greedy_sampler_is_found_through_an_imperfect_instrument():
    """Re-scoring off by 0.05 logits (0.25 at temperature 0.2): the fault still separates from
    the placebo. (At 0.1 the batched follow-up loses it: what the instrument cannot see is
    stated with the fidelity of each run.)"""
    _, verdict = _verdict(
        _records(np.random.default_rng(4), greedy=0.3, instrument=0.05, seeds=150)
    )
    assert verdict.label is Label.SAMPLER_BUG, verdict.reason


def test_without_batched_evidence_a_rejection_is_inconclusive_and_says_why():
    _, verdict = _verdict(_records(np.random.default_rng(3)), batched=False)
    assert verdict.label is Label.INCONCLUSIVE, verdict.reason
    assert "could not be checked" in verdict.reason


@pytest.mark.parametrize("seed", [5, 6])
def test_no_drift_and_a_correct_sampler_is_no_rejection(seed):
    analysis, verdict = _verdict(_records(np.random.default_rng(seed), drift=0.0))
    # no rejection: equivalent exactly where the comparison had its power, else inconclusive
    power = PowerEvidence.of(verdict.evidence)
    assert power is not None  # no test rejected: the rule reached the power
    powered = power.power >= MIN_POWER
    assert verdict.label is (Label.EQUIVALENT if powered else Label.INCONCLUSIVE), verdict.reason
    assert not [t for t in analysis.tests if t.p_adjusted < ALPHA]
    assert not needs_batched_evidence(analysis)
    assert analysis.batched is None


@pytest.mark.parametrize("seed", [7, 8, 9])
def test_an_instrument_that_is_off_alone_is_never_a_sampler_bug(seed):
    """The placebo deployment: both paths sample from the same rows; re-scoring is off by
    0.3 logits at temperature 0.2. Tested against the re-scored rows alone, both paths reject
    (as the speculative path alone used to be judged); against the placebo, nothing does."""
    records = _records(np.random.default_rng(seed), drift=0.0, instrument=0.3)
    analysis, verdict = _verdict(records)
    placebo_rejects = [t for t in analysis.placebo.tests if t.p_adjusted < ALPHA]
    alone_rejects = [t for t in analysis.consistency if t.p_adjusted < ALPHA]
    assert placebo_rejects
    assert alone_rejects
    assert not [t for t in analysis.tests if t.p_adjusted < ALPHA]
    assert verdict.label is not Label.SAMPLER_BUG, verdict.reason
    limit = SamplingEvidence.from_dict(verdict.evidence).limit
    assert limit is not None
    assert "the instrument here is off" in limit
