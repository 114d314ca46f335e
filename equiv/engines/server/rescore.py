"""Re-scoring on llama-server: the target's rows at given positions, asked of the server itself.

llama-server gives no probabilities for prompt tokens, but ``n_probs: K`` returns, for a generated
token, the top K of the softmax of the *raw* logits row it came from (no sampler applied), as
top-K log-probabilities (`equiv.engines.base.Rescoring`: ``-inf`` outside those K). How the
server evaluated each row is chosen by the request:

- **single-token** (as plain decoding), by *forced decoding*: one request per sample sends the
  prompt cold with ``n_predict`` = the sample's length, temp 0 and a grammar of the sample's
  token IDs (``root ::= <[t0]> <[t1]> ...``, llama.cpp's token grammar), so the server emits
  exactly the sample, evaluating the prompt as generation does and then one token at a time.
  A grammar is a sampler: the rows ``n_probs`` reads are the raw ones. Every row is then the row
  generation computed at that position, bit for bit where the server ran one request at a time
  (the same evaluations in the same order; `tests/engines/server/test_rescore_server.py`),
  whatever the model's caches. A row cannot be asked for a context alone: it is generation's
  only if every token before it was evaluated as generation did, so a sample is decoded whole
  from the prompt, and rows are reused only where every row of a sample is known already
  (`RescoreCost.rows_reused`; the last `CACHE_ROWS` contexts are kept). A server that refuses
  the grammar (HTTP 4xx) is asked one position at a time instead, each on the cached prefix
  of the one before (older builds; on Gemma 3 without ``--swa-full`` llama-server then
  restores a checkpoint 4 tokens back, and such rows, counted in `RescoreCost.rows_off_path`,
  come from a 5-token batch).
- **batched** (as draft verification): one ``n_predict: 1`` request per position, walked in
  `BATCH_STRIDE` interleaved chains (0, 4, 8, ...; 1, 5, 9, ...): the first of each chain is sent
  cold, every next one extends the cached prefix by `BATCH_STRIDE` tokens, so each row is the
  last of a batch of at least that many tokens on a cached prefix, the shape of verifying a few
  drafts (``timings.prompt_n >= 2``). Sending every position cold (also a batch) costs the whole
  prefix per row: 5-6x the tokens on the default suite. Batched rows are always asked.

llama-server sends no row for a token that leaves a UTF-8 character unfinished (a byte piece):
such a position of a decoded sample is asked on its own, and where the greedy token of a
one-position request is one, the request is sent again with that token banned by
``logit_bias``. A bias is a sampler; ``n_probs`` reads the raw logits row, so the row
is the same one (the retry's evaluation is checked and counted like any other).

Every answer is checked against the request: ``tokens_evaluated`` must be the prefix's length
(else the answer is for another prompt), the candidates must be real (K of them, probabilities
summing to at most 1). A row the server evaluated otherwise than asked (another request took the
slot's cache) is kept and counted in `RescoreCost.rows_off_path`. Each request's cost (server
time, tokens evaluated, wall time) is added to a per-thread ledger that the runner reads with
`take_cost`, so the results say what re-scoring cost.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from equiv.engines.base import RescoreCost
from equiv.engines.server.http import HttpStatusError, JsonClient
from equiv.engines.server.rescore_answers import (
    MAX_BANNED,
    Row,
    parse_forced,
    parse_scoring,
    rowless_choice,
)
from equiv.errors import EngineError
from equiv.json_types import JSONDict

__all__ = ["BATCH_STRIDE", "CACHE_ROWS", "LlamaRescorer", "scoring_body"]

#: What llama-server's error says where a forced sample left its token grammar.
GRAMMAR_FAILED = "grammar stack"
BATCH_STRIDE = 4  # tokens each batched scoring request evaluates on top of its cached prefix
CACHE_ROWS = 50_000  # single-token rows kept for reuse (K candidates each: a few MB in all)


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
        self.forced = True  # single-token rows by forced decoding (off: the server refused it)
        # tokens a forced sample cannot end on in the grammar (end-of-generation tokens: the
        # grammar never matches them), learned as the run meets them
        self._free_last: set[int] = set()
        # the single-token rows asked so far, by their prefix (prompt + tokens before)
        self._rows: OrderedDict[bytes, Row] = OrderedDict()

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
        if not batched and self.forced:
            for i, (ids, logprobs) in enumerate(self._decoded(prompt, [int(t) for t in tokens])):
                rows[i, ids] = logprobs
            return rows
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

    def _decoded(self, prompt: list[int], tokens: list[int]) -> list[Row]:
        """Single-token rows by forced decoding (module docstring): rows asked before in this
        run are reused where every row of ``tokens`` is known; else one request decodes all of
        them from the prompt, because a row is generation's only if every token before it was
        evaluated as generation evaluated it (one at a time after the prompt)."""
        keys = [_key(prompt + tokens[:i]) for i in range(len(tokens))]
        with self._lock:
            known = [self._rows.get(key) for key in keys]
        if all(row is not None for row in known):
            self._add(RescoreCost(rows=len(keys), rows_reused=len(keys)))
            return [row for row in known if row is not None]
        free_last = tokens[-1] in self._free_last
        got: list[Row | None] | None
        try:
            got = self._force(prompt, tokens, free_last=free_last)
        except HttpStatusError as exc:  # a server without token grammars: one row a request
            if exc.status >= 500 and GRAMMAR_FAILED not in str(exc):
                raise
            # 4xx: no token grammars at all; 5xx naming the grammar: the sample's last token
            # is one the grammar cannot match (an end-of-generation token), or llama-server
            # sampled a token outside it (seen: <pad>, ID 0): forced again with the last
            # token left to the server (unless it was), then this sample a position at a time
            retry = exc.status >= 500 and not free_last
            got = self._force_free_last(prompt, tokens) if retry else None
            if got is None:
                self.forced = self.forced and exc.status >= 500
                return [self._single(prompt + tokens[:i], cached=i > 0) for i in range(len(tokens))]
        rows = []
        for i, key in enumerate(keys):
            row = got[i] if i < len(got) else None
            if row is None:  # none in the answer (a byte piece): asked on its own, off the path
                row = self._single(prompt + tokens[:i], cached=True)
            self._keep(key, row)
            rows.append(row)
        return rows

    def _force_free_last(self, prefix: list[int], rest: list[int]) -> list[Row | None] | None:
        """`_force` with the grammar ending before ``rest``'s last token: a sample that ends on
        an end-of-generation token (which llama.cpp's grammar sampler never matches: it allows
        one only once the grammar is complete, `llama_grammar_apply_impl`). The last row is the
        raw row after the forced tokens whichever token the server then emits. None where this
        fails on the grammar too; a token it worked for is remembered."""
        try:
            got = self._force(prefix, rest, free_last=True)
        except HttpStatusError as exc:
            if exc.status >= 500 and GRAMMAR_FAILED in str(exc):
                return None
            raise
        with self._lock:
            self._free_last.add(rest[-1])
        return got

    def _force(self, prefix: list[int], rest: list[int], *, free_last: bool) -> list[Row | None]:
        """Rows of ``rest`` after ``prefix``, decoded one token at a time as generation does
        (``prefix`` evaluated cold, each next token on its own): llama-server made to emit
        exactly ``rest`` by a grammar of token IDs, at temp 0; ``n_probs`` reads the raw rows, which
        a grammar (a sampler) does not touch. ``free_last``: the grammar stops before the last
        token (`_force_free_last`). Entries stop where the answer stops following ``rest``; a
        token without a row (a byte piece, `rows_of_tokens`) has None."""
        url = f"{self.client.base_url}/completion"
        body = scoring_body(prefix, n_probs=self.n_probs, cached=False)
        body["n_predict"] = len(rest)
        forced = rest[:-1] if free_last else rest
        if forced:
            body["grammar"] = "root ::= " + " ".join(f"<[{t}]>" for t in forced)
        started = time.perf_counter()
        answer = self.client.post("/completion", body)
        wall = time.perf_counter() - started
        got, cost = parse_forced(
            answer, url=url, prefix_len=len(prefix), rest=rest,
            n_probs=min(self.n_probs, self.n_vocab), wall_s=wall,
        )  # fmt: skip
        self._add(cost)
        for row in got:
            if row is not None:
                self._check_vocab(url, row[0])
        return got

    def _check_vocab(self, url: str, ids: Sequence[int]) -> None:
        """Refuse candidates outside the target's vocabulary: another model answered."""
        bad = [i for i in ids if not 0 <= i < self.n_vocab]
        if bad:
            raise EngineError(
                f"{url} scored token {bad[0]}, outside the target's vocabulary of {self.n_vocab}: "
                "the server does not serve the configured target"
            )

    def _keep(self, key: bytes, row: Row) -> None:
        with self._lock:
            self._rows[key] = row
            if len(self._rows) > CACHE_ROWS:
                self._rows.popitem(last=False)

    def _single(self, prefix: list[int], *, cached: bool) -> Row:
        """The single-token row after ``prefix``: reused where this run has asked it already."""
        key = _key(prefix)
        with self._lock:
            known = self._rows.get(key)
            if known is not None:
                self._rows.move_to_end(key)
        if known is not None:
            self._add(RescoreCost(rows=1, rows_reused=1))
            return known
        answer = self.score(prefix, cached=cached, single=cached)
        self._keep(key, answer)
        return answer

    def score(self, prefix: Sequence[int], *, cached: bool, single: bool = False) -> Row:
        """The top candidates of the row after ``prefix``: ``cached`` lets the server reuse its
        cached prefix; ``single`` says one token should be evaluated (else at least two)."""
        url = f"{self.client.base_url}/completion"
        banned: list[int] = []
        while True:
            started = time.perf_counter()
            body = scoring_body(prefix, n_probs=self.n_probs, cached=cached, banned=banned)
            answer = self.client.post("/completion", body)
            wall = time.perf_counter() - started
            unfinished = rowless_choice(answer)
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
        self._check_vocab(url, ids)
        return ids, logprobs


def _key(prefix: Sequence[int]) -> bytes:
    """A context's key in the row cache."""
    return np.asarray(prefix, dtype=np.int64).tobytes()
