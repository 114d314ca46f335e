"""A tiny recurrent target and a transformer draft, written from scratch as GGUF files: the
built-in ``hybrid`` pair.

Why: a recurrent (or hybrid) target cannot drop the tail of a rejected draft from its state, so
llama-server verifies drafts for it on another path: it saves a checkpoint of the target's state
before each verification and, on a partly accepted draft, restores it and replays the accepted
tokens (``use_ckpt_tgt``, ``spec_is_replay`` in ``tools/server/server-context.cpp``). The bundled
Gemma 3 target rolls back in place and never takes that path; this pair does.

What: the target is a 2-layer Mamba (``general.architecture = mamba``, llama.cpp's simplest
recurrent architecture), the draft a 1-layer llama transformer. Both carry the bundled Gemma 3
tokenizer unchanged (prompts tokenize as they do for Gemma 3) and share their token embeddings
and output matrix, so the draft agrees with the target often, but not always. The weights are
random with a fixed seed, shaped so the model is not degenerate:

- the output matrix is zero except on ordinary printable-ASCII tokens, so greedy text is a word
  salad of English pieces, not special or unused tokens;
- its scale (``OUTPUT_STD``) sets how peaky the next-token distribution is (the share of positions
  whose top two logits lie within 1.0 of each other, and the entropy at temperature 0.8, are
  measured in tests/models/test_tiny_recurrent.py);
- the layers add context to a strong token-to-token map (through the residual stream), so the
  text depends on more than the last token.

The files are cached under ``cache_dir() / "tiny"``, named by `VERSION` and the tokenizer source's
sha256, with their provenance in a JSON file beside them; the same inputs give the same bytes.
This module runs no generation.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
import numpy.typing as npt

from equiv.config import ModelSpec
from equiv.models.gguf import MetaValue, read_gguf_info, read_tokenizer_kv
from equiv.models.tiny_gguf import gguf_version, live_tokens, normal, write_gguf

__all__ = ["SEED", "VERSION", "TinyPair", "build_tiny_recurrent_pair"]

#: Bump when anything that changes the files' bytes changes (shapes, scales, seed, layout).
VERSION = "2"
SEED = 20240617

N_EMBD = 32
CONTEXT_LENGTH = 4096
RMS_EPS = 1e-5
#: Mamba: llama.cpp supports only d_inner = 2 * n_embd.
MAMBA_LAYERS, D_STATE, D_CONV, DT_RANK = 2, 16, 4, 4
#: The draft: one llama block.
DRAFT_LAYERS, N_HEAD, N_FF = 1, 4, 128
#: Standard deviation of the output matrix's live rows: with RMS-normalised hidden states of
#: width 32 the logits of live tokens have a standard deviation of about OUTPUT_STD * 5.7.
OUTPUT_STD = 3.0
#: How much the target's Mamba layers and the draft's block add to the residual stream (the
#: token embedding has unit scale): larger means more context, less agreement between the two.
MAMBA_OUT_STD = 0.3
DRAFT_OUT_STD = 0.1

F32 = npt.NDArray[np.float32]
Arrays = dict[str, npt.NDArray[np.generic]]


@dataclass(frozen=True)
class TinyPair:
    target: ModelSpec
    draft: ModelSpec


def build_tiny_recurrent_pair(tokenizer_source: ModelSpec, folder: Path) -> TinyPair:
    """The tiny Mamba target and llama draft in ``folder``, built once (two to three seconds)
    and then reused; both copy ``tokenizer_source``'s ``tokenizer.*`` keys. The built-in pair
    (`equiv.models.pair.resolve_pair` with ``pair="hybrid"``) takes the bundled Gemma 3 270M's
    tokenizer and ``cache_dir() / "tiny"``.
    """
    source = tokenizer_source
    info = read_gguf_info(source.path)
    assert info.sha256 is not None
    stem = f"v{VERSION}-{info.sha256[:12]}"
    target_path = folder / f"tiny-mamba-target-{stem}.gguf"
    draft_path = folder / f"tiny-llama-draft-{stem}.gguf"
    meta_path = folder / f"tiny-recurrent-{stem}.json"
    provenance = f"built:tiny-recurrent v{VERSION}, tokenizer of sha256 {info.sha256[:12]}"
    if not (target_path.is_file() and draft_path.is_file() and meta_path.is_file()):
        started = time.perf_counter()
        folder.mkdir(parents=True, exist_ok=True)
        tokenizer = read_tokenizer_kv(source.path)
        shared = _shared_weights(tokenizer)
        _write(target_path, "mamba", tokenizer, _mamba_params(), _mamba_tensors(shared))
        _write(draft_path, "llama", tokenizer, _llama_params(), _llama_tensors(shared))
        meta = {
            "version": VERSION,
            "seed": SEED,
            "tokenizer_source": source.path,
            "tokenizer_source_sha256": info.sha256,
            "target": {"architecture": "mamba", "layers": MAMBA_LAYERS, "n_embd": N_EMBD},
            "draft": {"architecture": "llama", "layers": DRAFT_LAYERS, "n_embd": N_EMBD},
            "gguf": gguf_version(),
            "seconds": round(time.perf_counter() - started, 3),
        }
        meta_path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return TinyPair(
        ModelSpec(path=str(target_path), provenance=provenance),
        ModelSpec(path=str(draft_path), provenance=provenance),
    )


# -- weights ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Shared:
    """What target and draft have in common: the vocabulary's embeddings and output matrix."""

    n_vocab: int
    token_embd: npt.NDArray[np.float16]  # (n_vocab, n_embd)
    output: npt.NDArray[np.float16]  # (n_vocab, n_embd), zero rows for tokens never emitted


