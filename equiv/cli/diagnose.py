"""``equiv diagnose``: parse a llama.cpp command line (old and new spellings of
``common/arg.cpp``), say what in it can change output, map it onto an equiv run, and word the
verdict of that run from the summaries the runner writes (no statistics are computed here).
"""

from __future__ import annotations

import math
import os
import re
import shlex
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from equiv.errors import ConfigError

if TYPE_CHECKING:
    from equiv.records.kinds import AnalysisRecord

__all__ = [
    "DEFAULT_PROMPTS",
    "Finding",
    "LlamaCommand",
    "RunMapping",
    "execute",
    "findings",
    "map_to_run",
    "parse_command",
    "pass_through",
    "seeds_needed",
    "user_server",
    "verdict_lines",
]

#: A small spread over the built-in suites, so a diagnosis finishes in a few minutes on a CPU.
_SOME = ("code/fib_lt", "code/py_binary_search", "reasoning/add_two_digit", "chat/capital_france")
DEFAULT_PROMPTS = (*_SOME, "multilingual/de_berlin", "multilingual/ru_capital")
#: llama.cpp's "pick a random seed" (LLAMA_DEFAULT_SEED, also written -1).
RANDOM_SEED = 0xFFFFFFFF
LARGE_DRAFT_MAX = 8  # a draft-max worth checking against the acceptance
#: The local default pair is small; a user's long context is capped to this on it.
MAX_LOCAL_CTX = 8192

_FA_VALUES = {"on", "off", "auto", "1", "0", "true", "false"}
_NUMBER = re.compile(r"^-?\d+(\.\d*)?$")


def _int(text: str) -> int:
    return int(text, 0) if text.lower().startswith("0x") else int(text)


# flag spellings -> (setting, converter); a converter of None marks a switch without a value.
_FLAGS: tuple[tuple[tuple[str, ...], str, Callable[[str], Any] | None], ...] = (
    (("-m", "--model"), "model", str),
    (("-md", "--model-draft", "--spec-draft-model"), "model_draft", str),
    (
        ("--draft-max", "--draft", "--draft-n", "--spec-draft-n-max", "--spec-draft-max"),
        "draft_max",
        int,
    ),
    (("--draft-min", "--draft-n-min", "--spec-draft-n-min", "--spec-draft-min"), "draft_min", int),
    (("--draft-p-min", "--spec-draft-p-min"), "draft_p_min", float),
    (("--spec-type",), "spec_type", str),
    (("--temp", "--temperature"), "temp", float),
    (("--top-k",), "top_k", int),
    (("--top-p",), "top_p", float),
    (("--min-p",), "min_p", float),
    (("--repeat-penalty",), "repeat_penalty", float),
    (("-s", "--seed"), "seed", _int),
    (("-c", "--ctx-size"), "n_ctx", int),
    (("-b", "--batch-size"), "n_batch", int),
    (("-ub", "--ubatch-size"), "n_ubatch", int),
    (("-t", "--threads"), "threads", int),
    (("-fa", "--flash-attn"), "flash_attn", None),
    (("-ngl", "--gpu-layers", "--n-gpu-layers"), "n_gpu_layers", str),
    (("-ctk", "--cache-type-k"), "cache_type_k", str),
    (("-ctv", "--cache-type-v"), "cache_type_v", str),
    (("-np", "--parallel"), "parallel", int),
    (("--jinja",), "jinja", bool),  # a switch: the model's own Jinja chat template
)
_BY_SPELLING = {name: (key, conv) for names, key, conv in _FLAGS for name in names}


@dataclass(frozen=True)
class LlamaCommand:
    """A parsed llama-cli / llama-server / llama-speculative command line."""

    program: str
    settings: Mapping[str, Any]
    spellings: Mapping[str, str]  # setting -> the flag the user wrote
    ignored: tuple[str, ...] = ()
    program_path: str = ""  # the program as written (a path, or a name on PATH)
    words: tuple[str, ...] = ()  # the flags as written, in order

    def get(self, key: str, default: Any = None) -> Any:
        return self.settings.get(key, default)

    @property
    def seed_fixed(self) -> bool:
        seed = self.get("seed")
        return seed is not None and seed not in (-1, RANDOM_SEED)


