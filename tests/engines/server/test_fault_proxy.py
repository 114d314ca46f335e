"""A faulty server, for proof: equiv, talking only HTTP, labels a corrupted speculative
llama-server ``sampler-bug``, and the unmodified pair not.

The proxy (tests/fault_proxy.py) sits in front of the real speculative llama-server. At temp 0
it swaps one token for its row's runner-up (a relaxed acceptance) and lets the server continue;
at temp > 0 it replaces sampled tokens by the row's top token with probability 0.5 where the
server reported the row (a greedy-ish verifier), or draws them again at half the temperature (a
sampler at the wrong temperature).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fault_proxy import FaultProxy
from llama_server import prompts, server_bin

from equiv.cli.main import main
from equiv.config import Mode, RunConfig, SamplingConfig
from equiv.engines import load_factory
from equiv.engines.server.engine import ServerEngine
from equiv.engines.server.settings import ServerSettings
from equiv.records import ResultsFile
from equiv.records.verdict import Label, verdict_of
from equiv.run.plan import plan
from equiv.run.runner import Runner
from equiv.verdicts.verdict_evidence import Temp0Evidence

pytestmark = [pytest.mark.model, pytest.mark.server]

TEMP0_PROMPTS = ["code/fib_lt", "chat/capital_france", "reasoning/add_two_digit"]
SAMPLING_PROMPTS = ["chat/haiku_autumn"]


@pytest.fixture(scope="module")
def servers(model_pair: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """Two llama-servers started by equiv (4 slots each): the target alone, target + draft."""
    config = RunConfig(target=model_pair.target, draft=model_pair.draft, max_tokens=48)
    settings = ServerSettings(
        server_bin=server_bin(), log_dir=str(tmp_path_factory.mktemp("logs")), concurrency=4
    )
    baseline = ServerEngine(config, speculative=False, settings=settings)
    try:
        speculative = ServerEngine(config, speculative=True, settings=settings)
    except BaseException:
        baseline.close()
        raise
    yield baseline.url, speculative.url
    baseline.close()
    speculative.close()


def _run(config: RunConfig, baseline: str, speculative: str, path: Path, keys: list[str]):
    options = (("baseline_url", baseline), ("speculative_url", speculative))
    run = replace(config, engine_options=options)
    with Runner(run, load_factory("server"), path, controls=False) as runner:
        runner.run(plan(prompts(keys), run))
    return ResultsFile(path)


def test_a_relaxed_acceptance_at_temp0_is_a_sampler_bug_over_http(model_pair, servers, tmp_path):
    config = RunConfig(target=model_pair.target, draft=model_pair.draft, max_tokens=48)
    with FaultProxy(servers[1], fault="swap", min_gap=2.0) as proxy:
        results = _run(config, servers[0], proxy.url, tmp_path / "r.jsonl", TEMP0_PROMPTS)
        swapped = proxy.faults
    records = [r.to_dict() for r in results.results()]
    assert swapped > 0, "the proxy found no runner-up trailing by 2 logits to swap in"
    bugs = [r for r in records if verdict_of(r).label is Label.SAMPLER_BUG]
    for record in records:
        print(record["key"], verdict_of(record).label, verdict_of(record).reason)
    # each swap is the first divergence (unless the server diverged earlier by drift)
    assert len(bugs) >= swapped - sum(
        verdict_of(r).label is Label.NUMERIC_DRIFT for r in records
    ), "a swapped token was not labelled sampler-bug"
    assert bugs, "no swapped prompt was labelled sampler-bug"
    for record in bugs:
        rescored = Temp0Evidence.from_dict(verdict_of(record).evidence).rescored
        assert rescored is not None
        assert rescored.drift_bound is not None
        assert rescored.gap_single is not None
        assert rescored.gap_single > rescored.drift_bound.bound


def test_a_speculative_server_that_fails_mid_run_is_a_finding_and_keeps_what_finished(
    model_pair, servers, tmp_path, capsys
):
    """Through the command line: the speculative server answers the first generation, then
    HTTP 500 (as vLLM's CPU build did). Exit 6 naming the path; the finished result, the failure
    as a control, and a summary and report of what finished are all on disk."""
    out = tmp_path / "run"
    with FaultProxy(servers[1], fault="fail", after=1) as proxy:
        argv = ["run", "--engine", "server", "--target", model_pair.target.path]
        argv += ["--baseline-url", servers[0], "--speculative-url", proxy.url]
        argv += ["--max-tokens", "8", "--out", str(out)]
        code = main([*argv, "--prompt", TEMP0_PROMPTS[0], "--prompt", TEMP0_PROMPTS[1]])
        assert proxy.faults == 1
    err = capsys.readouterr().err
    assert code == 6, err
    results = ResultsFile(out / "results.jsonl")
    (finished,) = [r.key for r in results.results()]  # the first answered, the second refused
    (lost,) = {f"{key}::temp0" for key in TEMP0_PROMPTS[:2]} - {finished}
    assert f"the speculative path failed on {lost}, where the baseline answered" in err
    assert "out of bounds" in err  # the server's own message
    assert "Traceback" not in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verdict"]["label"] == "inconclusive"
    assert "the run did not finish" in summary["verdict"]["reason"]
    failed = [c for c in summary["controls"] if not c["ok"]]
    assert [c["event"] for c in failed] == ["engine-failure"], summary["controls"]
    assert "engine-failure" in (out / "report.html").read_text()


def _sampling_labels(model_pair, servers, tmp_path, fault: str, **kwargs: float):
    # 48 seeds x 48 tokens: 24 were too few for the greedy-ish verifier once sampler-bug needs
    # the comparison with the placebo (the difference of two paths' residuals has twice the
    # variance of one).
    seeds = tuple(range(1, 49))
    config = RunConfig(
        target=model_pair.target,
        draft=model_pair.draft,
        max_tokens=48,
        mode=Mode.SAMPLING,
        sampling=SamplingConfig(temp=0.8),
        seeds=seeds,
    )
    with FaultProxy(servers[1], fault=fault, **kwargs) as proxy:
        results = _run(config, servers[0], proxy.url, tmp_path / "r.jsonl", SAMPLING_PROMPTS)
        assert proxy.faults > 0
    analyses = [a.to_dict() for a in results.analyses()]
    assert len(analyses) == len(SAMPLING_PROMPTS)
    for analysis in analyses:
        print(fault, analysis["key"], verdict_of(analysis).reason)
    (run,) = results.runs()
    print(fault, "run", run.verdict.reason)
    return [verdict_of(a).label for a in analyses], run


def test_a_greedy_ish_verifier_is_a_sampler_bug_over_http(model_pair, servers, tmp_path):
    # every non-top token that has a row replaced by the top one: at rate 0.5 the top-token
    # excess over the placebo (about +0.026 a token in 2,304) sat at z ~ 2.6 against a critical
    # value of 2.6-3.0, a coin flip on another CPU; at 1.0 it sits near z ~ 5
    labels, run = _sampling_labels(model_pair, servers, tmp_path, "greedy", rate=1.0)
    assert Label.SAMPLER_BUG in labels, labels
    # pooled over the prompts; confirmed against batched rows by the prompt's own follow-up, so
    # the run asks no follow-up of its own
    assert run.verdict.label is Label.SAMPLER_BUG, run.verdict.reason
    # the proxy replaces tokens where the server reported their rows: the tests against those
    # rows see it with nothing between (no follow-up asked), as does the prompt's own
    assert "reported sampling from reject" in run.verdict.reason
    assert "batched" not in run.figures


def test_a_sampler_at_the_wrong_temperature_is_a_sampler_bug_over_http(
    model_pair, servers, tmp_path
):
    # the server samples at 0.8; where it reported the row, the proxy draws again at 0.4
    labels, run = _sampling_labels(model_pair, servers, tmp_path, "wrong_temp", temp=0.4)
    assert Label.SAMPLER_BUG in labels, labels
    assert run.verdict.label is Label.SAMPLER_BUG, run.verdict.reason


def test_the_unmodified_pair_gets_no_sampler_bug_over_http(model_pair, servers, tmp_path):
    seeds = tuple(range(1, 9))
    config = RunConfig(
        target=model_pair.target,
        draft=model_pair.draft,
        max_tokens=32,
        mode=Mode.SAMPLING,
        sampling=SamplingConfig(temp=0.8),
        seeds=seeds,
    )
    with FaultProxy(servers[1], fault=None) as proxy:
        results = _run(config, servers[0], proxy.url, tmp_path / "r.jsonl", SAMPLING_PROMPTS)
    analyses = [a.to_dict() for a in results.analyses()]
    for analysis in analyses:
        verdict = verdict_of(analysis)
        print(analysis["key"], verdict.reason)
        assert verdict.label is not Label.SAMPLER_BUG, verdict.reason
        names = {t["name"] for t in analysis["tests"]}
        # over HTTP both paths' samples were re-scored on the baseline server and compared
        assert {"pit:vs-placebo", "top-token:vs-placebo", "temperature:vs-placebo"} <= names
        assert analysis["placebo"]["tests"]  # the placebo's own one-sample tests
        assert analysis["placebo"]["fidelity"]["positions"] > 0  # re-scoring's fidelity
    (run,) = results.runs()
    print("run", run.verdict.reason)
    assert run.verdict.label is not Label.SAMPLER_BUG, run.verdict.reason
    pooled = run.figures["pooled"]
    assert pooled["prompts"] == len(SAMPLING_PROMPTS)  # every prompt pooled
    assert {t["name"] for t in pooled["tests"]} == {
        "pit:pooled",
        "top-token:pooled",
        "temperature:pooled",
        "support:pooled",
        # the speculative server's tokens where it reported the row it sampled from
        "pit:reported",
        "top-token:reported",
        "temperature:reported",
    }
    checks = {t["name"] for t in pooled["instrument"]}
    assert {"pit:reported", "top-token:reported", "temperature:reported"} <= checks
    # what the re-scored rows move the temperature estimate by on those tokens, and on the
    # placebo's (the instrument's own error)
    assert pooled["drift"]["tokens"] > 0
    assert pooled["drift"]["placebo"] is not None
