"""The server engine against scripted stdlib HTTP servers on 127.0.0.1: parsing, retries and every
bad answer a real deployment can give. No model is loaded; see test_engine_server_real.py."""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scripted_server import NEW_HELP, OLD_HELP, FakeServer, Reply, _completion, _json, _vllm_answer

from equiv.cli.main import main
from equiv.config import Mode, ModelSpec, RunConfig, SamplingConfig
from equiv.engines import load_factory
from equiv.engines.base import server_facts
from equiv.engines.server.api import (
    candidate_bytes,
    parse_llama,
    parse_openai,
    piece_id,
    rows_of_tokens,
)
from equiv.engines.server.engine import ServerEngine
from equiv.engines.server.llama_command import detect_flags, llama_server_argv
from equiv.engines.server.process import ServerProcess, free_port
from equiv.engines.server.settings import ServerSettings
from equiv.errors import ConfigError, EngineError
from equiv.options.build import engine_options
from equiv.prompts import Prompt
from equiv.records import ResultRecord, ResultsFile
from equiv.run.plan import plan
from equiv.run.runner import Runner
from equiv.verdicts.temp0.classify import fingerprint_differences


@pytest.fixture
def tiny_config(make_gguf: Callable[..., Path]) -> RunConfig:
    path = make_gguf("target.gguf")
    return RunConfig(target=ModelSpec(str(path)), draft=ModelSpec(str(path)), n_threads=1)


@pytest.fixture
def fake(tiny_config: RunConfig) -> Iterator[FakeServer]:
    server = FakeServer(Path(tiny_config.target.path).name)
    yield server
    server.close()


def _served(config: RunConfig, **options: Any) -> RunConfig:
    """``config`` for the server engine with these engine options (as the CLI builds it)."""
    return replace(config, engine="server", engine_options=tuple(options.items()))


def _engine(config: RunConfig, url: str, **kwargs: Any) -> ServerEngine:
    settings = ServerSettings(baseline_url=url, speculative_url=url, backoff_s=0.01, **kwargs)
    return ServerEngine(config, speculative=False, settings=settings)


def _generate(engine: ServerEngine, seed: int | None = None) -> Any:
    return engine.generate([1, 9], sampling=SamplingConfig(), seed=seed, max_tokens=3)


def test_a_llama_server_answer_becomes_a_generation(tiny_config, fake):
    fake.script["/completion"] = [_json(_completion([5, 6, 7], draft=(10, 8)))]
    engine = _engine(tiny_config, fake.url)
    assert engine.api == "llama"
    assert engine.capabilities.full_logits is False
    assert engine.capabilities.token_ids is True
    assert engine.prompt_tokens(Prompt("s", "p", text="a")) == [1, 9]
    gen = _generate(engine)
    assert gen.tokens == (5, 6, 7)
    assert gen.pieces == ("tok5", "tok6", "tok7")
    assert gen.stop_reason == "length"
    # log-probabilities in place of logits, sorted descending; a null (p = 0) becomes -1e9
    assert gen.alternatives[0].ids == (5, 6, 7)
    assert gen.alternatives[0].logits == (-0.1, -3.0, -1e9)
    assert gen.acceptance_rate == pytest.approx(0.8)
    assert (gen.t_prompt_s, gen.t_decode_s) == (0.005, 0.02)
    body = dict(fake.calls)["/completion"]
    assert body["prompt"] == [1, 9]
    assert body["cache_prompt"] is False
    assert body["return_tokens"] is True
    assert body["n_probs"] == tiny_config.top_k_record
    assert body["seed"] == 1  # temp 0 gets a fixed seed, as the in-process engine
    fp = engine.fingerprint()
    assert fp["engine"] == "server"
    assert fp["n_ctx"] == 2048
    assert fp["build_info"] == "b0-fake"
    assert server_facts(engine) == {
        "url": fake.url,
        "api": "llama",
        "rescoring": "llama-server n_probs: forced decoding, batched one by one",
    }


def test_placeholder_probabilities_of_speculative_tokens_are_recorded_as_missing(tiny_config, fake):
    """llama-server sends none (this build) or p = 1 for every candidate (newer builds,
    ggml-org/llama.cpp#27972) for the tokens of a speculative step; neither is evidence."""
    answer = _completion([5, 6, 7])
    answer["completion_probabilities"][1]["top_logprobs"] = []
    answer["completion_probabilities"][2]["logprob"] = 0.0
    answer["completion_probabilities"][2]["top_logprobs"] = [
        {"id": 7, "token": "tok7", "logprob": 0.0},
        {"id": 8, "token": "x", "logprob": 0.0},
    ]
    fake.script["/completion"] = [_json(answer)]
    gen = _generate(_engine(tiny_config, fake.url))
    assert gen.tokens == (5, 6, 7)
    assert gen.alternatives[0].ids == (5, 6, 7)  # a real row is kept
    assert gen.alternatives[1].ids == ()
    assert gen.alternatives[2].ids == ()


