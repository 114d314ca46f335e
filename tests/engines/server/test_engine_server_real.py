"""The server engine against a real llama-server on the default pair, with and without a draft.

The binary comes from ``$EQUIV_LLAMA_SERVER`` or the cache that scripts/build_llama_server.sh
fills (CI runs it first); without one these tests are skipped with that instruction.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from llama_server import prompts, server_bin

from equiv.config import Mode, RunConfig, SamplingConfig
from equiv.engines import load_factory
from equiv.engines.server.api import parse_llama
from equiv.engines.server.engine import ServerEngine
from equiv.engines.server.settings import ServerSettings
from equiv.errors import ConfigError, EngineError
from equiv.models.gguf import read_token_texts
from equiv.models.token_bytes import token_bytes
from equiv.records import ResultsFile
from equiv.records.verdict import Label
from equiv.run.plan import plan
from equiv.run.runner import Runner
from equiv.verdicts.runs.summary import summarize_file
from equiv.verdicts.temp0.classify import fingerprint_differences

pytestmark = [pytest.mark.model, pytest.mark.server]

PROMPTS = ["code/fib_lt", "chat/capital_france", "reasoning/add_two_digit"]
SEEDS = (1, 2, 3)


@pytest.fixture(scope="module")
def server_config(model_pair: Any) -> RunConfig:
    return RunConfig(target=model_pair.target, draft=model_pair.draft, max_tokens=16)


@pytest.fixture(scope="module")
def served(
    server_config: RunConfig, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerEngine, ServerEngine]]:
    settings = ServerSettings(
        server_bin=server_bin(), log_dir=str(tmp_path_factory.mktemp("logs")), concurrency=4
    )
    baseline = ServerEngine(server_config, speculative=False, settings=settings)
    try:
        speculative = ServerEngine(server_config, speculative=True, settings=settings)
    except BaseException:
        baseline.close()
        raise
    yield baseline, speculative
    baseline.close()
    speculative.close()


def test_prompts_tokenize_as_in_process(served, engines):
    """The server's tokenizer and chat template give the in-process engine's token IDs."""
    for prompt in prompts(PROMPTS):
        expected = engines[0].prompt_tokens(prompt)
        assert served[0].prompt_tokens(prompt) == expected, prompt.key
        assert served[1].prompt_tokens(prompt) == expected, prompt.key


def test_temp0_with_and_without_a_draft(served):
    baseline, speculative = served
    assert baseline.capabilities.full_logits is False
    drafted = 0
    for prompt in prompts(PROMPTS):
        tokens = baseline.prompt_tokens(prompt)
        base = baseline.generate(tokens, sampling=SamplingConfig(), seed=None, max_tokens=16)
        spec = speculative.generate(tokens, sampling=SamplingConfig(), seed=None, max_tokens=16)
        for gen in (base, spec):
            assert 0 < gen.n_tokens <= 16
            assert len(gen.alternatives) == gen.n_tokens == len(gen.pieces)
            # temp 0: every emitted token is the top candidate of the row it came from
            for token, alt in zip(gen.tokens, gen.alternatives, strict=True):
                assert not alt.ids or alt.ids[0] == token or alt.margin == 0
        assert all(alt.ids for alt in base.alternatives)
        # llama-server sends no probabilities for the tokens of a speculative step (accepted
        # draft tokens and the target's own token after them): those rows stay empty
        missing = sum(not alt.ids for alt in spec.alternatives)
        assert base.draft_steps == ()
        drafted += spec.drafted
        same = base.tokens == spec.tokens
        print(f"{prompt.key}: same={same} acceptance={spec.acceptance_rate} no-probs={missing}")
    assert drafted > 0, "the speculative server drafted nothing: is --model-draft in effect?"
    fp, base_fp = speculative.fingerprint(), baseline.fingerprint()
    assert "--model-draft" in fp["draft_config"]["server_flags"]
    assert fp["model_path"].endswith(Path(baseline.config.target.path).name)
    assert fp["server_argv"] == base_fp["server_argv"]
    assert fingerprint_differences(base_fp, fp) == []  # the same experiment but for the draft


def _whole(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@pytest.mark.parametrize("char", ["€", "\u2000"])
def test_a_token_that_leaves_a_character_unfinished_gets_no_row(served, model_pair, char):
    """llama-server, made to spell one character in byte pieces (a grammar, the whole-character
    token banned), sends every token and a row only where the text ends in a whole character.
    equiv matches the rows to the tokens by ID; where two byte pieces share an ID and the row
    fits either (U+2000 is E2 80 80), the vocabulary's bytes replay the server's rule."""
    baseline = served[0]
    texts = read_token_texts(model_pair.target.path)
    found = [re.fullmatch(r"<0x([0-9A-F]{2})>", t) for t in texts]
    byte_id = {int(m[1], 16): i for i, m in enumerate(found) if m}
    raw = char.encode()
    body = {
        "prompt": baseline.prompt_tokens(prompts(["chat/capital_france"])[0]),
        "n_predict": len(raw),
        "n_probs": 4,
        "temperature": 0.0,
        "return_tokens": True,
        "cache_prompt": False,
        "grammar": f'root ::= "{char}"',
        "logit_bias": [[i, False] for i, t in enumerate(texts) if t == char],
    }
    answer = baseline.client.post("/completion", body)
    assert answer["tokens"] == [byte_id[b] for b in raw]  # spelled in byte pieces
    ends = [_whole(raw[: i + 1]) for i in range(len(raw))]
    rowed = [p["id"] for p in answer["completion_probabilities"]]
    assert rowed == [t for t, end in zip(answer["tokens"], ends, strict=True) if end]
    vocab = token_bytes(str(model_pair.target.path))
    parsed = parse_llama(answer, url="u", n_probs=4, pieces=vocab.__getitem__)
    assert [bool(alt.ids) for alt in parsed.alternatives] == ends
    if len(set(answer["tokens"])) < len(raw):  # E2 80 80: the IDs alone cannot place the row
        with pytest.raises(EngineError, match="fits token 1 as well as a later one"):
            parse_llama(answer, url="u", n_probs=4)


def test_sampling_is_repeatable_per_seed(served):
    baseline, speculative = served
    sampling = SamplingConfig(temp=0.8)
    prompt = prompts(PROMPTS[:1])[0]
    tokens = baseline.prompt_tokens(prompt)
    for seed in SEEDS:
        first = baseline.generate(tokens, sampling=sampling, seed=seed, max_tokens=8)
        again = baseline.generate(tokens, sampling=sampling, seed=seed, max_tokens=8)
        spec = speculative.generate(tokens, sampling=sampling, seed=seed, max_tokens=8)
        assert first.tokens == again.tokens, f"seed {seed} is not repeatable on llama-server"
        assert spec.n_tokens > 0
        print(f"seed {seed}: identical={first.tokens == spec.tokens} acc={spec.acceptance_rate}")


def test_the_runner_keeps_requests_in_flight(served, server_config, tmp_path):
    """Eight seeds of one prompt through the runner, four prompts in flight on 4-slot servers."""
    urls = (("baseline_url", served[0].url), ("speculative_url", served[1].url))
    sampling = SamplingConfig(temp=0.8)
    seeds = tuple(range(1, 9))
    config = replace(server_config, mode=Mode.SAMPLING, sampling=sampling, seeds=seeds)
    config = replace(config, max_tokens=4, engine_options=urls)
    with Runner(config, load_factory("server"), tmp_path / "r.jsonl", controls=False) as runner:
        assert runner.in_flight == 4
        runner.run(plan(prompts(PROMPTS[:1]), config))
    results = ResultsFile(tmp_path / "r.jsonl").results()
    assert sorted(r.seed for r in results) == list(range(1, 9))
    assert all(r.baseline.tokens and r.speculative.tokens for r in results)
    # Its speed is a benchmark's (benchmarks/server_throughput.py), not a test's.


def test_openai_mode_against_llama_server(served):
    baseline, _ = served
    settings = ServerSettings(baseline_url=baseline.url, speculative_url=baseline.url, api="openai")
    engine = ServerEngine(baseline.config, speculative=False, settings=settings)
    assert engine.api == "openai"
    assert engine.capabilities.token_ids is True  # llama-server returns the IDs
    prompt = prompts(PROMPTS[:1])[0]
    tokens = engine.prompt_tokens(prompt)
    assert tokens == baseline.prompt_tokens(prompt)
    via_openai = engine.generate(tokens, sampling=SamplingConfig(), seed=None, max_tokens=8)
    native = baseline.generate(tokens, sampling=SamplingConfig(), seed=None, max_tokens=8)
    assert via_openai.tokens == native.tokens
    assert via_openai.alternatives[0] == native.alternatives[0], (
        via_openai.alternatives[0],
        native.alternatives[0],
    )


def test_a_killed_server_keeps_finished_results_and_resume_continues(
    served, server_config, tmp_path
):
    """equiv's own server killed after the first result: the error names it, the result is
    kept, and the run resumes (here against the module's running servers)."""
    own = (("server_bin", server_bin()), ("log_dir", str(tmp_path)), ("server_concurrency", 1))
    config = replace(server_config, engine_options=own)
    items = plan(prompts(PROMPTS[:2]), config)
    items = [replace(item, max_tokens=4) for item in items]
    path = tmp_path / "results.jsonl"

    def kill_speculative(item: Any, record: Any, done: int, total: int) -> None:
        runner.speculative._server.proc.kill()  # type: ignore[attr-defined]

    with (
        Runner(config, load_factory("server"), path) as runner,
        pytest.raises(EngineError, match=r"exited with code -9 mid-run(.|\n)*--resume"),
    ):
        runner.run(items, on_result=kill_speculative)
    assert len(ResultsFile(path).results()) == 1
    # the failure is a finding on record: which path, on which prompt, that the other answered
    (failure,) = [e for e in ResultsFile(path).read().events if e.event == "engine-failure"]
    assert failure.failed
    assert failure.key == items[1].key
    assert failure.extra["path"] == "speculative"
    assert "where the baseline answered the same request" in failure.detail
    cut = summarize_file(ResultsFile(path))
    assert cut.verdict.label is Label.INCONCLUSIVE, cut.verdict.reason
    assert "the speculative path failed" in cut.verdict.reason
    assert (tmp_path / "llama-server-speculative.log").is_file()
    # The same run resumed against the module's running servers: the engine options differ
    # (URLs instead of a binary), which --resume refuses by name...
    urls = (("baseline_url", served[0].url), ("speculative_url", served[1].url))
    with (
        Runner(replace(config, engine_options=urls), load_factory("server"), path) as runner,
        pytest.raises(ConfigError, match="differs in: engine_options"),
    ):
        runner.run(items, resume=True)
    # ...so it resumes with its own options, equiv starting the servers again.
    with Runner(config, load_factory("server"), path) as runner:
        new = runner.run(items, resume=True)
    assert [r.key for r in new] == [items[1].key]
    assert ResultsFile(path).done_keys() == {item.key for item in items}
    finished = summarize_file(ResultsFile(path))
    assert finished.unfinished is None  # finished by the rerun: the failure stays, passed
    assert not finished.failed_controls


def test_equiv_run_with_server_bin_end_to_end(tmp_path):
    out = tmp_path / "run"
    argv = ["run", "--engine", "server", "--server-bin", server_bin(), "--max-tokens", "8"]
    argv += ["--prompt", "code/fib_lt", "--prompt", "chat/capital_france", "--out", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "equiv", *argv],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    header = lines[0]
    assert header["fingerprints"]["baseline"]["engine"] == "server"
    assert header["capabilities"]["speculative"]["full_logits"] is False
    servers = header["servers"]
    assert servers["baseline"]["log"] == str(out / "llama-server-baseline.log")
    assert "--model-draft" in servers["speculative"]["argv"]
    assert "listening" in servers["speculative"]["log_tail"]
    results = [r for r in lines if r["kind"] == "result"]
    assert {r["key"] for r in results} == {"code/fib_lt::temp0", "chat/capital_france::temp0"}
    assert (out / "llama-server-baseline.log").is_file()
    assert (out / "llama-server-speculative.log").is_file()
    assert "Traceback" not in proc.stderr
