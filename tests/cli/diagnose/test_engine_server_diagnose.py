"""``equiv diagnose`` runs the user's own llama-server: the binary of the command line (or the one
beside its llama-cli), with the user's flags, and says so; otherwise in process, saying that."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from equiv.cli.diagnose.command import parse_command
from equiv.cli.diagnose.mapping import map_to_run, pass_through, user_server
from equiv.cli.main import main
from equiv.errors import ConfigError
from equiv.models.pair import cache_dir

LLAMA_CPP_PYTHON = "0.3.36"


def _build_dir(tmp_path: Path, *names: str) -> Path:
    """A build directory holding files of these names (only their presence is looked at)."""
    for name in names:
        (tmp_path / name).write_text("")
    return tmp_path


def test_a_llama_server_path_that_exists_is_run(tmp_path: Path) -> None:
    build = _build_dir(tmp_path, "llama-server")
    cmd = parse_command(f"{build}/llama-server -m t.gguf -md d.gguf -ngl 99 -ngld 99 --temp 0.2")
    mapping = map_to_run(cmd)
    assert mapping.values["engine"] == "server"
    assert mapping.values["server_bin"] == str(build / "llama-server")
    assert mapping.values["server_args"] == "-ngl 99"
    assert mapping.values["server_draft_args"] == "-ngld 99"
    assert mapping.runs.startswith(f"running your llama-server {build}/llama-server")


def test_a_relative_server_path_stays_a_path(tmp_path: Path, monkeypatch) -> None:
    """``./llama-server`` is the file here, not a name to look up on PATH (it was run as
    ``llama-server`` and not found)."""
    _build_dir(tmp_path, "llama-server")
    monkeypatch.chdir(tmp_path)
    mapping = map_to_run(parse_command("./llama-server -m t.gguf"))
    assert mapping.values["server_bin"] == str(tmp_path / "llama-server")
    assert mapping.runs == f"running your llama-server {tmp_path / 'llama-server'} with your flags"


def test_llama_cli_maps_onto_the_llama_server_of_its_build(tmp_path: Path) -> None:
    build = _build_dir(tmp_path, "llama-cli", "llama-server")
    binary, said = user_server(parse_command(f"{build}/llama-speculative -m t.gguf"))
    assert binary is None  # no llama-speculative file here: nothing to map from
    assert "is not a file here" in said
    binary, said = user_server(parse_command(f"{build}/llama-cli -m t.gguf"))
    assert binary == str(build / "llama-server")
    assert "llama-server of the same build" in said


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ("llama-server-not-on-path-anywhere -m t.gguf", "is not a file here"),
        ("-m t.gguf --temp 0", "pass --server-bin"),
    ],
)
def test_otherwise_in_process_and_it_says_so(command: str, why: str) -> None:
    mapping = map_to_run(parse_command(command))
    assert "engine" not in mapping.values
    assert "running llama-cpp-python in process" in mapping.runs
    assert why in mapping.runs


def test_a_missing_server_bin_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist; give the path of your llama-server"):
        map_to_run(parse_command("-m t.gguf"), server_bin=str(tmp_path / "nope"))


def test_only_flags_equiv_does_not_set_pass_through() -> None:
    cmd = parse_command(
        "llama-server -m t.gguf -c 4096 -ngl 99 -ctk q8_0 --no-mmap -t 8 -ngld=50 --port 9 -np 1"
    )
    assert pass_through(cmd) == (["-ngl", "99", "-ctk", "q8_0", "--no-mmap"], ["-ngld=50"])


def _server_bin() -> str:
    given = os.environ.get("EQUIV_LLAMA_SERVER")
    path = Path(given) if given else cache_dir() / f"llama-server-{LLAMA_CPP_PYTHON}/llama-server"
    if not path.is_file():
        pytest.skip(f"no llama-server at {path}: run scripts/build_llama_server.sh")
    return str(path)


@pytest.mark.model
@pytest.mark.server
def test_diagnose_runs_the_users_llama_server(
    model_pair: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binary = _server_bin()
    argv = ["diagnose", "--prompt", "code/fib_lt", "--max-tokens", "8", "--seeds", "4"]
    argv += ["--out", str(tmp_path), "--", binary, "-m", model_pair.target.path]
    argv += ["-md", model_pair.draft.path, "--spec-type", "draft-simple"]
    code = main([*argv, "--temp", "0.2", "--seed", "1"])
    out = capsys.readouterr().out
    print(out)
    assert code == 0
    assert f"runs: running your llama-server {binary} with your flags" in out
    for mode in ("temp0", "sampling"):
        header = json.loads((tmp_path / mode / "results.jsonl").read_text().splitlines()[0])
        servers = header["servers"]
        assert servers["baseline"]["argv"][0] == binary
        assert "--model-draft" not in servers["baseline"]["argv"]
        spec = servers["speculative"]["argv"]
        assert spec[spec.index("--spec-type") + 1] == "draft-simple"
        assert header["fingerprints"]["speculative"]["speculating"] is True
        assert not [d for d in header["differences"] if d.startswith("speculating")]


@pytest.mark.model
@pytest.mark.server
def test_diagnose_finds_a_draft_the_server_ignores(
    model_pair: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """This build's --spec-type defaults to none: -md alone loads the draft and builds no
    speculative implementation (/slots: "speculative": false). Run as written, it is found."""
    binary = _server_bin()
    argv = ["diagnose", "--prompt", "code/fib_lt", "--max-tokens", "8", "--seeds", "4"]
    argv += ["--out", str(tmp_path), "--", binary, "-m", model_pair.target.path]
    code = main([*argv, "-md", model_pair.draft.path, "--temp", "0.2", "--seed", "1"])
    out = capsys.readouterr().out
    print(out)
    assert code == 0
    assert "speculation was never checked: the speculative server does not speculate" in out
    assert "add --spec-type draft-simple" in out
    assert "not sampling at temp 0.2" in out
    assert not (tmp_path / "sampling").exists()
    header = json.loads((tmp_path / "temp0" / "results.jsonl").read_text().splitlines()[0])
    assert "--spec-type" not in header["servers"]["speculative"]["argv"]  # as the user ran it
    assert header["differences"][0].startswith("speculating:")
    summary = json.loads((tmp_path / "temp0" / "summary.json").read_text())
    assert summary["verdict"]["label"] == "misconfiguration"
