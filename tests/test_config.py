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