def test_two_servers_of_one_setup_have_no_fingerprint_differences(tiny_config, fake):
    other = FakeServer(Path(tiny_config.target.path).name)
    try:
        settings = ServerSettings(baseline_url=fake.url, speculative_url=other.url)
        base = ServerEngine(tiny_config, speculative=False, settings=settings)
        spec = ServerEngine(tiny_config, speculative=True, settings=settings)
        assert fingerprint_differences(base.fingerprint(), spec.fingerprint()) == []
        other.script["/props"] = [
            _json({**json.loads(other.script["/props"][0][2]), "build_info": "b1-other"})
        ]
        spec = ServerEngine(tiny_config, speculative=True, settings=settings)
        (difference,) = fingerprint_differences(base.fingerprint(), spec.fingerprint())
        assert "build_info" in difference
    finally:
        other.close()


def test_503_is_retried_then_succeeds(tiny_config, fake):
    fake.script["/completion"] = [
        _json({"error": {"code": 503, "message": "Loading model"}}, status=503),
        _json({"error": {"code": 503, "message": "Loading model"}}, status=503),
        _json(_completion([5])),
    ]
    gen = _generate(_engine(tiny_config, fake.url))
    assert gen.tokens == (5,)
    assert fake.paths().count("/completion") == 3


def test_503_forever_gives_up_with_the_servers_message(tiny_config, fake):
    fake.script["/completion"] = [_json({"error": {"message": "Loading model"}}, status=503)]
    engine = _engine(tiny_config, fake.url, retries=2)
    with pytest.raises(EngineError, match="HTTP 503: Loading model"):
        _generate(engine)
    assert fake.paths().count("/completion") == 3


def test_an_html_error_page_is_named_as_such(tiny_config, fake):
    page = b"<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>nginx</body>"
    fake.script["/completion"] = [(500, "text/html", page)]
    with pytest.raises(EngineError) as info:
        _generate(_engine(tiny_config, fake.url))
    message = str(info.value)
    assert "HTML page" in message
    assert "502 Bad Gateway" in message
    assert f"{fake.url}/completion" in message
    assert "--baseline-url" in message


def test_truncated_json_is_named_as_such(tiny_config, fake):
    whole = json.dumps(_completion([5, 6])).encode()
    fake.script["/completion"] = [(200, "application/json", whole[:40])]
    with pytest.raises(EngineError, match="truncated or invalid JSON"):
        _generate(_engine(tiny_config, fake.url))


def test_a_body_cut_short_of_its_content_length_is_truncated_json(tiny_config, fake):
    whole = json.dumps(_completion([5, 6])).encode()
    fake.script["/completion"] = [(200, "application/json; short", whole[:60])]
    with pytest.raises(EngineError, match="truncated or invalid JSON"):
        _generate(_engine(tiny_config, fake.url))


def test_an_unreachable_url_names_the_url_and_the_fix(tiny_config):
    url = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(EngineError) as info:
        _engine(tiny_config, url)
    assert url in str(info.value)
    assert "--baseline-url" in str(info.value)
    assert "--server-bin" in str(info.value)
    assert time.monotonic() - started < 5


