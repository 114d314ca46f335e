"""`TokenAlternatives.from_row`: the top k of a logits row, exactly as a full sort orders them."""

from __future__ import annotations

import numpy as np
import pytest

from equiv.records import TokenAlternatives


def _sorted_top(row: np.ndarray, k: int) -> tuple[int, ...]:
    order = np.lexsort((np.arange(row.size), -row))  # descending logit, ties by ascending id
    return tuple(int(i) for i in order[:k])


@pytest.mark.parametrize("scale", [0.5, 3.0, 8.0])
@pytest.mark.parametrize("peak", [0.0, 6.0, 12.0, 20.0, 30.0, 50.0])
def test_top_k_matches_a_full_sort(scale, peak):
    rng = np.random.default_rng(int(scale * 10 + peak))
    for _ in range(5):
        row = (rng.standard_normal(5000) * scale).astype(np.float32)
        row[rng.integers(5000)] += peak
        alts = TokenAlternatives.from_row(row, 8)
        assert alts.ids == _sorted_top(row, 8)
        assert alts.logits == tuple(round(float(row[i]), 5) for i in alts.ids)


def test_ties_within_the_window_go_to_the_smaller_id():
    row = np.full(100, -5.0, dtype=np.float32)
    row[[40, 10, 70]] = 2.0
    assert TokenAlternatives.from_row(row, 2).ids == (10, 40)


def test_k_larger_than_the_vocabulary():
    row = np.array([0.5, 2.0, -1.0], dtype=np.float32)
    assert TokenAlternatives.from_row(row, 8).ids == (1, 0, 2)