def parse_command(argv: Sequence[str] | str) -> LlamaCommand:
    """Parse a llama.cpp command line; unknown flags (and their values) land in ``ignored``."""
    words = shlex.split(argv) if isinstance(argv, str) else list(argv)
    if len(words) == 1 and " " in words[0]:
        words = shlex.split(words[0])
    if words and words[0] == "--":
        words = words[1:]
    if not words:
        raise ConfigError(
            "equiv diagnose needs a llama.cpp command line after '--', e.g. "
            "equiv diagnose -- llama-server -m target.gguf -md draft.gguf --draft-max 16"
        )
    program = program_path = ""
    if not words[0].startswith("-"):
        program_path, words = words[0], words[1:]
        program = Path(program_path).name
    settings: dict[str, Any] = {}
    spellings: dict[str, str] = {}
    ignored: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        name, eq, inline = word.partition("=") if word.startswith("--") else (word, "", "")
        i += 1
        if name not in _BY_SPELLING:
            if word.startswith("-") and not _NUMBER.match(word):
                nxt = words[i] if i < len(words) and not eq else "-"
                has_value = not nxt.startswith("-") or bool(_NUMBER.match(nxt))
                ignored.append(f"{word} {words[i]}" if has_value else word)
                i += 1 if has_value else 0
            else:
                ignored.append(word)
            continue
        key, conv = _BY_SPELLING[name]
        if conv is bool:  # a switch without a value
            settings[key], spellings[key] = True, name
            continue
        if conv is None:  # -fa: a bare switch in old builds, -fa on|off|auto in new ones
            value = inline or (words[i] if i < len(words) and words[i] in _FA_VALUES else "on")
            i += 1 if not inline and i < len(words) and words[i] in _FA_VALUES else 0
            settings[key], spellings[key] = value, name
            continue
        if not eq:
            if i >= len(words):
                raise ConfigError(f"{name} needs a value; e.g. {name} 16")
            inline = words[i]
            i += 1
        try:
            settings[key] = conv(inline)
        except ValueError:
            raise ConfigError(
                f"{name} {inline!r} is not a valid value; llama.cpp expects "
                f"{'a number' if conv in (int, float, _int) else 'a value'} there"
            ) from None
        spellings[key] = name
    return LlamaCommand(program, settings, spellings, tuple(ignored), program_path, tuple(words))


@dataclass(frozen=True)
class Finding:
    """Something in the command line that can make outputs differ, in plain words, with a fix."""

    kind: str  # "misconfiguration" (changes or hides output differences) or "note"
    title: str
    explanation: str
    fix: str

    def text(self) -> str:
        return f"[{self.kind}] {self.title}\n    why: {self.explanation}\n    fix: {self.fix}"


