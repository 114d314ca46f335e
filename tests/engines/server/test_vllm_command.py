"""The vLLM servers equiv starts itself (``--vllm-model``): their command lines, the settings
that refuse a mixed-up request, and what a run without a model file reads. The servers
themselves run in tests/engines/server/test_vllm_draft_real.py (marker vllm)."""

from __future__ import annotations

import json

import pytest

from equiv.config import DraftConfig, ModelSpec, RunConfig
from equiv.engines.server.settings import ServerSettings
from equiv.engines.server.vllm_command import (
    parse_spec_config,
    spec_config,
    split_vllm_draft,
    vllm_argv,
    vllm_env,
)
from equiv.errors import ConfigError
from equiv.options.build import build_config

SERVED = ModelSpec.of_server()
CONFIG = RunConfig(SERVED, SERVED, n_ctx=1024, draft_config=DraftConfig(draft_max=6))
DRAFT = {"method": "draft_model", "model": "/m/draft", "num_speculative_tokens": 4}


def _argv(*, speculative: bool, spec: dict[str, object], **kwargs: object) -> list[str]:
    return vllm_argv(
        "/venv/bin/python", "/m/target", CONFIG, speculative=speculative, slots=4,
        logprobs=40, spec=spec, **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip


def test_both_paths_share_every_flag_but_the_speculative_config():
    spec = spec_config(None, CONFIG)
    assert spec == {"method": "ngram", "num_speculative_tokens": 6, "prompt_lookup_max": 4}
    base = _argv(speculative=False, spec=spec, extra=["--dtype", "bfloat16"])
    speculative = _argv(speculative=True, spec=spec, extra=["--dtype", "bfloat16"])
    shared, own = split_vllm_draft(speculative)
    assert shared == base == split_vllm_draft(base)[0]
    assert split_vllm_draft(base)[1] == []
    assert own[0] == "--speculative-config"
    assert json.loads(own[1]) == spec
    assert base[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    flags = dict(zip(base[3::2], base[4::2], strict=False))
    assert flags["--model"] == "/m/target"
    assert flags["--max-model-len"] == "1024"  # the run's --n-ctx
    assert flags["--max-num-seqs"] == "4"
    assert flags["--max-logprobs"] == "40"  # what re-scoring asks for, past vLLM's default 20
    assert "--disable-hybrid-kv-cache-manager" not in base  # n-gram lookup needs no kv groups


def test_a_draft_model_turns_the_hybrid_kv_cache_off_on_both_paths():
    base = _argv(speculative=False, spec=DRAFT)
    speculative = _argv(speculative=True, spec=DRAFT, draft_extra=["--foo"])
    assert "--disable-hybrid-kv-cache-manager" in base
    assert split_vllm_draft(speculative)[0] == base
    assert split_vllm_draft(speculative)[1][-1] == "--foo"


def test_never_fewer_log_probabilities_than_vllms_default():
    argv = vllm_argv(
        "py", "m", CONFIG, speculative=False, slots=1, logprobs=8, spec=spec_config(None, CONFIG)
    )
    assert argv[argv.index("--max-logprobs") + 1] == "20"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{method: ngram}", r"--vllm-spec-config '\{method: ngram\}' is not JSON"),
        ('["ngram"]', "names no drafter"),
        ('{"num_speculative_tokens": 4}', "names no drafter"),
    ],
)
def test_a_spec_config_that_names_no_drafter_is_refused_with_the_value(text, match):
    with pytest.raises(ConfigError, match=match):
        parse_spec_config(text)
    with pytest.raises(ConfigError, match=match):
        ServerSettings(vllm_model="/m", vllm_spec_config=text)


@pytest.mark.parametrize("n", [2, 7, 16])
def test_the_paths_get_as_many_cores_each_unless_the_user_binds_them(n):
    """The same thread count on both paths (another count splits reductions otherwise), on
    disjoint cores; on an odd count one core is left over."""
    cores = list(range(n))
    base = vllm_env(False, {}, cores)["VLLM_CPU_OMP_THREADS_BIND"].split(",")
    speculative = vllm_env(True, {}, cores)["VLLM_CPU_OMP_THREADS_BIND"].split(",")
    assert len(base) == len(speculative) == n // 2
    assert set(base).isdisjoint(speculative)
    bound = {"VLLM_CPU_OMP_THREADS_BIND": "7"}
    assert vllm_env(True, bound, cores)["VLLM_CPU_OMP_THREADS_BIND"] == "7"
    assert "VLLM_CPU_OMP_THREADS_BIND" not in vllm_env(True, {}, [0])  # one core: no binding


def test_settings_refuse_a_vllm_model_beside_another_source_or_llama_flags():
    with pytest.raises(ConfigError, match="--server-bin and --vllm-model name the servers twice"):
        ServerSettings(server_bin="x", vllm_model="/m")
    with pytest.raises(ConfigError, match="--vllm-model and --baseline-url"):
        ServerSettings(vllm_model="/m", baseline_url="http://a", speculative_url="http://b")
    with pytest.raises(ConfigError, match="--server-api openai or auto"):
        ServerSettings(vllm_model="/m", api="llama")
    with pytest.raises(ConfigError, match="--server-spec-type is a flag of the llama-server"):
        ServerSettings(vllm_model="/m", spec_type="ngram-mod")
    with pytest.raises(ConfigError, match="give --vllm-model DIR too"):
        ServerSettings(server_bin="x", vllm_spec_config='{"method": "ngram"}')
    assert ServerSettings(vllm_model="/m", extra_args="--dtype bfloat16").starts_servers


def test_a_vllm_run_reads_no_model_file(tmp_path):
    """vLLM serves a model directory: the pair is the servers' own, no GGUF is looked for."""
    values = {"engine": "server", "vllm_model": str(tmp_path)}
    config, pair = build_config(values, workdir=tmp_path)
    assert config.target.served
    assert config.draft.served
    assert pair.vocab is None
    assert dict(config.engine_options)["vllm_model"] == str(tmp_path)
