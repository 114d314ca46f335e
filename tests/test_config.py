import re

import pytest

from equiv.config import DraftConfig, Mode, ModelSpec, RunConfig, SamplingConfig
from equiv.errors import ConfigError

PAIR = {"target": ModelSpec("t.gguf"), "draft": ModelSpec("d.gguf")}


@pytest.mark.parametrize("seed", [0, -1, 2**32 - 1])
def test_seeds_that_mean_random_are_refused(seed):
    with pytest.raises(ConfigError, match=f"seed={seed}.*random"):
        RunConfig(**PAIR, mode=Mode.SAMPLING, sampling=SamplingConfig(temp=0.8), seeds=(seed,))


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"temp": -0.1}, "temp"),
        ({"top_k": -1}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"min_p": 2.0}, "min_p"),
    ],
)
def test_sampling_values_out_of_range_are_named(kwargs, name):
    with pytest.raises(ConfigError, match=name):
        SamplingConfig(**kwargs)


def test_draft_settings_are_checked():
    with pytest.raises(ConfigError, match="draft_max=0"):
        DraftConfig(draft_max=0)
    with pytest.raises(ConfigError, match="draft_min=5"):
        DraftConfig(draft_max=4, draft_min=5)


@pytest.mark.parametrize("margin", [0.0, 100.0, -1.0, float("nan")])
def test_a_quality_margin_outside_0_100_points_is_refused(margin):
    with pytest.raises(
        ConfigError, match=re.escape(f"quality_margin={margin} must lie in (0, 100)")
    ):
        RunConfig(**PAIR, quality_margin=margin)


def test_sampling_mode_needs_seeds_and_temperature():
    with pytest.raises(ConfigError, match="at least one seed"):
        RunConfig(**PAIR, mode=Mode.SAMPLING, sampling=SamplingConfig(temp=0.8))
    with pytest.raises(ConfigError, match="temp > 0"):
        RunConfig(**PAIR, mode=Mode.SAMPLING, seeds=(1,))


def test_run_config_round_trips_through_dict():
    config = RunConfig(
        **PAIR,
        mode=Mode.SAMPLING,
        sampling=SamplingConfig(temp=0.7, top_k=10),
        seeds=(1, 2, 3),
        draft_config=DraftConfig(draft_max=4),
        n_threads=2,
    )
    assert RunConfig.from_dict(config.to_dict()) == config


def test_self_draft_is_detected(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    spec = ModelSpec(str(model))
    assert RunConfig(target=spec, draft=ModelSpec(str(tmp_path / "." / "m.gguf"))).self_draft
    assert not RunConfig(**PAIR).self_draft


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
@pytest.mark.parametrize("name", ["temp", "top_p", "min_p", "typical_p", "repeat_penalty"])
def test_sampling_values_that_are_not_finite_are_named(name, value):
    with pytest.raises(ConfigError, match=f"{name}={value!r} is not a finite number"):
        SamplingConfig(**{name: value})


def test_sampling_values_that_are_not_numbers_are_named():
    with pytest.raises(ConfigError, match="temp='hot' is not a number"):
        SamplingConfig(temp="hot")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="top_p=True is not a number"):
        SamplingConfig(top_p=True)


# -- TOML configs: each value checked against its option's type ---------------------------------


def _toml(tmp_path, text):
    from equiv.options.config_file import merge_toml

    path = tmp_path / "equiv.toml"
    path.write_text(text, encoding="utf-8")
    return merge_toml({"config": str(path)})


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('max_tokens = "4"', "max_tokens must be an integer, found the string '4'"),
        ('temp = "hot"', "temp must be a finite number (e.g. temp = 0.8), found the string"),
        ("temp = inf", "temp must be a finite number (e.g. temp = 0.8), found the number inf"),
        ("n_ctx = 2048.5", "n_ctx must be an integer (e.g. n_ctx = 2048), found the number"),
        ("flash_attn = 1", "flash_attn must be true or false, found the number 1"),
        ("suite = 3", "suite must be a string or a list of strings, found the number 3"),
        ('suite = ["code", 3]', "suite must be a string or a list of strings, found a list"),
        ("engine = 5", 'engine must be a string (e.g. engine = "llamacpp"), found the number'),
        ('mode = "greedy"', "mode must be one of temp0, sampling, found the string 'greedy'"),
        ("seeds = 0", "seeds: --seeds 0: give a count >= 1"),
        ("quality_margin = 0", "quality_margin: --quality-margin 0: give percentage points"),
        ('quality_margin = "3"', "quality_margin must be a finite number (e.g. quality_margin"),
        ("max_tokens = true", "max_tokens must be an integer, found the boolean true"),
        ("[suite]\nx = 1", "suite must be a string or a list of strings, found an object"),
    ],
)
def test_a_toml_value_of_the_wrong_type_names_key_type_and_value(tmp_path, line, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        _toml(tmp_path, line)


def test_toml_values_of_the_right_types_are_taken(tmp_path):
    text = 'max_tokens = 4\ntemp = 1\nflash_attn = true\nsuite = "code"\nquality_margin = 10\n'
    values = _toml(tmp_path, text)
    assert (values["max_tokens"], values["temp"], values["flash_attn"]) == (4, 1, True)
    assert values["quality_margin"] == 10
    assert values["suite"] == ["code"]


def test_a_toml_config_of_the_wrong_type_is_an_error_without_traceback(tmp_path, capsys):
    from equiv.cli.main import main

    path = tmp_path / "equiv.toml"
    path.write_text('max_tokens = "4"\n', encoding="utf-8")
    assert main(["run", "--config", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "max_tokens must be an integer" in err
    assert "Traceback" not in err


def test_every_option_with_a_converter_has_a_toml_type():
    """A converter missing from the TOML type table would make its option's TOML value a string."""
    from equiv.options.table import PLUGIN_OPTIONS, RUN_OPTIONS

    untyped = [
        o.name for o in (*RUN_OPTIONS, *PLUGIN_OPTIONS) if o.kind == "string" and o.type is not str
    ]
    assert untyped == []
