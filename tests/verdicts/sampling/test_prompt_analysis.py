"""One sampled prompt's analysis (`equiv.verdicts.sampling.prompt_analysis.analyze`): which rows
its two-sample log-likelihood test compares the paths under."""

from __future__ import annotations

from equiv.verdicts.sampling.prompt_analysis import analyze
from equiv.verdicts.sampling.samples import PathSample, Sample

ALPHA = 0.01


def _path(p_token: float, rescored: bool) -> PathSample:
    """A 4-token sample; each token of probability ``p_token`` under the rows the path sampled
    from (``chain_pit``) and 0.5 under the target's re-scoring (``target_pit``), if any."""
    pits = {"chain_pit": ((0.0, p_token, p_token),) * 4}
    if rescored:
        pits["target_pit"] = ((0.0, 0.5, 0.5),) * 4
    return PathSample(tokens=(1, 2, 3, 4), pits=pits)


def _loglik_test(records: list[Sample]):
    (test,) = [t for t in analyze(records, alpha=ALPHA).tests if t.name.startswith("log-lik")]
    return test


def test_the_log_likelihoods_are_compared_under_one_instrument_on_the_seeds_that_have_it():
    """In process only the first seeds are re-scored, and the speculative path's own rows are
    batched (another instrument): here they give its tokens a lower probability. The test
    compares the re-scored seeds under the target's rows, and does not reject; with no seed
    re-scored it falls back to each path's own rows, where the instruments differ."""
    records = [
        Sample(f"p::s{i}", _path(0.9, i < 4), _path(0.6 - 0.01 * i, i < 4)) for i in range(24)
    ]
    rescored = _loglik_test(records)
    assert rescored.n == 8
    assert rescored.p_value > 0.5
    own_rows = [Sample(r.key, _path(0.9, False), r.speculative) for r in records]
    own_rows = [
        Sample(r.key, r.baseline, _path(0.6 - 0.01 * i, False)) for i, r in enumerate(own_rows)
    ]
    fallback = _loglik_test(own_rows)
    assert fallback.n == 48
    assert fallback.p_value < ALPHA
