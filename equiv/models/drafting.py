"""What a target can draft with: a separate draft (llama.cpp's vocabulary rules,
`equiv.models.vocab_compat.check_vocab_compat`) or its own multi-token-prediction (MTP) head.

A model is a GGUF file or a Hugging Face checkpoint's ``config.json`` (or its folder): a user
asking "which draft for DeepSeek-R1?" often has only the published config. A config carries the
vocabulary size and ``num_nextn_predict_layers`` but no token texts, so it can prove a draft
incompatible (sizes apart by more than llama.cpp allows), never compatible.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from equiv.errors import ModelError
from equiv.models.gguf import read_gguf_info
from equiv.models.vocab_compat import SPEC_VOCAB_MAX_SIZE_DIFFERENCE, check_vocab_compat

__all__ = ["DraftingReport", "ModelFacts", "drafting_report", "model_facts"]


@dataclass(frozen=True)
class ModelFacts:
    """The figures of a model that decide how it can be drafted."""

    path: str
    kind: str  # "gguf" or "config.json"
    vocab_size: int
    mtp_layers: int  # nextn / MTP layers the checkpoint declares
    mtp_head: bool  # a GGUF whose last block has nextn.eh_proj (what llama.cpp runs MTP from)

    @property
    def name(self) -> str:
        return Path(self.path).name if self.kind == "gguf" else str(Path(self.path).parent.name)


def model_facts(path: str | Path) -> ModelFacts:
    """`ModelFacts` of a GGUF file, a ``config.json``, or a folder holding one."""
    p = Path(path)
    config = p / "config.json" if p.is_dir() else p
    if config.name.endswith(".json"):
        return _config_facts(config)
    info = read_gguf_info(p, with_sha256=False)
    return ModelFacts(
        str(p), "gguf", info.vocab_size, info.nextn_predict_layers or 0, info.mtp_head
    )


def _config_facts(path: Path) -> ModelFacts:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ModelError(
            f"cannot read {str(path)!r} ({exc.strerror}); give a GGUF file, a Hugging Face "
            "config.json, or the folder holding one"
        ) from None
    except ValueError as exc:
        raise ModelError(f"{str(path)!r} is not JSON ({exc}); give a config.json") from None
    text = data.get("text_config", data) if isinstance(data, dict) else {}
    vocab = text.get("vocab_size") if isinstance(text, dict) else None
    if not isinstance(vocab, int) or vocab < 1:
        raise ModelError(
            f"{str(path)!r} has no vocab_size; give the model's own config.json (Hugging Face "
            "checkpoints have one) or its GGUF file"
        )
    layers = text.get("num_nextn_predict_layers", 0)
    return ModelFacts(
        str(path), "config.json", vocab, layers if isinstance(layers, int) else 0, False
    )


@dataclass(frozen=True)
class DraftingReport:
    """How ``target`` can be drafted: with ``draft`` (``compatible``: True, False, or None
    where the files cannot tell), with its MTP head, and what to run."""

    target: ModelFacts
    draft: ModelFacts | None
    compatible: bool | None
    reasons: tuple[str, ...]
    notes: tuple[str, ...]

    def lines(self) -> list[str]:
        if self.draft is None:
            head = f"{self.target.name}: {self._mtp_line()}"
            return [head, *(f"  note: {n}" for n in self.notes)]
        verdict = {True: "compatible", False: "NOT compatible", None: "cannot tell"}
        out = [f"{self.draft.path} -> {self.target.path}: {verdict[self.compatible]}"]
        out += [f"  - {r}" for r in self.reasons]
        out += [f"  note: {n}" for n in self.notes]
        if self.compatible is False and (self.target.mtp_head or self.target.mtp_layers):
            out.append(
                "  this draft cannot draft for it, and none is needed: your model has an MTP "
                "head: use --spec-type draft-mtp"
            )
        return out

    def _mtp_line(self) -> str:
        t = self.target
        if t.mtp_head:
            return (
                f"carries an MTP head ({t.mtp_layers or 1} nextn layer(s)): llama.cpp drafts with "
                "it under --spec-type draft-mtp (and infers draft-mtp when the file is given as "
                "-md without --spec-type); no separate draft is needed"
            )
        if t.mtp_layers and t.kind == "config.json":
            return (
                f"the checkpoint declares {t.mtp_layers} MTP (nextn) layer(s): its GGUF, converted "
                "with them kept, runs under --spec-type draft-mtp; no separate draft is needed"
            )
        if t.mtp_layers:
            return (
                f"declares {t.mtp_layers} nextn layer(s) but its last block has no nextn.eh_proj: "
                "llama.cpp cannot run MTP from this file (convert it again with the MTP layers)"
            )
        return (
            "no MTP head: speculative decoding needs a draft of the same vocabulary "
            "(equiv check-draft TARGET DRAFT) or an n-gram type (--spec-type ngram-mod)"
        )


def drafting_report(target: str | Path, draft: str | Path | None = None) -> DraftingReport:
    """What can draft for ``target``; with ``draft``, whether llama.cpp accepts it."""
    t = model_facts(target)
    if draft is None:
        return DraftingReport(t, None, None, (), ())
    d = model_facts(draft)
    if t.kind == d.kind == "gguf":
        vocab = check_vocab_compat(target, draft)
        notes = tuple(n for n in vocab.notes if "multi-token-prediction" not in n)
        return DraftingReport(t, d, vocab.compatible, vocab.reasons, notes)
    gap = abs(t.vocab_size - d.vocab_size)
    sizes = f"(target {t.vocab_size:,}, draft {d.vocab_size:,})"
    if gap > SPEC_VOCAB_MAX_SIZE_DIFFERENCE:
        why = f"llama.cpp allows at most {SPEC_VOCAB_MAX_SIZE_DIFFERENCE}"
        return DraftingReport(t, d, False, (f"vocab sizes differ by {gap:,} {sizes}; {why}",), ())
    return DraftingReport(
        t, d, None, (),
        (f"vocab sizes agree within llama.cpp's allowance {sizes}; a config.json has no token "
         "texts: check the two GGUF files to be sure",),
    )  # fmt: skip
