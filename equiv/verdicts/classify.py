"""The verdict and its evidence, for each prompt x mode and for the run.

Rules (also in the README, each with the evidence it needs):

Misconfiguration first: when the two paths' fingerprints differ in anything that can change
output (target file or quant, context or batch sizes, threads, flash attention, KV type, chat
template, sampler settings, library version), the two runs were not the same experiment and every
result is ``misconfiguration``, with each difference explained.

Temperature 0, at the first divergent position d (tokens a from the baseline, b from the
speculative path), with the target re-scored over the common prefix one token at a time (S) and
in one batch (B), as plain decoding and draft verification evaluate it:

- ``sampler-bug`` if the speculative path emitted b although its own row prefers another token
  (margin < -1e-4), or if the row it says it used is not the target's (max |Δlogit| from B_d above
  max(4 x the S/B drift at d, 1.0) with a different argmax), or, without its rows, if the target
  prefers a by more than batching can move a gap here (``S_d[a] - S_d[b] > 2 max|S_d - B_d|``) —
  then no numeric drift explains b;
- ``numeric-drift`` if each path emitted its own argmax and the gap it flipped is within what
  kernel/batch differences move (``gap <= 2 max|logit difference|`` between the evaluation paths at
  d): a near-tie;
- ``inconclusive`` when neither rows nor re-scoring are available.

Temperature > 0 from the tests of `equiv.verdicts.sampling_evidence` (Holm-adjusted within the
prompt at the prompt's share alpha/P of the run's level):

- ``sampler-bug`` if a sampler-consistency test (randomized PIT, or the top-token count) rejects
  on either path (its tokens are not draws from its own logits and chain), or the logits the
  speculative sampler used are not the target's (mean KL against the target's single-token
  re-scoring > 0.1 nats);
- ``numeric-drift`` if only the two-sample tests reject;
- ``equivalent`` if nothing rejects and the consistency test had power >= 0.8 for Cohen's w = 0.1;
- ``inconclusive`` otherwise, saying how many more tokens would give that power.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from equiv.records import Generation
from equiv.verdicts.labels import Label, Verdict
from equiv.verdicts.stats import min_detectable_w

__all__ = [
    "KL_NOT_TARGET",
    "MIN_POWER",
    "Rescorer",
    "classify_sampling",
    "classify_temp0",
    "fingerprint_differences",
    "run_verdict",
]

MIN_POWER = 0.8
KL_NOT_TARGET = 0.1
OWN_ARGMAX_TOL = 1e-4

# Keys that differ between the paths by design.
_EXPECTED = {"path", "logits_all", "draft_sha256", "draft_quant", "draft_config", "engine"}
_WHY = {
    "target_sha256": "the speculative path ran another target file; a different quant or model "
    "is not the same experiment",
    "target_quant": "the target quantization differs",
    "n_ctx": "context sizes differ: a prompt that fits one may be truncated in the other",
    "n_batch": "batch sizes differ: kernels and reduction orders change with them",
    "n_ubatch": "micro-batch sizes differ: kernels and reduction orders change with them",
    "n_threads": "thread counts differ: reduction orders change with them",
    "flash_attn": "flash attention is on in one path only",
    "kv_type": "KV cache types differ",
    "chat_template": "the chat templates differ: the prompts were not the same tokens",
    "sampling": "sampling parameters differ",
    "seed_policy": "seed policies differ (llama-cpp-python's seed 0 means random)",
    "llama_cpp_python": "library versions differ",
    "system_info": "CPU features differ (other machines or builds)",
}

Rescorer = Callable[[Sequence[int], Sequence[int], bool], npt.NDArray[np.float32]]


def fingerprint_differences(
    baseline: Mapping[str, Any], speculative: Mapping[str, Any]
) -> list[str]:
    """Every output-relevant difference between the two paths' fingerprints, in plain words."""
    out = []
    for key in sorted(set(baseline) | set(speculative)):
        if key in _EXPECTED or baseline.get(key) == speculative.get(key):
            continue
        a, b = baseline.get(key), speculative.get(key)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            parts = [f"{k} {a.get(k)!r} vs {b.get(k)!r}" for k in sorted(a) if a.get(k) != b.get(k)]
            detail = ", ".join(parts)
        else:
            detail = f"{a!r} vs {b!r}"
        out.append(f"{key}: {detail} ({_WHY.get(key, 'settings differ')})")
    return out


def _misconfiguration(differences: Sequence[str], outputs: str) -> Verdict:
    return Verdict(
        Label.MISCONFIGURATION,
        f"the two paths were not the same experiment ({outputs}): {differences[0]}",
        {"differences": list(differences)},
    )


