"""URL mode without a model file: running servers' own models, as a vLLM user (who has no GGUF)
runs equiv. Contract tests against the scripted server of test_engine_server.py; against real
vLLM servers equiv runs this way in test_vllm_real.py and test_vllm_draft_real.py."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from scripted_server import FakeServer, _json, _vllm_answer

from equiv.config import ModelSpec, RunConfig, SamplingConfig
from equiv.engines.server.engine import ServerEngine
from equiv.engines.server.http import JsonClient
from equiv.engines.server.inspect import openai_vocab_size
from equiv.engines.server.settings import ServerSettings
from equiv.errors import ConfigError, EngineError, ModelError
from equiv.options.build import build_config

SERVED = RunConfig(target=ModelSpec.of_server(), draft=ModelSpec.of_server(), n_threads=1)


def _engine(url: str, **kwargs: Any) -> ServerEngine:
    settings = ServerSettings(baseline_url=url, speculative_url=url, backoff_s=0.01, **kwargs)
    return ServerEngine(SERVED, speculative=False, settings=settings)


@pytest.fixture
def server() -> Any:
    fake = FakeServer("/models/whatever-the-user-serves-Q8_0.gguf", n_vocab=40)
    yield fake
    fake.close()


def test_a_served_model_is_no_file_and_no_self_draft():
    spec = ModelSpec.of_server()
    assert spec.served
    assert spec.path == ""
    assert not SERVED.self_draft  # two empty paths resolve alike, but nothing drafts itself
    assert ModelSpec.from_dict(spec.to_dict()) == spec


def test_url_mode_without_target_reads_no_model_file(monkeypatch, tmp_path):
    """No --target, no --draft: the pair is the servers' own, so no GGUF is looked for (a vLLM
    user's machine has none) and no draft is derived."""
    monkeypatch.setattr("equiv.models.pair.resolve_pair", _refuse)
    values = {"engine": "server"}
    values.update(baseline_url="http://127.0.0.1:1", speculative_url="http://127.0.0.1:2")
    config, pair = build_config(values, workdir=tmp_path)
    assert config.target.served
    assert config.draft.served
    assert pair.vocab is None


