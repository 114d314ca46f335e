"""Tests for equiv.engines.chain: llama.cpp's sampler chain as exact probabilities."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from equiv.config import SamplingConfig
from equiv.engines.chain import (
    NEAR_TOP,
    apply_penalties,
    chain_distribution,
    chain_probs,
    on_one_support,
    pit_position,
    top_k_candidates,
    validate_sampling,
)
from equiv.errors import ConfigError

# p = [0.5, 0.3, 0.15, 0.05]: every cut below is far from float rounding.
ROW = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
OFF: dict[str, Any] = {"top_k": 0, "top_p": 1.0, "min_p": 0.0}


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return np.asarray(e / e.sum(), dtype=np.float64)


def test_top_k_keeps_the_k_largest() -> None:
    got = chain_probs(np.array([3.0, 2.0, 1.0, 0.0]), temp=1.0, top_k=2, top_p=1.0, min_p=0.0)
    np.testing.assert_allclose(got, [*softmax(np.array([3.0, 2.0])), 0.0, 0.0], atol=1e-15)


@pytest.mark.parametrize("top_k", [0, 4, 100])
def test_top_k_zero_or_at_least_vocab_is_a_no_op(top_k: int) -> None:
    got = chain_probs(ROW, temp=1.0, top_k=top_k, top_p=1.0, min_p=0.0)
    np.testing.assert_allclose(got, [0.5, 0.3, 0.15, 0.05], atol=1e-12)


def test_top_k_ties_keep_the_lower_id() -> None:
    got = chain_probs(np.array([0.0, 1.0, 1.0, 1.0]), temp=1.0, top_k=2, top_p=1.0, min_p=0.0)
    np.testing.assert_allclose(got, [0.0, 0.5, 0.5, 0.0], atol=1e-15)


@pytest.mark.parametrize(("top_p", "kept"), [(0.4, 1), (0.75, 2), (0.85, 3), (0.97, 4)])
def test_top_p_keeps_the_shortest_prefix_reaching_p(top_p: float, kept: int) -> None:
    got = chain_probs(ROW, temp=1.0, top_k=0, top_p=top_p, min_p=0.0)
    want = np.zeros(4)
    want[:kept] = softmax(ROW[:kept])
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_top_p_uses_untempered_probabilities() -> None:
    # Tempered at 0.5 the top two hold 0.93 >= 0.9 and would be the nucleus; llama.cpp's top_p
    # runs before temp, on untempered p, where the top two hold only 0.8, so three survive.
    got = chain_probs(ROW, temp=0.5, top_k=0, top_p=0.9, min_p=0.0)
    assert np.count_nonzero(got) == 3
    np.testing.assert_allclose(got[:3], softmax(ROW[:3] / 0.5), atol=1e-12)


def test_top_p_respects_min_keep() -> None:
    got = chain_probs(ROW, temp=1.0, top_k=0, top_p=0.1, min_p=0.0, min_keep=3)
    assert np.count_nonzero(got) == 3


def test_min_p_keeps_tokens_at_least_min_p_times_max() -> None:
    # threshold 0.35 * 0.5 = 0.175: 0.3 stays, 0.15 goes
    got = chain_probs(ROW, temp=1.0, top_k=0, top_p=1.0, min_p=0.35)
    np.testing.assert_allclose(got, [0.625, 0.375, 0.0, 0.0], atol=1e-12)


def test_min_p_uses_untempered_probabilities() -> None:
    # untempered 0.3 / 0.5 = 0.6 >= 0.5 keeps token 1; tempered (0.36) would drop it
    got = chain_probs(ROW, temp=0.5, top_k=0, top_p=1.0, min_p=0.5)
    np.testing.assert_allclose(got, [*softmax(ROW[:2] / 0.5), 0.0, 0.0], atol=1e-12)


def test_min_p_respects_min_keep() -> None:
    got = chain_probs(ROW, temp=1.0, top_k=0, top_p=1.0, min_p=0.99, min_keep=2)
    assert np.count_nonzero(got) == 2


def test_typical_orders_by_distance_from_entropy() -> None:
    # H = 1.142 nats; |-log p - H| ranks token 1 (0.062) before token 0 (0.449), so a small
    # typical_p keeps token 1 alone (cum 0.3 > 0.2) and drops the argmax.
    got = chain_probs(ROW, temp=1.0, **OFF, typical_p=0.2)
    np.testing.assert_array_equal(got, [0.0, 1.0, 0.0, 0.0])
    got = chain_probs(ROW, temp=1.0, **OFF, typical_p=0.5)
    np.testing.assert_allclose(got, [0.625, 0.375, 0.0, 0.0], atol=1e-12)


def test_typical_cut_is_strictly_greater_than_p() -> None:
    # cum after token 1 is exactly 0.5 (two equal tokens): "> 0.5" needs both
    got = chain_probs(np.zeros(2), temp=1.0, **OFF, typical_p=0.5)
    np.testing.assert_allclose(got, [0.5, 0.5], atol=1e-15)


def test_temperature_scales_logits() -> None:
    got = chain_probs(ROW, temp=2.0, **OFF)
    np.testing.assert_allclose(got, softmax(ROW / 2.0), atol=1e-12)
    assert got[0] < 0.5  # flatter than the untempered row


def test_chain_order_top_k_before_top_p() -> None:
    # top_k=3 first renormalises {0.5, 0.3, 0.15} to {0.526, 0.316, 0.158}; top_p=0.84 then
    # 0.84 is reached by two tokens (0.842); without top_k it would take three (0.8 < 0.84).
    got = chain_probs(ROW, temp=1.0, top_k=3, top_p=0.84, min_p=0.0)
    assert np.count_nonzero(got) == 2


def test_greedy_is_one_hot_on_the_first_maximum() -> None:
    got = chain_probs(np.array([0.0, 2.0, 2.0, 1.0]), temp=0.0, top_k=1, top_p=0.5, min_p=0.5)
    np.testing.assert_array_equal(got, [0.0, 1.0, 0.0, 0.0])


def test_minus_inf_logits_get_zero_probability() -> None:
    got = chain_probs(np.array([0.0, -np.inf, 1.0]), temp=1.0, top_k=0, top_p=0.999, min_p=0.0)
    assert got[1] == 0.0
    assert math.isclose(got.sum(), 1.0)


@pytest.mark.parametrize("bad", [np.array([0.0, np.nan]), np.array([-np.inf, -np.inf]), []])
def test_bad_rows_are_rejected(bad: np.ndarray) -> None:
    with pytest.raises(ValueError, match=r"logit|shape"):
        chain_probs(bad, temp=1.0, **OFF)


rows = st.lists(
    st.floats(min_value=-20.0, max_value=20.0, allow_nan=False), min_size=1, max_size=30
)


@settings(max_examples=150, deadline=None)
@given(
    logits=rows,
    temp=st.sampled_from([0.0, 0.3, 1.0, 1.7]),
    top_k=st.integers(0, 40),
    top_p=st.floats(0.05, 1.0),
    min_p=st.floats(0.0, 1.0),
    typical_p=st.sampled_from([1.0, 0.95, 0.5]),
)
def test_chain_probs_is_a_distribution_over_top_tokens(
    logits: list[float], temp: float, top_k: int, top_p: float, min_p: float, typical_p: float
) -> None:
    x = np.array(logits)
    got = chain_probs(x, temp=temp, top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p)
    assert got.shape == x.shape
    assert got.dtype == np.float64
    assert math.isclose(got.sum(), 1.0, rel_tol=1e-12)
    assert (got >= 0.0).all()
    kept = got > 0.0
    if typical_p == 1.0:
        assert kept[int(np.argmax(x))]  # every stage but typical keeps the argmax
    if top_k > 0 and temp > 0.0:
        assert np.count_nonzero(kept) <= top_k
    # within the kept set, probability is monotone in the logit
    xs, ps = x[kept], got[kept]
    order = np.argsort(xs, kind="stable")
    assert (np.diff(ps[order]) >= -1e-15).all()


def naive_chain(
    x: np.ndarray, temp: float, top_k: int, top_p: float, min_p: float, typical_p: float
) -> np.ndarray:
    """llama.cpp's stages one by one on (id, logit) pairs, with plain Python loops."""
    cur = [(i, float(v)) for i, v in enumerate(x)]

    def ranked(c: list[tuple[int, float]]) -> list[tuple[int, float]]:
        return sorted(c, key=lambda t: (-t[1], t[0]))

    def soft(c: list[tuple[int, float]]) -> list[float]:
        m = max(v for _, v in c)
        e = [math.exp(v - m) for _, v in c]
        return [w / sum(e) for w in e]

    if top_k > 0:
        cur = ranked(cur)[:top_k]
    if typical_p < 1.0:
        cur = ranked(cur)
        ps = soft(cur)
        h = -sum(p * math.log(p) for p in ps)
        idx = sorted(range(len(cur)), key=lambda i: abs(-math.log(ps[i]) - h))
        cum, last = 0.0, len(idx)
        for n, i in enumerate(idx):
            cum += ps[i]
            if cum > typical_p:
                last = n + 1
                break
        cur = [cur[i] for i in idx[:last]]
    if top_p < 1.0:
        cur = ranked(cur)
        cum, last = 0.0, len(cur)
        for n, p in enumerate(soft(cur)):
            cum += p
            if cum >= top_p:
                last = n + 1
                break
        cur = cur[:last]
    if min_p > 0.0:
        cur = ranked(cur)
        cur = [t for t in cur if t[1] >= cur[0][1] + math.log(min_p)]
    out = np.zeros(x.size)
    for (i, _), p in zip(cur, soft([(i, v / temp) for i, v in cur]), strict=True):
        out[i] = p
    return out


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(st.integers(-12, 12), min_size=1, max_size=16),
    temp=st.sampled_from([0.4, 1.0, 1.9]),
    top_k=st.integers(0, 10),
    top_p=st.sampled_from([1.0, 0.93, 0.71, 0.42]),
    min_p=st.sampled_from([0.0, 0.04, 0.33]),
    typical_p=st.sampled_from([1.0, 0.91, 0.47]),
)
def test_chain_probs_matches_a_naive_stage_by_stage_chain(
    steps: list[int], temp: float, top_k: int, top_p: float, min_p: float, typical_p: float
) -> None:
    x = np.array(steps) * 0.37  # coarse logits keep every cut clear of rounding
    got = chain_probs(x, temp=temp, top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p)
    want = naive_chain(x, temp, top_k, top_p, min_p, typical_p)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_penalties_follow_llama_cpp() -> None:
    logits = np.array([2.0, -1.0, 0.5, 3.0])
    got = apply_penalties(
        logits, [0, 1, 1, 2], repeat_penalty=2.0, frequency_penalty=0.1, presence_penalty=0.5
    )
    # token 0: 2/2 - 0.1 - 0.5; token 1 (c=2): -1*2 - 0.2 - 0.5; token 2: 0.5/2 - 0.1 - 0.5
    np.testing.assert_allclose(got, [0.4, -2.7, -0.35, 3.0], atol=1e-12)
    np.testing.assert_array_equal(logits, [2.0, -1.0, 0.5, 3.0])  # input untouched


