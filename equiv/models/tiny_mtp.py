"""A tiny DeepSeek-style model with a multi-token-prediction head, written from scratch as one
GGUF file: a target that drafts for itself under ``--spec-type draft-mtp``.

Why: with ``draft-mtp`` llama-server runs no second model. It opens a second context on the
target's own weights (``LLAMA_CONTEXT_TYPE_MTP``) whose graph is the file's "nextn" block, fed
with the target's last hidden state (``h_nextn``) and the next token (``common/speculative.cpp``,
``common_speculative_impl_draft_mtp``). The drafts therefore depend on the target's hidden rows,
carried across verification batches, which no separate draft model exercises.

What: ``general.architecture = deepseek2`` (DeepSeek-V3/R1's architecture in llama.cpp): two MLA
blocks with dense FFNs and, counted inside ``block_count`` as the last block, one nextn block
(``nextn_predict_layers = 1``). llama.cpp's deepseek2 MTP graph (``src/models/deepseek2.cpp``,
``graph_mtp``) requires MLA with a query low-rank (``q_lora_rank > 0``) and a mixture-of-experts
FFN in that block, so it alone has two routed experts (one used) and a shared expert; llama.cpp
finds the head by ``blk.{block_count-1}.nextn.eh_proj.weight`` and infers ``draft-mtp`` from it.
The file carries the bundled Gemma 3 tokenizer unchanged. The head has no ``embed_tokens`` or
``shared_head_*`` of its own, so it reads the target's token embeddings, output norm and output
matrix. The weights are random with a fixed seed, shaped as in `equiv.models.tiny_recurrent`:

- the output matrix is zero except on ordinary printable-ASCII tokens (``OUTPUT_STD`` sets how
  peaky the next-token distribution is);
- the target's blocks add context (``MAIN_OUT_STD``) to a strong token-to-token map through the
  residual stream, so its text depends on more than the last token;
- the head's ``eh_proj`` passes the next token's embedding through nearly unchanged and mixes in
  a little of the hidden state, and its block adds little (``MTP_OUT_STD``): it predicts roughly
  what the target predicts from that token alone, so drafts are often, but not always, accepted
  (about 40% of drafted tokens with ``--spec-draft-n-max 3``, at temperature 0 and 0.8).

Without ``--spec-type draft-mtp`` llama.cpp skips the nextn block (``load_mtp`` is false) and logs
"model has unused tensor blk.2.nextn.* -- ignoring" (when this was written, greedy and seeded
sampling gave the same tokens with and without the head).

The two vocabulary matrices are stored as Q8_0, the rest as F32: the file takes 24.5 MB (17 MiB
of tensors, the rest the tokenizer) and two or three seconds to build. It is cached under the
folder given, named by `VERSION` and the tokenizer source's sha256, with its provenance in a JSON
file beside it; the same inputs give the same bytes. This module runs no generation.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import gguf
import numpy as np
import numpy.typing as npt

from equiv.config import ModelSpec
from equiv.models.gguf import MetaValue, read_gguf_info, read_tokenizer_kv
from equiv.models.tiny_gguf import Tensors, gguf_version, live_tokens, normal, write_gguf

__all__ = ["ARCH", "SEED", "VERSION", "build_tiny_mtp_model"]

#: Bump when anything that changes the file's bytes changes (shapes, scales, seed, layout).
VERSION = "1"
SEED = 20240618
ARCH = "deepseek2"

N_EMBD, N_HEAD, CONTEXT_LENGTH, RMS_EPS = 32, 4, 4096, 1e-5
#: Target blocks (dense FFN), then the nextn block; the GGUF's block_count counts both.
MAIN_LAYERS, MTP_LAYERS, N_FF = 2, 1, 64
#: Multi-head latent attention: query and key/value low ranks, per-head dimensions.
Q_LORA_RANK, KV_LORA_RANK, QK_NOPE, QK_ROPE, V_HEAD = 16, 16, 8, 8, 8
#: The nextn block's FFN: routed experts (softmax gating), how many are used, shared experts.
N_EXPERT, N_EXPERT_USED, N_EXPERT_SHARED, N_FF_EXP = 2, 1, 1, 32
#: As in tiny_recurrent: logits of live tokens have a standard deviation of about
#: OUTPUT_STD * 5.7 for RMS-normalised hidden states of width 32.
OUTPUT_STD = 3.0
#: How much the target's blocks and the head's block add to the residual stream (the token
#: embedding has unit scale), and how much of the target's hidden state the head mixes in.
MAIN_OUT_STD = 0.15
MTP_OUT_STD = 0.05
MTP_HIDDEN_MIX = 0.05

F32 = npt.NDArray[np.float32]


def build_tiny_mtp_model(tokenizer_source: ModelSpec, folder: Path) -> ModelSpec:
    """The tiny deepseek2 model with an MTP head in ``folder``, built once and then reused; it
    copies ``tokenizer_source``'s ``tokenizer.*`` keys (the bundled Gemma 3 270M's, for one)."""
    info = read_gguf_info(tokenizer_source.path)
    assert info.sha256 is not None
    stem = f"v{VERSION}-{info.sha256[:12]}"
    path = folder / f"tiny-deepseek2-mtp-{stem}.gguf"
    meta_path = folder / f"tiny-mtp-{stem}.json"
    provenance = f"built:tiny-mtp v{VERSION}, tokenizer of sha256 {info.sha256[:12]}"
    if not (path.is_file() and meta_path.is_file()):
        started = time.perf_counter()
        folder.mkdir(parents=True, exist_ok=True)
        tokenizer = read_tokenizer_kv(tokenizer_source.path)
        _write(path, tokenizer, _tensors(live_tokens(tokenizer)))
        meta = {
            "version": VERSION,
            "seed": SEED,
            "tokenizer_source": tokenizer_source.path,
            "tokenizer_source_sha256": info.sha256,
            "architecture": ARCH,
            "layers": MAIN_LAYERS,
            "nextn_predict_layers": MTP_LAYERS,
            "n_embd": N_EMBD,
            "gguf": gguf_version(),
            "seconds": round(time.perf_counter() - started, 3),
        }
        meta_path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return ModelSpec(path=str(path), provenance=provenance)


# -- weights ---------------------------------------------------------------------------------------


def _q8(values: F32) -> tuple[npt.NDArray[np.generic], gguf.GGMLQuantizationType]:
    q8 = gguf.GGMLQuantizationType.Q8_0
    return gguf.quants.quantize(values, q8), q8


def _ones(n: int) -> tuple[F32, None]:
    return np.ones(n, dtype=np.float32), None


def _attention(t: Tensors, b: str, rng: np.random.Generator, out_std: float) -> None:
    """MLA as llama.cpp stores it (absorbed): ``attn_kv_b`` split into ``attn_k_b``, stored
    transposed, and ``attn_v_b``. Numpy shapes are ggml's reversed."""
    k_mla = QK_NOPE + QK_ROPE
    t[f"{b}.attn_norm.weight"] = _ones(N_EMBD)
    t[f"{b}.attn_q_a.weight"] = normal(rng, (Q_LORA_RANK, N_EMBD), N_EMBD**-0.5), None
    t[f"{b}.attn_q_a_norm.weight"] = _ones(Q_LORA_RANK)
    t[f"{b}.attn_q_b.weight"] = normal(rng, (N_HEAD * k_mla, Q_LORA_RANK), Q_LORA_RANK**-0.5), None
    kv_a = normal(rng, (KV_LORA_RANK + QK_ROPE, N_EMBD), N_EMBD**-0.5)
    t[f"{b}.attn_kv_a_mqa.weight"] = kv_a, None
    t[f"{b}.attn_kv_a_norm.weight"] = _ones(KV_LORA_RANK)
    t[f"{b}.attn_k_b.weight"] = normal(rng, (N_HEAD, KV_LORA_RANK, QK_NOPE), QK_NOPE**-0.5), None
    v_b = normal(rng, (N_HEAD, V_HEAD, KV_LORA_RANK), KV_LORA_RANK**-0.5)
    t[f"{b}.attn_v_b.weight"] = v_b, None
    n_v = N_HEAD * V_HEAD
    t[f"{b}.attn_output.weight"] = normal(rng, (N_EMBD, n_v), out_std * n_v**-0.5), None
    t[f"{b}.ffn_norm.weight"] = _ones(N_EMBD)


