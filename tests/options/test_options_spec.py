"""llama.cpp's flag spellings beside equiv's, and the speculative path's own settings
(``--spec``, ``[tool.equiv.speculative]``, ``spec_overrides``) reaching `RunConfig`."""

import argparse
from pathlib import Path

import pytest

from equiv.config import Mode
from equiv.errors import ConfigError
from equiv.options.build import build_config, spec_overrides
from equiv.options.config_file import merge_toml
from equiv.options.table import add_arguments


def _parse(*argv):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return vars(parser.parse_args(list(argv)))


def test_llama_cpp_spellings_set_the_same_options():
    pasted = _parse(
        *("-c", "4096", "-b", "256", "-ub", "128", "-t", "3", "-fa", "on", "-s", "7"),
        *("--top-k", "20", "--temp", "0.5", "-n", "12", "-m", "t.gguf", "-md", "d.gguf"),
    )
    ours = _parse(
        *("--n-ctx", "4096", "--n-batch", "256", "--n-ubatch", "128", "--threads", "3"),
        *("--flash-attn", "--seed-start", "7", "--top-k", "20", "--temp", "0.5"),
        *("--max-tokens", "12", "--target", "t.gguf", "--draft", "d.gguf"),
    )
    assert pasted == ours
    assert pasted["n_ctx"] == 4096
    assert _parse("-fa", "off")["flash_attn"] is False
    assert _parse("--flash-attn")["flash_attn"] is True
    with pytest.raises(SystemExit):
        _parse("-fa", "maybe")


def test_spec_entries_are_typed_by_their_option():
    assert spec_overrides(["n_ctx=1024", "temp=0.7", "threads=2", "flash-attn=on"]) == (
        ("n_ctx", 1024),
        ("temp", 0.7),
        ("n_threads", 2),
        ("flash_attn", True),
    )
    assert spec_overrides(["typical_p=0.9"]) == (("typical_p", 0.9),)
    with pytest.raises(ConfigError, match=r"--spec 'n_ctx': give KEY=VALUE"):
        spec_overrides(["n_ctx"])
    with pytest.raises(ConfigError, match=r"--spec 'n_ctx=big'"):
        spec_overrides(["n_ctx=big"])


def test_toml_table_and_pairs_become_spec_entries(tmp_path):
    toml = tmp_path / "pyproject.toml"
    toml.write_text(
        "[tool.equiv]\nspec_overrides = [['n_batch', 64]]\n"
        "[tool.equiv.speculative]\nn_ctx = 1024\nflash_attn = true\n",
        encoding="utf-8",
    )
    merged = merge_toml({"config": str(toml)})
    assert sorted(merged["spec"]) == ["flash_attn=on", "n_batch=64", "n_ctx=1024"]
    assert merged["n_ctx"] == 2048  # the baseline keeps the shared value


def test_a_bad_speculative_table_names_the_value_and_the_fix(tmp_path):
    toml = tmp_path / "equiv.toml"
    toml.write_text("speculative = 3\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"speculative = 3 .*\[tool.equiv.speculative\]"):
        merge_toml({"config": str(toml)})
    toml.write_text("spec_overrides = [['n_ctx']]\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"give \[KEY, VALUE\] pairs"):
        merge_toml({"config": str(toml)})


def test_overrides_reach_the_speculative_path_only(make_gguf, tmp_path):
    target, draft = make_gguf("t.gguf"), make_gguf("d.gguf")
    toml = tmp_path / "equiv.toml"
    toml.write_text("[speculative]\nn_ctx = 1024\n", encoding="utf-8")
    config, _ = build_config(
        {
            "config": str(toml),
            "target": str(target),
            "draft": str(draft),
            "mode": "sampling",
            "spec": ["temp=0.5"],
        }
    )
    assert config.mode is Mode.SAMPLING
    assert dict(config.spec_overrides) == {"temp": 0.5, "n_ctx": 1024}
    spec, base = config.for_path(speculative=True), config.for_path(speculative=False)
    assert (base.n_ctx, spec.n_ctx) == (2048, 1024)
    assert (base.sampling.temp, spec.sampling.temp) == (0.8, 0.5)


def test_a_key_no_path_can_override_is_refused(make_gguf):
    target = make_gguf("t.gguf")
    with pytest.raises(ConfigError, match="speculative override 'draft_max' is not supported"):
        build_config({"target": str(target), "draft": str(target), "spec": ["draft_max=4"]})


@pytest.mark.parametrize("text", ["0", "100", "-2", "nan", "three"])
def test_a_quality_margin_outside_0_100_points_is_a_usage_error(text, capsys):
    with pytest.raises(SystemExit):
        _parse("--quality-margin", text)
    assert f"--quality-margin {text}: give percentage points in (0, 100)" in capsys.readouterr().err
    assert _parse("--quality-margin", "10")["quality_margin"] == 10.0


def test_pair_comes_from_the_command_line_or_toml_and_defaults_to_gemma3(tmp_path):
    from equiv.config import DEFAULT_PAIR

    assert DEFAULT_PAIR == "gemma3"
    assert merge_toml({})["pair"] == DEFAULT_PAIR
    assert _parse("--pair", "hybrid")["pair"] == "hybrid"
    toml = tmp_path / "equiv.toml"
    toml.write_text('pair = "hybrid"\n', encoding="utf-8")
    assert merge_toml({"config": str(toml)})["pair"] == "hybrid"
    toml.write_text('pair = "mamba"\n', encoding="utf-8")
    with pytest.raises(
        ConfigError, match=r"pair must be one of gemma3, hybrid, mtp, found the string 'mamba'"
    ):
        merge_toml({"config": str(toml)})


@pytest.mark.model
def test_pair_hybrid_builds_a_config_on_the_tiny_recurrent_pair():
    from equiv.models.pair import cache_dir

    config, pair = build_config({"pair": "hybrid"})
    assert Path(config.target.path).parent == cache_dir() / "tiny"
    assert (config.target, config.draft) == (pair.target, pair.draft)
    assert config.target.path != config.draft.path
