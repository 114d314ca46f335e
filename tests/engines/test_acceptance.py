"""equiv.engines.acceptance_rules: exact one-step output distributions of acceptance rules."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from equiv.engines.acceptance_rules import (
    Rule,
    accept_probability,
    output_distribution,
    residual,
    total_variation,
)
from equiv.engines.chain import pit_position
from equiv.errors import ConfigError
from equiv.verdicts.stats import pit_uniformity_test, randomized_pit


@st.composite
def dist(draw: st.DrawFn, size: int) -> np.ndarray:
    w = np.array(draw(st.lists(st.floats(0.01, 1.0), min_size=size, max_size=size)))
    return np.asarray(w / w.sum(), dtype=np.float64)


@st.composite
def pq(draw: st.DrawFn, min_size: int = 2) -> tuple[np.ndarray, np.ndarray]:
    size = draw(st.integers(min_size, 8))
    return draw(dist(size)), draw(dist(size))


def tempered(q: np.ndarray, temp: float) -> np.ndarray:
    w = q ** (1.0 / temp)
    return np.asarray(w / w.sum(), dtype=np.float64)


SETTINGS = settings(max_examples=200, deadline=None)


@SETTINGS
@given(pq())
def test_correct_rule_outputs_the_target(rows: tuple[np.ndarray, np.ndarray]) -> None:
    p, q = rows
    np.testing.assert_allclose(output_distribution(Rule.CORRECT, p, q), p, rtol=0, atol=1e-9)


@SETTINGS
@given(pq())
def test_every_rule_outputs_a_distribution(rows: tuple[np.ndarray, np.ndarray]) -> None:
    p, q = rows
    for rule in Rule:
        out = output_distribution(rule, p, q, q_wrong=tempered(q, 2.0), p_wrong=q)
        assert out.sum() == pytest.approx(1.0, abs=1e-12)
        assert (out >= 0.0).all()
        r = residual(rule, p, q, q_wrong=tempered(q, 2.0), p_wrong=q)
        assert r.sum() == pytest.approx(1.0, abs=1e-12)


@SETTINGS
@given(pq())
def test_greedy_acceptance_changes_the_output(rows: tuple[np.ndarray, np.ndarray]) -> None:
    p, q = rows
    # the draft's likely token is not the target's argmax, so the fault is exercised
    assume(np.argmax(q) != np.argmax(p))
    assert total_variation(output_distribution(Rule.GREEDY, p, q), p) > 1e-6


@SETTINGS
@given(pq())
def test_no_max_residual_changes_the_output(rows: tuple[np.ndarray, np.ndarray]) -> None:
    p, q = rows
    assume(total_variation(p, q) > 1e-3)
    out = output_distribution(Rule.NO_MAX, p, q)
    # out = min(p, q) + |p - q| / 2, which is TV(p, q) / 2 away from p
    assert total_variation(out, p) == pytest.approx(total_variation(p, q) / 2)
    assert total_variation(out, p) > 1e-6


@SETTINGS
@given(pq())
def test_no_norm_residual_changes_the_output(rows: tuple[np.ndarray, np.ndarray]) -> None:
    p, q = rows
    # the walk's overflow lands on the last id; it only hurts when the true residual
    # max(0, p - q) also has mass elsewhere (else the fall-through is right by luck)
    assume(np.maximum(0.0, p - q)[:-1].sum() > 1e-3)
    assert total_variation(output_distribution(Rule.NO_NORM, p, q), p) > 1e-6


@SETTINGS
@given(pq(), st.floats(1.5, 4.0))
def test_wrong_temperature_changes_the_output(
    rows: tuple[np.ndarray, np.ndarray], temp: float
) -> None:
    p, q = rows
    q_wrong = tempered(q, temp)
    assume(total_variation(q, q_wrong) > 1e-3)
    out = output_distribution(Rule.WRONG_TEMP, p, q, q_wrong=q_wrong)
    assert total_variation(out, p) > 1e-6
    # with the right temperature the same code path is correct again
    np.testing.assert_allclose(output_distribution(Rule.WRONG_TEMP, p, q, q_wrong=q), p, atol=1e-9)


@SETTINGS
@given(pq(min_size=3))
def test_top2_acceptance_changes_the_output(rows: tuple[np.ndarray, np.ndarray]) -> None:
    p, q = rows
    rest = np.argsort(-p, kind="stable")[2:]
    # a token outside the top two that the draft over-proposes gets no residual mass,
    # and its proposals are always rejected: its output probability drops to 0
    assume((q[rest] > p[rest]).any())
    assert total_variation(output_distribution(Rule.TOP2, p, q), p) > 1e-6


@SETTINGS
@given(pq(), st.integers(0, 2**32 - 1))
def test_off_by_one_outputs_the_wrong_row(rows: tuple[np.ndarray, np.ndarray], seed: int) -> None:
    p, q = rows
    p_wrong = np.random.default_rng(seed).dirichlet(np.ones(p.size))
    assume(total_variation(p, p_wrong) > 1e-3)
    out = output_distribution(Rule.OFF_BY_ONE, p, q, p_wrong=p_wrong)
    np.testing.assert_allclose(out, p_wrong, atol=1e-9)
    assert total_variation(out, p) > 1e-6


P = np.array([0.5, 0.3, 0.2])
Q = np.array([0.2, 0.3, 0.5])


@pytest.mark.parametrize(
    ("rule", "want"),
    [
        (Rule.CORRECT, [0.5, 0.3, 0.2]),
        (Rule.GREEDY, [0.6, 0.24, 0.16]),  # accept 0 w.p. 0.2, else resample p: 0.2 e_0 + 0.8 p
        (Rule.NO_MAX, [0.35, 0.3, 0.35]),  # min(p, q) + |p - q| / 2
        (Rule.NO_NORM, [0.29, 0.3, 0.41]),  # min(p,q) + 0.3 * ([0.3, 0, 0] + 0.7 e_2)
        (Rule.TOP2, [0.7, 0.3, 0.0]),  # accept {0, 1} w.p. 0.5; residual e_0
        (Rule.OFF_BY_ONE, [0.2, 0.3, 0.5]),  # p_wrong = q
    ],
)
def test_hand_computed_outputs(rule: Rule, want: list[float]) -> None:
    out = output_distribution(rule, P, Q, p_wrong=Q)
    np.testing.assert_allclose(out, want, atol=1e-12)


def test_accept_probability_and_residual_by_hand() -> None:
    assert accept_probability(Rule.CORRECT, P, Q, 2) == pytest.approx(0.4)
    assert accept_probability(Rule.CORRECT, P, Q, 0) == 1.0
    assert accept_probability(Rule.GREEDY, P, Q, 1) == 0.0
    assert accept_probability(Rule.TOP2, P, Q, 1) == 1.0
    assert accept_probability(Rule.TOP2, P, Q, 2) == 0.0
    np.testing.assert_allclose(residual(Rule.CORRECT, P, Q), [1.0, 0.0, 0.0])
    np.testing.assert_allclose(residual(Rule.NO_MAX, P, Q), [0.5, 0.0, 0.5])
    np.testing.assert_allclose(residual(Rule.NO_NORM, P, Q), [0.3, 0.0, 0.7])
    # p == q: nothing is ever rejected; the residual falls back to p
    np.testing.assert_allclose(residual(Rule.CORRECT, P, P), P)


def test_sampling_with_the_engine_code_path_matches_the_exact_output() -> None:
    """Draw x ~ q, accept with accept_probability, else draw from residual: what an engine
    does. The empirical distribution must match output_distribution."""
    rng = np.random.default_rng(8)
    p, q = np.array([0.1, 0.6, 0.2, 0.1]), np.array([0.4, 0.3, 0.2, 0.1])
    for rule in (Rule.CORRECT, Rule.GREEDY, Rule.NO_NORM):
        n = 20000
        acc = [accept_probability(rule, p, q, x) for x in range(4)]
        res = residual(rule, p, q)
        xs = rng.choice(4, size=n, p=q)
        keep = rng.random(n) < np.array(acc)[xs]
        out = np.where(keep, xs, rng.choice(4, size=n, p=res))
        freq = np.bincount(out, minlength=4) / n
        assert total_variation(freq, output_distribution(rule, p, q)) < 0.015


def test_pit_detects_greedy_acceptance_but_not_the_correct_rule() -> None:
    """Tokens emitted under each rule, judged against the target rows they should follow."""
    rng = np.random.default_rng(9)
    results = {}
    for rule in (Rule.CORRECT, Rule.GREEDY):
        before, p_tok = np.empty(2000), np.empty(2000)
        for i in range(2000):
            p, q = rng.dirichlet(np.full(8, 0.5)), rng.dirichlet(np.full(8, 0.5))
            token = int(rng.choice(8, p=output_distribution(rule, p, q)))
            before[i], p_tok[i] = pit_position(p, token)
        u = randomized_pit(before, p_tok, rng)
        results[rule] = pit_uniformity_test(u, alpha=0.01)
    assert not results[Rule.CORRECT].rejects
    assert results[Rule.GREEDY].rejects


def test_missing_wrong_rows_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="q_wrong"):
        output_distribution(Rule.WRONG_TEMP, P, Q)
    with pytest.raises(ConfigError, match="p_wrong"):
        residual(Rule.OFF_BY_ONE, P, Q)


def test_inputs_are_checked() -> None:
    with pytest.raises(ValueError, match="not 1"):
        output_distribution(Rule.CORRECT, 2 * P, Q)
    with pytest.raises(ValueError, match="negative"):
        output_distribution(Rule.CORRECT, np.log(P), Q)
    with pytest.raises(ValueError, match="one vocabulary"):
        output_distribution(Rule.CORRECT, P, np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match="x=3"):
        accept_probability(Rule.CORRECT, P, Q, 3)


def test_rules_parse_from_strings() -> None:
    assert Rule("off_by_one") is Rule.OFF_BY_ONE
    assert [str(r) for r in Rule] == [
        "correct",
        "greedy",
        "no_max",
        "no_norm",
        "wrong_temp",
        "top2",
        "off_by_one",
    ]


def test_total_variation() -> None:
    assert total_variation(P, Q) == pytest.approx(0.3)
    assert total_variation(P, P) == 0.0