def _shared_weights(tokenizer: dict[str, MetaValue]) -> _Shared:
    live = live_tokens(tokenizer)
    n_vocab = len(live)
    rng = np.random.default_rng([SEED, 0])
    embd = rng.standard_normal((n_vocab, N_EMBD), dtype=np.float32)
    out = rng.standard_normal((n_vocab, N_EMBD), dtype=np.float32) * np.float32(OUTPUT_STD)
    out[~live] = 0.0
    return _Shared(n_vocab, embd.astype(np.float16), out.astype(np.float16))


def _mamba_tensors(shared: _Shared) -> Arrays:
    """Numpy shapes are ggml's reversed: ``ssm_in`` {n_embd, 2*d_inner} is (2*d_inner, n_embd)."""
    d_inner = 2 * N_EMBD
    rng = np.random.default_rng([SEED, 1])
    t: Arrays = {"token_embd.weight": shared.token_embd}
    for i in range(MAMBA_LAYERS):
        b = f"blk.{i}"
        dt = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), d_inner)).astype(np.float32)
        t[f"{b}.attn_norm.weight"] = np.ones(N_EMBD, dtype=np.float32)
        t[f"{b}.ssm_in.weight"] = normal(rng, (2 * d_inner, N_EMBD), N_EMBD**-0.5)
        t[f"{b}.ssm_conv1d.weight"] = normal(rng, (d_inner, D_CONV), D_CONV**-0.5)
        t[f"{b}.ssm_conv1d.bias"] = np.zeros(d_inner, dtype=np.float32)
        t[f"{b}.ssm_x.weight"] = normal(rng, (DT_RANK + 2 * D_STATE, d_inner), d_inner**-0.5)
        t[f"{b}.ssm_dt.weight"] = normal(rng, (d_inner, DT_RANK), DT_RANK**-0.5)
        t[f"{b}.ssm_dt.bias"] = (dt + np.log(-np.expm1(-dt))).astype(np.float32)  # softplus⁻¹
        a = -np.arange(1, D_STATE + 1, dtype=np.float32)  # A = -exp(A_log), S4D-real init
        t[f"{b}.ssm_a"] = np.tile(a, (d_inner, 1))
        t[f"{b}.ssm_d"] = np.ones(d_inner, dtype=np.float32)
        t[f"{b}.ssm_out.weight"] = normal(rng, (N_EMBD, d_inner), MAMBA_OUT_STD * d_inner**-0.5)
    t["output_norm.weight"] = np.ones(N_EMBD, dtype=np.float32)
    t["output.weight"] = shared.output
    return t


def _llama_tensors(shared: _Shared) -> Arrays:
    rng = np.random.default_rng([SEED, 2])
    t: Arrays = {"token_embd.weight": shared.token_embd}
    for i in range(DRAFT_LAYERS):
        b = f"blk.{i}"
        t[f"{b}.attn_norm.weight"] = np.ones(N_EMBD, dtype=np.float32)
        for name in ("attn_q", "attn_k", "attn_v"):
            t[f"{b}.{name}.weight"] = normal(rng, (N_EMBD, N_EMBD), N_EMBD**-0.5)
        t[f"{b}.attn_output.weight"] = normal(rng, (N_EMBD, N_EMBD), DRAFT_OUT_STD * N_EMBD**-0.5)
        t[f"{b}.ffn_norm.weight"] = np.ones(N_EMBD, dtype=np.float32)
        t[f"{b}.ffn_gate.weight"] = normal(rng, (N_FF, N_EMBD), N_EMBD**-0.5)
        t[f"{b}.ffn_up.weight"] = normal(rng, (N_FF, N_EMBD), N_EMBD**-0.5)
        t[f"{b}.ffn_down.weight"] = normal(rng, (N_EMBD, N_FF), DRAFT_OUT_STD * N_FF**-0.5)
    t["output_norm.weight"] = np.ones(N_EMBD, dtype=np.float32)
    t["output.weight"] = shared.output
    return t


# -- files -----------------------------------------------------------------------------------------


def _mamba_params() -> dict[str, int | float]:
    return {
        "context_length": CONTEXT_LENGTH,
        "embedding_length": N_EMBD,
        "block_count": MAMBA_LAYERS,
        "feed_forward_length": 0,
        "attention.head_count": 0,
        "attention.layer_norm_rms_epsilon": RMS_EPS,
        "ssm.conv_kernel": D_CONV,
        "ssm.inner_size": 2 * N_EMBD,
        "ssm.state_size": D_STATE,
        "ssm.time_step_rank": DT_RANK,
    }


def _llama_params() -> dict[str, int | float]:
    return {
        "context_length": CONTEXT_LENGTH,
        "embedding_length": N_EMBD,
        "block_count": DRAFT_LAYERS,
        "feed_forward_length": N_FF,
        "attention.head_count": N_HEAD,
        "attention.head_count_kv": N_HEAD,
        "attention.layer_norm_rms_epsilon": RMS_EPS,
        "rope.dimension_count": N_EMBD // N_HEAD,
    }


def _write(
    path: Path,
    arch: str,
    tokenizer: dict[str, MetaValue],
    params: dict[str, int | float],
    tensors: Arrays,
) -> None:
    write_gguf(
        path, arch, name=f"equiv tiny {arch} v{VERSION}", file_type=gguf.LlamaFileType.MOSTLY_F16,
        params=params, tokenizer=tokenizer, tensors={k: (v, None) for k, v in tensors.items()},
    )  # fmt: skip