def findings(
    cmd: LlamaCommand,
    *,
    vocab_check: Callable[..., Any] | None = None,
    own_server: bool = False,
) -> list[Finding]:
    """What the command line alone says (``vocab_check``: llama.cpp's rules unless given;
    ``own_server``: the run starts the user's own llama-server with their flags)."""
    out: list[Finding] = []

    def add(kind: str, title: str, explanation: str, fix: str) -> None:
        out.append(Finding(kind, title, explanation, fix))

    seed, temp = cmd.get("seed"), cmd.get("temp", 0.8)
    seed_flag = cmd.spellings.get("seed", "--seed")
    if seed == 0:
        add(
            "misconfiguration",
            f"{seed_flag} 0",
            "llama.cpp takes 0 as a fixed seed, but llama-cpp-python (and every tool built on "
            "it) treats seed=0 as 'pick a random seed', so the same setup run there is not "
            "repeatable and a comparison between two runs measures chance",
            f"use a seed in [1, 2**32 - 2], e.g. {seed_flag} 1, in both runs",
        )
    elif temp > 0 and not cmd.seed_fixed:
        written = "not set" if seed is None else f"{seed} (random)"
        add(
            "misconfiguration",
            f"temperature {temp:g} with no fixed seed (seed {written})",
            "llama.cpp's default seed -1 / 0xFFFFFFFF means random: every run samples "
            "differently, with or without a draft, so two runs differing proves nothing",
            "pass --seed 1 (any fixed value) to both runs, or compare at --temp 0",
        )
    if cmd.get("draft_max") is not None and cmd.get("draft_min", 0) > cmd.get("draft_max"):
        add(
            "misconfiguration",
            f"draft-min {cmd.get('draft_min')} > draft-max {cmd.get('draft_max')}",
            "no draft can be long enough, so the draft model is never used",
            "use a draft-min no larger than draft-max (llama.cpp's default draft-min is 0)",
        )
    if cmd.get("draft_max", 16) >= LARGE_DRAFT_MAX and cmd.get("model_draft"):
        add(
            "note",
            f"draft-max {cmd.get('draft_max', 16)}",
            "long drafts pay off only when the draft agrees with the target most of the time; "
            "the run below measures the acceptance",
            "if the acceptance is below about 0.6, try --draft-max 4",
        )
    ngl = cmd.get("n_gpu_layers")
    if ngl is not None and ngl not in ("0",):
        partial = ngl.isdigit() and int(ngl) < 99
        add(
            "misconfiguration" if partial else "note",
            f"-ngl {ngl}" + (" (partial GPU offload?)" if partial else ""),
            "layers on the GPU and on the CPU run different kernels; a partial offload mixes "
            "them, and target and draft may be split differently. "
            + (
                "equiv runs your llama-server with your -ngl, so your GPU kernels are tested"
                if own_server
                else "This run is llama-cpp-python on the CPU: your GPU kernels are NOT what it "
                "tests, and GPU kernels drift differently"
            ),
            ("offload all layers (-ngl 999) or none (-ngl 0) when comparing outputs" if partial
             else "nothing to change in your flags")
            + ("" if own_server else "; to test your GPU kernels pass --server-bin PATH (your "
               "llama-server build) so equiv runs it with your -ngl"),
        )  # fmt: skip
    if cmd.get("jinja"):
        add(
            "note",
            "--jinja",
            "chat requests are formatted with the model's own Jinja chat template "
            "(tokenizer.chat_template); equiv formats its chat prompts with the same template "
            "(and passes --jinja to your llama-server when it runs one)",
            "nothing to fix; if a chat prompt diverges, check that both servers ran --jinja",
        )
    kv = [f"{f} {cmd.get(k)}" for f, k in (("-ctk", "cache_type_k"), ("-ctv", "cache_type_v"))]
    kv = [text for text in kv if not text.endswith((" None", " f16"))]
    if kv:
        add(
            "note",
            " ".join(kv),
            "a quantized KV cache changes logits in both paths; speculative verification "
            "writes K/V in batches, so rounding differs from one-token decoding",
            "compare with -ctk f16 -ctv f16 to see whether the difference goes away",
        )
    if cmd.get("parallel", 1) > 1:
        add(
            "misconfiguration",
            f"-np {cmd.get('parallel')}",
            "with several slots llama-server batches concurrent requests together, so a "
            "request's numerics depend on what else is running (and -c is split between the "
            "slots); outputs are not reproducible request to request",
            "compare with -np 1 (one request at a time)",
        )
    target, draft = cmd.get("model"), cmd.get("model_draft")
    if target and draft and Path(target).is_file() and Path(draft).is_file():
        from equiv.models.gguf import check_vocab_compat

        report = (vocab_check or check_vocab_compat)(target, draft, with_sha256=False)
        if not report.compatible:
            add(
                "misconfiguration",
                "the draft's vocabulary is incompatible with the target's",
                "; ".join(report.reasons),
                "use a draft of the same model family, converted with the same tokenizer",
            )
    return out


@dataclass(frozen=True)
class RunMapping:
    """The equiv run values a command line maps to, and what was said about the mapping."""

    values: dict[str, Any]
    notes: tuple[str, ...] = ()
    runs: str = ""  # what equiv runs: the user's llama-server, or llama-cpp-python in process

    @property
    def user_temp(self) -> float:
        return float(self.values.get("temp", 0.8))  # llama.cpp's default temperature


_SAMPLING = ("draft_max", "draft_min", "draft_p_min", "temp", "top_k", "top_p", "min_p")
_DIRECT = (*_SAMPLING, "repeat_penalty", "n_batch", "n_ubatch")


