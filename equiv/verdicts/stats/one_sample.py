"""Tests of one sample against the distributions it was stated to be drawn from: emitted
tokens against their chain distributions (PIT uniformity, the top token, the temperature) and
draft tokens against the acceptance rule ``min(1, p/q)`` (forced decisions, acceptance rate)."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from scipy import stats as sps

from equiv.errors import ConfigError
from equiv.verdicts.stats.power import power_detail
from equiv.verdicts.stats.result import FloatArray, TestResult, check_alpha, not_enough

__all__ = [
    "FORCED_TOL",
    "acceptance_rate_test",
    "forced_decisions_test",
    "pit_uniformity_test",
    "randomized_pit",
    "temperature_test",
    "top_token_test",
]

FORCED_TOL = 1e-6  # rounding between an engine's chain and equiv's, for forced decisions


def randomized_pit(
    mass_before: npt.ArrayLike, p_token: npt.ArrayLike, rng: np.random.Generator
) -> FloatArray:
    """Randomised probability integral transform of discrete draws: ``u = F(x-) + V * P(x)``.

    ``mass_before`` and ``p_token`` come from `equiv.engines.chain.pit_position`; ``V ~ U(0, 1)``
    independent. Under H0 "each token is a draw from its stated distribution" every ``u`` is
    exactly U(0, 1) and independent of the others (Brockwell 2007, *Stat. Probab. Lett.* 77;
    Czado, Gneiting & Held 2009, *Biometrics* 65). With tokens ranked by probability descending,
    a sampler biased toward likely tokens (e.g. greedy acceptance) pushes ``u`` toward 0.
    Results are clipped to [0, 1] against rounding.
    """
    mb = np.asarray(mass_before, dtype=np.float64)
    pt = np.asarray(p_token, dtype=np.float64)
    if mb.shape != pt.shape:
        raise ValueError(f"mass_before {mb.shape} and p_token {pt.shape} differ in shape")
    u: FloatArray = np.clip(mb + rng.random(mb.shape) * pt, 0.0, 1.0)
    return u


def pit_uniformity_test(
    u: npt.ArrayLike, *, alpha: float, bins: int = 10, effect_w: float = 0.1
) -> TestResult:
    """Chi-square goodness of fit of PIT values against U(0, 1).

    H0: the ``u`` are i.i.d. U(0, 1) (the tokens were drawn from the stated distributions). The
    ``u`` are counted in ``bins`` equal-width bins (fewer when ``n < 5 * bins``, so that every
    bin expects at least 5; below 10 values there is no test) and compared with ``n / bins`` each
    (``scipy.stats.chisquare``, ``df = bins - 1``). ``effect`` is the observed Cohen's ``w =
    sqrt(X2 / n)``; ``power`` is `chi2_power` at ``w = effect_w``, and ``detail`` adds the
    smallest ``w`` detectable with power 0.95 (`min_detectable_w`).
    """
    check_alpha(alpha)
    if bins < 2:
        raise ConfigError(f"bins={bins!r} is below 2; pass a value such as 10")
    x = np.asarray(u, dtype=np.float64).reshape(-1)
    if x.size and (np.isnan(x).any() or x.min() < 0.0 or x.max() > 1.0):
        raise ValueError("PIT values must lie in [0, 1]; build them with randomized_pit")
    n = int(x.size)
    name = "pit_uniformity"
    if n < 10:
        return not_enough(name, alpha, n, f"{n} PIT values; the chi-square needs 10 or more")
    asked, bins = bins, max(2, min(bins, n // 5))  # >= 5 expected per bin, or it over-rejects
    counts, _ = np.histogram(x, bins=bins, range=(0.0, 1.0))
    res = sps.chisquare(counts)
    stat = float(res.statistic)
    df = bins - 1
    power, pdetail = power_detail(n, df, alpha, effect_w)
    fewer = "" if bins == asked else f" (not {asked}: {n} values keep 5 expected per bin)"
    detail = (
        f"{bins} equal-width bins{fewer}, counts {counts.tolist()}; effect is Cohen's w; {pdetail}"
    )
    w = math.sqrt(stat / n)
    return TestResult(name, stat, float(res.pvalue), alpha, n, df, power, w, detail)


def top_token_test(
    is_top: npt.ArrayLike, p_top: npt.ArrayLike, *, alpha: float, shift: float = 0.05
) -> TestResult:
    """How often the most probable token was emitted, against how often the logits imply.

    H0: token i is the top token with probability ``p_top[i]`` independently, so the count X is
    Poisson-binomial with mean ``E = sum p`` and variance ``V = sum p (1 - p)``; the statistic
    is ``z = (X - E) / sqrt(V)``, the p-value the exact two-sided Poisson-binomial one
    (``min(1, 2 min(P[X <= x], P[X >= x]))``, `scipy.stats.poisson_binom`). Aimed at
    the commonest sampler bias, toward likely tokens (greedy-like acceptance), which the PIT
    spreads over its bins. ``effect`` is the observed excess rate ``(X - E) / n``; ``power`` is for
    every ``p_top`` raised by ``shift`` (capped at 1); ``detail`` gives the shift detectable
    with power 0.95.
    """
    check_alpha(alpha)
    top = np.asarray(is_top, dtype=np.float64).reshape(-1)
    p = np.asarray(p_top, dtype=np.float64).reshape(-1)
    name = "top_token"
    if top.shape != p.shape:
        raise ValueError(f"is_top {top.shape} and p_top {p.shape} differ in shape")
    n = int(p.size)
    var = float(np.sum(p * (1.0 - p)))
    if var < 1.0:
        return not_enough(name, alpha, n, f"variance {var:.2f} < 1: the top token is near-certain")
    x, mean = float(top.sum()), float(p.sum())
    z = (x - mean) / math.sqrt(var)
    z_crit = float(sps.norm.isf(alpha / 2))
    lam = float(np.minimum(shift, 1.0 - p).sum()) / math.sqrt(var)
    power = float(sps.norm.sf(z_crit - lam) + sps.norm.cdf(-z_crit - lam))
    mde = (z_crit + float(sps.norm.isf(0.05))) * math.sqrt(var) / n
    detail = (
        f"top token emitted {x:.0f} times, logits imply {mean:.1f} +- {math.sqrt(var):.1f}; "
        f"power {power:.3f} for a shift of {shift:g} in its probability; "
        f"shift detectable with power 0.95: {mde:.4f}"
    )
    return TestResult(
        name, z, _poisson_binom_p(p, int(x)), alpha, n, None, power, (x - mean) / n, detail
    )


def _pits_and_weights(
    u: npt.ArrayLike, sensitivity: npt.ArrayLike
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """`temperature_test`'s inputs checked: the PITs, and the weights ``|k|``."""
    x = np.asarray(u, dtype=np.float64).reshape(-1)
    signed = np.asarray(sensitivity, dtype=np.float64).reshape(-1)
    if x.shape != signed.shape:
        raise ValueError(f"u {x.shape} and sensitivity {signed.shape} differ in shape")
    if x.size and (np.isnan(x).any() or x.min() < 0.0 or x.max() > 1.0):
        raise ValueError("PIT values must lie in [0, 1]; build them with randomized_pit")
    if signed.size and not (signed <= 1e-9).all():
        raise ValueError("sensitivities must be <= 0; build them with chain_sensitivity")
    weights: npt.NDArray[np.float64] = -np.minimum(signed, 0.0)
    return x, weights


