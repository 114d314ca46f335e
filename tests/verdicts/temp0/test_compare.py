import numpy as np
import pytest

from equiv.records import Generation, TokenAlternatives
from equiv.verdicts.temp0.compare import Comparison, compare, drift


def _gen(path: str, tokens: list[int], rows: np.ndarray) -> Generation:
    return Generation(
        path=path,
        prompt_tokens=(1,),
        tokens=tuple(tokens),
        pieces=tuple(f"<{t}>" for t in tokens),
        text="".join(f"<{t}>" for t in tokens),
        stop_reason="length",
        alternatives=tuple(TokenAlternatives.from_row(r, 3) for r in rows),
        t_prompt_s=0.0,
        t_decode_s=0.0,
        logits=rows.astype(np.float32),
    )


def test_identical_generations_compare_equal_with_zero_drift():
    rows = np.random.default_rng(0).normal(size=(4, 16)).astype(np.float32)
    tokens = [int(r.argmax()) for r in rows]
    result = compare(_gen("baseline", tokens, rows), _gen("speculative", tokens, rows))
    assert result.identical
    assert result.divergence is None
    assert result.edit_distance == 0
    assert result.drift is not None
    assert result.drift.max_abs_logit_delta == 0.0
    assert result.drift.top1_agreement == 1.0


def test_near_tie_flip_is_recorded_with_both_margins():
    base = np.zeros((3, 8), dtype=np.float32)
    base[:, 1] = 5.0
    base[1, 3] = 4.99  # a near-tie at position 1
    spec = base.copy()
    spec[1, 3] = 5.02  # numeric noise flips it
    b = _gen("baseline", [1, 1, 1], base)
    s = _gen("speculative", [1, 3, 1], spec)
    result = compare(b, s)
    assert not result.identical
    div = result.divergence
    assert div is not None
    assert div.position == 1 == result.common_prefix
    assert (div.baseline_token, div.speculative_token) == (1, 3)
    assert div.margin_baseline == pytest.approx(0.01, abs=1e-5)
    assert div.margin_speculative == pytest.approx(0.02, abs=1e-5)
    assert div.delta_logit_at_divergence == pytest.approx(0.03, abs=1e-5)
    assert result.edit_distance == 1
    assert ("replace", 1, 2, 1, 2) in result.opcodes
    assert Comparison.from_dict(result.to_dict()) == result


def test_drift_kl_is_positive_when_rows_differ():
    a = np.array([[2.0, 0.0, -1.0]], dtype=np.float32)
    b = np.array([[0.0, 2.0, -1.0]], dtype=np.float32)
    d = drift(a, b)
    assert d.kl_mean > 0.1
    assert d.top1_agreement == 0.0
    assert d.max_abs_logit_delta == pytest.approx(2.0)


def test_generation_that_stops_early_diverges_at_its_end():
    rows = np.zeros((3, 4), dtype=np.float32)
    result = compare(_gen("baseline", [0, 0], rows[:2]), _gen("speculative", [0, 0, 1], rows))
    assert result.divergence is not None
    assert result.divergence.position == 2
    assert result.divergence.baseline_token is None
    assert result.divergence.margin_baseline is None
