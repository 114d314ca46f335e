"""The evidence-gathering stage (`equiv.run.evidence`) on model-free engines: where it asks
for re-scoring, what it records when that fails, and what re-scoring cost."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from toy_engines import CONFIG, VOCAB, Plain, Served

from equiv.config import Mode
from equiv.engines.base import Capabilities, RescoreCost
from equiv.errors import ConfigError, EngineError
from equiv.records import Generation, TokenAlternatives
from equiv.run.evidence import RESCORED_SEEDS, BatchOnce, Evidence
from equiv.verdicts.sampling.token_evidence import reported_evidence


def _generation(path: str, tokens: tuple[int, ...]) -> Generation:
    return Generation(
        path=path,
        prompt_tokens=(1,),
        tokens=tokens,
        pieces=tuple(str(t) for t in tokens),
        text="",
        stop_reason="length",
        alternatives=(),
        t_prompt_s=0.0,
        t_decode_s=0.0,
    )


def test_evidence_rescores_single_token_on_the_baseline_and_batched_on_the_batcher():
    base, spec = Plain(), Plain("speculative")
    evidence = Evidence(base, spec, CONFIG)
    evidence.rescore([1], [2], False)
    evidence.rescore([1], [2], True)
    assert (base.asked, spec.asked) == ([False], [True])
    assert evidence.can_rescore
    assert evidence.take_cost() is None  # no engine counts


def test_evidence_takes_the_cost_only_where_rows_were_asked():
    base, spec = Served(), Served("speculative")
    evidence = Evidence(base, spec, CONFIG)
    assert evidence.take_cost() is None
    evidence.rescore([1], [2, 3], True)
    assert spec.asked == []  # the baseline server re-scores batched
    assert evidence.take_cost() == RescoreCost(requests=2, rows=2)
    # rows given again from earlier requests, without a request of their own, still count
    base.cost = RescoreCost(rows=3, rows_reused=3)
    assert evidence.take_cost() == RescoreCost(rows=3, rows_reused=3)


def test_without_rescoring_nothing_can_be_redone_or_rescored():
    base = Plain()
    base.capabilities = Capabilities(full_logits=False, deterministic_seed=True)
    evidence = Evidence(base, Plain("speculative"), CONFIG)
    assert not evidence.can_rescore
    assert not evidence.can_redo(Mode.SAMPLING)
    with pytest.raises(ConfigError, match="does not offer it"):
        evidence.rescore([1], [2], False)
    assert evidence.batched([], [], alpha=0.01).error == "the servers cannot re-score batched"


def test_one_results_classifier_and_placebo_share_one_batched_evaluation():
    base, spec = Plain(), Plain("speculative")
    evidence = Evidence(base, spec, CONFIG)
    once = BatchOnce(evidence)
    first = once([1], [2, 3], True)
    assert once([1], [2, 3], True) is first  # the same batch: the rows of one evaluation
    assert evidence.drift_placebo([1], _generation("baseline", (2, 3)), once) is not None
    assert spec.asked == [True]
    once([1], [2], True)  # another batch (a calibration shorter than the generation)
    once([1], [2, 3], False)  # single-token rows are never kept
    assert (spec.asked, base.asked) == ([True, True], [False])
    spec.fail = True
    with pytest.raises(EngineError):
        once([1], [3], True)
    with pytest.raises(EngineError):  # a failed call is not remembered as an answer
        once([1], [3], True)


def test_a_failed_placebo_is_left_out():
    evidence = Evidence(Plain(fail=True), Plain("speculative", fail=True), CONFIG)
    assert evidence.drift_placebo([1], _generation("baseline", (2, 3))) is None


def test_sample_evidence_scores_both_paths_and_stops_at_a_failed_rescoring():
    base, spec = _generation("baseline", (2, 3)), _generation("speculative", (4,))
    sampled = Evidence(Plain(), Plain("speculative"), CONFIG).of_samples([1], base, spec)
    assert list(sampled.paths) == ["baseline", "speculative"]
    for path, gen in (("baseline", base), ("speculative", spec)):
        assert list(sampled.paths[path]) == ["target_pit", "target_sensitivity", "target_score"]
        assert len(sampled.paths[path]["target_pit"]) == gen.n_tokens
        assert len(sampled.paths[path]["target_score"]) == gen.n_tokens
    assert sampled.drift is None  # the speculative path reported no rows
    failed = Evidence(Plain(fail=True), Plain("speculative"), CONFIG).of_samples([1], base, spec)
    assert failed.paths == {"speculative": {"rescore_error": "the server timed out"}}
    assert failed.fidelity is None


def test_in_process_only_each_prompts_first_seeds_are_rescored():
    """Where both paths carry the rows they sampled from, re-scoring measures only the drift and
    the fidelity: the first `RESCORED_SEEDS` seeds; over HTTP every seed (its instrument)."""
    config = dataclasses.replace(CONFIG, seeds=tuple(range(11, 11 + RESCORED_SEEDS + 2)))
    evidence = Evidence(Plain(), Plain("speculative"), config)
    base, spec = _generation("baseline", (2, 3)), _generation("speculative", (4,))
    assert all(evidence.rescores(seed, base, spec) for seed in config.seeds)
    rows = np.zeros((2, VOCAB), dtype=np.float32)
    base = dataclasses.replace(base, logits=rows)
    spec = dataclasses.replace(spec, logits=rows[:1])
    chosen = [evidence.rescores(seed, base, spec) for seed in config.seeds]
    assert chosen == [True] * RESCORED_SEEDS + [False, False]
    kept = evidence.of_samples([1], base, spec, rescore=False)
    for path, gen in (("baseline", base), ("speculative", spec)):
        assert "target_pit" not in kept.paths[path]
        assert len(kept.paths[path]["chain_pit"]) == gen.n_tokens
    assert kept.drift is None
    assert kept.fidelity is None


class _Reporting(Plain):
    """A server that reports the row it sampled a token from outside a speculative step."""

    capabilities = Capabilities(
        full_logits=False, deterministic_seed=True, rescoring=True, sampled_rows=True
    )

    def candidate_bytes(self, token: int) -> bytes:
        return b"x"


def test_the_rows_a_server_reported_are_kept_with_their_positions():
    """Positions 0 and 2 sampled outside a speculative step (a row each), 1 inside (none): the
    evidence under the reported rows is kept with the indices of its tokens, so each lines up
    with the same token's re-scoring (here the same rows: no shift)."""
    tokens = (2, 3, 4)
    rows = np.zeros((len(tokens), VOCAB), dtype=np.float32)
    rows[np.arange(len(tokens)), list(tokens)] = 1.0  # as `Plain.rescore` re-scores them
    alternatives = tuple(
        TokenAlternatives.from_row(rows[i], VOCAB) if i != 1 else TokenAlternatives((), ())
        for i in range(len(tokens))
    )
    spec = dataclasses.replace(_generation("speculative", tokens), alternatives=alternatives)
    base = _generation("baseline", (2,))
    sampled = Evidence(Plain(), _Reporting("speculative"), CONFIG).of_samples([1], base, spec)
    path = sampled.paths["speculative"]
    assert path["reported_positions"] == [0, 2]
    assert len(path["reported_score"]) == 2
    for j, i in enumerate(path["reported_positions"]):
        assert path["reported_score"][j] == path["target_score"][i]