def test_penalties_no_op_by_default() -> None:
    got = apply_penalties(
        ROW, [0, 0, 1], repeat_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0
    )
    np.testing.assert_array_equal(got, ROW)


def test_penalty_for_token_outside_vocab_is_rejected() -> None:
    with pytest.raises(ValueError, match="token id 7"):
        apply_penalties(ROW, [7], repeat_penalty=1.1, frequency_penalty=0.0, presence_penalty=0.0)


GOOD = {
    "temp": 0.8,
    "top_k": 40,
    "top_p": 0.95,
    "min_p": 0.05,
    "typical_p": 1.0,
    "repeat_penalty": 1.0,
}


def test_validate_accepts_defaults_and_edges() -> None:
    validate_sampling(**GOOD)  # type: ignore[arg-type]
    edges = {**GOOD, "temp": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}
    validate_sampling(**edges)  # type: ignore[arg-type]
    validate_sampling(**{**GOOD, "min_p": 1.0, "typical_p": 1e-9})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("temp", -0.1),
        ("temp", math.nan),
        ("top_k", -1),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("min_p", -0.01),
        ("min_p", 1.01),
        ("typical_p", 0.0),
        ("typical_p", 1.2),
        ("repeat_penalty", 0.0),
        ("repeat_penalty", -1.0),
    ],
)
def test_validate_names_the_value_and_the_fix(name: str, value: float) -> None:
    with pytest.raises(ConfigError, match=rf"{name}={value!r}.*pass") as info:
        validate_sampling(**{**GOOD, name: value})  # type: ignore[arg-type]
    assert "pass" in str(info.value)