def _tensors(live: npt.NDArray[np.bool_]) -> Tensors:
    n_vocab = len(live)
    rng = np.random.default_rng([SEED, 0])
    embd = rng.standard_normal((n_vocab, N_EMBD), dtype=np.float32)
    out = rng.standard_normal((n_vocab, N_EMBD), dtype=np.float32) * np.float32(OUTPUT_STD)
    out[~live] = 0.0
    t: Tensors = {"token_embd.weight": _q8(embd)}
    rng = np.random.default_rng([SEED, 1])
    for i in range(MAIN_LAYERS):
        b = f"blk.{i}"
        _attention(t, b, rng, MAIN_OUT_STD)
        t[f"{b}.ffn_gate.weight"] = normal(rng, (N_FF, N_EMBD), N_EMBD**-0.5), None
        t[f"{b}.ffn_up.weight"] = normal(rng, (N_FF, N_EMBD), N_EMBD**-0.5), None
        t[f"{b}.ffn_down.weight"] = normal(rng, (N_EMBD, N_FF), MAIN_OUT_STD * N_FF**-0.5), None
    b = f"blk.{MAIN_LAYERS}"
    eh = normal(rng, (N_EMBD, 2 * N_EMBD), MTP_HIDDEN_MIX * N_EMBD**-0.5)
    eh[:, :N_EMBD] += np.eye(N_EMBD, dtype=np.float32)  # [enorm(embedding), hnorm(hidden)]
    t[f"{b}.nextn.eh_proj.weight"] = eh, None
    t[f"{b}.nextn.enorm.weight"] = _ones(N_EMBD)
    t[f"{b}.nextn.hnorm.weight"] = _ones(N_EMBD)
    _attention(t, b, rng, MTP_OUT_STD)
    t[f"{b}.ffn_gate_inp.weight"] = normal(rng, (N_EXPERT, N_EMBD), N_EMBD**-0.5), None
    exps = (N_EXPERT, N_FF_EXP, N_EMBD)
    t[f"{b}.ffn_gate_exps.weight"] = normal(rng, exps, N_EMBD**-0.5), None
    t[f"{b}.ffn_up_exps.weight"] = normal(rng, exps, N_EMBD**-0.5), None
    down = normal(rng, (N_EXPERT, N_EMBD, N_FF_EXP), MTP_OUT_STD * N_FF_EXP**-0.5)
    t[f"{b}.ffn_down_exps.weight"] = down, None
    n_sh = N_FF_EXP * N_EXPERT_SHARED
    t[f"{b}.ffn_gate_shexp.weight"] = normal(rng, (n_sh, N_EMBD), N_EMBD**-0.5), None
    t[f"{b}.ffn_up_shexp.weight"] = normal(rng, (n_sh, N_EMBD), N_EMBD**-0.5), None
    t[f"{b}.ffn_down_shexp.weight"] = normal(rng, (N_EMBD, n_sh), MTP_OUT_STD * n_sh**-0.5), None
    t["output_norm.weight"] = _ones(N_EMBD)
    t["output.weight"] = _q8(out)
    return t