def test_the_cli_exits_6_on_an_unreachable_server(capsys, model_pair, tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    code = main(
        ["run", "--engine", "server", "--baseline-url", url, "--speculative-url", url,
         "--prompt", "code/fib_lt", "--out", str(tmp_path / "run")]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 6, err
    assert url in err
    assert "Traceback" not in err


def test_a_server_that_dies_mid_run_is_reported(tiny_config, fake):
    engine = _engine(tiny_config, fake.url)
    _generate(engine)
    fake.close()
    with pytest.raises(EngineError, match=r"stopped answering.*--resume"):
        _generate(engine)


def test_a_dropped_connection_is_retried(tiny_config, fake):
    fake.script["/completion"] = [(0, "", b""), _json(_completion([5]))]
    assert _generate(_engine(tiny_config, fake.url)).tokens == (5,)


def test_a_server_of_another_model_is_refused(tiny_config):
    server = FakeServer("/models/other-model-Q8_0.gguf")
    try:
        with pytest.raises(ConfigError, match=r"serves 'other-model-Q8_0.gguf'.*target\.gguf"):
            _engine(tiny_config, server.url)
    finally:
        server.close()


def test_a_server_with_another_context_is_refused(tiny_config):
    server = FakeServer(Path(tiny_config.target.path).name, n_ctx=4096)
    try:
        with pytest.raises(ConfigError, match=r"n_ctx 4096.*--n-ctx 4096"):
            _engine(tiny_config, server.url)
    finally:
        server.close()


def test_a_server_with_another_vocabulary_is_refused(tiny_config):
    server = FakeServer(Path(tiny_config.target.path).name, n_vocab=262144)
    try:
        with pytest.raises(ConfigError, match="vocabulary of 262144"):
            _engine(tiny_config, server.url)
    finally:
        server.close()


def test_a_truncated_prompt_is_an_error(tiny_config, fake):
    fake.script["/completion"] = [_json({**_completion([5]), "truncated": True})]
    with pytest.raises(EngineError, match="truncated the prompt"):
        _generate(_engine(tiny_config, fake.url))


def _seed_runner(
    config: RunConfig, url: str, path: Path, concurrency: int, controls: bool = False
) -> Runner:
    """A sampling run over one prompt and eight seeds, through `load_factory` as the CLI does."""
    config = replace(
        _served(config, baseline_url=url, speculative_url=url, server_concurrency=concurrency),
        mode=Mode.SAMPLING,
        sampling=SamplingConfig(temp=0.8),
        seeds=tuple(range(1, 9)),
    )
    return Runner(config, load_factory("server"), path, controls=controls)


SEED_PLAN = [Prompt("s", "p", text="a", max_tokens=1)]


def test_the_runner_keeps_up_to_the_concurrency_prompts_in_flight(tiny_config, fake, tmp_path):
    fake.delay_s = 0.05
    fake.script["/completion"] = [lambda body: _json(_completion([body.get("seed", 1)]))]
    with _seed_runner(tiny_config, fake.url, tmp_path / "r.jsonl", 3) as runner:
        assert runner.in_flight == 3
        runner.run(plan(SEED_PLAN, runner.config))
    results = ResultsFile(tmp_path / "r.jsonl").results()
    assert sorted(r.seed for r in results) == list(range(1, 9))
    assert all(r.baseline.tokens == (r.seed,) for r in results)
    assert fake.max_in_flight == 3


def test_the_first_prompt_and_the_determinism_control_run_alone(tiny_config, fake, tmp_path):
    """Whether the engine repeats itself is asked with nothing else in its batch."""
    fake.delay_s = 0.02
    fake.script["/completion"] = [lambda body: _json(_completion([body.get("seed", 1)]))]
    with _seed_runner(tiny_config, fake.url, tmp_path / "r.jsonl", 3, controls=True) as runner:
        runner.run(plan(SEED_PLAN, runner.config))
    # (requests without a seed are the re-scoring of each speculative sample on the baseline)
    seeds = [body["seed"] for path, body in fake.calls if path == "/completion" and "seed" in body]
    assert seeds[:3] == [1, 1, 1]  # baseline, speculative, the baseline again
    assert sorted(seeds[3:]) == sorted([*range(2, 9), *range(2, 9)])
    (event,) = ResultsFile(tmp_path / "r.jsonl").events()
    assert event.event == "determinism"
    assert event.ok is True


@pytest.mark.parametrize(
    ("mode", "given", "expected"),
    [(Mode.TEMP0, None, 1), (Mode.SAMPLING, None, 4), (Mode.TEMP0, 3, 3), (Mode.SAMPLING, 2, 2)],
)
def test_prompts_in_flight_default_to_one_at_temp0(tiny_config, fake, mode, given, expected):
    """Servers are not batch-invariant: a bit-exact run sends one request at a time unless told."""
    seeds = (1,) if mode is Mode.SAMPLING else ()
    config = replace(
        tiny_config, mode=mode, seeds=seeds, sampling=SamplingConfig(temp=0.8 * bool(seeds))
    )
    engine = _engine(config, fake.url, concurrency=given)
    assert engine.max_in_flight == expected


def test_a_failure_in_flight_keeps_every_answered_prompt_and_resume_ends_it(
    tiny_config, fake, tmp_path
):
    fake.delay_s = 0.02

    def reply(body: Any) -> Reply:
        if body.get("seed") == 5:
            return _json({"error": {"code": 500, "message": "boom"}}, status=500)
        return _json(_completion([body.get("seed", 1)]))

    fake.script["/completion"] = [reply]
    path = tmp_path / "r.jsonl"
    with (
        _seed_runner(tiny_config, fake.url, path, 2) as runner,
        pytest.raises(EngineError, match="HTTP 500: boom"),
    ):
        runner.run(plan(SEED_PLAN, runner.config))
    kept = {r.seed for r in ResultsFile(path).results()}
    # seeds 1-4 were answered before seed 5 failed; the one in flight beside it is kept too, and
    # nothing was sent after the failure
    assert {1, 2, 3, 4} <= kept <= {1, 2, 3, 4, 6}
    sent = {body.get("seed") for p, body in fake.calls if p == "/completion"}
    assert not {7, 8} & sent
    fake.script["/completion"] = [lambda body: _json(_completion([body.get("seed", 1)]))]
    with _seed_runner(tiny_config, fake.url, path, 2) as runner:
        new = runner.run(plan(SEED_PLAN, runner.config), resume=True)
    assert {r.seed for r in new if isinstance(r, ResultRecord)} == set(range(1, 9)) - kept
    assert len(ResultsFile(path).results()) == 8


@pytest.mark.parametrize("with_ids", [True, False])
def test_openai_mode_with_and_without_token_ids(tiny_config, fake, with_ids):
    fake.script["/props"] = [(404, "application/json", b'{"detail": "Not Found"}')]
    fake.script["/v1/models"] = [_json({"data": [{"id": "org/model"}]})]
    fake.script["/tokenize"] = [_json({"tokens": [1, 9], "count": 2})]
    fake.script["/detokenize"] = [_json({"prompt": "tok"})]
    names = ["token_id:5", "token_id:6"] if with_ids else ["Hel", "lo"]
    fake.script["/v1/completions"] = [_json(_vllm_answer(names))]
    engine = _engine(tiny_config, fake.url)
    assert engine.api == "openai"
    assert engine.capabilities.token_ids is with_ids
    assert engine.capabilities.deterministic_seed is False
    gen = _generate(engine, seed=3)
    if with_ids:
        assert gen.tokens == (5, 6)
    else:
        assert gen.tokens == (piece_id("Hel"), piece_id("lo"))
        assert gen.pieces == ("Hel", "lo")
        assert all(t < 0 for t in gen.tokens)
    body = dict(fake.calls)["/v1/completions"]
    assert body["model"] == "org/model"
    assert body["prompt"] == [1, 9]
    assert body["seed"] == 3
    assert engine.fingerprint()["api"] == "openai"


def test_openai_mode_refuses_an_unknown_model(tiny_config, fake):
    fake.script["/v1/models"] = [_json({"data": [{"id": "org/model"}]})]
    with pytest.raises(ConfigError, match=r"serves models \['org/model'\]"):
        _engine(tiny_config, fake.url, api="openai", model="other")


def _without_rows(answer: dict[str, Any], *positions: int) -> dict[str, Any]:
    """``answer`` as llama-server sends it when the tokens at ``positions`` leave a UTF-8
    character unfinished: every token, but no row for those (``process_token``)."""
    probs = answer["completion_probabilities"]
    answer["completion_probabilities"] = [p for i, p in enumerate(probs) if i not in positions]
    return answer


def test_a_token_without_a_row_is_matched_by_id_and_has_no_candidates(tiny_config, fake):
    fake.script["/completion"] = [_json(_without_rows(_completion([5, 6, 7, 6, 9]), 1, 4))]
    fake.script["/detokenize"] = [_json({"content": "\ufffd"})]
    gen = _generate(_engine(tiny_config, fake.url))
    assert gen.tokens == (5, 6, 7, 6, 9)
    assert [alt.ids[:1] for alt in gen.alternatives] == [(5,), (), (7,), (6,), ()]
    # a piece from the same token's row elsewhere, else the server's own (/detokenize)
    assert gen.pieces == ("tok5", "tok6", "tok7", "tok6", "\ufffd")
    detokenized = [body for path, body in fake.calls if path == "/detokenize"]
    assert detokenized == [{"tokens": [9]}]


@pytest.mark.parametrize(
    ("tokens", "rows", "message"),
    [
        # E2 80 80 (U+2000) in byte pieces: the one row fits either 80
        ([464, 366, 366], [366], "row 0 \\(token 366\\) fits token 1 as well as a later one"),
        ([5, 6], [6, 5], "not among the tokens in order"),
        ([5, 6], [9], "not among the tokens in order"),
        ([5], [5, 5], "not among the tokens in order"),
    ],
)
def test_rows_that_cannot_be_matched_to_tokens_are_refused(tokens, rows, message):
    answer = _completion(tokens)
    answer["completion_probabilities"] = _completion(rows)["completion_probabilities"]
    with pytest.raises(EngineError, match=message):
        parse_llama(answer, url="u", n_probs=8)


def test_the_candidates_bytes_are_read_from_llama_servers_rows():
    """Each candidate of a reported row comes with its piece's bytes: what tells whether it
    could leave a character unfinished (`equiv.verdicts.sampling.token_evidence`)."""
    answer = {
        "completion_probabilities": [
            {"id": 5, "top_logprobs": [{"id": 5, "bytes": [32, 97]}, {"id": 464, "bytes": [226]}]},
            {"id": 6, "top_logprobs": []},  # a token of a speculative step: no row
            {"id": 7, "top_logprobs": [{"id": 7, "logprob": -0.1}]},  # no bytes sent
        ]
    }
    assert candidate_bytes(answer) == {5: b" a", 464: b"\xe2"}
    assert candidate_bytes({"content": ""}) == {}


def test_byte_pieces_that_fit_either_way_are_placed_by_llama_servers_rule():
    pieces = {464: b"\xe2", 366: b"\x80", 5: b" a", 410: b"\xac", 368: b"\x82"}.__getitem__
    # E2 80 80 (U+2000): the text is whole only after the last byte
    assert rows_of_tokens([464, 366, 366], [366], url="u", pieces=pieces) == [None, None, 0]
    # "80 80" after a whole text: a lone continuation byte ends nothing, each has its row
    assert rows_of_tokens([5, 366, 366], [5, 366, 366], url="u", pieces=pieces) == [0, 1, 2]
    # rows where the rule gives none (a vocabulary that is not the server's) are refused
    wrong = {464: b"a", 366: b"\x80"}.__getitem__
    with pytest.raises(EngineError, match="fits token 1 as well as a later one"):
        rows_of_tokens([464, 366, 366], [366], url="u", pieces=wrong)


def test_an_answer_whose_rows_all_fit_one_way_is_kept():
    assert rows_of_tokens([1, 2, 3], [1, 2, 3], url="u") == [0, 1, 2]
    assert rows_of_tokens([464, 368, 410], [410], url="u") == [None, None, 0]  # E2 82 AC
    euro_twice = [464, 368, 410, 5, 464, 368, 410]  # "€ €" in byte pieces, the space whole
    assert rows_of_tokens(euro_twice, [410, 5, 410], url="u") == [None, None, 0, 1, None, None, 2]
    assert rows_of_tokens([4, 4], [], url="u") == [None, None]


def test_parse_openai_refuses_an_answer_without_logprobs():
    with pytest.raises(EngineError, match="logprobs"):
        parse_openai({"choices": [{"text": "x", "logprobs": None}]}, url="u")


# -- settings ---------------------------------------------------------------------------------


def test_settings_need_a_binary_or_both_urls():
    with pytest.raises(ConfigError, match="--server-bin PATH, --vllm-model DIR, or both"):
        ServerSettings(baseline_url="http://127.0.0.1:1")
    with pytest.raises(ConfigError, match="name the servers twice"):
        ServerSettings(server_bin="x", baseline_url="http://a", speculative_url="http://b")
    with pytest.raises(ConfigError, match="--server-concurrency 0"):
        ServerSettings(server_bin="x", concurrency=0)


def test_server_options_without_the_server_engine_are_refused():
    with pytest.raises(ConfigError, match="--server-bin only applies to the server engine"):
        engine_options({"server_bin": "/x"}, "llamacpp")


def test_server_options_become_engine_options_of_the_config():
    options = engine_options(
        {"server_bin": "/x", "server_timeout": 600.0, "server_api": "auto"}, "server", workdir="d"
    )
    assert options == (
        ("server_bin", "/x"),
        ("server_api", "auto"),
        ("server_timeout", 600.0),
        ("log_dir", "d"),
    )


def test_load_factory_knows_the_server_engine(tiny_config, fake):
    config = _served(tiny_config, baseline_url=fake.url, speculative_url=fake.url)
    engine = load_factory("server")(config, speculative=True)
    assert engine.path == "speculative"
    _generate(engine)
    body = dict(fake.calls)["/completion"]
    assert body["speculative.n_max"] == tiny_config.draft_config.draft_max


def test_a_bad_url_is_a_config_error(tiny_config):
    with pytest.raises(ConfigError, match="not an http"):
        _engine(tiny_config, "ftp://host")


# -- starting llama-server: flags and process handling, with stand-in scripts ------------------


def _script(path: Path, body: str) -> Path:
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.parametrize(
    ("help_text", "expected"),
    [
        (NEW_HELP, ["--spec-type", "draft-simple", "--spec-draft-n-max", "--spec-draft-p-min"]),
        (OLD_HELP, ["--draft-max", "--draft-min", "--draft-p-min"]),
    ],
)
def test_flag_spellings_come_from_help(tmp_path, tiny_config, help_text, expected):
    binary = _script(
        tmp_path / "llama-server",
        f"import sys\nprint({help_text!r} if '--help' in sys.argv else 'version: 1 (abc)')\n",
    )
    flags = detect_flags(str(binary))
    argv = llama_server_argv(str(binary), flags, tiny_config, speculative=True, slots=4)
    for flag in expected:
        assert flag in argv
    assert argv[argv.index("-c") + 1] == str(tiny_config.n_ctx * 4)
    assert argv[argv.index("--model-draft") + 1] == tiny_config.draft.path
    assert ("off" in argv) is (help_text == NEW_HELP)  # -fa off only where -fa takes a value
    baseline = llama_server_argv(str(binary), flags, tiny_config, speculative=False, slots=1)
    assert "--model-draft" not in baseline
    assert flags.version == "version: 1 (abc)"


def test_concurrent_servers_share_the_cores(tmp_path, tiny_config, monkeypatch):
    """With several slots both servers compute at once: each gets at most half the cores."""
    binary = _script(tmp_path / "llama-server", f"print({NEW_HELP!r})\n")
    flags = detect_flags(str(binary))
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    config = replace(tiny_config, n_threads=8)

    def threads(slots: int, speculative: bool = False) -> str:
        argv = llama_server_argv(str(binary), flags, config, speculative=speculative, slots=slots)
        return argv[argv.index("-t") + 1]

    assert (threads(1), threads(4), threads(4, speculative=True)) == ("8", "4", "4")


def test_a_binary_that_is_not_llama_server_is_refused(tmp_path):
    binary = _script(tmp_path / "other", "print('usage: other [options]')\n")
    with pytest.raises(ConfigError, match="does not look like llama-server"):
        detect_flags(str(binary))
    with pytest.raises(ConfigError, match="does not exist"):
        detect_flags(str(tmp_path / "missing"))


HEALTHY = """
import json, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer
port = int(sys.argv[sys.argv.index("--port") + 1])
print("loading model", flush=True)
time.sleep(0.3)
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"status": "ok"}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body)))
        self.end_headers(); self.wfile.write(body)
HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def test_a_started_server_is_waited_for_and_stopped(tmp_path):
    binary = _script(tmp_path / "server", HEALTHY)
    log = tmp_path / "logs" / "server.log"
    server = ServerProcess.start([str(binary)], log_path=log, timeout_s=30)
    try:
        assert server.alive()
        assert server.url.startswith("http://127.0.0.1:")
    finally:
        server.stop()
    assert not server.alive()
    assert "loading model" in log.read_text()


def test_a_server_that_exits_while_starting_shows_its_log(tmp_path):
    binary = _script(
        tmp_path / "server", "print('error: failed to load model nope.gguf')\nraise SystemExit(1)\n"
    )
    with pytest.raises(EngineError, match=r"exited with code 1(.|\n)*failed to load model"):
        ServerProcess.start([str(binary)], log_path=tmp_path / "s.log", timeout_s=30)


def test_a_server_that_never_gets_healthy_times_out_with_its_log(tmp_path):
    stuck = "import time\nprint('stuck', flush=True)\ntime.sleep(60)\n"
    binary = _script(tmp_path / "server", stuck)
    started = time.monotonic()
    with pytest.raises(EngineError, match=r"not healthy after 1 s(.|\n)*stuck"):
        ServerProcess.start([str(binary)], log_path=tmp_path / "s.log", timeout_s=1)
    assert time.monotonic() - started < 15


@pytest.fixture
def squatter() -> Iterator[int]:
    """Another process's healthy server (here: a thread of the test's) on a port: what a second
    test worker's llama-server is to this one when both picked the same free port."""
    import http.server
    import threading

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b'{"status": "ok"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc tells whose socket")
def test_a_health_answer_from_another_process_on_the_port_is_not_taken(tmp_path, squatter):
    stuck = "import time\ntime.sleep(60)\n"
    binary = _script(tmp_path / "server", stuck)
    server = ServerProcess([str(binary)], log_path=tmp_path / "s.log", port=squatter)
    try:
        with pytest.raises(EngineError, match="taken by another process"):
            server.wait_healthy(10)
    finally:
        server.stop()


def test_a_server_that_exits_saying_nothing_is_named_by_its_command(tmp_path):
    """An empty log (a --vllm-python that is no Python with vLLM, a wrong binary): the error
    shows the command that was run, the first thing to check."""
    with pytest.raises(
        EngineError, match=r"vLLM exited with code 1 .*wrote nothing.*/bin/false -m"
    ):
        ServerProcess.start(
            ["/bin/false", "-m", "vllm"], log_path=tmp_path / "s.log", timeout_s=10, name="vLLM"
        )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc tells whose socket")
def test_start_moves_to_another_port_when_its_port_was_taken(tmp_path, squatter, monkeypatch):
    from equiv.engines.server import process

    ports = iter([squatter, process.free_port()])
    monkeypatch.setattr(process, "free_port", lambda: next(ports))
    binary = _script(tmp_path / "server", HEALTHY)
    server = ServerProcess.start([str(binary)], log_path=tmp_path / "s.log", timeout_s=30)
    try:
        assert server.port != squatter
        assert process.listens_on(server.proc.pid, server.port)
    finally:
        server.stop()


def test_a_wrapper_script_whose_child_serves_is_healthy(tmp_path):
    """--server-bin may be a script that starts llama-server as its child (no exec): the child
    holds the socket, and that counts as the server's."""
    server_py = _script(tmp_path / "server.py", HEALTHY)
    wrapper = tmp_path / "wrapper.sh"
    wrapper.write_text(f'#!/bin/sh\n"{server_py}" "$@"\necho done\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    server = ServerProcess.start([str(wrapper)], log_path=tmp_path / "s.log", timeout_s=30)
    try:
        assert server.alive()
    finally:
        server.stop()
    deadline = time.monotonic() + 10
    while _live_in_group(server.proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _live_in_group(server.proc.pid)  # the wrapper's child went with it


def _live_in_group(pgid: int) -> list[int]:
    """Processes of group ``pgid`` that are not zombies (an orphan's zombie waits for init)."""
    live = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat_line = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat_line.rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                live.append(int(entry))
    return live


def _scored(body: Any) -> Reply:
    """A scoring answer as llama-server gives it: the prompt's length, and timings saying how
    many tokens it evaluated (all when cold, one on top of the cached prefix). Given a grammar of
    token IDs (forced decoding), it emits those tokens, each with its row."""
    n = len(body["prompt"])
    forced = [int(t) for t in re.findall(r"<\[(\d+)\]>", body.get("grammar", ""))]
    answer = _completion(forced or [n % 30])
    answer["tokens_evaluated"] = n
    answer["timings"] = {"prompt_n": 1 if body["cache_prompt"] else n, "cache_n": 0}
    if body["cache_prompt"]:
        answer["timings"]["cache_n"] = n - 1
    return _json(answer)


def test_batched_rescoring_asks_one_row_per_position_on_interleaved_cached_prefixes(
    tiny_config, fake
):
    engine = _engine(tiny_config, fake.url)
    assert engine.capabilities.rescoring
    fake.script["/completion"] = [_scored]
    rows = engine.rescore([1, 9], [4, 5, 6], batched=True)
    bodies = [body for path, body in fake.calls if path == "/completion"]
    assert [b["prompt"] for b in bodies] == [[1, 9], [1, 9, 4], [1, 9, 4, 5]]
    assert all(b["n_predict"] == 1 and b["post_sampling_probs"] is False for b in bodies)
    assert [b["cache_prompt"] for b in bodies] == [False] * 3  # each chain starts cold
    assert rows.shape == (3, 40)
    # the candidates the server returned (ids t and t + 1; id 7's log-probability is null)
    assert np.isfinite(rows[0]).sum() == 2
    assert rows[0][2] == pytest.approx(-0.1)
    assert rows[0][3] == pytest.approx(-3.0)
    assert rows[0][7] == -np.inf
    cost = engine.take_rescore_cost()
    assert (cost.requests, cost.rows_off_path, cost.tokens_evaluated) == (3, 0, 2 + 3 + 4)
    assert engine.take_rescore_cost().requests == 0  # taken


def test_single_token_rescoring_decodes_the_sample_from_the_prompt_in_one_request(
    tiny_config, fake
):
    """llama-server made to emit exactly the sample (a grammar of token IDs, temp 0): each row
    is the raw row generation computed there, the prompt cold, then one token at a time."""
    engine = _engine(tiny_config, fake.url)
    fake.script["/completion"] = [_scored]
    fake.calls.clear()
    rows = engine.rescore([1, 9], [4, 5, 8], batched=False)
    (body,) = [body for path, body in fake.calls if path == "/completion"]
    assert body["prompt"] == [1, 9]
    assert body["grammar"] == "root ::= <[4]> <[5]> <[8]>"
    assert (body["n_predict"], body["cache_prompt"], body["post_sampling_probs"]) == (
        3,
        False,
        False,
    )
    assert [float(rows[i][t]) for i, t in enumerate((4, 5, 8))] == pytest.approx([-0.1] * 3)
    cost = engine.take_rescore_cost()
    assert (cost.requests, cost.rows, cost.rows_off_path) == (1, 3, 0)
    assert cost.tokens_evaluated == 2 + 3


def test_a_sample_whose_rows_are_all_known_is_not_asked_again(tiny_config, fake):
    """Rows are reused only where every row of the sample is known: a row is generation's only
    if every token before it was evaluated as generation did, so a sample sharing just a prefix
    is decoded again from the prompt."""
    engine = _engine(tiny_config, fake.url)
    fake.script["/completion"] = [_scored]
    first = engine.rescore([1, 9], [4, 5, 8], batched=False)
    engine.take_rescore_cost()
    fake.calls.clear()
    np.testing.assert_array_equal(engine.rescore([1, 9], [4, 5, 8], batched=False), first)
    np.testing.assert_array_equal(engine.rescore([1, 9], [4, 5], batched=False), first[:2])
    assert fake.calls == []
    cost = engine.take_rescore_cost()
    assert (cost.requests, cost.rows, cost.rows_reused) == (0, 5, 5)
    engine.rescore([1, 9], [4, 5, 7, 8], batched=False)
    bodies = [body for path, body in fake.calls if path == "/completion"]
    assert [b["grammar"] for b in bodies] == ["root ::= <[4]> <[5]> <[7]> <[8]>"]
    fake.calls.clear()
    engine.rescore([1, 9], [4, 5, 8], batched=True)  # batched rows are always asked
    assert len([b for path, b in fake.calls if path == "/completion"]) == 3


def test_a_position_without_a_row_in_the_decoded_sample_is_asked_on_its_own(tiny_config, fake):
    engine = _engine(tiny_config, fake.url)

    def decoded(body: Any) -> Reply:
        if "grammar" not in body:
            return _scored(body)
        status, ctype, raw = _scored(body)
        return status, ctype, json.dumps(_without_rows(json.loads(raw), 1)).encode()

    fake.script["/completion"] = [decoded]
    rows = engine.rescore([1, 9], [4, 464, 8], batched=False)
    bodies = [body for path, body in fake.calls if path == "/completion"]
    assert [(b["prompt"], "grammar" in b) for b in bodies] == [([1, 9], True), ([1, 9, 4], False)]
    assert bodies[1]["cache_prompt"] is True  # on the decoded sample's cached prefix
    assert (np.isfinite(rows).sum(axis=1) >= 2).all()


def test_a_server_that_refuses_token_grammars_is_asked_one_position_at_a_time(tiny_config, fake):
    engine = _engine(tiny_config, fake.url)

    def no_grammar(body: Any) -> Reply:
        if "grammar" in body:
            return _json({"error": {"code": 400, "message": "failed to parse grammar"}}, 400)
        return _scored(body)

    fake.script["/completion"] = [no_grammar]
    engine.rescore([1, 9], [4, 5], batched=False)
    engine.rescore([1, 9], [7, 6], batched=False)
    bodies = [body for path, body in fake.calls if path == "/completion"]
    assert ["grammar" in b for b in bodies] == [True, False, False, False]  # asked once only
    assert [b["prompt"] for b in bodies[1:]] == [[1, 9], [1, 9, 4], [1, 9, 7]]


def test_a_sample_whose_grammar_fails_on_the_server_alone_is_asked_one_position_at_a_time(
    tiny_config, fake
):
    """llama-server answered HTTP 500 "Unexpected empty grammar stack after accepting piece:
    <pad> (0)" for one forced sample of a real run (a fault-proxy test): that sample is asked a
    position at a time, the next one is forced again; any other server error still stops."""
    engine = _engine(tiny_config, fake.url)
    failed = {"error": {"code": 500, "message": "Unexpected empty grammar stack after accepting"}}

    def grammar_fails_once(body: Any) -> Reply:
        if body.get("grammar", "").startswith("root ::= <[4]>"):  # at its first token
            return _json(failed, 500)
        return _scored(body)

    fake.script["/completion"] = [grammar_fails_once]
    rows = engine.rescore([1, 9], [4, 5], batched=False)
    assert (np.isfinite(rows).sum(axis=1) >= 2).all()
    engine.rescore([1, 9], [7, 6], batched=False)
    bodies = [body for path, body in fake.calls if path == "/completion"]
    grammars = [b.get("grammar") for b in bodies]
    # forced, forced with the last token left free, then a position at a time; forced again
    assert grammars[:5] == ["root ::= <[4]> <[5]>", "root ::= <[4]>", None, None, grammars[4]]
    assert grammars[4] == "root ::= <[7]> <[6]>"
    assert [b["prompt"] for b in bodies[2:4]] == [[1, 9], [1, 9, 4]]
    fake.calls.clear()
    fake.script["/completion"] = [_json({"error": {"code": 500, "message": "out of memory"}}, 500)]
    with pytest.raises(EngineError, match="out of memory"):
        engine.rescore([1, 9], [8, 3], batched=False)


def test_a_sample_that_ends_on_end_of_generation_is_forced_with_its_last_token_left_free(
    tiny_config, fake
):
    """llama.cpp's grammar sampler never matches an end-of-generation token: it allows one
    only once the grammar is complete (`llama_grammar_apply_impl`), so a sample ending on
    <eos> fails its grammar with HTTP 500 at the last step. Forced without that token, the
    server emits it itself, with the raw row: every row comes from one decoding of the sample,
    and later samples ending on it are forced that way at once."""
    engine = _engine(tiny_config, fake.url)
    eos = 1
    failed = {"error": {"code": 500, "message": "Unexpected empty grammar stack after accepting"}}

    def llama_server(body: Any) -> Reply:
        forced = [int(t) for t in re.findall(r"<\[(\d+)\]>", body.get("grammar", ""))]
        if eos in forced:
            return _json(failed, 500)
        if "grammar" in body and body["n_predict"] > len(forced):  # the grammar is complete
            status, ctype, raw = _scored(body)
            answer = json.loads(raw)
            eog = _completion([*forced, eos])
            answer["tokens"], answer["completion_probabilities"] = (
                eog["tokens"], eog["completion_probabilities"],
            )  # fmt: skip
            return status, ctype, json.dumps(answer).encode()
        return _scored(body)

    fake.script["/completion"] = [llama_server]
    rows = engine.rescore([1, 9], [4, 5, eos], batched=False)
    assert (np.isfinite(rows).sum(axis=1) >= 2).all()
    assert engine.take_rescore_cost().rows_off_path == 0
    engine.rescore([1, 9], [7, eos], batched=False)
    grammars = [b.get("grammar") for path, b in fake.calls if path == "/completion"]
    assert grammars == [
        "root ::= <[4]> <[5]> <[1]>",  # fails at <eos>
        "root ::= <[4]> <[5]>",
        "root ::= <[7]>",  # learned: no failed request first
    ]
    # a learned sample whose grammar fails anyway is not asked the same way twice
    fake.calls.clear()
    failed_at_3 = {"error": {"code": 500, "message": "empty grammar stack after accepting <pad>"}}

    def fails_on_3(body: Any) -> Reply:
        if "<[3]>" in body.get("grammar", ""):
            return _json(failed_at_3, 500)
        return _scored(body)

    fake.script["/completion"] = [fails_on_3]
    rows = engine.rescore([1, 9], [3, eos], batched=False)
    assert (np.isfinite(rows).sum(axis=1) >= 2).all()
    grammars = [b.get("grammar") for path, b in fake.calls if path == "/completion"]
    # one forced request, then a position at a time (the row after [1, 9] is known already)
    assert grammars == ["root ::= <[3]>", None]
    assert [b["prompt"] for path, b in fake.calls if path == "/completion"][1] == [1, 9, 3]


def test_a_scoring_answer_without_a_row_is_asked_again_with_its_token_banned(tiny_config, fake):
    """The greedy token of a scoring request leaves a UTF-8 character unfinished: llama-server
    sends it without a row. Banning it (a sampler) leaves the raw row, and the server sends it."""
    engine = _engine(tiny_config, fake.url)

    def rowless(token: int) -> Reply:
        return _json(_without_rows({**_completion([token]), "tokens_evaluated": 2}, 0))

    fake.script["/completion"] = [rowless(464), rowless(368), _scored]
    rows = engine.rescore([1, 9], [4], batched=True)
    bodies = [body for path, body in fake.calls if path == "/completion"]
    banned = [b.get("logit_bias") for b in bodies]
    assert banned == [None, [[464, False]], [[464, False], [368, False]]]
    assert np.isfinite(rows[0]).sum() == 2
    assert engine.take_rescore_cost().requests == 3
    fake.calls.clear()
    fake.script["/completion"] = [rowless(464)]  # a server that ignores the ban: no endless loop
    with pytest.raises(EngineError, match=r"chose token 464 .* asks again with such a token"):
        engine.rescore([1, 9], [4], batched=True)
    assert len([b for path, b in fake.calls if path == "/completion"]) == 2


def test_a_scoring_answer_for_another_prefix_is_refused(tiny_config, fake):
    engine = _engine(tiny_config, fake.url)
    fake.script["/completion"] = [_json({**_completion([5]), "tokens_evaluated": 7})]
    with pytest.raises(EngineError, match="answer is for another prefix"):
        engine.rescore([1, 9], [4], batched=True)


@pytest.mark.parametrize(
    "answer",
    [
        {"completion_probabilities": [{"top_logprobs": [{"id": "x"}, {"id": 2}]}]},
        {"completion_probabilities": [{"top_logprobs": [{"logprob": -1.0}, {"id": 2}]}]},
        {"tokens_evaluated": "many", "completion_probabilities": []},
        {"completion_probabilities": [{"top_logprobs": [1, 2]}]},
    ],
)
def test_a_malformed_scoring_answer_is_an_engine_error_naming_the_server(answer):
    from equiv.engines.server.rescore_answers import parse_scoring

    with pytest.raises(EngineError, match="http://s:1"):
        parse_scoring(answer, url="http://s:1", prefix_len=3, n_probs=2, single=True, wall_s=0.1)
