"""Re-scoring on llama-server: the target's rows at given positions, asked of the server itself.

llama-server gives no probabilities for prompt tokens, but ``n_probs: K`` returns, for a generated
token, the top K of the softmax of the *raw* logits row it came from (no sampler applied). So one
``n_predict: 1, n_probs: K`` request per position gives the target's row there, as top-K
log-probabilities (`equiv.engines.base.Rescoring`: ``-inf`` outside those K). How the server
evaluated that row is chosen by the prompt cache and checked in the answer's ``timings``:

- **single-token** (as plain decoding): position 0 is the prompt evaluated cold, as generation
  evaluates it; position i > 0 sends prompt + tokens[:i] with ``cache_prompt: true`` right after
  position i - 1, so the server finds all but the last token in its KV cache and evaluates one
  token (``timings.prompt_n == 1``). One server evaluation of one token per position.
- **batched** (as draft verification): the positions are walked in `BATCH_STRIDE` interleaved
  chains (0, 4, 8, ...; 1, 5, 9, ...): the first of each chain is sent cold, every next one
  extends the cached prefix by `BATCH_STRIDE` tokens, so each row is the last of a batch of at
  least that many tokens on a cached prefix, the shape of verifying a few drafts
  (``timings.prompt_n >= 2``). Sending every position cold (also a batch) costs the whole prefix
  per row: 5-6x the tokens on the default suite.

A sliding-window model (Gemma 3) served without ``--swa-full`` keeps context checkpoints, and
llama-server restores one 4 tokens back instead of extending a cached prefix by one token: such
"single-token" rows come from a 5-token batch. They are still the target's rows, counted in
`RescoreCost.rows_off_path`; ``--server-args --swa-full`` (both servers) makes them single-token.

A single-token row is asked once per context: seeds (and the two paths' samples) that share a
prefix share its rows, so the rows of a context already scored in this run are reused, not asked
again (`RescoreCost.rows_reused`; the last `CACHE_ROWS` contexts are kept). The next row asked
after a reused one finds less of its prefix in the server's cache and may be evaluated as a small
batch; such rows are counted in ``rows_off_path`` like the rest. Batched rows are always asked.

llama-server sends no row for a token that leaves a UTF-8 character unfinished (a byte piece):
where the greedy token of a scoring request is one, the request is sent again with that token
banned by ``logit_bias``. A bias is a sampler; ``n_probs`` reads the raw logits row, so the row
is the same one (the retry's evaluation is checked and counted like any other).

Every answer is checked against the request: ``tokens_evaluated`` must be the prefix's length
(else the answer is for another prompt), the candidates must be real (K of them, probabilities
summing to at most 1). A row the server evaluated otherwise than asked (another request took the
slot's cache) is kept and counted in `RescoreCost.rows_off_path`. Each request's cost (server
time, tokens evaluated, wall time) is added to a per-thread ledger that the runner reads with
`take_cost`, so the results say what re-scoring cost.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from equiv.engines.base import RescoreCost
from equiv.engines.server.http import JsonClient
from equiv.errors import EngineError
from equiv.json_types import JSONDict, JSONObject, json_float, json_int

__all__ = ["BATCH_STRIDE", "CACHE_ROWS", "LlamaRescorer", "scoring_body"]

BATCH_STRIDE = 4  # tokens each batched scoring request evaluates on top of its cached prefix
CACHE_ROWS = 50_000  # single-token rows kept for reuse (K candidates each: a few MB in all)
MAX_BANNED = 4  # the longest UTF-8 character: tokens banned from one scoring request at most


def scoring_body(
    prefix: Sequence[int], *, n_probs: int, cached: bool, banned: Sequence[int] = ()
) -> JSONDict:
    """One scoring request: the row after ``prefix``, top ``n_probs`` of its raw softmax.
    ``banned``: tokens the server may not choose (a bias is a sampler: the raw row is the same)."""
    body: JSONDict = {
        "prompt": [int(t) for t in prefix],
        "n_predict": 1,
        "n_probs": n_probs,
        "post_sampling_probs": False,  # the raw logits row, before any sampler
        "temperature": 0.0,
        "samplers": ["top_k"],
        "top_k": 1,
        "return_tokens": True,
        "cache_prompt": cached,
        "stream": False,
    }
    if banned:
        body["logit_bias"] = [[int(t), False] for t in banned]
    return body


class LlamaRescorer:
    """`equiv.engines.base.Rescoring` over one llama-server's ``/completion``."""

    def __init__(self, client: JsonClient, *, n_vocab: int, n_probs: int) -> None:
        self.client = client
        self.n_vocab = n_vocab
        self.n_probs = n_probs
        self._local = threading.local()
        self._lock = threading.Lock()
        self.total = RescoreCost()
        # the single-token rows asked so far, by their prefix (prompt + tokens before)
        self._rows: OrderedDict[bytes, tuple[list[int], list[float]]] = OrderedDict()

    # -- the ledger --------------------------------------------------------------------------
    def _add(self, cost: RescoreCost) -> None:
        self._local.cost = getattr(self._local, "cost", RescoreCost()) + cost
        with self._lock:
            self.total = self.total + cost

    def take_cost(self) -> RescoreCost:
        """What this thread's re-scoring cost since its previous `take_cost`."""
        cost: RescoreCost = getattr(self._local, "cost", RescoreCost())
        self._local.cost = RescoreCost()
        return cost

    # -- scoring -----------------------------------------------------------------------------
    def rescore(
        self, prompt_tokens: Sequence[int], tokens: Sequence[int], *, batched: bool
    ) -> npt.NDArray[np.float32]:
        """Row i: the target's top-``n_probs`` log-probabilities for ``tokens[i]`` after
        ``prompt_tokens`` + ``tokens[:i]``, ``-inf`` elsewhere (see the module docstring)."""
        if not prompt_tokens:
            raise EngineError("re-scoring needs at least one prompt token")
        rows = np.full((len(tokens), self.n_vocab), -np.inf, dtype=np.float32)
        prompt = [int(t) for t in prompt_tokens]
        n = len(tokens)
        if batched:  # interleaved chains, each extending its cached prefix by BATCH_STRIDE
            order = [
                (i, i >= BATCH_STRIDE)
                for r in range(BATCH_STRIDE)
                for i in range(r, n, BATCH_STRIDE)
            ]
        else:  # the prompt cold, then one token at a time on the cached prefix
            order = [(i, i > 0) for i in range(n)]
        for i, cached in order:
            prefix = prompt + [int(t) for t in tokens[:i]]
            if batched:
                ids, logprobs = self.score(prefix, cached=cached)
            else:
                ids, logprobs = self._single(prefix, cached=cached)
            rows[i, ids] = logprobs
        return rows

    def _single(self, prefix: list[int], *, cached: bool) -> tuple[list[int], list[float]]:
        """The single-token row after ``prefix``: reused where this run has asked it already."""
        key = np.asarray(prefix, dtype=np.int64).tobytes()
        with self._lock:
            known = self._rows.get(key)
            if known is not None:
                self._rows.move_to_end(key)
        if known is not None:
            self._add(RescoreCost(rows=1, rows_reused=1))
            return known
        answer = self.score(prefix, cached=cached, single=cached)
        with self._lock:
            self._rows[key] = answer
            if len(self._rows) > CACHE_ROWS:
                self._rows.popitem(last=False)
        return answer

    def score(
        self, prefix: Sequence[int], *, cached: bool, single: bool = False
    ) -> tuple[list[int], list[float]]:
        """The top candidates of the row after ``prefix``: ``cached`` lets the server reuse its
        cached prefix; ``single`` says one token should be evaluated (else at least two)."""
        url = f"{self.client.base_url}/completion"
        banned: list[int] = []
        while True:
            started = time.perf_counter()
            body = scoring_body(prefix, n_probs=self.n_probs, cached=cached, banned=banned)
            answer = self.client.post("/completion", body)
            wall = time.perf_counter() - started
            unfinished = _rowless_choice(answer)
            if unfinished is None or unfinished in banned or len(banned) >= MAX_BANNED:
                break
            # The server chose a token that leaves a UTF-8 character unfinished and so sent no
            # row (module docstring): ask again with that token banned, for the same raw row.
            banned.append(unfinished)
            self._add(RescoreCost(requests=1, wall_s=wall))
        ids, logprobs, cost = parse_scoring(
            answer, url=url, prefix_len=len(prefix), n_probs=min(self.n_probs, self.n_vocab),
            single=single, wall_s=wall,
        )  # fmt: skip
        self._add(cost)
        bad = [i for i in ids if not 0 <= i < self.n_vocab]
        if bad:
            raise EngineError(
                f"{url} scored token {bad[0]}, outside the target's vocabulary of {self.n_vocab}: "
                "the server does not serve the configured target"
            )
        return ids, logprobs