def temperature_test(
    u: npt.ArrayLike,
    sensitivity: npt.ArrayLike,
    *,
    alpha: float,
    rel_error: float = 0.1,
) -> TestResult:
    """Were the tokens drawn at the stated temperature, or colder or hotter?

    The family ``p_λ(x) ∝ p(x)**λ`` tempers each position's chain distribution ``p`` (λ = 1 under
    H0; λ > 1 a colder sampler: greedy-ish acceptance, a temperature applied too low; λ < 1 a
    hotter one). The statistic weighs the normal scores ``Z = Φ⁻¹(u)`` of the randomized PITs
    ``u`` (`randomized_pit`, tokens ranked by probability descending) by each position's
    sensitivity ``k = d/dλ E_λ[Z]`` (`equiv.verdicts.sampling.token_evidence.chain_sensitivity`)::

        T = Σ k Z / sqrt(Σ k²)        (k <= 0, so T > 0: colder)

    Under H0 each ``Z`` is exactly N(0, 1) given everything before it, whatever the row, and
    ``k`` is fixed before the token is drawn: ``Σ k Z`` is a martingale with Gaussian
    increments, and ``T`` is N(0, 1) by the martingale central limit theorem (exactly, were the
    weights fixed in advance; they depend on earlier tokens through the rows). The p-value is
    two-sided. Near-certain positions have ``k ≈ 0`` and weigh nothing: the test
    spends its power where the tokens carry evidence. (The likelihood score ``Σ (log p(x) -
    E_p[log p])`` is the locally best statistic, but at a peaked position one draw of a rare
    token moves it by many standard deviations: its normal p-values were false alarms at
    temperature 0.2. The normal scores keep every position's influence Gaussian.)
    To first order ``T ~ N((λ - 1) sqrt(Σ k²), 1)``: ``power`` is against a temperature off by
    ``rel_error`` (λ = 1 ± rel_error), and ``effect`` the estimated ``λ - 1 = T / sqrt(Σ k²)``.
    Below ``Σ k² = 1`` there is no test.
    """
    check_alpha(alpha)
    x, k = _pits_and_weights(u, sensitivity)
    n = int(np.count_nonzero(k))
    name = "temperature"
    info = float(np.dot(k, k))
    if info < 1.0:
        why = f"sensitivity Σk² = {info:.2f} < 1 over {n} tokens: near-certain tokens"
        return not_enough(name, alpha, n, why)
    # k <= 0 at every position (a colder draw ranks earlier: smaller u, smaller Z), so with
    # |k| as the weight a colder sampler makes T positive.
    z_scores = sps.norm.ppf(np.clip(x, 1e-16, 1.0 - 1e-16))
    t = -float(np.dot(k, z_scores)) / math.sqrt(info)
    z_crit = float(sps.norm.isf(alpha / 2))
    shift = rel_error * math.sqrt(info)
    power = float(sps.norm.sf(z_crit - shift) + sps.norm.cdf(-z_crit - shift))
    need = ((z_crit + float(sps.norm.isf(1 - 0.8))) / rel_error) ** 2
    effect = t / math.sqrt(info)
    detail = (
        f"normal scores of the randomized PIT over {n} tokens weighed by their sensitivity "
        f"(Σk² = {info:.1f}): the tokens look {'colder' if t > 0 else 'hotter'} than the stated "
        f"temperature, λ - 1 = {effect:+.3f}; power {power:.3f} for a temperature off by "
        f"{rel_error:.0%} (power 0.8 needs Σk² = {need:.0f})"
    )
    p_value = float(2 * sps.norm.sf(abs(t)))
    return TestResult(name, t, p_value, alpha, n, None, power, effect, detail)