def test_url_mode_from_the_environment_without_target_reads_no_model_file(monkeypatch, tmp_path):
    monkeypatch.setattr("equiv.models.pair.resolve_pair", _refuse)
    monkeypatch.setenv("EQUIV_BASELINE_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("EQUIV_SPECULATIVE_URL", "http://127.0.0.1:2")
    config, _ = build_config({"engine": "server"}, workdir=tmp_path)
    assert config.target.served


def test_a_given_target_is_checked_and_no_draft_derived_in_url_mode(tmp_path, make_gguf):
    """The speculative server drafts with its own draft: equiv derives none (the header and the
    terminal would name a file nothing uses)."""
    path = make_gguf("mine.gguf")
    values = {"engine": "server", "target": str(path)}
    values.update(baseline_url="http://127.0.0.1:1", speculative_url="http://127.0.0.1:2")
    config, pair = build_config(values, workdir=tmp_path)
    assert config.target == ModelSpec(str(path.resolve()))
    assert config.draft.served
    assert pair.vocab is None
    (tmp_path / "bad.gguf").write_bytes(b"not a gguf")
    with pytest.raises(ModelError, match="target model"):
        build_config({**values, "target": str(tmp_path / "bad.gguf")}, workdir=tmp_path)


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError(f"resolve_pair{args} read model files")


def test_a_served_llama_server_is_taken_as_it_is_but_its_context_is_checked(server):
    engine = _engine(server.url)
    assert engine.fingerprint()["model_path"] == "/models/whatever-the-user-serves-Q8_0.gguf"
    assert "target_sha256" not in engine.fingerprint()
    gen = engine.generate([1, 9], sampling=SamplingConfig(), seed=None, max_tokens=3)
    assert gen.tokens == (5, 6, 7)
    other = FakeServer("/models/x.gguf", n_ctx=4096)
    try:
        with pytest.raises(ConfigError, match=r"n_ctx 4096.*--n-ctx 4096"):
            _engine(other.url)
    finally:
        other.close()


def test_a_served_llama_server_without_a_vocabulary_size_names_the_fix(server):
    server.script["/v1/models"] = [_json({"data": [{"id": "fake"}]})]
    with pytest.raises(EngineError, match=r"no vocabulary size.*--target"):
        _engine(server.url)


def _vocab_server(server: FakeServer, n_vocab: int) -> FakeServer:
    """An OpenAI-compatible server of ``n_vocab`` tokens that refuses a larger prompt ID as vLLM
    does (``Token id ... is out of vocabulary``, HTTP 400)."""

    def complete(body: Any) -> Any:
        top = max(body["prompt"])
        if top >= n_vocab:
            message = f"Token id {top} is out of vocabulary"
            return _json({"error": {"message": message, "code": 400}}, status=400)
        answer = _vllm_answer(["token_id:5"])
        if body.get("prompt_logprobs") is not None:  # vLLM's scoring: a row per prompt token
            rows = [{str(t): {"logprob": -0.25, "rank": 1}} for t in body["prompt"][1:]]
            answer["choices"][0]["prompt_logprobs"] = [None, *rows]
        return _json(answer)

    server.script["/props"] = [(404, "application/json", b'{"detail": "Not Found"}')]
    server.script["/v1/models"] = [_json({"data": [{"id": "org/model"}]})]
    server.script["/v1/completions"] = [complete]
    server.script["/metrics"] = [(200, "text/plain", VLLM_METRICS)]
    return server


# vLLM's /metrics page, no speculative config: what tells equiv the server is vLLM
VLLM_METRICS = (
    b'# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m"} 0.0\n'
)


@pytest.mark.parametrize("n_vocab", [40, 4096, 4097, 262144, 151936])
def test_an_openai_servers_vocabulary_is_found_by_the_ids_it_refuses(server, n_vocab):
    _vocab_server(server, n_vocab)
    client = JsonClient(server.url, role="baseline", backoff_s=0.01)
    assert openai_vocab_size(client, model="org/model") == n_vocab
    asked = [c for c in server.calls if c[0] == "/v1/completions"]
    assert len(asked) <= 2 * 25


def test_a_vocabulary_the_server_does_not_bound_is_unknown(server):
    _vocab_server(server, 1 << 30)
    client = JsonClient(server.url, role="baseline", backoff_s=0.01)
    assert openai_vocab_size(client, model="org/model", limit=1 << 16) is None


def test_a_refusal_for_another_reason_leaves_the_vocabulary_unknown(server):
    _vocab_server(server, 40)
    server.script["/v1/completions"] = [_json({"error": {"message": "no"}}, status=400)]
    client = JsonClient(server.url, role="baseline", backoff_s=0.01)
    assert openai_vocab_size(client, model="org/model") is None


def test_a_served_vllm_rescores_with_the_vocabulary_it_reports(server):
    """Token IDs and prompt_logprobs, no file: the rescorer's rows are as wide as the
    vocabulary the server bounds."""
    _vocab_server(server, 4100)
    server.script["/tokenize"] = [_json({"tokens": [1, 9], "count": 2})]
    engine = _engine(server.url)
    assert engine.api == "openai"
    assert engine.server_facts()["rescoring"] == "vllm scoring (prompt_logprobs)"
    rows = engine.rescore([1, 9], [4099, 7], batched=True)
    assert rows.shape == (2, 4100)
    assert rows[0, 4099] == -0.25


def test_the_cli_prints_that_the_models_are_the_servers(server, tmp_path, capsys):
    from equiv.cli.main import main

    code = main(
        ["run", "--engine", "server", "--baseline-url", server.url, "--speculative-url",
         server.url, "--prompt", "code/fib_lt", "--max-tokens", "3", "--n-ctx", "2048",
         "--out", str(tmp_path / "run")]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert "target the servers' own (equiv reads no model file)" in err
    assert "Traceback" not in err
    assert code in (0, 1, 2), err
    assert Path(tmp_path / "run" / "results.jsonl").exists()


def test_served_specs_survive_a_config_round_trip():
    assert RunConfig.from_dict(SERVED.to_dict()) == SERVED
    assert replace(SERVED, n_ctx=512).target.served


def test_a_server_that_is_not_vllm_is_sent_no_token_id_it_may_not_know(server):
    """Another OpenAI-compatible server might not bound prompt IDs: without a file it gets no
    re-scoring, and the reason names --target, rather than a bisection past its vocabulary."""
    _vocab_server(server, 4100)
    server.script["/metrics"] = [(404, "text/plain", b"not found")]
    server.script["/tokenize"] = [_json({"tokens": [1, 9], "count": 2})]
    engine = _engine(server.url)
    assert not engine.capabilities.rescoring
    assert "pass --target" in str(engine.server_facts()["rescoring"])
    assert all(max(body["prompt"]) < 4100 for path, body in _posts(server, "/v1/completions"))


def _posts(server: FakeServer, path: str) -> list[tuple[str, Any]]:
    return [(p, body) for p, body in server.calls if p == path and isinstance(body, dict)]


def test_a_draft_without_a_target_is_refused_where_the_servers_bring_their_models(tmp_path):
    values = {"engine": "server", "draft": str(tmp_path / "d.gguf")}
    values.update(baseline_url="http://127.0.0.1:1", speculative_url="http://127.0.0.1:2")
    with pytest.raises(ConfigError, match=r"--draft .*d\.gguf.*drop --draft, or give --target"):
        build_config(values, workdir=tmp_path)
    vllm = {"engine": "server", "draft": str(tmp_path / "d.gguf"), "vllm_model": str(tmp_path)}
    with pytest.raises(ConfigError, match="drop --draft"):
        build_config(vllm, workdir=tmp_path)


class _Started:
    """What `start_server` hands the engine, around a scripted server: its stop is recorded."""

    name = "vLLM"

    def __init__(self, url: str) -> None:
        self.url = url
        self.stopped = False

    def alive(self) -> bool:
        return not self.stopped

    def stop(self) -> None:
        self.stopped = True


def test_a_started_server_is_stopped_when_the_engine_fails_before_the_run(server, monkeypatch):
    """A failure after the start (here: the re-scoring set-up, a llama-server that says no
    vocabulary size and no --target) stops the server: no engine exists to close it later."""
    from equiv.engines.server import engine as engine_module
    from equiv.engines.server.start import Started

    process = _Started(server.url)
    started = Started(process, (), (), None, drafts_from_file=False)  # type: ignore[arg-type]
    monkeypatch.setattr(engine_module, "start_server", lambda *a, **k: started)
    server.script["/v1/models"] = [_json({"data": [{"id": "fake"}]})]  # no n_vocab
    settings = ServerSettings(vllm_model="/m", backoff_s=0.01)
    with pytest.raises(EngineError, match="no vocabulary size"):
        ServerEngine(SERVED, speculative=False, settings=settings)
    assert process.stopped