def map_to_run(
    cmd: LlamaCommand, *, cpu_count: int | None = None, server_bin: str | None = None
) -> RunMapping:
    """Option values for `equiv.options.build.build_config` (``mode`` is set by the caller).

    When the command line names a llama-server binary that exists (or ``server_bin`` is given,
    or a llama-cli / llama-speculative has a llama-server beside it), the run starts *that*
    binary with the user's flags (`user_server`); otherwise llama-cpp-python runs in process.
    """
    values: dict[str, Any] = {}
    notes: list[str] = []
    binary, runs = user_server(cmd, server_bin=server_bin)
    if binary is not None:
        shared, draft_only = pass_through(cmd)
        values.update(engine="server", server_bin=binary)
        if shared:
            values["server_args"] = shlex.join(shared)
        if draft_only:
            values["server_draft_args"] = shlex.join(draft_only)
    target, draft = cmd.get("model"), cmd.get("model_draft")
    if target and Path(target).is_file():
        values["target"] = target
        if draft and Path(draft).is_file():
            values["draft"] = draft
        elif draft:
            notes.append(f"{Path(draft).name} is not here; using a draft requantized from {target}")
    else:
        what = f"{Path(target).name} is not here" if target else "no -m model given"
        notes.append(f"{what}; checking the same setup on the local default pair")
    if cmd.get("spec_type") not in (None, "none", "draft-simple"):
        notes.append(f"--spec-type {cmd.get('spec_type')} is checked as draft-model speculation")
    for key in _DIRECT:
        if cmd.get(key) is not None:
            values[key] = cmd.get(key)
    if cmd.get("n_ctx"):
        n_ctx = cmd.get("n_ctx") // max(cmd.get("parallel", 1), 1)
        if cmd.get("parallel", 1) > 1:
            notes.append(f"llama-server splits -c between -np slots: {n_ctx} per request")
        if "target" not in values and n_ctx > MAX_LOCAL_CTX:
            notes.append(f"n_ctx {n_ctx} capped at {MAX_LOCAL_CTX} on the local pair")
            n_ctx = MAX_LOCAL_CTX
        values["n_ctx"] = n_ctx
    cores = cpu_count or os.cpu_count() or 1
    threads = cmd.get("threads")
    if threads and threads > 0:
        values["threads"] = min(threads, cores)
        if threads > cores:
            notes.append(f"-t {threads} lowered to this machine's {cores} cores")
    if str(cmd.get("flash_attn", "off")).lower() in ("on", "1", "true"):
        values["flash_attn"] = True
    if cmd.seed_fixed and 0 < cmd.get("seed") < RANDOM_SEED:
        values["seed_start"] = cmd.get("seed")
    return RunMapping(values, tuple(notes), runs)


#: Programs of a llama.cpp build directory that have a llama-server beside them to run instead.
_BUILD_PROGRAMS = ("llama-cli", "llama-speculative", "llama-speculative-simple", "main")
#: The user's flags that change numerics and that equiv does not set itself: passed to the user's
#: llama-server as written (draft-only ones to the speculative server only). Switches take no value.
_PASS_SHARED = frozenset(
    {"-ngl", "--gpu-layers", "--n-gpu-layers", "-ctk", "--cache-type-k", "-ctv", "--cache-type-v",
     "-sm", "--split-mode", "-ts", "--tensor-split", "-mg", "--main-gpu", "-dev", "--device",
     "--no-mmap", "--mlock", "--numa", "--no-kv-offload", "-nkvo", "--jinja"}
)  # fmt: skip
_PASS_DRAFT = frozenset(
    {"-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft", "-devd", "--device-draft",
     "-ctkd", "--cache-type-k-draft", "-ctvd", "--cache-type-v-draft"}
)  # fmt: skip
_SWITCHES = frozenset({"--no-mmap", "--mlock", "--no-kv-offload", "-nkvo", "--jinja"})


