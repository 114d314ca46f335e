"""Re-scoring on vLLM and SGLang: the target's rows for given tokens, in one request per call.

- **vLLM**: ``/v1/completions`` with ``prompt_logprobs: K`` (a vLLM extension of the body) and
  ``max_tokens: 1``. ``choices[0].prompt_logprobs`` has one entry per prompt token: ``null`` for
  the first, then ``{"<token id>": {"logprob", "rank", "decoded_token"}}`` holding the top K of
  the row that predicts that token *and* the token itself. K is capped by the server's
  ``--max-logprobs`` (default 20); such requests skip the prefix cache.
- **SGLang**: ``/generate`` with ``input_ids``, ``return_logprob: true``, ``logprob_start_len``
  and ``top_logprobs_num: K``. ``meta_info.input_token_logprobs`` lists ``[logprob, token id,
  text]`` for the input tokens from the start position to the last, and
  ``meta_info.input_top_logprobs`` the top K ``[logprob, token id, text]`` of each of their rows.
  Entries are aligned from the end (the last entry is the last input token), and every echoed id
  is checked against the tokens sent.

Both evaluate the whole sequence in one prefill: every row is *batched* (as verification
computes it). Neither server can evaluate a given token one at a time on request, so
``batched=False`` returns the same prefill rows and says so in `OpenAIRescorer.single_token`
(False): for the sampling tests (a sample's likelihood under the target) prefill rows differ
from decode rows by numeric drift only; the temp-0 rule takes its single-token rows from the
baseline's own generation.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from equiv.engines.base import RescoreCost
from equiv.engines.server.http import HttpStatusError, JsonClient
from equiv.errors import ConfigError, EngineError
from equiv.json_types import JSONDict

__all__ = ["OpenAIRescorer", "detect_openai_scorer", "sglang_body", "vllm_body"]

Candidates = list[tuple[int, float]]


def vllm_body(model: str, tokens: Sequence[int], k: int) -> JSONDict:
    return {
        "model": model,
        "prompt": [int(t) for t in tokens],
        "max_tokens": 1,
        "temperature": 0.0,
        "prompt_logprobs": k,
        "stream": False,
    }


def sglang_body(tokens: Sequence[int], start: int, k: int) -> JSONDict:
    return {
        "input_ids": [int(t) for t in tokens],
        "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
        "return_logprob": True,
        "logprob_start_len": start,
        "top_logprobs_num": k,
        "stream": False,
    }


def _logprob(value: Any) -> float:
    return -math.inf if value is None else float(value)


def parse_vllm(data: Any, *, url: str, tokens: Sequence[int]) -> list[Candidates]:
    """Per input position p >= 1, the candidates of the row that predicts ``tokens[p]``."""
    choices = data.get("choices") if isinstance(data, dict) else None
    entries = (
        choices[0].get("prompt_logprobs") if choices and isinstance(choices[0], dict) else None
    )
    if not isinstance(entries, list):
        raise EngineError(
            f"{url} returned no choices[0].prompt_logprobs: this OpenAI-compatible server "
            "cannot score given tokens (vLLM can; others need --server-api llama or SGLang)"
        )
    if len(entries) != len(tokens):
        raise EngineError(
            f"{url} scored {len(entries)} prompt tokens, equiv sent {len(tokens)}: the answer is "
            "for another prefix"
        )
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    if usage.get("prompt_tokens") not in (None, len(tokens)):
        raise EngineError(
            f"{url} says the prompt had {usage['prompt_tokens']} tokens, equiv sent "
            f"{len(tokens)}: the answer is for another prefix"
        )
    out: list[Candidates] = [[]]
    for p, entry in enumerate(entries[1:], start=1):
        if not isinstance(entry, dict) or str(tokens[p]) not in entry:
            raise EngineError(
                f"{url} scored position {p} without the token equiv sent there ({tokens[p]}): "
                "the answer is for another prefix or model"
            )
        out.append(
            [(int(tid), _logprob(v.get("logprob") if isinstance(v, dict) else v))
             for tid, v in entry.items()]
        )  # fmt: skip
    return out


def parse_sglang(data: Any, *, url: str, tokens: Sequence[int]) -> list[Candidates]:
    """Per input position, the candidates of its row ([] where the server sent none)."""
    meta = data.get("meta_info") if isinstance(data, dict) else None
    echoed = meta.get("input_token_logprobs") if isinstance(meta, dict) else None
    tops = meta.get("input_top_logprobs") if isinstance(meta, dict) else None
    if not isinstance(echoed, list) or not isinstance(tops, list) or len(tops) != len(echoed):
        raise EngineError(
            f"{url} returned no meta_info.input_token_logprobs / input_top_logprobs: this "
            "server cannot score given tokens (SGLang's /generate with return_logprob can)"
        )
    if isinstance(meta, dict) and meta.get("prompt_tokens") not in (None, len(tokens)):
        raise EngineError(
            f"{url} says the input had {meta['prompt_tokens']} tokens, equiv sent "
            f"{len(tokens)}: the answer is for another prefix"
        )
    first = len(tokens) - len(echoed)
    out: list[Candidates] = [[] for _ in tokens]
    for e, (entry, top) in enumerate(zip(echoed, tops, strict=True)):
        p = first + e
        if p < 0 or not isinstance(entry, list) or int(entry[1]) != int(tokens[p]):
            raise EngineError(
                f"{url} echoed token {entry[1] if isinstance(entry, list) else entry!r} at "
                f"position {p}, equiv sent {tokens[p] if p >= 0 else None}: the answer is for "
                "another prefix or model"
            )
        pairs = [(int(c[1]), _logprob(c[0])) for c in top or []]
        if entry[0] is not None:
            pairs.append((int(entry[1]), _logprob(entry[0])))
        out[p] = pairs
    return out


class OpenAIRescorer:
    """`equiv.engines.base.Rescoring` over vLLM's or SGLang's scoring request."""

    single_token = False  # prefill rows only: see the module docstring

    def __init__(
        self, client: JsonClient, *, kind: str, model: str, n_vocab: int, n_probs: int
    ) -> None:
        if kind not in ("vllm", "sglang"):
            raise ValueError(f"kind {kind!r} is not 'vllm' or 'sglang'")
        self.client = client
        self.kind = kind
        self.model = model
        self.n_vocab = n_vocab
        self.n_probs = n_probs
        self.total = RescoreCost()

    def take_cost(self) -> RescoreCost:
        cost, self.total = self.total, RescoreCost()
        return cost

    def candidates(self, tokens: Sequence[int], start: int) -> list[Candidates]:
        """One request: the candidates of every row of ``tokens`` from ``start`` on."""
        url = f"{self.client.base_url}{'/v1/completions' if self.kind == 'vllm' else '/generate'}"
        started = time.perf_counter()
        try:
            if self.kind == "vllm":
                data = self.client.post(
                    "/v1/completions", vllm_body(self.model, tokens, self.n_probs)
                )
                rows = parse_vllm(data, url=url, tokens=tokens)
            else:
                data = self.client.post("/generate", sglang_body(tokens, start, self.n_probs))
                rows = parse_sglang(data, url=url, tokens=tokens)
        except HttpStatusError as exc:
            if exc.status == 400 and "logprob" in str(exc).lower():
                # a setting of the server, not a missing capability: re-scoring quietly off
                # would cost every verdict its evidence, so the run stops here with the fix
                raise ConfigError(
                    f"{url} refused {self.n_probs} log-probabilities per row ({exc}); vLLM caps "
                    f"them at --max-logprobs (default 20): restart it with --max-logprobs "
                    f"{self.n_probs}, or lower --top-k / --top-k-record"
                ) from None
            raise
        self.total = self.total + RescoreCost(
            requests=1, rows=len(tokens) - start, tokens_evaluated=len(tokens),
            wall_s=time.perf_counter() - started,
        )  # fmt: skip
        return rows

    def rescore(
        self, prompt_tokens: Sequence[int], tokens: Sequence[int], *, batched: bool
    ) -> npt.NDArray[np.float32]:
        if not prompt_tokens:
            raise EngineError("re-scoring needs at least one prompt token")
        sequence = [*prompt_tokens, *tokens]
        rows = np.full((len(tokens), self.n_vocab), -np.inf, dtype=np.float32)
        if not tokens:
            return rows
        start = len(prompt_tokens)
        found = self.candidates(sequence, start - 1)
        for i in range(len(tokens)):
            pairs = found[start + i]
            if not pairs:
                raise EngineError(
                    f"the {self.kind} server sent no log-probabilities for position {start + i}"
                )
            ids = [t for t, _ in pairs if 0 <= t < self.n_vocab]
            rows[i, ids] = [lp for t, lp in pairs if 0 <= t < self.n_vocab]
        return rows


def detect_openai_scorer(
    client: JsonClient, *, model: str, probe: Sequence[int], n_vocab: int, n_probs: int
) -> tuple[OpenAIRescorer | None, str]:
    """vLLM's or SGLang's scoring, whichever the server answers (one probe each); else None,
    and why."""
    reasons = []
    for kind in ("vllm", "sglang"):
        scorer = OpenAIRescorer(client, kind=kind, model=model, n_vocab=n_vocab, n_probs=n_probs)
        try:
            scorer.candidates(list(probe), max(len(probe) - 2, 0))
        except EngineError as exc:
            reasons.append(f"{kind}: {str(exc).splitlines()[0][:160]}")
            continue
        scorer.take_cost()
        return scorer, f"{kind} scoring ({'prompt_logprobs' if kind == 'vllm' else '/generate'})"
    return None, "no scoring request answered (" + "; ".join(reasons) + ")"
