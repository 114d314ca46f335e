"""The command line: exit codes and messages for bad input, and one real run."""

import json
import subprocess
import sys

import pytest

from equiv.cli.main import main


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_missing_target_names_the_path(capsys, tmp_path):
    missing = tmp_path / "nope.gguf"
    code, _, err = _run(capsys, "run", "--target", str(missing), "--draft", str(missing))
    assert code == 3
    assert str(missing) in err
    assert "does not exist" in err


def test_a_file_that_is_not_gguf_is_refused(capsys, tmp_path):
    fake = tmp_path / "model.gguf"
    fake.write_text("<html>not a model</html>")
    code, _, err = _run(capsys, "run", "--target", str(fake), "--draft", str(fake))
    assert code == 3
    assert "GGUF" in err
    assert "Traceback" not in err


def test_a_truncated_gguf_is_refused(capsys, make_gguf):
    path = make_gguf()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 64])
    code, _, err = _run(capsys, "run", "--target", str(path), "--draft", str(path))
    assert code == 3
    assert "truncated" in err or "past the end" in err


def test_a_draft_with_another_vocabulary_is_refused(capsys, make_gguf):
    target = make_gguf("target.gguf")
    other = make_gguf("draft.gguf", vocab=["<unk>", "<s>", "</s>", "a", "b", "c", "zzz"] * 40)
    code, _, err = _run(capsys, "run", "--target", str(target), "--draft", str(other))
    assert code == 4
    assert "vocab" in err


def test_check_draft_explains_a_mismatch(capsys, make_gguf):
    target = make_gguf("target.gguf")
    other = make_gguf("draft.gguf", model="gpt2")
    code, out, _ = _run(capsys, "check-draft", str(target), str(other))
    assert code == 4
    assert "NOT compatible" in out
    assert "type" in out


def test_unknown_suite_is_a_prompt_error(capsys, model_pair):
    code, _, err = _run(capsys, "run", "--suite", "nope")
    assert code == 5
    assert "unknown suite 'nope'" in err


@pytest.mark.model
def test_max_tokens_beyond_the_context_is_refused(capsys, tmp_path):
    code, _, err = _run(
        capsys, "run", "--prompt", "code/fib_lt", "--max-tokens", "5000", "--out", str(tmp_path)
    )
    assert code == 5
    assert "max_tokens 5000" in err
    assert "n_ctx" in err


@pytest.mark.model
def test_equiv_run_end_to_end(tmp_path):
    """The console script on the default pair: a result per prompt and a summary, exit 0."""
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "equiv",
            "run",
            "--prompt",
            "code/fib_lt",
            "--prompt",
            "chat/*",
            "--max-tokens",
            "8",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    results = [r for r in lines if r["kind"] == "result"]
    assert "code/fib_lt::temp0" in {r["key"] for r in results}
    assert {r["suite"] for r in results} == {"code", "chat"}
    assert "equivalent" in proc.stdout
    assert "Traceback" not in proc.stderr


# -- help, -q/-v, --json (the fake engine of the plugin tests: no model) -------------------------
def _subcommands():
    from equiv.cli.main import build_parser

    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return action.choices, action._choices_actions


def test_every_subcommand_and_option_says_what_it_does():
    parsers, summaries = _subcommands()
    assert {a.dest for a in summaries} == set(parsers)
    assert all(a.help for a in summaries)
    for name, sub in parsers.items():
        assert len(sub.description or "") > 20, name
        for action in sub._actions:
            assert action.help, f"equiv {name} {action.option_strings or action.dest}"
        text = sub.format_help()
        assert "(default Q4_0) [Q4_0]" not in text
    run_help = parsers["run"].format_help()
    for flag in ("-q, --quiet", "-v, --verbose", "--json", "-c N", "-fa [on|off]", "--spec"):
        assert flag in run_help