def _without_rows(baseline: Generation, d: int, a: int, b: int, ev: dict[str, Any]) -> str:
    """What the baseline's own top-k at the divergence says, when nothing else is known (a
    server: no rows, no re-scoring, and no probabilities for speculative-step tokens)."""
    why = "no logits rows and no re-scoring available"
    alts = baseline.alternatives[d] if d < len(baseline.alternatives) else None
    if alts is None or a not in alts.ids:
        return why
    if b not in alts.ids:
        ev["baseline_gap"] = None
        return (
            f"{why}; the speculative token {b} is not among the baseline's top "
            f"{len(alts.ids)} at token {d}: far from a tie"
        )
    rank = alts.ids.index(b)
    gap = alts.logits[alts.ids.index(a)] - alts.logits[rank]
    ev["baseline_gap"] = round(gap, 5)
    return (
        f"{why}; on the baseline's row at token {d} the speculative token {b} is "
        f"{gap:.4f} below {a} (rank {rank + 1}): "
        + ("a near-tie, as batching drift flips" if gap < 1.0 else "wider than drift usually is")
    )


def classify_temp0(
    record: Mapping[str, Any],
    baseline: Generation,
    speculative: Generation,
    *,
    differences: Sequence[str] = (),
    rescore: Rescorer | None = None,
) -> Verdict:
    comparison = record["comparison"]
    if differences:
        same = "outputs identical" if comparison["identical"] else "outputs differ"
        return _misconfiguration(differences, same)
    if comparison["identical"]:
        return Verdict(
            Label.EQUIVALENT,
            f"token IDs identical over {comparison['n_baseline']} tokens",
            {"drift": comparison.get("drift")},
        )
    div = comparison["divergence"]
    d, a, b = div["position"], div["baseline_token"], div["speculative_token"]
    if a is None or b is None:
        return Verdict(Label.INCONCLUSIVE, f"one path ended at token {d}; nothing to compare")
    ev: dict[str, Any] = {
        "position": d,
        "baseline_token": a,
        "speculative_token": b,
        "margin_baseline": div["margin_baseline"],
        "margin_speculative": div["margin_speculative"],
    }
    rows = speculative.logits
    used = rows[d] if rows is not None and d < rows.shape[0] else None
    if used is not None and float(used[b]) < float(used.max()) - OWN_ARGMAX_TOL:
        ev["own_argmax"] = int(used.argmax())
        return Verdict(
            Label.SAMPLER_BUG,
            f"at token {d} the speculative path emitted {b} although its own logits prefer "
            f"{int(used.argmax())} by {float(used.max() - used[b]):.4f}",
            ev,
        )
    if rescore is None:
        if used is not None and (div["margin_baseline"] or 0) >= -OWN_ARGMAX_TOL:
            return Verdict(
                Label.NUMERIC_DRIFT,
                f"at token {d} each path emitted its own argmax (margins "
                f"{div['margin_baseline']:.4f} and {div['margin_speculative']:.4f}); the target "
                "could not be re-scored to size the drift",
                ev,
            )
        return Verdict(Label.INCONCLUSIVE, _without_rows(baseline, d, a, b, ev), ev)
    prefix = [*baseline.tokens[:d], a]
    # At temp 0 the baseline's own rows are the single-token re-scoring of this very prefix.
    if baseline.logits is not None and d < baseline.logits.shape[0]:
        single = baseline.logits[d].astype(np.float64)
    else:
        single = rescore(baseline.prompt_tokens, prefix, False)[d].astype(np.float64)
    batched = rescore(baseline.prompt_tokens, prefix, True)[d].astype(np.float64)
    drift_d = float(np.abs(single - batched).max())
    gap_single = float(single[a] - single[b])
    ev.update(
        gap_single=round(gap_single, 6),
        gap_batched=round(float(batched[a] - batched[b]), 6),
        drift_at_divergence=round(drift_d, 6),
    )
    bound = 2 * drift_d
    if used is not None:
        used64 = used.astype(np.float64)
        deviation = float(np.abs(used64 - batched).max())
        ev["used_row_deviation"] = round(deviation, 6)
        if deviation > max(4 * drift_d, 1.0) and int(used.argmax()) != int(batched.argmax()):
            return Verdict(
                Label.SAMPLER_BUG,
                f"at token {d} the logits the speculative sampler used are not the target's: "
                f"max |Δlogit| {deviation:.3f} from the target's batched re-scoring, while "
                f"batching moves them by {drift_d:.3f} (a row read from the wrong position?)",
                ev,
            )
        bound = 2 * max(drift_d, float(np.abs(used64 - single).max()))
    if gap_single <= bound + OWN_ARGMAX_TOL:
        return Verdict(
            Label.NUMERIC_DRIFT,
            f"near-tie at token {d}: the target prefers {a} over {b} by {gap_single:.4f} "
            f"(single-token) and {ev['gap_batched']:.4f} (batched); evaluation-path differences "
            f"move logits by up to {bound / 2:.4f} here",
            ev,
        )
    return Verdict(
        Label.SAMPLER_BUG,
        f"at token {d} the target prefers {a} over {b} by {gap_single:.4f}, beyond the "
        f"{bound:.4f} that batching can move such a gap here; the speculative path should "
        "not have emitted it",
        ev,
    )


