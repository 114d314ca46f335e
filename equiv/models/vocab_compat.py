"""llama.cpp's rules for a draft model's vocabulary: whether it may draft for a target.

`check_vocab_compat` applies ``common_speculative_are_compatible`` (``common/speculative.cpp``) to
two GGUF files' metadata (`equiv.models.gguf`), with the BOS/EOS ids and flags llama.cpp's vocab
loader ends up with (``llama_vocab::impl::load``: per-type defaults where a file is silent).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from equiv.errors import VocabMismatchError
from equiv.json_types import JSONDict, JSONObject, json_list, json_object
from equiv.models.gguf import GGUFInfo, read_gguf_info, read_token_texts
from equiv.models.gguf_header import PathLike

__all__ = [
    "SPEC_VOCAB_CHECK_START_TOKEN_ID",
    "SPEC_VOCAB_MAX_SIZE_DIFFERENCE",
    "VocabReport",
    "check_vocab_compat",
    "require_vocab_compat",
]

#: llama.cpp ``common/speculative.cpp``: the most the two vocab sizes may differ by.
SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128
#: llama.cpp ``common/speculative.cpp``: token texts are compared from this id on.
SPEC_VOCAB_CHECK_START_TOKEN_ID = 5

# llama_vocab::impl::load: tokenizer.ggml.model -> (llama_vocab_type, and the defaults the
# file's keys override: bos id, eos id, add_bos, add_eos)
# fmt: off
_VOCABS: dict[str, tuple[str, int | None, int | None, bool, bool]] = {
    "llama": ("SPM", 1, 2, True, False), "bert": ("WPM", 101, None, True, False),
    "gpt2": ("BPE", 11, 11, False, False), "hybriddna": ("BPE", 11, 11, False, False),
    "whitespace": ("BPE", 11, 11, False, False), "gemma4": ("BPE", None, None, False, False),
    "t5": ("UGM", None, 1, False, True), "rwkv": ("RWKV", None, None, False, False),
    "plamo2": ("PLAMO2", 1, 2, False, False),
}
# BPE pre-tokenizers (tokenizer.ggml.pre) that turn add_bos on, drop the BOS id, force add_bos
_PRE_ADD_BOS = frozenset({"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                          "midm-2.0", "lfm2", "jina-v5-nano", "tekken", "chameleon"})
_PRE_NO_BOS = frozenset({"glm4", "chatglm-bpe"})
_PRE_FORCE_BOS = frozenset({"gemma4", "granite-embed-multi-311m"})
# fmt: on


@dataclass(frozen=True)
class VocabReport:
    """Whether llama.cpp accepts `draft` as a draft for `target`; notes never fail the pair."""

    compatible: bool
    reasons: tuple[str, ...]
    notes: tuple[str, ...]
    target: GGUFInfo
    draft: GGUFInfo

    def to_dict(self) -> JSONDict:
        return {**asdict(self), "reasons": list(self.reasons), "notes": list(self.notes)}

    @classmethod
    def from_dict(cls, data: JSONObject) -> VocabReport:
        target = GGUFInfo.from_dict(json_object(data["target"]))
        draft = GGUFInfo.from_dict(json_object(data["draft"]))
        reasons = tuple(str(r) for r in json_list(data["reasons"]))
        notes = tuple(str(n) for n in json_list(data.get("notes", ())))
        return cls(bool(data["compatible"]), reasons, notes, target, draft)


def _specials(info: GGUFInfo) -> tuple[bool, int | None, bool, int | None]:
    """(add_bos, bos, add_eos, eos) as llama.cpp's vocab loader ends up with them."""
    _, bos, eos, add_bos, add_eos = _VOCABS.get(info.vocab_model, ("", 1, 2, False, False))
    pre = "gemma4" if info.vocab_model == "gemma4" else info.vocab_pre
    if _vocab_type(info) == "BPE":
        add_bos = pre in _PRE_ADD_BOS
        bos = None if pre in _PRE_NO_BOS else bos
    n = info.vocab_size  # a default id out of range is dropped, a file id out of range ignored
    bos = next((i for i in (info.bos_id, bos) if i is not None and i < n), None)
    eos = next((i for i in (info.eos_id, eos) if i is not None and i < n), None)
    add_bos = add_bos if info.add_bos is None else info.add_bos
    add_eos = add_eos if info.add_eos is None else info.add_eos
    return add_bos or pre in _PRE_FORCE_BOS, bos, add_eos, eos


