"""The command line. Thin: parse, delegate to the library, print.

Exit codes: 0 done; 1 a control failed (engine not deterministic, self-draft acceptance too low);
2 bad option or config; 3 unusable model file; 4 incompatible draft vocabulary; 5 bad prompt or a
prompt that does not fit the context; 6 engine failure; 130 interrupted (finished results kept).
"""

from __future__ import annotations

import argparse
import fnmatch
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from equiv import __version__
from equiv.errors import EquivError, PromptError
from equiv.options import add_arguments, build_config
from equiv.prompts import Prompt, load_suites

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

    check = sub.add_parser("check-draft", help="can DRAFT draft for TARGET? (GGUF metadata only)")
    check.add_argument("target", metavar="TARGET")
    check.add_argument("draft", metavar="DRAFT")
    return parser


def select_prompts(suites: Sequence[str], globs: Sequence[str]) -> list[Prompt]:
    prompts = load_suites(suites)
    if globs:
        prompts = [p for p in prompts if any(fnmatch.fnmatchcase(p.key, g) for g in globs)]
        if not prompts:
            raise PromptError(
                f"no prompt matches --prompt {', '.join(globs)}; keys look like "
                "'code/fib_lt' (suite/id)"
            )
    return prompts


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
    from rich.console import Console

    from equiv.engines import load_factory
    from equiv.progress import Progress
    from equiv.runner import Runner, plan
    from equiv.summary import summarize
    from equiv.views import print_summary

    console = Console(stderr=True)
    values: dict[str, Any] = vars(args)
    config, pair = build_config(values)
    prompts = select_prompts(config.suites, values.get("prompt") or [])
    out = _results_dir(args.out, args.resume)
    results_path = out / "results.jsonl"
    items = plan(prompts, config)
    console.print(f"[bold]equiv {__version__}[/]  target {pair.target.path}")
    console.print(f"draft {pair.draft.path} ({pair.draft.provenance})")
    command = shlex.join(["equiv", *argv])
    with (
        Runner(
            config,
            load_factory(config.engine),
            results_path,
            extra_header={"vocab": pair.vocab.to_dict(), "argv": list(argv)},
        ) as runner,
        Progress(console, total=len(items)) as progress,
    ):
        try:
            runner.run(items, resume=args.resume, command=command, on_result=progress.update)
        except KeyboardInterrupt:
            progress.stop()
            done = len(runner.results.done_keys())
            console.print(
                f"[yellow]interrupted[/]: {done} finished result(s) kept in "
                f"{results_path}; rerun with --resume --out {out} to continue"
            )
            return EXIT_INTERRUPTED
    summary = summarize(runner.results.results(), runner.results.events())
    # Logs and pipes get a fixed width, wide enough that no column header is cut.
    stdout = Console() if sys.stdout.isatty() else Console(width=120)
    print_summary(summary, stdout, results_path=results_path)
    return EXIT_CONTROL_FAILED if summary.failed_controls else 0


def _cmd_check_draft(args: argparse.Namespace) -> int:
    from equiv.gguf_info import check_vocab_compat

    report = check_vocab_compat(args.target, args.draft)
    verdict = "compatible" if report.compatible else "NOT compatible"
    print(f"{args.draft} -> {args.target}: {verdict}")
    for reason in report.reasons:
        print(f"  - {reason}")
    for note in report.notes:
        print(f"  note: {note}")
    return 0 if report.compatible else 4


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    try:
        if args.command == "run":
            return _cmd_run(args, argv)
        return _cmd_check_draft(args)
    except EquivError as exc:
        print(f"equiv: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("equiv: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
