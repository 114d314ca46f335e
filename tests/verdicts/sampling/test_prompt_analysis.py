"""One sampled prompt's analysis (`equiv.verdicts.sampling.prompt_analysis.analyze`): which rows
its two-sample log-likelihood test compares the paths under."""

from __future__ import annotations

import dataclasses

from equiv.verdicts.sampling.prompt_analysis import analyze
from equiv.verdicts.sampling.samples import PathSample, Sample

ALPHA = 0.01
SEEDS = 24


def _path(own: float, target: float | None) -> PathSample:
    """A 4-token sample; each token of probability ``own`` under the rows the path sampled
    from (``chain_pit``) and ``target`` under the target's single-token re-scoring, if any."""
    pits = {"chain_pit": ((0.0, own, own),) * 4}
    if target is not None:
        pits["target_pit"] = ((0.0, target, target),) * 4
    return PathSample(tokens=(1, 2, 3, 4), pits=pits)


def _in_process(spec_target: float) -> list[Sample]:
    """An in-process prompt: the baseline's own rows are the target's (plain decoding), the
    speculative path's own rows batched (another instrument: they give its tokens 0.3 less);
    the first 4 seeds re-scored, where the target gives the speculative tokens
    ``spec_target`` (the baseline's: 0.6 - 0.01 i)."""
    records = []
    for i in range(SEEDS):
        p = 0.6 - 0.01 * i
        rescored = i < 4
        base = _path(p, p if rescored else None)
        spec = _path(p - 0.3, spec_target if rescored else None)
        records.append(Sample(f"p::s{i}", base, spec))
    return records


def _loglik_test(records: list[Sample], *, has_logits: bool = True):
    tests = analyze(records, alpha=ALPHA, has_logits=has_logits).tests
    found = [t for t in tests if t.name.startswith("log-lik")]
    return found[0] if found else None


def test_in_process_the_log_likelihoods_are_compared_under_the_targets_single_token_rows():
    """The baseline's own rows on every seed beside the speculative samples re-scored: the
    batched rows' lower probabilities do not reject; a real difference under the target's rows
    does, on 4 re-scored seeds."""
    alike = _loglik_test(_in_process(spec_target=0.55))
    assert alike is not None
    assert alike.n == SEEDS + 4
    assert alike.p_value > ALPHA
    apart = _loglik_test(_in_process(spec_target=0.05))
    assert apart is not None
    assert apart.p_value < ALPHA


def test_over_http_a_missing_rescoring_leaves_the_log_likelihood_test_out():
    """Which samples' re-scoring failed depends on the data (a timeout on a long sample): the
    test is run on all of them or none."""
    records = [Sample(f"p::s{i}", _path(0.5, 0.5), _path(0.5, 0.5)) for i in range(SEEDS)]
    records = [
        Sample(
            r.key,
            dataclasses.replace(r.baseline, pits={"target_pit": r.baseline.pits["target_pit"]}),
            dataclasses.replace(
                r.speculative, pits={"target_pit": r.speculative.pits["target_pit"]}
            ),
        )
        for r in records
    ]
    whole = _loglik_test(records, has_logits=False)
    assert whole is not None
    assert whole.n == 2 * SEEDS
    failed = dataclasses.replace(records[0].speculative, pits={})
    records[0] = dataclasses.replace(records[0], speculative=failed)
    assert _loglik_test(records, has_logits=False) is None