def test_chain_probs_validates_parameters() -> None:
    with pytest.raises(ConfigError, match=r"top_p=1\.5 is outside \(0, 1\]"):
        chain_probs(ROW, temp=1.0, top_k=0, top_p=1.5, min_p=0.0)


def test_pit_position_ranks_by_probability_then_id() -> None:
    probs = np.array([0.1, 0.4, 0.1, 0.4])
    assert pit_position(probs, 1) == (0.0, 0.4)
    assert pit_position(probs, 3) == pytest.approx((0.4, 0.4))
    assert pit_position(probs, 0) == pytest.approx((0.8, 0.1))
    assert pit_position(probs, 2) == pytest.approx((0.9, 0.1))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12).filter(lambda v: sum(v) > 0.01))
def test_pit_positions_tile_the_unit_interval(weights: list[float]) -> None:
    probs = np.array(weights) / sum(weights)
    spans = sorted(pit_position(probs, t) for t in range(probs.size))
    edge = 0.0
    for before, p in spans:
        assert before == pytest.approx(edge, abs=1e-12)
        edge = before + p
    assert edge == pytest.approx(1.0, abs=1e-12)


def test_pit_position_rejects_token_outside_vocab() -> None:
    with pytest.raises(ValueError, match="token=4"):
        pit_position(np.full(4, 0.25), 4)


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(st.integers(-12, 12), min_size=1, max_size=12),
    spread=st.integers(0, 3),
    temp=st.sampled_from([0.0, 0.4, 1.0]),
    top_k=st.integers(0, 16),
    top_p=st.sampled_from([1.0, 0.71]),
    min_p=st.sampled_from([0.0, 0.04]),
)
def test_chain_distribution_of_a_top_k_row_is_the_chain_over_the_whole_row(
    steps: list[int], spread: int, temp: float, top_k: int, top_p: float, min_p: float
) -> None:
    # a server's row: its K candidates spread over the vocabulary, -inf elsewhere; the chain
    # runs on the candidates alone (fewer or more than top_k of them), as over the whole row
    vocab = 64
    row = np.full(vocab, -np.inf, dtype=np.float32)
    ids = (np.arange(len(steps)) * (1 + spread) * 3) % vocab
    row[ids] = np.array(steps, dtype=np.float32) * 0.37
    sampling = SamplingConfig(temp=temp, top_k=top_k, top_p=top_p, min_p=min_p)
    got_ids, got = chain_distribution(row, [], sampling)
    want = chain_probs(row, temp=temp, top_k=top_k, top_p=top_p, min_p=min_p)
    assert (np.diff(got_ids) > 0).all()
    assert np.isfinite(row[got_ids]).all()  # no -inf candidate is listed
    full = np.zeros(vocab)
    full[got_ids] = got
    np.testing.assert_allclose(full, want, rtol=0, atol=1e-12)


