"""The command line. Thin: parse, delegate to the library, print.

Exit codes: 0 done; 1 a control failed (engine not deterministic, self-draft acceptance too low);
2 bad option or config; 3 unusable model file; 4 incompatible draft vocabulary; 5 bad prompt or a
prompt that does not fit the context; 6 engine failure; 7 a results file that cannot be read or
written; 8 the results are in use by another equiv process; 9 no space left on the device
(finished results kept); 130 interrupted (finished results kept). See `equiv.errors`.
"""

from __future__ import annotations

import argparse
import errno
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TypeAlias

from equiv import __version__
from equiv.cli.run import EXIT_INTERRUPTED, cmd_run, warn_unreadable
from equiv.errors import DiskFullError, EquivError, ResultsError
from equiv.options.table import add_arguments, shared

__all__ = ["build_parser", "main"]

# What ``add_subparsers`` returns (a private class of argparse, public in its stubs).
_Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _sub(
    sub: _Subcommands, name: str, summary: str, description: str, *parents: argparse.ArgumentParser
) -> argparse.ArgumentParser:
    """A subcommand with a one-line summary (in ``equiv -h``) and a description (in its -h)."""
    return sub.add_parser(
        name,
        help=summary,
        description=f"{summary[0].upper()}{summary[1:]}. {description}",
        parents=list(parents),
    )


def build_parser() -> argparse.ArgumentParser:
    """equiv's whole command line, every subcommand (what `main` parses; nothing is run)."""
    parser = argparse.ArgumentParser(
        prog="equiv",
        description="Prove or disprove that speculative decoding leaves an LLM's output "
        "unchanged: run each prompt through the target alone (baseline) and with a draft "
        "(speculative), compare, and label each difference.",
        epilog=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"equiv {__version__}")
    talk = argparse.ArgumentParser(add_help=False)
    level = talk.add_mutually_exclusive_group()
    level.add_argument(
        "-q", "--quiet", action="store_true", help="print only the conclusion and the paths"
    )
    level.add_argument(
        "-v", "--verbose", action="store_true", help="also print each prompt's label and reason"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _add_run(sub, talk)
    _add_report(sub)
    _add_compare(sub, talk)
    _add_check_draft(sub)
    _add_diagnose(sub)
    _add_minimize(sub)
    return parser


def _add_run(sub: _Subcommands, talk: argparse.ArgumentParser) -> None:
    run = _sub(
        sub,
        "run",
        "run prompts through the baseline and the speculative path and label each difference",
        "Writes results.jsonl, summary.json and report.html to --out. Exit 1 when a control "
        "fails. llama.cpp's flag spellings work too (-c, -b, -ub, -t, -fa on|off, -s, -n, "
        "-m, -md, --temp, --top-k).",
        talk,
    )
    add_arguments(run)
    run.add_argument("--out", metavar="DIR", help="results directory (default: reports/<run-id>)")
    run.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted run (the latest in reports/ unless --out)",
    )
    run.add_argument(
        "--sweep-draft-max",
        metavar="N,N,...",
        help="run once per draft-max value (e.g. 1,2,4,8,16) and compare speed and acceptance",
    )
    run.add_argument(
        "--json",
        action="store_true",
        help="print summary.json on stdout (the human summary goes to stderr)",
    )


def _add_report(sub: _Subcommands) -> None:
    report = _sub(
        sub,
        "report",
        "render the HTML report of a results file",
        "A self-contained page (no network), rendered from the results file alone.",
    )
    report.add_argument("results", metavar="RESULTS.jsonl", help="a run's results file")
    report.add_argument(
        "other",
        nargs="?",
        metavar="RESULTS_B.jsonl",
        help="a second run of the same plan: write the page comparing the two (equiv compare)",
    )
    report.add_argument(
        "-o", "--output", metavar="FILE", help="where to write (default: report.html beside it)"
    )
    report.add_argument(
        "--no-redact",
        dest="redact",
        action="store_false",
        help="keep local paths and user names (redacted by default)",
    )