def test_a_server_baselines_reported_evidence_is_its_chain_evidence_at_those_positions():
    """A server's baseline reports every row, so the chain already ran over them: its
    ``reported_*`` are those figures at the positions `reported_evidence` keeps, the same
    numbers it computes row by row."""
    tokens = (2, 3, 4, 5)
    rng = np.random.default_rng(4)
    rows = rng.normal(0.0, 2.0, (len(tokens), VOCAB)).astype(np.float32)
    alternatives = tuple(TokenAlternatives.from_row(row, VOCAB) for row in rows)
    base = dataclasses.replace(_generation("baseline", tokens), alternatives=alternatives)
    evidence = Evidence(_Reporting(), Plain("speculative"), CONFIG)
    path = evidence.of_samples([1], base, _generation("speculative", (2,))).paths["baseline"]
    direct = reported_evidence(alternatives, tokens, CONFIG.sampling, lambda t: True)
    assert path["reported_positions"] == direct.positions == [0, 1, 2, 3]
    assert path["reported_pit"] == direct.evidence.pits == path["chain_pit"]
    assert path["reported_score"] == direct.evidence.scores


@pytest.mark.parametrize(("typical_p", "recorded"), [(1.0, True), (0.9, False)])
def test_tokens_beyond_rounding_are_recorded_only_where_loosening_the_chain_is_sound(
    typical_p, recorded
):
    """In process the rows a path sampled from are at hand, and a token far outside the chain's
    support is recorded (`chain_far`); under typical-p, where loosening a cut-off can tighten
    another, nothing is (`equiv.verdicts.sampling.support.far_outside`)."""
    sampling = dataclasses.replace(CONFIG.sampling, top_k=2, typical_p=typical_p)
    config = dataclasses.replace(CONFIG, sampling=sampling)
    rows = np.tile(np.arange(VOCAB, dtype=np.float32)[::-1] * 2.0, (3, 1))  # 0 likeliest
    gen = dataclasses.replace(_generation("speculative", (0, 7, 1)), logits=rows)
    out = Evidence(Plain(), Plain("speculative"), config)._own_rows(gen, "speculative")
    assert "chain_pit" in out
    assert (out.get("chain_far") == [1]) if recorded else ("chain_far" not in out), out
