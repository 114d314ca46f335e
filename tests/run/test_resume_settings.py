"""`--resume` compares configurations setting by setting; settings an older equiv did not write
count as their defaults, so a run of the previous release can be resumed."""

from __future__ import annotations

from equiv.config import ModelSpec, RunConfig
from equiv.run.resume import changed_settings


def _config(**kwargs: object) -> RunConfig:
    return RunConfig(target=ModelSpec("/m/t.gguf"), draft=ModelSpec("/m/d.gguf"), **kwargs)  # type: ignore[arg-type]


def test_a_setting_the_older_file_lacks_counts_as_its_default():
    new = _config().to_dict()
    old = {k: v for k, v in new.items() if k not in ("engine_options", "quality_margin")}
    assert changed_settings(old, new) == []


def test_a_real_difference_is_named():
    assert changed_settings(_config(n_ctx=1024).to_dict(), _config().to_dict()) == ["n_ctx"]
    options = _config(engine="server", engine_options=(("server_bin", "/x"),)).to_dict()
    assert changed_settings(_config().to_dict(), options) == ["engine", "engine_options"]


def test_a_configuration_this_equiv_cannot_read_is_compared_as_written():
    assert changed_settings({"n_ctx": 3}, {"n_ctx": 3}) == []
    assert changed_settings({"n_ctx": 3}, {"n_ctx": 4}) == ["n_ctx"]