def _rowless_choice(answer: Any) -> int | None:
    """The token a scoring answer chose without a row of probabilities, if it did."""
    if not isinstance(answer, dict) or answer.get("completion_probabilities"):
        return None
    tokens = answer.get("tokens")
    if isinstance(tokens, list) and len(tokens) == 1 and isinstance(tokens[0], int):
        return tokens[0]
    return None


def parse_scoring(
    data: Any, *, url: str, prefix_len: int, n_probs: int, single: bool, wall_s: float
) -> tuple[list[int], list[float], RescoreCost]:
    """Candidates and cost of one scoring answer, checked against the request; an answer whose
    fields have the wrong type or are missing is an `EngineError` naming the server."""
    try:
        return _parse_scoring(
            data, url=url, prefix_len=prefix_len, n_probs=n_probs, single=single, wall_s=wall_s
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise EngineError(
            f"{url} answered a scoring request with a malformed body ({type(exc).__name__}: "
            f"{exc}; {str(data)[:160]!r}): is it llama-server's /completion?"
        ) from None


def _parse_scoring(
    data: Any, *, url: str, prefix_len: int, n_probs: int, single: bool, wall_s: float
) -> tuple[list[int], list[float], RescoreCost]:
    if not isinstance(data, dict):
        raise EngineError(f"{url} answered a scoring request with {str(data)[:120]!r}")
    evaluated = data.get("tokens_evaluated")
    if evaluated is not None and int(evaluated) != prefix_len:
        raise EngineError(
            f"{url} answered a scoring request for a prompt of {evaluated} tokens, but equiv sent "
            f"{prefix_len}: the answer is for another prefix (a proxy or cache in between?); "
            "re-scoring needs answers for the tokens sent"
        )
    if (chosen := _rowless_choice(data)) is not None:
        raise EngineError(
            f"{url} chose token {chosen} for a scoring request and sent no row of probabilities "
            "for it. llama-server sends none for a token that leaves a UTF-8 character "
            f"unfinished, and equiv asks again with such a token banned ({MAX_BANNED} times at "
            "most); a server that sends no row whatever it chooses cannot re-score (a "
            "llama-server build without n_probs, or an endpoint that is not llama-server's "
            "/completion)"
        )
    probs = data.get("completion_probabilities")
    entry = probs[0] if isinstance(probs, list) and probs else None
    candidates = entry.get("top_logprobs") if isinstance(entry, dict) else None
    if not isinstance(candidates, list) or len(candidates) < min(n_probs, 2):
        raise EngineError(
            f"{url} returned no top-{n_probs} log-probabilities for a scoring request "
            f"({str(data)[:160]!r}): this server cannot re-score (a llama-server build without "
            "n_probs, or an endpoint that is not llama-server's /completion)"
        )
    ids = [int(c["id"]) for c in candidates]
    logprobs = [-math.inf if c.get("logprob") is None else float(c["logprob"]) for c in candidates]
    if sum(math.exp(lp) for lp in logprobs) > 1.0 + 1e-3 or len(set(ids)) != len(ids):
        raise EngineError(
            f"{url} returned placeholder probabilities for a scoring request (they sum above 1 "
            "or repeat a token): no evidence to score with"
        )
    raw = data.get("timings")
    timings: JSONObject = raw if isinstance(raw, dict) else {}
    prompt_n = json_int(timings.get("prompt_n", -1))
    cache_n = json_int(timings.get("cache_n", 0))
    on_path = prompt_n == 1 if single else prompt_n != 1  # a cold 1-token prompt is fine too
    cost = RescoreCost(
        requests=1,
        rows=1,
        tokens_evaluated=max(prompt_n, 0),
        tokens_cached=cache_n,
        server_s=(
            json_float(timings.get("prompt_ms", 0.0)) + json_float(timings.get("predicted_ms", 0.0))
        )
        / 1000,
        wall_s=wall_s,
        rows_off_path=0 if on_path or prefix_len == 1 else 1,
    )
    return ids, logprobs, cost
