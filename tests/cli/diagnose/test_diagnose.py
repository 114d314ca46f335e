"""equiv diagnose: parsing llama.cpp command lines, findings, mapping, and one real run."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from equiv.cli.diagnose.command import parse_command
from equiv.cli.diagnose.findings import findings
from equiv.cli.diagnose.mapping import map_to_run
from equiv.cli.main import main
from equiv.errors import ConfigError

ISSUE_EXAMPLE = (
    "llama-server -m qwen32b-q5_k_m.gguf --model-draft qwen0.6b-q8_0.gguf "
    "--draft-max 16 --draft-min 1 --temp 0.2"
)


def test_issue_example_parses_and_maps_onto_the_local_pair() -> None:
    cmd = parse_command(ISSUE_EXAMPLE)
    assert cmd.program == "llama-server"
    assert dict(cmd.settings) == {
        "model": "qwen32b-q5_k_m.gguf",
        "model_draft": "qwen0.6b-q8_0.gguf",
        "draft_max": 16,
        "draft_min": 1,
        "temp": 0.2,
    }
    assert cmd.ignored == ()
    mapping = map_to_run(cmd)
    assert mapping.values == {"draft_max": 16, "draft_min": 1, "temp": 0.2}
    assert mapping.notes == (
        "qwen32b-q5_k_m.gguf is not here; checking the same setup on the local default pair",
    )
    titles = [f.title for f in findings(cmd)]
    assert "temperature 0.2 with no fixed seed (seed not set)" in titles
    assert "draft-max 16" in titles


@pytest.mark.parametrize(
    "spelling",
    [
        "-md d.gguf --draft-max 8 --draft-min 2 --draft-p-min 0.5",
        "--model-draft d.gguf --draft 8 --draft-n-min 2 --draft-p-min 0.5",
        "-md d.gguf --draft-n 8 --draft-min 2 --draft-p-min 0.5",
        "--spec-draft-model d.gguf --spec-draft-n-max 8 --spec-draft-n-min 2 "
        "--spec-draft-p-min 0.5",
        "-md d.gguf --spec-draft-max 8 --spec-draft-min 2 --spec-draft-p-min=0.5",
    ],
)
def test_old_and_new_spellings_mean_the_same(spelling: str) -> None:
    cmd = parse_command(f"llama-speculative -m t.gguf {spelling} --spec-type draft-simple")
    assert {k: cmd.get(k) for k in ("model_draft", "draft_max", "draft_min", "draft_p_min")} == {
        "model_draft": "d.gguf",
        "draft_max": 8,
        "draft_min": 2,
        "draft_p_min": 0.5,
    }


def test_runtime_and_sampling_flags() -> None:
    cmd = parse_command(
        "llama-cli -m t.gguf -c 4096 -b 256 -ub 128 -t 64 -fa -ngl 99 -ctk q8_0 -ctv q8_0 "
        "--top-k 20 --top-p 0.9 --min-p 0.1 --repeat-penalty 1.1 -s 7 --temp 0.7"
    )
    assert cmd.text("flash_attn") == "on"
    assert cmd.integer("seed") == 7
    assert cmd.text("n_gpu_layers") == "99"
    assert (cmd.number("temp"), cmd.temp, cmd.number("top_k")) == (0.7, 0.7, 20.0)
    values = map_to_run(cmd, cpu_count=2).values
    assert values["threads"] == 2
    assert values["flash_attn"] is True
    assert values["seed_start"] == 7
    assert (values["n_ctx"], values["n_batch"], values["n_ubatch"], values["top_k"]) == (
        4096,
        256,
        128,
        20,
    )
    assert parse_command("llama-server -fa off -m t.gguf").text("flash_attn") == "off"
    kinds = {f.title: f.kind for f in findings(cmd)}
    assert kinds == {"-ngl 99": "note", "-ctk q8_0 -ctv q8_0": "note"}


def test_seed_zero_is_a_misconfiguration_with_a_fix() -> None:
    (finding,) = list(findings(parse_command("llama-cli -m t.gguf --seed 0 --temp 0")))
    assert finding.kind == "misconfiguration"
    assert finding.title == "--seed 0"
    assert "random" in finding.explanation
    assert "--seed 1" in finding.fix
    assert "seed -1 (random)" in findings(parse_command("llama-cli -s -1"))[0].title


def test_unknown_arguments_are_listed_as_ignored() -> None:
    cmd = parse_command(
        "llama-server --host 0.0.0.0 --port 8080 --jinja -m t.gguf --mystery -x -1 --alias a"
    )
    assert cmd.flag("jinja")  # understood, not ignored
    assert cmd.ignored == (
        "--host 0.0.0.0",
        "--port 8080",
        "--mystery",
        "-x -1",
        "--alias a",
    )
    assert cmd.text("model") == "t.gguf"


def test_settings_are_read_by_their_type_with_llama_cpp_s_defaults() -> None:
    cmd = parse_command("llama-server -m t.gguf -np 4")
    assert (cmd.integer("parallel"), cmd.parallel) == (4, 4)
    assert (cmd.number("temp"), cmd.temp) == (None, 0.8)  # llama.cpp's default temperature
    assert not cmd.flag("jinja")
    assert parse_command("llama-server").parallel == 1
    with pytest.raises(TypeError, match=r"setting model is 't\.gguf', not int"):
        cmd.integer("model")
    with pytest.raises(TypeError, match="setting parallel is 4, not str"):
        cmd.text("parallel")


def test_bad_values_name_the_flag_and_value() -> None:
    with pytest.raises(ConfigError, match=r"--draft-max 'lots'"):
        parse_command("llama-server --draft-max lots")
    with pytest.raises(ConfigError, match="after '--'"):
        parse_command([])


def test_partial_offload_and_slots_are_flagged() -> None:
    titles = {
        f.title: f.kind for f in findings(parse_command("llama-server -ngl 20 -np 4 -c 8192"))
    }
    assert titles["-ngl 20 (partial GPU offload?)"] == "misconfiguration"
    assert titles["-np 4"] == "misconfiguration"
    assert map_to_run(parse_command("llama-server -np 4 -c 8192")).values["n_ctx"] == 2048


def test_incompatible_draft_vocabulary_is_flagged(make_gguf: Any) -> None:
    target = make_gguf("t.gguf")
    draft = make_gguf("d.gguf", vocab=[*"abcde", *(f"x{i}" for i in range(35))])
    found = findings(parse_command(["llama-server", "-m", str(target), "-md", str(draft)]))
    vocab = [f for f in found if "vocabulary" in f.title]
    assert vocab
    assert vocab[0].kind == "misconfiguration"
    assert "token 5" in vocab[0].explanation
    mapping = map_to_run(parse_command(["llama-server", "-m", str(target), "-md", str(draft)]))
    assert mapping.values["target"] == str(target)
    assert mapping.values["draft"] == str(draft)


def test_cli_dry_run(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["diagnose", "--dry-run", "--", *ISSUE_EXAMPLE.split(), "--seed", "0", "--foo"])
    out = capsys.readouterr().out
    assert code == 0
    assert "ignored: --foo" in out
    assert "[misconfiguration] --seed 0" in out
    assert "qwen32b-q5_k_m.gguf is not here" in out


@pytest.mark.model
def test_diagnose_runs_and_prints_a_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["diagnose", "--prompt", "code/fib_lt", "--max-tokens", "8", "--out", str(tmp_path)]
    code = main([*argv, "--", "llama-cli", "-m", "missing.gguf", "--draft-max", "4", "--temp", "0"])
    out = capsys.readouterr().out
    print(out)
    assert code == 0
    assert "temp-0 outputs identical on" in out
    assert "of 1 prompts" in out
    assert (tmp_path / "temp0" / "results.jsonl").is_file()
    assert not (tmp_path / "sampling").exists()  # temp 0: no sampling run


# -- what a user reads and copies (issue 15, item 11) and two deployments (item 13) ------------
def test_gpu_users_hear_whether_their_kernels_were_tested() -> None:
    cmd = parse_command("llama-server -m t.gguf -md d.gguf -ngl 99")
    (cpu,) = [f for f in findings(cmd) if f.title == "-ngl 99"]
    assert "NOT what it tests" in cpu.explanation
    assert "--server-bin" in cpu.fix
    assert "nothing to fix" not in cpu.fix
    (own,) = [f for f in findings(cmd, own_server=True) if f.title == "-ngl 99"]
    assert "your GPU kernels are tested" in own.explanation


def test_jinja_is_understood_and_passed_to_the_users_server() -> None:
    from equiv.cli.diagnose.mapping import pass_through

    cmd = parse_command("llama-server --jinja -m t.gguf -ngl 99")
    assert any(f.title == "--jinja" for f in findings(cmd))
    shared, _ = pass_through(cmd)
    assert shared == ["--jinja", "-ngl", "99"]


def test_the_mapping_prints_as_a_runnable_equiv_run(capsys, tmp_path) -> None:
    import shlex

    from equiv.cli.diagnose.mapping import run_command
    from equiv.cli.main import build_parser

    values = {"temp": 0.2, "n_ctx": 4096, "flash_attn": True, "prompt": ["code/*", "chat/*"]}
    values["spec"] = ["n_ctx=1024"]
    argv = run_command(values, mode="sampling", out=tmp_path)
    parsed = vars(build_parser().parse_args(shlex.split(shlex.join(argv))))  # copy, paste, parse
    assert parsed["mode"] == "sampling"
    assert parsed["n_ctx"] == 4096
    assert parsed["flash_attn"] is True
    assert parsed["prompt"] == ["code/*", "chat/*"]
    assert parsed["spec"] == ["n_ctx=1024"]
    assert parsed["out"] == str(tmp_path)


def test_dry_run_prints_a_copyable_command_not_a_dict(capsys) -> None:
    from equiv.cli.main import main

    code = main(["diagnose", "--dry-run", "--", "llama-cli", "-m", "t.gguf", "-c", "512"])
    out = capsys.readouterr().out
    assert code == 0
    assert "equiv run values: {" not in out
    line = next(x for x in out.splitlines() if x.startswith("the same check by hand: equiv run "))
    assert "--n-ctx 512" in line


def test_thin_evidence_says_how_many_seeds_would_decide() -> None:
    from equiv.cli.diagnose.verdict import seeds_needed
    from equiv.records.kinds import AnalysisRecord
    from equiv.records.verdict import Label, Verdict
    from equiv.verdicts.verdict_evidence import PowerEvidence

    def analysis(label: Label, needed: int) -> AnalysisRecord:
        evidence = PowerEvidence(0.3, 0.001, tokens=256, tokens_needed=needed).to_dict()
        return AnalysisRecord("s/p::sampling", "s", "p", verdict=Verdict(label, "", evidence))

    analyses = [analysis(Label.INCONCLUSIVE, 2048), analysis(Label.EQUIVALENT, 9999)]
    assert seeds_needed(analyses, 32) == 256  # 32 seeds gave 256 tokens; 2048 need 8x the seeds
    assert seeds_needed([], 32) is None


def test_two_command_lines_reproduce_two_deployments_that_differ() -> None:
    from equiv.cli.diagnose.command import split_commands
    from equiv.cli.diagnose.deployments import map_pair

    words = ["--", "llama-server", "-m", "t.gguf", "-c", "4096", "--temp", "0.7", "--",
             "llama-server", "-m", "t.gguf", "-md", "d.gguf", "-c", "2048", "--temp", "0.7",
             "--draft-max", "8"]  # fmt: skip
    base, spec = (parse_command(w) for w in split_commands(words))
    mapping, found = map_pair(base, spec)
    assert mapping.values["n_ctx"] == 4096  # the baseline's
    assert mapping.values["spec"] == ["n_ctx=2048"]  # the speculative path's own
    assert mapping.values["draft_max"] == 8
    assert [f.title for f in found] == ["-c: 4096 in the baseline, 2048 with the draft"]
    assert found[0].kind == "misconfiguration"
    with pytest.raises(ConfigError, match="no -md/--model-draft"):
        map_pair(spec, base)


def test_a_setting_given_to_the_baseline_only_is_a_finding() -> None:
    from equiv.cli.diagnose.command import split_commands
    from equiv.cli.diagnose.deployments import map_pair

    words = ["--", "llama-server", "-m", "t.gguf", "-c", "4096", "--top-k", "20", "--",
             "llama-server", "-m", "t.gguf", "-md", "d.gguf", "--top-k", "20"]  # fmt: skip
    base, spec = (parse_command(w) for w in split_commands(words))
    mapping, found = map_pair(base, spec)
    assert [f.title for f in found] == [
        "-c: 4096 in the baseline, your build's default with the draft"
    ]
    assert found[0].kind == "misconfiguration"
    assert "not reproduced" in found[0].explanation
    assert "spec" not in mapping.values


def test_diagnose_leads_with_the_runs_pooled_answer_and_the_seeds_it_needs() -> None:
    from collections import Counter

    from equiv.cli.diagnose.verdict import verdict_lines
    from equiv.verdicts.runs.summary import Summary
    from equiv.verdicts.sampling.pooled import PooledAnalysis
    from equiv.verdicts.sampling.pooled_bounds import Bound, Effect
    from equiv.verdicts.sampling.run_verdict import RunJudgement, classify_run

    wide = Bound(Effect.TOP_TOKEN, 0.0, -0.03, 0.03, 0.02)  # half-width 0.03 > margin 0.02
    pooled = PooledAnalysis(0.005, prompts=6, samples=192, tokens=3000, seeds=32, bounds=(wide,))
    verdict = classify_run(pooled, prompt_labels=Counter())
    sampling = Summary(run=RunJudgement(pooled, verdict))
    lines = verdict_lines(Summary(), sampling, draft_max=4, user_temp=0.2, analyses=[], seeds=32)
    (line,) = [x for x in lines if x.startswith("at temp 0.2, pooled over 6 prompts")]
    assert "inconclusive" in line
    assert "rerun with --seeds 72 (now 32)" in line  # (0.03 / 0.02)**2 x 32 seeds


@pytest.mark.parametrize(("flag", "value"), [("--seeds", "0"), ("--looks", "0")])
def test_diagnose_refuses_a_count_below_one_as_run_does(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for command in (
        ["diagnose", flag, value, "--", "llama-server", "-m", "t.gguf"],
        ["run", flag, value],
    ):
        with pytest.raises(SystemExit) as exited:
            main(command)
        assert exited.value.code == 2
        assert f"{flag} {value}: give a count >= 1" in capsys.readouterr().err


def test_diagnose_takes_the_run_options_from_the_one_table() -> None:
    """One declaration: diagnose's --prompt, --max-tokens, --seeds and --looks are the option
    table's (its help and converter), with diagnose's own defaults; no llama.cpp alias before
    the ``--``."""
    from equiv.cli.main import build_parser
    from equiv.options.table import CORE_OPTIONS

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    diagnose = {a.dest: a for a in sub.choices["diagnose"]._actions}
    table = {opt.dest: opt for opt in CORE_OPTIONS}
    for dest in ("prompt", "max_tokens", "seeds", "looks"):
        assert diagnose[dest].help.startswith(table[dest].help), dest
        assert diagnose[dest].option_strings == [f"--{table[dest].name}"], dest
    assert diagnose["seeds"].type is table["seeds"].type
    args = parser.parse_args(["diagnose", "--", "llama-server", "-m", "t.gguf"])
    assert (args.seeds, args.looks, args.prompt, args.max_tokens) == (64, 4, None, None)


def test_the_users_speculative_type_is_what_their_server_runs(tmp_path) -> None:
    import shlex

    from equiv.cli.diagnose.mapping import map_to_run, run_command
    from equiv.cli.main import build_parser

    binary = tmp_path / "llama-server"
    binary.write_text("")
    server = str(binary)
    ngram = parse_command(
        f"{server} -m t.gguf --spec-type ngram-mod --spec-ngram-mod-n-match 8 --temp 0"
    )
    values = map_to_run(ngram).values
    assert values["server_spec_type"] == "ngram-mod"
    assert values["server_draft_args"] == "--spec-ngram-mod-n-match 8"
    argv = run_command(values, mode="temp0", out=tmp_path)
    assert vars(build_parser().parse_args(shlex.split(shlex.join(argv))))["server_spec_type"] == (
        "ngram-mod"
    )
    draft_alone = map_to_run(parse_command(f"{server} -m t.gguf -md d.gguf"))
    assert draft_alone.values["server_spec_type"] == "inferred"  # as written: no --spec-type
    assert any("run without one, as you run it" in n for n in draft_alone.notes)
    default = map_to_run(parse_command(f"{server} -m t.gguf --spec-default"))
    assert default.values["server_spec_type"] == "inferred"
    assert default.values["server_draft_args"] == "--spec-default"
    in_process = map_to_run(parse_command("llama-server -m t.gguf --spec-type ngram-mod"))
    assert "server_spec_type" not in in_process.values
    assert any("checked in process as draft-model speculation" in n for n in in_process.notes)
