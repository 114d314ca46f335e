"""What a llama.cpp command line alone says can make outputs differ, in plain words, each with
its fix."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from equiv.cli.diagnose.command import LlamaCommand

if TYPE_CHECKING:
    from equiv.models.vocab_compat import VocabReport


class VocabCheck(Protocol):
    """`equiv.models.vocab_compat.check_vocab_compat`, or a stand-in for it."""

    def __call__(self, target: str, draft: str, /, *, with_sha256: bool) -> VocabReport: ...


__all__ = ["LARGE_DRAFT_MAX", "Finding", "findings"]

LARGE_DRAFT_MAX = 8  # a draft-max worth checking against the acceptance


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
    vocab_check: VocabCheck | None = None,
    own_server: bool = False,
) -> list[Finding]:
    """What the command line alone says (``vocab_check``: llama.cpp's rules unless given;
    ``own_server``: the run starts the user's own llama-server with their flags)."""
    return [
        *_seed(cmd),
        *_draft(cmd),
        *_gpu(cmd, own_server),
        *_formatting_and_cache(cmd),
        *_vocab(cmd, vocab_check),
    ]


def _seed(cmd: LlamaCommand) -> list[Finding]:
    seed, temp = cmd.integer("seed"), cmd.temp
    seed_flag = cmd.spellings.get("seed", "--seed")
    if seed == 0:
        return [
            Finding(
                "misconfiguration",
                f"{seed_flag} 0",
                "llama.cpp takes 0 as a fixed seed, but llama-cpp-python (and every tool built "
                "on it) treats seed=0 as 'pick a random seed', so the same setup run there is "
                "not repeatable and a comparison between two runs measures chance",
                f"use a seed in [1, 2**32 - 2], e.g. {seed_flag} 1, in both runs",
            )
        ]
    if temp > 0 and not cmd.seed_fixed:
        written = "not set" if seed is None else f"{seed} (random)"
        return [
            Finding(
                "misconfiguration",
                f"temperature {temp:g} with no fixed seed (seed {written})",
                "llama.cpp's default seed -1 / 0xFFFFFFFF means random: every run samples "
                "differently, with or without a draft, so two runs differing proves nothing",
                "pass --seed 1 (any fixed value) to both runs, or compare at --temp 0",
            )
        ]
    return []


def _draft(cmd: LlamaCommand) -> list[Finding]:
    out = []
    draft_max, draft_min = cmd.integer("draft_max"), cmd.integer("draft_min")
    if draft_max is not None and (draft_min or 0) > draft_max:
        out.append(
            Finding(
                "misconfiguration",
                f"draft-min {draft_min} > draft-max {draft_max}",
                "no draft can be long enough, so the draft model is never used",
                "use a draft-min no larger than draft-max (llama.cpp's default draft-min is 0)",
            )
        )
    draft_max = 16 if draft_max is None else draft_max  # llama.cpp's default
    if draft_max >= LARGE_DRAFT_MAX and cmd.text("model_draft"):
        out.append(
            Finding(
                "note",
                f"draft-max {draft_max}",
                "long drafts pay off only when the draft agrees with the target most of the "
                "time; the run below measures the acceptance",
                "if the acceptance is below about 0.6, try --draft-max 4",
            )
        )
    return out


def _gpu(cmd: LlamaCommand, own_server: bool) -> list[Finding]:
    ngl = cmd.text("n_gpu_layers")
    if ngl is None or ngl in ("0",):
        return []
    partial = ngl.isdigit() and int(ngl) < 99
    return [
        Finding(
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
            (
                "offload all layers (-ngl 999) or none (-ngl 0) when comparing outputs"
                if partial
                else "nothing to change in your flags"
            )
            + (
                ""
                if own_server
                else "; to test your GPU kernels pass --server-bin PATH (your "
                "llama-server build) so equiv runs it with your -ngl"
            ),
        )
    ]


def _formatting_and_cache(cmd: LlamaCommand) -> list[Finding]:
    out = []
    if cmd.flag("jinja"):
        out.append(
            Finding(
                "note",
                "--jinja",
                "chat requests are formatted with the model's own Jinja chat template "
                "(tokenizer.chat_template); equiv formats its chat prompts with the same "
                "template (and passes --jinja to your llama-server when it runs one)",
                "nothing to fix; if a chat prompt diverges, check that both servers ran --jinja",
            )
        )
    kv = [f"{f} {cmd.text(k)}" for f, k in (("-ctk", "cache_type_k"), ("-ctv", "cache_type_v"))]
    kv = [text for text in kv if not text.endswith((" None", " f16"))]
    if kv:
        out.append(
            Finding(
                "note",
                " ".join(kv),
                "a quantized KV cache changes logits in both paths; speculative verification "
                "writes K/V in batches, so rounding differs from one-token decoding",
                "compare with -ctk f16 -ctv f16 to see whether the difference goes away",
            )
        )
    if cmd.parallel > 1:
        out.append(
            Finding(
                "misconfiguration",
                f"-np {cmd.parallel}",
                "with several slots llama-server batches concurrent requests together, so a "
                "request's numerics depend on what else is running (and -c is split between "
                "the slots); outputs are not reproducible request to request",
                "compare with -np 1 (one request at a time)",
            )
        )
    return out


def _vocab(cmd: LlamaCommand, vocab_check: VocabCheck | None) -> list[Finding]:
    target, draft = cmd.text("model"), cmd.text("model_draft")
    if not (target and draft and Path(target).is_file() and Path(draft).is_file()):
        return []
    from equiv.models.vocab_compat import check_vocab_compat

    report = (vocab_check or check_vocab_compat)(target, draft, with_sha256=False)
    if report.compatible:
        return []
    return [
        Finding(
            "misconfiguration",
            "the draft's vocabulary is incompatible with the target's",
            "; ".join(report.reasons),
            "use a draft of the same model family, converted with the same tokenizer",
        )
    ]