def _vocab_type(info: GGUFInfo) -> str:
    return _VOCABS[info.vocab_model][0] if info.vocab_model in _VOCABS else info.vocab_model


def _special_reason(
    what: str, t: tuple[bool, int | None], d: tuple[bool, int | None], notes: list[str]
) -> list[str]:
    (t_add, t_id), (d_add, d_id) = t, d
    if t_add != d_add:
        return [f"add_{what.lower()} differs: target {t_add}, draft {d_add}"]
    if t_id != d_id and t_add:
        return [f"{what} ids differ: target {t_id}, draft {d_id} (both add {what})"]
    if t_id != d_id:
        notes.append(
            f"{what} ids differ (target {t_id}, draft {d_id}) but neither model adds {what}: "
            "current llama.cpp accepts this, older builds compared the ids and refuse the pair"
        )
    return []


def check_vocab_compat(
    target_path: PathLike, draft_path: PathLike, *, with_sha256: bool = True
) -> VocabReport:
    """Apply llama.cpp's ``common_speculative_are_compatible`` (``common/speculative.cpp``).

    Refused when the vocab types (``tokenizer.ggml.model``) differ; add_bos differs, or both add
    BOS with different ids; the same for EOS; the sizes differ by more than
    ``SPEC_VOCAB_MAX_SIZE_DIFFERENCE`` (128); or a token text differs for an id from
    ``SPEC_VOCAB_CHECK_START_TOKEN_ID`` (5) up to the smaller size. BOS/EOS are what llama.cpp's
    loader would use (its per-type defaults where the file is silent). Lists every reason.
    """
    target = read_gguf_info(target_path, with_sha256=with_sha256)
    notes: list[str] = []
    if target.nextn_predict_layers:
        notes.append(
            f"target has {target.nextn_predict_layers} multi-token-prediction layers; llama.cpp's "
            "built-in MTP speculative path is the alternative to a separate draft"
        )
    if Path(target.path).resolve() == Path(draft_path).resolve():
        notes.append("target and draft are the same file")
        return VocabReport(True, (), tuple(notes), target, target)
    draft = read_gguf_info(draft_path, with_sha256=with_sha256)
    reasons: list[str] = []
    if _vocab_type(target) != _vocab_type(draft):
        reasons.append(
            f"vocab types differ: target {target.vocab_model!r} ({_vocab_type(target)}), "
            f"draft {draft.vocab_model!r} ({_vocab_type(draft)})"
        )
    ts, ds = _specials(target), _specials(draft)
    reasons += _special_reason("BOS", ts[:2], ds[:2], notes)
    reasons += _special_reason("EOS", ts[2:], ds[2:], notes)
    n_t, n_d = target.vocab_size, draft.vocab_size
    sizes = f"(target {n_t:,}, draft {n_d:,})"
    if abs(n_t - n_d) > SPEC_VOCAB_MAX_SIZE_DIFFERENCE:
        reasons.append(
            f"vocab sizes differ by {abs(n_t - n_d):,} {sizes}; llama.cpp allows at most "
            f"{SPEC_VOCAB_MAX_SIZE_DIFFERENCE}"
        )
    elif n_t != n_d:
        notes.append(
            f"vocab sizes differ by {abs(n_t - n_d):,} {sizes}, within llama.cpp's allowance; ids"
            f" {min(n_t, n_d):,}+ exist only in the {'draft' if n_d > n_t else 'target'}"
        )
    t_texts, d_texts = read_token_texts(target.path), read_token_texts(draft.path)
    start, stop = SPEC_VOCAB_CHECK_START_TOKEN_ID, min(n_t, n_d)
    if t_texts[start:stop] != d_texts[start:stop]:
        i = next(i for i in range(start, stop) if t_texts[i] != d_texts[i])
        reasons.append(
            f"token {i:,} differs: target {t_texts[i]!r}, draft {d_texts[i]!r} (first mismatch)"
        )
    return VocabReport(not reasons, tuple(reasons), tuple(notes), target, draft)


def require_vocab_compat(
    target_path: PathLike, draft_path: PathLike, *, with_sha256: bool = True
) -> VocabReport:
    """`check_vocab_compat`, raising `VocabMismatchError` that lists every reason."""
    report = check_vocab_compat(target_path, draft_path, with_sha256=with_sha256)
    if not report.compatible:
        raise VocabMismatchError(
            f"draft {report.draft.path!r} cannot be used with target {report.target.path!r}: "
            + "; ".join(report.reasons)
            + ". Use a draft from the same model family, converted with the same tokenizer"
        )
    return report
