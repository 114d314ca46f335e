"""Per-token evidence and the per-prompt tests of sampling mode, on rows with known answers."""

import numpy as np
import pytest

from equiv.config import SamplingConfig
from equiv.engines.acceptance_rules import Rule, accept_probability, residual
from equiv.engines.chain import chain_probs, pit_position
from equiv.records import Judgement, TokenAlternatives
from equiv.records.verdict import Label
from equiv.verdicts.sampling.prompt_analysis import analyze
from equiv.verdicts.sampling.samples import Sample
from equiv.verdicts.sampling.token_evidence import (
    chain_evidence,
    chain_pit,
    judgement_evidence,
    reported_evidence,
)
from equiv.verdicts.sampling.verdict import classify_sampling
from equiv.verdicts.stats import (
    acceptance_rate_test,
    forced_decisions_test,
    pit_uniformity_test,
    randomized_pit,
)


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


def _analyze(records, *, alpha):
    """`analyze` of seed records as the file holds them."""
    return analyze([Sample.from_dict(r) for r in records], alpha=alpha)


def test_a_greedy_bias_is_a_sampler_bug_and_honest_draws_are_not():
    rng = np.random.default_rng(7)
    honest = _analyze(_records(rng, biased=False), alpha=0.01)
    biased = _analyze(_records(rng, biased=True), alpha=0.01)
    assert classify_sampling(honest).label is not Label.SAMPLER_BUG
    verdict = classify_sampling(biased)
    assert verdict.label is Label.SAMPLER_BUG
    assert "differ from the placebo" in verdict.reason
    assert any(t.name.endswith(":vs-placebo") for t in biased.tests if t.p_adjusted < 0.01)


def test_too_few_tokens_is_inconclusive_and_says_how_many_more():
    rng = np.random.default_rng(3)
    analysis = _analyze(_records(rng, biased=False, seeds=3, length=10), alpha=0.01)
    verdict = classify_sampling(analysis)
    assert verdict.label is Label.INCONCLUSIVE
    assert "would reach" in verdict.reason
    assert "seeds" in verdict.reason


def test_every_test_is_holm_adjusted_within_the_prompt():
    rng = np.random.default_rng(5)
    analysis = _analyze(_records(rng, biased=False, seeds=10), alpha=0.01)
    for test in analysis.tests:
        assert test.p_adjusted >= test.p_value
    assert {t.name for t in analysis.tests} >= {
        "pit:vs-placebo",
        "top-token:vs-placebo",
        "first-token:two-sample",
    }
    for one_sample in (analysis.placebo.tests, analysis.consistency):  # Holm'd alone
        assert {t.kind for t in one_sample} >= {"sampler-consistency", "top-token"}
        assert all(t.p_adjusted >= t.p_value for t in one_sample)


def test_a_path_that_loops_fails_distinct2():
    """Same first tokens and lengths, but the speculative samples repeat one bigram."""
    rng = np.random.default_rng(11)
    records = _records(rng, biased=False, seeds=20)
    for record in records:
        record["speculative"]["tokens"] = [record["speculative"]["tokens"][0], 1] * 15
    tests = {t.name: t for t in _analyze(records, alpha=0.01).tests}
    assert tests["distinct-2:two-sample"].p_value < 1e-6
    assert tests["first-token:two-sample"].p_value > 0.01


def _rejection_sampled(rule, n: int = 1500, seed: int = 3):
    """``n`` positions of a rejection sampler over 30-token rows (one draft token judged per
    position): the target rows, the emitted tokens and the judgements an engine would report."""
    rng = np.random.default_rng(seed)
    sampling = SamplingConfig(temp=0.8)
    rows = (rng.normal(size=(n, 30)) * 2).astype(np.float32)
    drafts = (rows + rng.normal(size=rows.shape)).astype(np.float32)
    tokens, judged = [], []
    for i in range(n):
        p = chain_probs(rows[i], temp=0.8, top_k=40, top_p=0.95, min_p=0.05)
        q = chain_probs(drafts[i], temp=0.8, top_k=40, top_p=0.95, min_p=0.05)
        # wrong_temp: the ratio uses the draft at twice its temperature, as the reference engine
        wrong = {"q_wrong": chain_probs(drafts[i], temp=1.6, top_k=40, top_p=0.95, min_p=0.05)}
        extra = wrong if rule is Rule.WRONG_TEMP else {}
        x = int(rng.choice(30, p=q))
        ok = bool(rng.random() < accept_probability(rule, p, q, x, **extra))
        tokens.append(x if ok else int(rng.choice(30, p=residual(rule, p, q, **extra))))
        judged.append(Judgement(i, x, ok, drafts[i]))
    return judgement_evidence(rows, tokens, judged, sampling)