@settings(max_examples=200, deadline=None)
@given(
    scale=st.sampled_from([0.5, 3.0, 12.0]),
    ties=st.integers(0, 6),
    top_k=st.integers(1, 48),
    seed=st.integers(0, 2**16),
)
def test_the_top_k_candidates_of_a_dense_row_are_those_of_a_partition_of_the_whole_row(
    scale: float, ties: int, top_k: int, seed: int
) -> None:
    # rows as flat as a warm model's and as spread as a peaked one's (where fewer than k lie
    # near the top and the whole row is partitioned), with ties at the k-th value
    rng = np.random.default_rng(seed)
    row = (rng.normal(0.0, scale, 512)).astype(np.float32)
    kth_value = np.sort(row)[-top_k]
    row[rng.choice(512, ties, replace=False)] = kth_value
    kth = np.partition(row, row.size - top_k)[-top_k]
    np.testing.assert_array_equal(top_k_candidates(row, top_k), np.flatnonzero(row >= kth))


def test_top_k_candidates_partition_the_whole_row_where_few_lie_near_the_top() -> None:
    row = np.arange(64, dtype=np.float32) * (NEAR_TOP / 4)  # 4 within NEAR_TOP of the max
    assert (row >= row.max() - NEAR_TOP).sum() < 10
    np.testing.assert_array_equal(top_k_candidates(row, 10), np.arange(54, 64))
    flat = np.zeros(64, dtype=np.float32)
    flat[[3, 40]] = 1.0  # all tied below the two largest: every tie with the k-th is kept
    np.testing.assert_array_equal(top_k_candidates(flat, 5), np.arange(64))


@settings(max_examples=60, deadline=None)
@given(size_a=st.integers(0, 40), size_b=st.integers(0, 40), seed=st.integers(0, 2**16))
def test_two_distributions_on_one_support_keep_each_ones_mass_at_its_ids(
    size_a: int, size_b: int, seed: int
) -> None:
    """What `np.union1d` and a scatter give, empty candidates and id 0 included."""
    rng = np.random.default_rng(seed)
    ids_a = np.sort(rng.choice(64, size_a, replace=False))
    ids_b = np.sort(rng.choice(64, size_b, replace=False))
    a, b = rng.random(size_a), rng.random(size_b)
    ids, on_a, on_b = on_one_support(ids_a, a, ids_b, b)
    np.testing.assert_array_equal(ids, np.union1d(ids_a, ids_b))
    for own_ids, own, out in ((ids_a, a, on_a), (ids_b, b, on_b)):
        np.testing.assert_array_equal(out[np.isin(ids, own_ids)], own)
        assert not out[~np.isin(ids, own_ids)].any()