def _add_compare(sub: _Subcommands, talk: argparse.ArgumentParser) -> None:
    compare = _sub(
        sub,
        "compare",
        "what changed between two runs of the same plan",
        "A new llama.cpp build, a new draft, another machine: the setup that differs, prompts "
        "whose label changed, new divergences, outputs that changed, and the shifts in drift, "
        "acceptance and speed with 95 % intervals. Exit 1 when --fail-on trips.",
        talk,
    )
    compare.add_argument("run_a", metavar="RUN_A", help="the kept run: results.jsonl or its folder")
    compare.add_argument("run_b", metavar="RUN_B", help="the new run: results.jsonl or its folder")
    compare.add_argument(
        "--fail-on",
        choices=("worse", "changed", "never"),
        default="worse",
        help="worse: a label got worse, a new divergence or failed control; changed: any label "
        "or output changed; never [worse]",
    )
    compare.add_argument("--json", action="store_true", help="print the comparison as JSON")
    compare.add_argument("--html", metavar="FILE", help="also write the comparison as a page")


def _add_check_draft(sub: _Subcommands) -> None:
    check = _sub(
        sub,
        "check-draft",
        "can DRAFT draft for TARGET? does TARGET carry an MTP head?",
        "llama.cpp's vocabulary rules, from GGUF metadata alone (no model is loaded), or from "
        "Hugging Face config.json files (vocabulary sizes only); without DRAFT, whether TARGET "
        "carries a multi-token-prediction head (--spec-type draft-mtp). Exit 4 when not "
        "compatible.",
    )
    check.add_argument(
        "target", metavar="TARGET", help="the target: a GGUF file, a config.json or its folder"
    )
    check.add_argument(
        "draft", metavar="DRAFT", nargs="?", help="the draft: a GGUF file, a config.json ..."
    )


def _add_diagnose(sub: _Subcommands) -> None:
    diag = _sub(
        sub,
        "diagnose",
        "check a llama.cpp command line (after --)",
        "Maps your llama-cli / llama-server flags to an equiv run, lists what looks wrong, "
        "then runs it. Example: equiv diagnose -- llama-server -m t.gguf -md d.gguf -c 4096. "
        "Two deployments: equiv diagnose -- BASELINE_CMD -- SPECULATIVE_CMD. Without --prompt: "
        "6 prompts over code, reasoning, chat and two languages.",
    )
    diag.add_argument("--dry-run", action="store_true", help="only parse, map and list findings")
    # the run's own options, one declaration (diagnose: 6 default prompts, not every suite; a
    # budget of seeds in looks, the run stopped at its first conclusive answer and each round
    # after the first given to the prompts that carry the evidence)
    options = shared("prompt", "max-tokens", "seeds", "looks", seeds=64, looks=4)
    add_arguments(diag, options, with_defaults=True)
    diag.add_argument("--out", metavar="DIR", help="results (default: reports/diagnose-<time>)")
    diag.add_argument(
        "--server-bin",
        metavar="PATH",
        help="run this llama-server (your build) with your flags; default: the command's own "
        "llama-server, or the one beside its llama-cli, else llama-cpp-python in process",
    )
    diag.add_argument(
        "llama",
        nargs=argparse.REMAINDER,
        metavar="-- LLAMA.CPP COMMAND LINE",
        help="your llama-cli or llama-server command line, after --",
    )


def _add_minimize(sub: _Subcommands) -> None:
    mini = _sub(
        sub,
        "minimize",
        "shrink a diverging temp-0 prompt for a bug report",
        "Deletes parts of the prompt while the divergence stays, and writes the shortest "
        "prompt found as a one-line suite.",
    )
    mini.add_argument("results", metavar="RESULTS.jsonl", help="a run's results file")
    mini.add_argument(
        "--key",
        required=True,
        metavar="SUITE/ID::temp0",
        help="the diverging prompt's key, as the report and results.jsonl name it",
    )
    mini.add_argument(
        "--max-tests", type=int, default=60, metavar="N", help="most reruns to try [60]"
    )
    mini.add_argument("--out", metavar="FILE", help="suite file (default: beside the results)")


def _cmd_report(args: argparse.Namespace) -> int:
    from equiv.report import write_report

    results = Path(args.results)
    if not results.is_file():
        raise EquivError(f"results file {str(results)!r} does not exist; pass a results.jsonl")
    if args.other:  # two runs: their comparison, as equiv compare --html writes it
        from equiv.cli.compare import load_comparison
        from equiv.report.compare_view import write_compare_report

        comparison = load_comparison(args.results, args.other)
        out = Path(args.output) if args.output else results.with_name("compare.html")
        print(f"report: {write_compare_report(comparison, out)}")
        return 0
    out = Path(args.output) if args.output else results.with_name("report.html")
    warn_unreadable(results)
    print(f"report: {write_report(results, out, redact=args.redact)}")
    return 0