def _test(analysis: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    return next((t for t in analysis["tests"] if t["name"] == name), None)


# The stages of a rejection sampler, tested on their own when the engine reports judgements.
STAGES = {
    "acceptance-forced:speculative": "accept/reject decisions break min(1, p/q): it rejects "
    "draft tokens the rule must accept, or accepts ones it must reject",
    "acceptance-rate:speculative": "acceptance rate is not the one min(1, p/q) implies",
    "residual:speculative": "replacements after a rejection are not draws from norm(max(0, p - q))",
}


def classify_sampling(
    analysis: Mapping[str, Any], *, differences: Sequence[str] = (), has_logits: bool = True
) -> Verdict:
    alpha = analysis["alpha"]
    rejected = [t for t in analysis["tests"] if t["p_adjusted"] < alpha]
    ev: dict[str, Any] = {
        "alpha": alpha,
        "rejected": [t["name"] for t in rejected],
        "same_seed_agreement": analysis["same_seed_agreement"],
        "drift": analysis.get("drift"),
    }
    if differences:
        return _misconfiguration(differences, f"{len(rejected)} test(s) reject")
    spec = _test(analysis, "sampler-consistency:speculative")
    for name, what in STAGES.items():
        test = _test(analysis, name)
        if test is not None and test["p_adjusted"] < alpha:
            return Verdict(
                Label.SAMPLER_BUG,
                f"the speculative sampler's {what} ({name.split(':')[0]} test: Holm-adjusted "
                f"p = {test['p_adjusted']:.2g} < alpha {alpha:.2g}; {test['detail']})",
                ev,
            )
    for path in ("speculative", "baseline"):
        for kind in ("top-token", "sampler-consistency"):
            test = _test(analysis, f"{kind}:{path}")
            if test is not None and test["p_adjusted"] < alpha:
                return Verdict(
                    Label.SAMPLER_BUG,
                    f"the {path} path's tokens are not draws from its own logits and sampler "
                    f"chain ({kind} test: statistic {test['statistic']:.2f}, Holm-adjusted p = "
                    f"{test['p_adjusted']:.2g} < alpha {alpha:.2g}, n = {test['n']} tokens; "
                    f"{test['detail'].split(';')[0]})",
                    ev,
                )
    drift = analysis.get("drift")
    if drift and drift["kl_mean"] > KL_NOT_TARGET:
        return Verdict(
            Label.SAMPLER_BUG,
            f"the logits the speculative sampler used are not the target's: mean KL "
            f"{drift['kl_mean']:.3f} nats against the target's own re-scoring (batching drift is "
            f"typically < 0.01), top-1 agreement {drift['top1_agreement']:.2f}",
            ev,
        )
    if rejected:
        names = ", ".join(t["name"] for t in rejected)
        return Verdict(
            Label.NUMERIC_DRIFT,
            f"both samplers follow their own logits, but the output distributions differ "
            f"({names} reject at alpha {alpha:.2g}): the logits differ between the paths",
            ev,
        )
    power_test = spec if has_logits else _test(analysis, "first-token:two-sample")
    power = (power_test or {}).get("power") or 0.0
    n = (power_test or {}).get("n", 0)
    ev["power"] = power
    what = "sampler-consistency" if has_logits else "first-token two-sample (no logits reported)"
    if power >= MIN_POWER:
        return Verdict(
            Label.EQUIVALENT,
            f"no test rejects at alpha {alpha:.2g}; the {what} test over {n} tokens had power "
            f"{power:.2f} for Cohen's w >= 0.1",
            ev,
        )
    df = (power_test or {}).get("df") or 9
    need = n
    while need < 10**7 and min_detectable_w(max(need, 1), df, alpha=alpha, power=MIN_POWER) > 0.1:
        need = max(2 * need, 16)
    return Verdict(
        Label.INCONCLUSIVE,
        f"no test rejects, but the {what} test over {n} tokens has power only {power:.2f} for "
        f"w >= 0.1; about {need} tokens would reach {MIN_POWER}: add seeds or max_tokens",
        ev,
    )


def run_verdict(labels: Sequence[str], differences: Sequence[str] = ()) -> Verdict:
    """One label for the whole run, from the per-prompt labels."""
    counts = Counter(labels)
    ev = {"counts": dict(counts), "differences": list(differences)}
    order = [
        Label.MISCONFIGURATION,
        Label.SAMPLER_BUG,
        Label.NUMERIC_DRIFT,
        Label.INCONCLUSIVE,
        Label.EQUIVALENT,
    ]
    total = len(labels)
    for label in order:
        if counts.get(label.value):
            n = counts[label.value]
            reason = {
                Label.MISCONFIGURATION: "the two paths were not set up as the same experiment",
                Label.SAMPLER_BUG: f"{n} of {total} prompt(s) show tokens the speculative path's "
                "logits do not support: a sampler-implementation bug",
                Label.NUMERIC_DRIFT: f"{n} of {total} prompt(s) differ only by numeric drift "
                "(near-ties flipped by batched vs single-token kernels); no sampler bug found",
                Label.INCONCLUSIVE: f"{n} of {total} prompt(s) lack the evidence for a verdict",
                Label.EQUIVALENT: f"all {total} prompt(s) equivalent",
            }[label]
            return Verdict(label, reason, ev)
    return Verdict(Label.INCONCLUSIVE, "no results", ev)