def _poisson_binom_p(p: FloatArray, x: int) -> float:
    """Exact two-sided p-value of a count ``x`` of independent Bernoulli(p_i) successes."""
    dist = sps.poisson_binom(p)
    return min(1.0, 2.0 * min(float(dist.cdf(x)), float(dist.sf(x - 1))))


def _decisions(
    a: npt.ArrayLike, accepted: npt.ArrayLike
) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
    prob = np.asarray(a, dtype=np.float64).reshape(-1)
    acc = np.asarray(accepted, dtype=np.float64).reshape(-1) > 0.5
    if prob.shape != acc.shape:
        raise ValueError(f"a {prob.shape} and accepted {acc.shape} differ in shape")
    if prob.size and (np.isnan(prob).any() or prob.min() < 0.0 or prob.max() > 1.0):
        raise ValueError("acceptance probabilities must lie in [0, 1]")
    return prob, acc


def forced_decisions_test(
    a: npt.ArrayLike,
    accepted: npt.ArrayLike,
    q_token: npt.ArrayLike,
    *,
    alpha: float,
    tol: float = FORCED_TOL,
    flip: float = 0.01,
) -> TestResult:
    """Draft tokens the acceptance rule must accept or must reject, and how many went wrong.

    H0: draft token i is accepted with probability ``a_i = min(1, p(x_i) / q(x_i))``. Where
    ``a_i >= 1 - tol`` (``p(x) >= q(x)``: the rule must accept) or ``a_i <= tol`` (``p(x) = 0``:
    it must reject) a wrong decision has probability at most ``tol`` (rounding between the
    engine's chain and equiv's), and a draft token outside the draft's own chain
    (``q(x) = 0``) cannot occur. With V such violations among m forced decisions, ``p = P[Binom(m,
    tol) >= V]`` (exact tail; it bounds the Poisson-binomial). This is the test that catches an
    acceptance rule that is not ``min(1, p/q)``: a greedy or "top-2" verifier rejects tokens with
    ``p >= q``. ``power``: for ``flip`` of the forced decisions wrong; ``effect``: V / m.
    """
    check_alpha(alpha)
    prob, acc = _decisions(a, accepted)
    qx = np.asarray(q_token, dtype=np.float64).reshape(-1)
    if qx.shape != prob.shape:
        raise ValueError(f"q_token {qx.shape} and a {prob.shape} differ in shape")
    must_accept = prob >= 1.0 - tol
    must_reject = prob <= tol
    forced = must_accept | must_reject | (qx <= 0.0)
    wrong = (must_accept & ~acc) | (must_reject & acc) | (qx <= 0.0)
    m, v = int(forced.sum()), int(wrong.sum())
    name = "forced_decisions"
    if m == 0:
        return not_enough(name, alpha, 0, "no draft token had p >= q or p = 0")
    p_value = float(sps.binom.sf(v - 1, m, tol)) if v else 1.0
    v_crit = int(sps.binom.isf(alpha, m, tol)) + 1  # smallest V with P[Binom >= V] <= alpha
    power = float(sps.binom.sf(v_crit - 1, m, flip))
    detail = (
        f"{v} of {m} forced decisions wrong ({int((must_accept & ~acc).sum())} draft tokens with "
        f"p >= q rejected, {int((must_reject & acc).sum())} with p = 0 accepted, "
        f"{int((qx <= 0.0).sum())} outside the draft's chain); {v_crit} would reject; "
        f"power {power:.3f} if {flip:g} of them were wrong"
    )
    return TestResult(name, float(v), p_value, alpha, m, None, power, v / m, detail)