def _cmd_check_draft(args: argparse.Namespace) -> int:
    from equiv.models.drafting import drafting_report

    report = drafting_report(args.target, args.draft)
    for line in report.lines():
        print(line)
    return 4 if report.compatible is False else 0


def _cmd_diagnose(args: argparse.Namespace) -> int:
    import shlex

    from equiv.cli.diagnose.command import parse_command, split_commands
    from equiv.cli.diagnose.deployments import map_pair
    from equiv.cli.diagnose.findings import findings
    from equiv.cli.diagnose.mapping import map_to_run, run_command
    from equiv.cli.diagnose.run import DEFAULT_PROMPTS, execute

    commands = [parse_command(w) for w in split_commands(args.llama)]
    if len(commands) == 2:  # baseline -- speculative: two deployments that may differ
        mapping, differ = map_pair(*commands, server_bin=args.server_bin)
    else:
        mapping, differ = map_to_run(commands[0], server_bin=args.server_bin), []
    for role, cmd in zip(("baseline: ", "speculative: "), commands, strict=False):
        role = role if len(commands) == 2 else ""
        settings = ", ".join(f"{k}={v}" for k, v in cmd.settings.items())
        print(f"{role}{cmd.program or 'llama.cpp'}: {settings}")
        print(f"{role}ignored: {', '.join(cmd.ignored)}" if cmd.ignored else f"{role}ignored: -")
    print(f"runs: {mapping.runs}")
    for note in mapping.notes:
        print(f"note: {note}")
    own_server = mapping.values.get("engine") == "server"
    shown = dict.fromkeys(
        f.text() for cmd in commands for f in findings(cmd, own_server=own_server)
    )
    for text in [*shown, *(f.text() for f in differ)]:
        print(text)
    out = Path(args.out or f"reports/diagnose-{time.strftime('%Y%m%d-%H%M%S')}")
    prompts = args.prompt or list(DEFAULT_PROMPTS)
    values = {"temp": mapping.user_temp, **mapping.values, "prompt": prompts}
    values["max_tokens"] = args.max_tokens
    argv = run_command(values, mode="temp0", out=out / "temp0")
    print(f"the same check by hand: equiv {shlex.join(argv)}")
    if args.dry_run:
        return 0
    return execute(
        mapping,
        prompts=prompts,
        max_tokens=args.max_tokens,
        seeds=args.seeds,
        looks=args.looks,
        out=out,
    )


def _cmd_minimize(args: argparse.Namespace) -> int:
    from equiv.run.minimize import minimize_file

    result = minimize_file(args.results, args.key, max_tests=args.max_tests, out=args.out)
    print("\n".join(result.lines()))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser()  # gathers the engines' options: a package's may fail to load
    except EquivError as exc:
        print(f"equiv: error: {exc}", file=sys.stderr)
        return exc.exit_code
    args = parser.parse_args(argv)
    try:
        if args.command == "run":
            return cmd_run(args, argv)
        if args.command == "report":
            return _cmd_report(args)
        if args.command == "diagnose":
            return _cmd_diagnose(args)
        if args.command == "minimize":
            return _cmd_minimize(args)
        if args.command == "compare":
            from equiv.cli.compare import cmd_compare

            return cmd_compare(args)
        return _cmd_check_draft(args)
    except EquivError as exc:
        print(f"equiv: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
            # An output path that is a folder, not writable, ...: named, never a traceback.
            where = exc.filename or "a file equiv writes"
            print(
                f"equiv: error: cannot write {where}: {exc.strerror or exc}; choose another "
                "path (--out, -o) or fix its permissions",
                file=sys.stderr,
            )
            return ResultsError.exit_code
        error = DiskFullError(
            f"no space left on the device ({exc.filename or 'writing'}); the results file keeps "
            "every finished result: free some space and rerun (with --resume for a run)"
        )
        print(f"equiv: error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("equiv: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
