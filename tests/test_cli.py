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