def acceptance_rate_test(
    a: npt.ArrayLike,
    accepted: npt.ArrayLike,
    *,
    alpha: float,
    tol: float = FORCED_TOL,
    shift: float = 0.05,
) -> TestResult:
    """How many of the draft tokens the rule accepts only by chance were accepted.

    H0: over the decisions with ``tol < a_i < 1 - tol``, each is accepted with probability
    ``a_i`` independently, so the count X is Poisson-binomial; exact two-sided p-value
    ``min(1, 2 min(P[X <= x], P[X >= x]))`` (``scipy.stats.poisson_binom``). Catches a ratio
    computed from the wrong probabilities (the draft's at another temperature). ``effect``: the
    excess acceptance rate ``(X - E) / n``; ``power`` (normal approximation) for every ``a_i``
    raised by ``shift`` (capped at 1).
    """
    check_alpha(alpha)
    prob, acc = _decisions(a, accepted)
    chance = (prob > tol) & (prob < 1.0 - tol)
    prob, acc = prob[chance], acc[chance]
    n = int(prob.size)
    name = "acceptance_rate"
    if n == 0:
        return not_enough(name, alpha, 0, "no draft token had 0 < p < q")
    x, mean = int(acc.sum()), float(prob.sum())
    p_value = _poisson_binom_p(prob, x)
    sd = math.sqrt(float(np.sum(prob * (1.0 - prob))))
    z_crit = float(sps.norm.isf(alpha / 2))
    lam = float(np.minimum(shift, 1.0 - prob).sum()) / sd
    power = float(sps.norm.sf(z_crit - lam) + sps.norm.cdf(-z_crit - lam))
    detail = (
        f"{x} of {n} accepted where the rule implies {mean:.1f} +- {sd:.1f}; power {power:.3f} "
        f"for a shift of {shift:g} in the acceptance probability"
    )
    return TestResult(name, (x - mean) / sd, p_value, alpha, n, None, power, (x - mean) / n, detail)