def user_server(cmd: LlamaCommand, *, server_bin: str | None = None) -> tuple[str | None, str]:
    """The user's own llama-server binary to run, and a sentence saying what equiv runs."""
    if server_bin:
        given = Path(server_bin).expanduser()
        if not given.is_file():
            raise ConfigError(
                f"--server-bin {server_bin!r} does not exist; give the path of your llama-server"
            )
        return str(given), f"running your llama-server {given} (--server-bin) with your flags"
    if not cmd.program_path:
        return None, _IN_PROCESS + "; pass --server-bin PATH to check your own build"
    written = cmd.program_path
    found = shutil.which(written) if "/" not in written else written
    path = Path(found).expanduser() if found else None
    if path is not None and path.is_file() and cmd.program in ("llama-server", "server"):
        return str(path), f"running your llama-server {path} with your flags"
    if path is not None and path.is_file() and cmd.program in _BUILD_PROGRAMS:
        sibling = path.parent / "llama-server"
        if sibling.is_file():
            return str(sibling), (
                f"your command runs {cmd.program}; equiv runs the llama-server of the same build "
                f"({sibling}: the same kernels) with your flags, one server per path"
            )
    why = (
        f"{written} is not a file here"
        if path is None or not path.is_file()
        else (f"{cmd.program} has no llama-server beside it")
    )
    return None, f"{why}: {_IN_PROCESS}; pass --server-bin PATH to check your own build"


_IN_PROCESS = (
    "running llama-cpp-python in process, whose llama.cpp build and backend may differ from "
    "yours (so may its drift)"
)


def pass_through(cmd: LlamaCommand) -> tuple[list[str], list[str]]:
    """The user's flags for their llama-server that equiv does not set (`_PASS_SHARED`), and
    those for the speculative server only (`_PASS_DRAFT`), as written."""
    shared: list[str] = []
    draft: list[str] = []
    words = cmd.words
    i = 0
    while i < len(words):
        name = words[i].partition("=")[0]
        into = shared if name in _PASS_SHARED else draft if name in _PASS_DRAFT else None
        takes_value = "=" not in words[i] and name not in _SWITCHES and i + 1 < len(words)
        if into is not None:
            into.append(words[i])
            if takes_value:
                into.append(words[i + 1])
        i += 2 if into is not None and takes_value else 1
    return shared, draft


def seeds_needed(analyses: Sequence[AnalysisRecord], seeds: int) -> int | None:
    """Seeds per prompt at which every inconclusive prompt's test reaches the power its verdict
    asks for, from the tokens the classifier said it needs (None when it did not say)."""
    from equiv.records.verdict import Label

    needed = []
    for record in analyses:
        verdict = record.judged
        need, have = verdict.evidence.get("tokens_needed"), verdict.evidence.get("tokens")
        if verdict.label is Label.INCONCLUSIVE and need and have:
            needed.append(math.ceil(seeds * need / have))
    return max(needed) if needed else None