def _stage_p_values(evidence):
    arr = np.asarray(evidence["acceptance"])
    pits = np.asarray(evidence["residual_pit"])
    u = randomized_pit(pits[:, 0], pits[:, 1], np.random.default_rng(0))
    return (
        forced_decisions_test(arr[:, 0], arr[:, 1], arr[:, 2], alpha=0.01).p_value,
        acceptance_rate_test(arr[:, 0], arr[:, 1], alpha=0.01).p_value,
        pit_uniformity_test(u, alpha=0.01).p_value,
    )


def test_judgement_evidence_of_a_correct_rejection_sampler_passes_every_stage():
    evidence = _rejection_sampled(Rule.CORRECT)
    arr = np.asarray(evidence["acceptance"])
    assert len(arr) == 1500
    assert len(evidence["residual_pit"]) == int((arr[:, 1] == 0).sum())
    assert (arr[:, 2] > 0).all()  # every draft token came from the draft's own chain
    assert 0.2 < (arr[:, 0] >= 1 - 1e-6).mean() < 0.8  # many forced accepts, many chances
    forced, rate, resid = _stage_p_values(evidence)
    assert forced == 1.0  # a forced decision never goes wrong
    assert rate > 0.01
    assert resid > 0.01


@pytest.mark.parametrize(
    ("rule", "stage"),
    [(Rule.GREEDY, 0), (Rule.TOP2, 0), (Rule.WRONG_TEMP, 1), (Rule.NO_MAX, 2), (Rule.NO_NORM, 2)],
)
def test_each_faulty_rule_fails_the_stage_it_breaks(rule, stage):
    p_values = _stage_p_values(_rejection_sampled(rule))
    assert p_values[stage] < 1e-4, p_values


def _top(row, k):
    order = np.argsort(-row)[:k]
    return TokenAlternatives(tuple(int(i) for i in order), tuple(float(row[i]) for i in order))


def test_reported_evidence_keeps_the_positions_whose_row_is_whole_and_holds_the_chain():
    """A server's rows: none at a speculative step, too few candidates to hold the chain, or a
    candidate that could leave a character unfinished (then whether the row came depends on the
    draw): those positions are left out; the rest are scored as under the full rows."""
    rng = np.random.default_rng(5)
    sampling = SamplingConfig(temp=0.8, top_k=4)
    full = rng.normal(0, 2, (6, 30)).astype(np.float32)
    tokens = [int(np.argmax(r)) for r in full]
    alts = [_top(full[0], 6), TokenAlternatives((), ()), _top(full[2], 3)]
    alts += [_top(full[3], 6), _top(full[4], 6), _top(full[5], 6)]
    # a byte piece among row 4's candidates (and no other kept row's): any candidate counts
    (piece, *_) = set(alts[4].ids) - {c for i in (0, 3, 5) for c in alts[i].ids}
    got = reported_evidence(alts, tokens, sampling, whole=lambda t: t != piece)
    want = chain_evidence(full, tokens, sampling)
    kept = [0, 3, 5]
    assert got.positions == kept
    got = got.evidence
    assert got.pits == [want.pits[i] for i in kept]
    assert got.sensitivities == [want.sensitivities[i] for i in kept]
    assert got.scores == [want.scores[i] for i in kept]
    none = reported_evidence(alts, tokens, SamplingConfig(temp=0.8, top_k=0), lambda t: True)
    assert none == ([], ([], [], []))


def test_reported_evidence_waits_four_whole_tokens_after_a_piece_and_skips_penalties():
    """llama-server judges a text finished by its last 4 bytes: after a token that is not whole
    on its own, whether the next rows come depends on the draws, so 4 positions are left out;
    under a repetition penalty the server's window (the prompt too) is not equiv's: none."""
    rng = np.random.default_rng(6)
    sampling = SamplingConfig(temp=0.8, top_k=4)
    full = rng.normal(0, 2, (8, 30)).astype(np.float32)
    tokens = [int(np.argmax(r)) for r in full]
    alts = [_top(row, 6) for row in full]
    piece = tokens[2]  # an emitted byte piece; rows holding it as a candidate are left out too
    kept_if = {i for i, a in enumerate(alts) if piece not in a.ids}
    assert tokens.count(piece) == 1
    assert {0, 1, 7} <= kept_if
    got = reported_evidence(alts, tokens, sampling, whole=lambda t: t != piece)
    want = chain_evidence(full, tokens, sampling)
    kept = [i for i in range(8) if i in kept_if and not 3 <= i <= 6]
    assert got.positions == kept
    assert got.evidence.pits == [want.pits[i] for i in kept]
    penalised = SamplingConfig(temp=0.8, top_k=4, repeat_penalty=1.1)
    assert reported_evidence(alts, tokens, penalised, lambda t: True) == ([], ([], [], []))
