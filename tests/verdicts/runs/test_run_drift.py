"""Drift at run level: every shared row of every prompt pooled, as llama-perplexity reports it."""

import json

import numpy as np
import pytest

from equiv.records import Drift
from equiv.report.summary_json import summary_json, summary_of
from equiv.verdicts.runs.drift import run_drift
from equiv.verdicts.temp0.compare import drift
from equiv.verdicts.temp0.drift import drift_metrics


def _rows(rng, n, vocab=64, noise=0.3):
    a = rng.normal(size=(n, vocab)).astype(np.float32)
    return a, (a + noise * rng.normal(size=(n, vocab))).astype(np.float32)


def test_percentiles_pool_every_row_of_every_prompt():
    rng = np.random.default_rng(7)
    pairs = [_rows(rng, n) for n in (5, 40, 1)]
    drifts = [drift(a, b) for a, b in pairs]
    pooled = np.concatenate([[float(f"{x:.4g}") for x in drift_metrics(a, b, rows=True).kl_rows]
                             for a, b in pairs])  # fmt: skip
    run = run_drift([*drifts, None])
    assert run is not None
    assert (run.prompts, run.rows, run.rows_with_kl) == (3, 46, 46)
    assert run.kl_p999 == pytest.approx(np.percentile(pooled, 99.9))
    assert run.kl_p99 == pytest.approx(np.percentile(pooled, 99))
    assert run.kl_p95 == pytest.approx(np.percentile(pooled, 95))
    assert run.kl_median == pytest.approx(np.median(pooled))
    all_a = np.concatenate([a for a, _ in pairs])
    all_b = np.concatenate([b for _, b in pairs])
    whole = drift_metrics(all_a, all_b)  # the run as one stack of rows
    assert run.kl_mean == pytest.approx(whole.kl_mean, rel=1e-6)
    assert run.kl_max == pytest.approx(whole.kl_max, rel=1e-6)
    assert run.max_abs_logit_delta == pytest.approx(whole.max_abs_logit_delta, rel=1e-5)
    assert run.same_top == pytest.approx(whole.top1_agreement)
    assert run.kl_median < run.kl_p95 < run.kl_p99 <= run.kl_p999 <= run.kl_max
    assert "drift over 46 shared rows of 3 prompt(s): mean KL " in run.line
    assert "99.9% " in run.line


def test_older_records_without_row_kl_give_no_percentiles_and_say_so():
    old = {"positions": 4, "max_abs_delta_logit": 0.5, "mean_kl": 0.01, "max_kl": 0.03,
           "top1_agreement": 0.75}  # fmt: skip
    run = run_drift([Drift.from_dict(old)])
    assert run is not None
    assert (run.rows, run.rows_with_kl, run.kl_p99, run.same_top) == (4, 0, None, 0.75)
    assert "99%" not in run.line
    assert "no per-row KL recorded" in run.line
    assert run_drift([None, Drift.from_dict({**old, "positions": 0})]) is None


def test_summary_json_of_a_results_file_is_strict_json_with_the_figures(tmp_path):
    path = "tests/fixtures/temp0_results.jsonl"
    data = json.loads(summary_json(summary_of(path)))
    counts = data["labels"]
    assert sum(counts.values()) == data["prompts"] == 7
    assert data["verdict"]["label"] in counts
    for label, n in counts.items():
        rate = data["rates"][label]
        assert rate["rate"] == pytest.approx(n / 7)
        assert rate["low"] <= rate["rate"] <= rate["high"]
    assert data["controls"][0]["event"] == "determinism"
    assert data["failed_controls"] == 0
    assert data["speed"]["drafted"] >= data["speed"]["accepted"] > 0
    assert data["drift"]["rows"] > 0
    assert data["mode"] == "temp0"
    assert data["quality"] == []
