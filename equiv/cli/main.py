"""The command line. Thin: parse, delegate to the library, print.

Exit codes: 0 done; 1 a control failed (engine not deterministic, self-draft acceptance too low);
2 bad option or config; 3 unusable model file; 4 incompatible draft vocabulary; 5 bad prompt or a
prompt that does not fit the context; 6 engine failure; 130 interrupted (finished results kept).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from equiv import __version__
from equiv.errors import EquivError
from equiv.options import add_arguments, build_config

__all__ = ["main"]

EXIT_CONTROL_FAILED = 1
EXIT_INTERRUPTED = 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="equiv",
        description="Prove or disprove that speculative decoding leaves output unchanged.",
    )
    parser.add_argument("--version", action="version", version=f"equiv {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run prompts through baseline and speculative paths")
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

    report = sub.add_parser("report", help="render the HTML report of a results file")
    report.add_argument("results", metavar="RESULTS.jsonl")
    report.add_argument(
        "-o", "--output", metavar="FILE", help="where to write (default: report.html beside it)"
    )
    report.add_argument(
        "--no-redact",
        dest="redact",
        action="store_false",
        help="keep local paths and user names (redacted by default)",
    )

    check = sub.add_parser("check-draft", help="can DRAFT draft for TARGET? (GGUF metadata only)")
    check.add_argument("target", metavar="TARGET")
    check.add_argument("draft", metavar="DRAFT")

    diag = sub.add_parser("diagnose", help="check a llama.cpp command line (after --)")
    diag.add_argument("--dry-run", action="store_true", help="only parse, map and list findings")
    diag.add_argument("--prompt", action="append", metavar="GLOB", help="prompts (default: 6)")
    diag.add_argument("--max-tokens", type=int, metavar="N", help="per-prompt max_tokens")
    diag.add_argument("--seeds", type=int, default=32, metavar="N", help="seeds at temp > 0 [32]")
    diag.add_argument("--out", metavar="DIR", help="results (default: reports/diagnose-<time>)")
    diag.add_argument(
        "--server-bin",
        metavar="PATH",
        help="run this llama-server (your build) with your flags; default: the command's own "
        "llama-server, or the one beside its llama-cli, else llama-cpp-python in process",
    )
    diag.add_argument("llama", nargs=argparse.REMAINDER, metavar="-- LLAMA.CPP COMMAND LINE")

    mini = sub.add_parser("minimize", help="shrink a diverging temp-0 prompt for a bug report")
    mini.add_argument("results", metavar="RESULTS.jsonl")
    mini.add_argument("--key", required=True, metavar="SUITE/ID::temp0")
    mini.add_argument("--max-tests", type=int, default=60, metavar="N", help="[60]")
    mini.add_argument("--out", metavar="FILE", help="suite file (default: beside the results)")
    return parser


def _results_dir(out: str | None, resume: bool) -> Path:
    if out:
        return Path(out)
    reports = Path("reports")
    if resume:
        runs = sorted(p.parent for p in reports.glob("*/results.jsonl"))
        if not runs:
            raise EquivError("--resume: no earlier run under reports/; pass --out DIR")
        return runs[-1]
    return reports / time.strftime("%Y%m%d-%H%M%S")


def _cmd_run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    values: dict[str, Any] = vars(args)
    sweep = values.get("sweep_draft_max")
    if not sweep:
        return _run_once(values, argv, _results_dir(args.out, args.resume), args.resume)[0]
    from equiv.report.terminal import print_sweep

    base = _results_dir(args.out, args.resume)
    rows = []
    for n in _int_list(sweep):
        code, summary = _run_once(
            {**values, "draft_max": n}, argv, base / f"draft-max-{n}", args.resume
        )
        if summary is None:
            return code
        rows.append((n, summary))
    print_sweep(rows)
    return 0


def _int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise EquivError(
            f"--sweep-draft-max {text!r}: give whole numbers, e.g. 1,2,4,8,16"
        ) from None
    if not values or min(values) < 1:
        raise EquivError(f"--sweep-draft-max {text!r}: give values >= 1, e.g. 1,2,4,8,16")
    return values


def _run_once(
    values: dict[str, Any], argv: Sequence[str], out: Path, resume: bool
) -> tuple[int, Any]:
    import resource

    from rich.console import Console

    from equiv.cli.progress import Progress
    from equiv.report import write_report
    from equiv.report.terminal import print_summary
    from equiv.run.execute import run_plan
    from equiv.run.plan import plan, select_prompts

    console = Console(stderr=True)
    config, pair = build_config(values, workdir=out)
    prompts = select_prompts(config.suites, values.get("prompt") or [])
    console.print(f"[bold]equiv {__version__}[/]  target {pair.target.path}")
    console.print(f"draft {pair.draft.path} ({pair.draft.provenance})")
    with Progress(console, total=len(plan(prompts, config))) as progress:
        outcome = run_plan(
            config, pair, prompts, out, resume=resume, argv=argv, on_result=progress.update
        )
        if outcome.summary is None:
            progress.stop()
    if outcome.summary is None:
        console.print(
            f"[yellow]interrupted[/]: {outcome.finished} finished result(s) kept in "
            f"{outcome.results_path}; rerun with --resume --out {out} to continue"
        )
        return EXIT_INTERRUPTED, None
    summary = outcome.summary
    # Logs and pipes get a fixed width, wide enough that no column header is cut.
    stdout = Console() if sys.stdout.isatty() else Console(width=150)
    print_summary(summary, stdout, results_path=outcome.results_path)
    print(f"report: {write_report(outcome.results_path, out / 'report.html')}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory (RSS, both paths in one process): {peak:.0f} MiB")
    return (EXIT_CONTROL_FAILED if summary.failed_controls else 0), summary


def _cmd_report(args: argparse.Namespace) -> int:
    from equiv.report import write_report

    results = Path(args.results)
    if not results.is_file():
        raise EquivError(f"results file {str(results)!r} does not exist; pass a results.jsonl")
    out = Path(args.output) if args.output else results.with_name("report.html")
    print(f"report: {write_report(results, out, redact=args.redact)}")
    return 0


def _cmd_check_draft(args: argparse.Namespace) -> int:
    from equiv.models.gguf import check_vocab_compat

    report = check_vocab_compat(args.target, args.draft)
    verdict = "compatible" if report.compatible else "NOT compatible"
    print(f"{args.draft} -> {args.target}: {verdict}")
    for reason in report.reasons:
        print(f"  - {reason}")
    for note in report.notes:
        print(f"  note: {note}")
    return 0 if report.compatible else 4


def _cmd_diagnose(args: argparse.Namespace) -> int:
    from equiv.cli import diagnose

    cmd = diagnose.parse_command(args.llama)
    mapping = diagnose.map_to_run(cmd, server_bin=args.server_bin)
    print(f"{cmd.program or 'llama.cpp'}: {', '.join(f'{k}={v}' for k, v in cmd.settings.items())}")
    print(f"ignored: {', '.join(cmd.ignored)}" if cmd.ignored else "ignored: nothing")
    print(f"runs: {mapping.runs}")
    for note in mapping.notes:
        print(f"note: {note}")
    for finding in diagnose.findings(cmd):
        print(finding.text())
    print(f"equiv run values: {mapping.values}")
    if args.dry_run:
        return 0
    out = Path(args.out or f"reports/diagnose-{time.strftime('%Y%m%d-%H%M%S')}")
    prompts = args.prompt or list(diagnose.DEFAULT_PROMPTS)
    return diagnose.execute(
        mapping, prompts=prompts, max_tokens=args.max_tokens, seeds=args.seeds, out=out
    )


def _cmd_minimize(args: argparse.Namespace) -> int:
    from equiv.cli.minimize import minimize_file

    result = minimize_file(args.results, args.key, max_tests=args.max_tests, out=args.out)
    print("\n".join(result.lines()))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    try:
        if args.command == "run":
            return _cmd_run(args, argv)
        if args.command == "report":
            return _cmd_report(args)
        if args.command == "diagnose":
            return _cmd_diagnose(args)
        if args.command == "minimize":
            return _cmd_minimize(args)
        return _cmd_check_draft(args)
    except EquivError as exc:
        print(f"equiv: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("equiv: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
