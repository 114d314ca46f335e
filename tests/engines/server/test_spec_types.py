"""The speculative server's ``--spec-type`` (`equiv.engines.server.spec_types`): read from the
build's ``--help``, checked before the server starts, passed as the user runs it; n-gram types
get no draft file. Flag handling with stand-in binaries that print a help text (contract tests:
the real server's runs are in tests/engines/server/test_spec_types_server.py)."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest
from scripted_server import NEW_HELP, OLD_HELP, FakeServer, _json

from equiv.config import ModelSpec, RunConfig
from equiv.engines.server.engine import ServerEngine
from equiv.engines.server.llama_command import detect_flags, llama_server_argv, split_draft
from equiv.engines.server.settings import ServerSettings
from equiv.engines.server.spec_types import INFERRED, build_types, chosen_types, reads_draft_file
from equiv.errors import ConfigError
from equiv.verdicts.temp0.classify import fingerprint_differences, speculation_problem

#: What llama-cpp-python 0.3.36's llama-server prints (its --help, abridged).
REAL_LINE = (
    "--spec-type none,draft-simple,draft-eagle3,draft-mtp,draft-dflash,draft-dspark,"
    "ngram-simple,ngram-map-k,ngram-map-k4v,ngram-mod,ngram-cache\n"
    "                                        comma-separated list of types of speculative"
)
TYPES = build_types(REAL_LINE)


def test_the_builds_types_are_read_from_either_help_format():
    assert TYPES[:3] == ("none", "draft-simple", "draft-eagle3")
    assert "ngram-mod" in TYPES
    assert len(TYPES) == 11
    assert build_types(NEW_HELP) == ("none", "draft-simple", "ngram-simple")
    assert build_types(OLD_HELP) == ()


def test_the_type_is_the_users_checked_against_the_build():
    assert chosen_types(None, TYPES) == ("draft-simple",)
    assert chosen_types(None, ()) is None  # an old build speculates with -md alone
    assert chosen_types(INFERRED, TYPES) is None
    assert chosen_types("ngram-mod, draft-simple", TYPES) == ("ngram-mod", "draft-simple")
    with pytest.raises(ConfigError, match=r"ngram-modd is not .* it has none, draft-simple"):
        chosen_types("ngram-modd", TYPES)
    with pytest.raises(ConfigError, match="'none' turns speculation off"):
        chosen_types("none", TYPES)
    with pytest.raises(ConfigError, match="has no --spec-type"):
        chosen_types("ngram-mod", ())


def test_only_draft_file_types_read_the_draft():
    assert reads_draft_file(("draft-simple",))
    assert reads_draft_file(("ngram-mod", "draft-simple"))
    assert reads_draft_file(None)  # no --spec-type: -md as the user wrote it
    assert not reads_draft_file(("ngram-mod",))
    assert not reads_draft_file(("draft-mtp",))  # the target's own head


def _binary(tmp_path: Path, help_text: str) -> str:
    path = tmp_path / "llama-server"
    path.write_text(f"#!{sys.executable}\nprint({help_text!r})\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.fixture
def config(make_gguf) -> RunConfig:
    target = make_gguf("target.gguf")
    return RunConfig(target=ModelSpec(str(target)), draft=ModelSpec(str(target)), n_threads=1)


def test_an_ngram_server_gets_no_draft_and_its_flags_stay_the_speculative_ones(tmp_path, config):
    binary = _binary(tmp_path, NEW_HELP)
    flags = detect_flags(binary)
    argv = llama_server_argv(
        binary, flags, config, speculative=True, slots=1, extra=["-ngl", "0"],
        draft_extra=["--spec-ngram-simple-size-n", "4"], spec_type="ngram-simple",
    )  # fmt: skip
    assert "--model-draft" not in argv
    assert argv[argv.index("--spec-type") + 1] == "ngram-simple"
    baseline = llama_server_argv(
        binary, flags, config, speculative=False, slots=1, extra=["-ngl", "0"]
    )
    shared, own = split_draft(argv, flags)
    assert shared == baseline  # the two paths' shared flags are the same words
    assert "--spec-ngram-simple-size-n" in own
    inferred = llama_server_argv(
        binary, flags, config, speculative=True, slots=1, spec_type=INFERRED
    )
    assert "--model-draft" in inferred
    assert "--spec-type" not in inferred


def test_a_spec_type_for_a_running_server_is_refused():
    with pytest.raises(ConfigError, match="--server-spec-type is a flag of the llama-server"):
        ServerSettings(baseline_url="http://a", speculative_url="http://b", spec_type="ngram-mod")


def test_a_server_that_does_not_speculate_is_a_setup_finding():
    spec = {"speculating": False, "draft_config": {"server_flags": ["--model-draft", "d.gguf"]}}
    problem = speculation_problem({"speculating": False}, spec)
    assert problem is not None
    assert "does not speculate (started with --model-draft d.gguf)" in problem
    assert "add --spec-type draft-simple" in problem
    assert fingerprint_differences({"speculating": False}, spec) == [problem]
    assert "baseline server speculates" in str(
        speculation_problem({"speculating": True}, {"speculating": True})
    )
    assert fingerprint_differences({"speculating": False}, {"speculating": True}) == []
    assert speculation_problem({}, {}) is None  # servers that do not say


def test_a_running_servers_slots_are_read(config):
    """Contract test: /slots as llama-server answers it, on a scripted server."""
    base, spec = (
        FakeServer(Path(config.target.path).name),
        FakeServer(Path(config.target.path).name),
    )
    try:
        for server, speculative in ((base, False), (spec, False)):
            server.script["/slots"] = [_json([{"id": 0, "speculative": speculative}])]
        settings = ServerSettings(baseline_url=base.url, speculative_url=spec.url)
        engines = [ServerEngine(config, speculative=s, settings=settings) for s in (False, True)]
        fingerprints = [e.fingerprint() for e in engines]
        assert [f["speculating"] for f in fingerprints] == [False, False]
        (difference,) = fingerprint_differences(*fingerprints)
        assert difference.startswith("speculating: the speculative server does not speculate:")
        spec.script["/slots"] = [_json([{"id": 0, "speculative": True}])]
        assert ServerEngine(config, speculative=True, settings=settings).fingerprint()[
            "speculating"
        ]
        placebo = ServerSettings(baseline_url=base.url, speculative_url=base.url)
        one = [ServerEngine(config, speculative=s, settings=placebo) for s in (False, True)]
        assert fingerprint_differences(*(e.fingerprint() for e in one)) == []  # by choice
        spec.script["/slots"] = [_json({"error": "slots endpoint disabled"}, status=501)]
        assert (
            ServerEngine(config, speculative=True, settings=settings).fingerprint()["speculating"]
            is None
        )
    finally:
        base.close()
        spec.close()
    assert json.dumps(fingerprints)  # recorded in the header as is
