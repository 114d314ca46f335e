"""Speculative types as users run them, on a real llama-server (llama-cpp-python 0.3.36's
llama.cpp): n-gram drafting with no draft model, at temp 0 and temp > 0, with the server's own
counters showing that it drafted and accepted; ``-md`` without ``--spec-type``, which this build
does not speculate with, found from the server's /slots; a type the build lacks refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from llama_server import server_bin
from repeating_prompts import REPEATS

from equiv.cli.main import main
from equiv.records import ResultsFile

pytestmark = [pytest.mark.model, pytest.mark.server]

NGRAM_ARGS = "--spec-ngram-mod-n-match 3 --spec-ngram-mod-n-min 1 --spec-ngram-mod-n-max 6"


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("suite") / "repeats.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in REPEATS))
    return path


def _run(out: Path, suite: Path, *args: str) -> tuple[int, Any]:
    argv = ["run", "--engine", "server", "--server-bin", server_bin(), "--suite", str(suite)]
    code = main([*argv, *args, "--out", str(out)])
    return code, ResultsFile(out / "results.jsonl").read()


def _drafted(contents: Any) -> tuple[int, int]:
    steps = [s for r in contents.results for s in r.speculative.draft_steps]
    return sum(s.drafted for s in steps), sum(s.accepted for s in steps)


@pytest.mark.parametrize(
    ("mode", "args"),
    [
        ("temp0", ()),
        ("sampling", ("--temp", "0.8", "--seeds", "6", "--top-k", "40")),
    ],
)
def test_ngram_mod_drafts_without_a_draft_model(tmp_path, suite, model_pair, mode, args):
    code, contents = _run(
        tmp_path, suite, "--mode", mode, *args,
        "--server-spec-type", "ngram-mod", "--server-draft-args", NGRAM_ARGS,
    )  # fmt: skip
    header = contents.header
    spec_argv = header.extra["servers"]["speculative"]["argv"]
    assert spec_argv[spec_argv.index("--spec-type") + 1] == "ngram-mod"
    assert "--model-draft" not in spec_argv
    fingerprint = header.fingerprints["speculative"]
    assert fingerprint["speculating"] is True  # the server's own /slots
    assert "draft_sha256" not in fingerprint  # no draft file: none is fingerprinted
    assert header.differences == ()
    drafted, accepted = _drafted(contents)  # the server's counters (timings.draft_n)
    assert drafted > 0
    assert 0 < accepted <= drafted
    judged = contents.analyses if mode == "sampling" else contents.results
    labels = {(r.judged if mode == "sampling" else r.verdict).label.value for r in judged}
    assert labels <= {"equivalent", "numeric-drift", "inconclusive"}
    if mode == "sampling":
        assert contents.runs, "the run's pooled answer is written"
        assert contents.runs[-1].verdict.label.value != "sampler-bug"
    assert code == 0


def test_a_draft_without_spec_type_is_found_not_speculating(tmp_path, suite, model_pair):
    code, contents = _run(
        tmp_path, suite, "--mode", "temp0", "--prompt", "*/calls",
        "--server-spec-type", "inferred",
    )  # fmt: skip
    spec_argv = contents.header.extra["servers"]["speculative"]["argv"]
    assert "--model-draft" in spec_argv
    assert "--spec-type" not in spec_argv
    assert contents.header.fingerprints["speculative"]["speculating"] is False
    assert contents.header.differences[0].startswith(
        "speculating: the speculative server does not speculate"
    )
    assert _drafted(contents) == (0, 0)
    assert {r.verdict.label.value for r in contents.results} == {"misconfiguration"}
    assert code == 0


def test_a_type_the_build_lacks_is_refused_before_any_server_starts(tmp_path, suite, capsys):
    argv = ["run", "--engine", "server", "--server-bin", server_bin(), "--suite", str(suite)]
    code = main([*argv, "--server-spec-type", "ngram-modd", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert "ngram-modd is not a speculative type of this llama-server" in err
    assert "ngram-mod" in err


@pytest.mark.parametrize(
    ("mode", "args"),
    [("temp0", ()), ("sampling", ("--temp", "0.8", "--seeds", "6", "--top-k", "40"))],
)
def test_the_mtp_pair_drafts_with_its_own_head(tmp_path, model_pair, mode, args):
    """DeepSeek-R1's own speculative path, on a tiny deepseek2 model with one nextn layer
    (`equiv.models.tiny_mtp`): llama-server's draft-mtp, no draft model."""
    argv = ["run", "--pair", "mtp", "--engine", "server", "--server-bin", server_bin()]
    argv += ["--prompt", "code/fib_lt", "--prompt", "chat/capital_france", "--max-tokens", "24"]
    code = main([*argv, "--mode", mode, *args, "--out", str(tmp_path)])
    contents = ResultsFile(tmp_path / "results.jsonl").read()
    header = contents.header
    spec_argv = header.extra["servers"]["speculative"]["argv"]
    assert spec_argv[spec_argv.index("--spec-type") + 1] == "draft-mtp"
    assert "--model-draft" not in spec_argv
    assert header.fingerprints["speculative"]["speculating"] is True
    assert header.differences == ()
    drafted, accepted = _drafted(contents)
    assert drafted > 0
    assert 0 < accepted <= drafted
    log = (tmp_path / "llama-server-speculative.log").read_text(errors="replace")
    assert "creating MTP draft context against the target model" in log  # the server's word
    assert "draft acceptance = " in log
    if mode == "temp0":
        assert {r.verdict.label.value for r in contents.results} <= {
            "equivalent", "numeric-drift",
        }  # fmt: skip
        assert not [e for e in contents.events if e.event == "self-draft"]  # no draft file
    else:
        assert contents.runs[-1].verdict.label.value != "sampler-bug"
    assert code == 0


def test_mtp_on_a_target_without_a_head_is_refused(tmp_path, model_pair, capsys):
    argv = ["run", "--engine", "server", "--server-bin", server_bin(), "--prompt", "code/fib_lt"]
    code = main([*argv, "--server-spec-type", "draft-mtp", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert "has no MTP head" in err
    assert "equiv check-draft TARGET" in err