# -- file ------------------------------------------------------------------------------------------


def _params() -> dict[str, int | float]:
    """The keys llama.cpp's deepseek2 loader reads (``load_arch_hparams``), as
    ``conversion/deepseek.py`` writes them for MLA: the cache holds one latent "head"."""
    return {
        "context_length": CONTEXT_LENGTH,
        "embedding_length": N_EMBD,
        "block_count": MAIN_LAYERS + MTP_LAYERS,
        "nextn_predict_layers": MTP_LAYERS,
        "leading_dense_block_count": MAIN_LAYERS,
        "feed_forward_length": N_FF,
        "attention.head_count": N_HEAD,
        "attention.head_count_kv": 1,
        "attention.layer_norm_rms_epsilon": RMS_EPS,
        "attention.q_lora_rank": Q_LORA_RANK,
        "attention.kv_lora_rank": KV_LORA_RANK,
        "attention.key_length": KV_LORA_RANK + QK_ROPE,
        "attention.value_length": KV_LORA_RANK,
        "attention.key_length_mla": QK_NOPE + QK_ROPE,
        "attention.value_length_mla": V_HEAD,
        "rope.dimension_count": QK_ROPE,
        "expert_count": N_EXPERT,
        "expert_used_count": N_EXPERT_USED,
        "expert_shared_count": N_EXPERT_SHARED,
        "expert_feed_forward_length": N_FF_EXP,
    }


def _write(path: Path, tokenizer: dict[str, MetaValue], tensors: Tensors) -> None:
    write_gguf(
        path, ARCH, name=f"equiv tiny {ARCH} mtp v{VERSION}",
        file_type=gguf.LlamaFileType.MOSTLY_Q8_0, params=_params(), tokenizer=tokenizer,
        tensors=tensors,
    )  # fmt: skip