def verdict_lines(
    temp0: Any,
    sampling: Any | None,
    *,
    draft_max: int,
    user_temp: float,
    analyses: Sequence[Any],
    seeds: int | None = None,
) -> list[str]:
    """Plain-language verdict and next steps from the runs' `Summary` objects (``seeds``: the
    seeds per prompt the sampling run used, to say how many would decide)."""
    t = temp0.total
    lines = [f"temp-0 outputs identical on {t.identical} of {t.prompts} prompts"]
    verdict = temp0.verdict
    if t.diverged:
        lines.append(f"  {temp0.conclusion}")
    if verdict.label.value in ("sampler-bug", "misconfiguration"):
        lines.append(f"  next: read the evidence per prompt in the report; {verdict.reason}")
    elif t.diverged:
        lines.append(
            "  next: numeric drift is expected on CPUs (batched verification vs one-token "
            "decoding); it is not a bug in speculative decoding"
        )
    if sampling is not None:
        p_values = [
            t["p_adjusted"] for record in analyses for t in record.tests if "p_adjusted" in t
        ]
        powers = [r.judged.evidence.get("power") for r in analyses]
        stats = [f"smallest adjusted p = {min(p_values):.2g}"] if p_values else []
        if powers and None not in powers:
            stats.append(f"power {min(powers):.2f} for Cohen's w >= 0.1")
        detail = f" ({'; '.join(stats)})" if stats else ""
        label = sampling.verdict.label.value
        if label == "equivalent":
            lines.append(
                f"at temp {user_temp:g} no significant difference on {sampling.total.prompts} "
                f"prompts{detail}: what you see between runs is sampling variance"
            )
        elif label == "inconclusive":
            more = seeds_needed(analyses, seeds) if seeds else None
            how = (
                f"rerun with --seeds {more} (now {seeds}) or a larger --max-tokens"
                if more
                else "rerun with more --seeds or a larger --max-tokens"
            )
            lines.append(
                f"at temp {user_temp:g} no test rejects, but the evidence is thin{detail}: {how}"
            )
        else:
            lines.append(f"at temp {user_temp:g}: {sampling.conclusion}{detail}")
    acc = t.acceptance
    if acc is not None:
        # Expected tokens per target pass at a per-token acceptance (Leviathan et al., eq. 1).
        per_pass = (1 - acc ** (draft_max + 1)) / (1 - acc) if acc < 1 else draft_max + 1.0
        line = (
            f"draft-max {draft_max} gives acceptance {acc:.2f}: about {per_pass:.1f} tokens per "
            f"target pass (at most {draft_max + 1})"
        )
        if acc < 0.6 and draft_max > 4:
            line += "; try --draft-max 4"
        lines.append(line)
    # The last line answers the user's question: did quality drop, by how much at most (at the
    # user's temperature when they sample, else at temp 0).
    graded = [q for s in (sampling, temp0) if s is not None for q in s.quality]
    if graded:
        lines.extend(q.line for q in reversed(graded))
        lines.append(graded[0].answer_line)
    else:
        lines.append(
            "did quality drop? not measured: none of these prompts carries a grader "
            "(the built-in suites do; prompts/README.md, Graded prompts)"
        )
    return lines


def execute(
    mapping: RunMapping,
    *,
    prompts: Sequence[str],
    max_tokens: int | None,
    seeds: int,
    out: Path,
    echo: Callable[[str], None] = print,
    console: Any = None,
) -> int:
    """Run temp 0 and (if the user samples) the user's temperature, with progress on
    ``console`` (stderr by default); write each run's summary.json and report.html; echo the
    ``equiv run`` command that reruns each, and the verdict."""
    from rich.console import Console

    from equiv.cli.deployments import run_command
    from equiv.cli.progress import Progress
    from equiv.options.build import build_config
    from equiv.options.config_file import merge_toml
    from equiv.records import ResultsFile
    from equiv.report import write_report
    from equiv.report.summary_json import write_summary
    from equiv.run.execute import run_plan
    from equiv.run.plan import plan, select_prompts

    values = {"temp": mapping.user_temp, **mapping.values, "prompt": list(prompts)}
    values["max_tokens"] = max_tokens
    modes = ["temp0"] + (["sampling"] if mapping.user_temp > 0 else [])
    summaries: dict[str, Any] = {}
    for mode in modes:
        run_values = {**values, "mode": mode, "seeds": seeds if mode == "sampling" else None}
        config, pair = build_config(run_values, workdir=out / mode)
        chosen = select_prompts(config.suites, values["prompt"])
        total = len(plan(chosen, config))
        argv = run_command(run_values, mode=mode, out=out / mode)
        echo(f"running {mode}: {total} generation pair(s) -> {out / mode}")
        echo(f"  the same run by hand: equiv {shlex.join(argv)}")
        with Progress(console or Console(stderr=True), total=total) as progress:
            outcome = run_plan(
                config, pair, chosen, out / mode, argv=argv, on_result=progress.update
            )
        if outcome.summary is None:
            raise KeyboardInterrupt
        summaries[mode] = outcome.summary
        echo(f"  summary: {write_summary(outcome.results_path)}")
        echo(f"  report: {write_report(outcome.results_path, out / mode / 'report.html')}")
    temp0 = summaries["temp0"]
    sampling = summaries.get("sampling")
    analyses = ResultsFile(out / "sampling" / "results.jsonl").read().analyses if sampling else []
    echo("")
    for line in verdict_lines(
        temp0,
        sampling,
        draft_max=merge_toml(values)["draft_max"],
        user_temp=mapping.user_temp,
        analyses=analyses,
        seeds=seeds,
    ):
        echo(line)
    failed = temp0.failed_controls + (sampling.failed_controls if sampling else [])
    return 1 if failed else 0