@pytest.fixture
def fake_run(tmp_path, make_gguf, monkeypatch):
    """``equiv run`` arguments on tiny GGUFs and the plugin tests' fake engine."""
    import shutil
    from pathlib import Path

    here = Path(__file__).parents[1] / "plugin" / "fake_engine.py"
    shutil.copy(here, tmp_path / "fake_engine.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    suite = tmp_path / "s.jsonl"
    suite.write_text(
        '{"id": "same", "text": "all the same"}\n{"id": "drift", "text": "we drift apart"}\n',
        encoding="utf-8",
    )
    target, draft = make_gguf("t.gguf"), make_gguf("d.gguf")
    return [
        "run", "--engine", "fake_engine:make_engine", "--target", str(target),
        "--draft", str(draft), "--suite", str(suite), "--max-tokens", "4",
    ]  # fmt: skip


def test_run_json_prints_summary_json_and_keeps_stdout_clean(fake_run, tmp_path, capsys):
    out = tmp_path / "out"
    code, stdout, stderr = _run(capsys, *fake_run, "--out", str(out), "--json")
    assert code == 0
    data = json.loads(stdout)  # nothing but the JSON on stdout
    assert data == json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert data["prompts"] == 2
    assert sum(data["labels"].values()) == 2
    assert data["labels"]["equivalent"] >= 1
    assert data["drift"]["rows"] > 0
    assert data["drift"]["kl_p99"] is not None
    assert data["controls"][0]["ok"] is True
    assert "summary: " in stderr
    assert "report: " in stderr


def test_quiet_prints_the_conclusion_and_verbose_each_prompt(fake_run, tmp_path, capsys):
    code, quiet, _ = _run(capsys, *fake_run, "--out", str(tmp_path / "q"), "-q")
    assert code == 0
    assert "prompts" not in quiet  # no table
    labels = ("equivalent", "numeric-drift", "sampler-bug", "misconfiguration", "inconclusive")
    assert quiet.splitlines()[0].split(":")[0] in {label.upper() for label in labels}
    code, verbose, _ = _run(capsys, *fake_run, "--out", str(tmp_path / "v"), "-v")
    assert "s/same::temp0  equivalent  token IDs identical" in verbose
    assert "s/drift::temp0  " in verbose


def test_sweep_json_holds_each_values_summary(fake_run, tmp_path, capsys):
    code, stdout, _ = _run(
        capsys, *fake_run, "--out", str(tmp_path / "sw"), "--sweep-draft-max", "1,2", "--json"
    )
    assert code == 0
    data = json.loads(stdout)
    assert data["sweep"] == "draft_max"
    assert set(data["runs"]) == {"1", "2"}
    assert all(run["prompts"] == 2 for run in data["runs"].values())


def test_an_output_path_that_is_a_folder_is_a_named_error(tmp_path, capsys):
    from pathlib import Path

    fixture = Path(__file__).parents[1] / "fixtures" / "temp0_results.jsonl"
    assert main(["report", str(fixture), "-o", str(tmp_path)]) == 7
    err = capsys.readouterr().err
    assert f"cannot write {tmp_path}" in err
    assert "Traceback" not in err


def test_model_paths_print_as_text_not_markup(tmp_path, capsys, make_gguf):
    """A folder named like rich markup ("[red]", "[/x]") prints as it is, with no traceback."""
    folder = tmp_path / "[red]" / "[" / "x]"
    folder.mkdir(parents=True)
    target = make_gguf("t.gguf")
    draft = make_gguf("d.gguf")
    target.rename(folder / "t.gguf")
    draft.rename(folder / "d.gguf")
    code = main(
        [
            "run",
            "--target",
            str(folder / "t.gguf"),
            "--draft",
            str(folder / "d.gguf"),
            "--prompt",
            "code/fib_lt",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    err = capsys.readouterr().err
    assert str(folder / "t.gguf") in err
    assert "Traceback" not in err
    assert "MarkupError" not in err
    assert code != 0  # a tiny test file is no model llama.cpp can load: a named error


# -- --pair: a built-in pair by name -------------------------------------------------------------
def test_pair_hybrid_with_a_model_path_names_the_flag_and_the_way_out(capsys, make_gguf):
    target = make_gguf("t.gguf")
    code, _, err = _run(capsys, "run", "--pair", "hybrid", "--target", str(target))
    assert code == 2
    assert f"pair 'hybrid' names both models, but --target '{target}' was given too" in err
    assert "drop --target, or drop --pair hybrid" in err
    code, _, err = _run(capsys, "run", "--pair", "hybrid", "--draft", str(target))
    assert code == 2
    assert "--draft" in err


def test_pair_mtp_in_process_says_it_needs_llama_server(capsys):
    code, _, err = _run(capsys, "run", "--pair", "mtp")
    assert code == 2
    assert "pair 'mtp' drafts with the target's own MTP head" in err
    assert "add --engine server --server-bin PATH" in err


def test_an_unknown_pair_lists_the_built_in_ones(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["run", "--pair", "mamba"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--pair: invalid choice: 'mamba'" in err
    assert "'gemma3'" in err
    assert "'hybrid'" in err
    assert "'mtp'" in err


def test_run_help_describes_each_built_in_pair():
    from equiv.config import BUILTIN_PAIRS

    parsers, _ = _subcommands()
    text = " ".join(parsers["run"].format_help().split())
    assert "--pair {gemma3,hybrid,mtp}" in text
    for name in BUILTIN_PAIRS:
        assert f"{name}: " in text
