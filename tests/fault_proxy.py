"""A faulty server, for proof: an HTTP proxy in front of a real llama-server that corrupts its
generations as real speculative-decoding bugs would, so equiv can be shown to catch them over
HTTP alone.

- ``swap`` (temp 0, a relaxed acceptance): at the first position whose row has a runner-up
  trailing the top token by at least ``min_gap`` log-probabilities, the emitted token is replaced
  by that runner-up and the server continues from there (a second request for the rest).
- ``greedy`` (temp > 0, a greedy-ish verifier): at each position whose row the server reported
  (llama-server sends none for the tokens of a speculative step), with probability ``rate`` the
  sampled token is replaced by the row's top token, and the server continues from there.
- ``wrong_temp`` (temp > 0, a sampler at the wrong temperature): at each position whose row the
  server reported, the token is drawn again from that row's candidates at ``temp`` instead of the
  request's temperature (as a verifier that applies the temperature twice, or not at all, would);
  where the draw differs from the server's token, the server continues from there.
- ``fail`` (a server that breaks mid-run): the first ``after`` generations pass unchanged, every
  later one is answered HTTP 500 with llama-server's error shape and the message vLLM's CPU
  build gave when its speculative engine died (``index 262144 is out of bounds ...``).

Every other request (``/props``, ``/tokenize``, scoring requests with ``n_predict: 1``) passes
through unchanged. The proxy rebuilds ``tokens``, ``completion_probabilities`` and ``content`` so
the answer is self-consistent: only the tokens' distribution is wrong.
"""

from __future__ import annotations

import http.client
import json
import math
import random
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from equiv.engines.server.api import rows_of_tokens
from equiv.errors import EngineError

__all__ = ["FaultProxy"]

_FAULTS = (None, "swap", "greedy", "wrong_temp", "fail")
_FAILURE = "index 262144 is out of bounds for dimension 1 with size 262144"


class FaultProxy:
    """``FaultProxy(upstream, fault="swap" | "greedy" | "wrong_temp" | None)``; ``url`` once
    started."""

    def __init__(
        self,
        upstream: str,
        *,
        fault: str | None,
        rate: float = 0.5,
        min_gap: float = 2.0,
        temp: float = 0.4,
        after: int = 0,
    ) -> None:
        if fault not in _FAULTS:
            raise ValueError(f"fault {fault!r} is not one of {_FAULTS}")
        parts = urlsplit(upstream)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.fault = fault
        self.rate = rate
        self.min_gap = min_gap
        self.temp = temp
        self.after = after
        self.generations = 0  # generation requests seen
        self.faults = 0  # tokens replaced (or, for fail, requests refused) so far
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                status, body = proxy._forward("GET", self.path, None)
                self._reply(status, body)

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status, body = proxy._handle(self.path, raw)
                self._reply(status, body)

            def _reply(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- forwarding --------------------------------------------------------------------------
    def _forward(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=600)
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def _complete(self, request: dict[str, Any]) -> dict[str, Any]:
        status, body = self._forward("POST", "/completion", json.dumps(request).encode())
        if status != 200:
            raise RuntimeError(f"upstream answered {status}: {body[:200]!r}")
        answer: dict[str, Any] = json.loads(body)
        return answer

    def _handle(self, path: str, raw: bytes) -> tuple[int, bytes]:
        request = json.loads(raw) if raw else {}
        generation = path == "/completion" and int(request.get("n_predict", 0)) > 1
        if self.fault is None or not generation:
            return self._forward("POST", path, raw)
        if self.fault == "fail":
            with self._lock:
                self.generations += 1
                if self.generations <= self.after:
                    return self._forward("POST", path, raw)
                self.faults += 1
            error = {"code": 500, "type": "server_error", "message": _FAILURE}
            return 500, json.dumps({"error": error}).encode()
        answer = self._corrupt(request)
        return 200, json.dumps(answer).encode()

    # -- the faults --------------------------------------------------------------------------
    def _corrupt(self, request: dict[str, Any]) -> dict[str, Any]:
        answer = self._complete(request)
        rng = random.Random(int(request.get("seed", 0)) * 7919 + len(request["prompt"]))
        i = 0
        rows = _rows(answer)  # llama-server sends no row for some byte pieces
        while rows is not None and i < len(answer.get("tokens", [])):
            j = rows[i]
            candidates = [] if j is None else _candidates(answer["completion_probabilities"][j])
            replacement = None
            if len(candidates) >= 2:
                top, runner_up = candidates[0], candidates[1]
                token = answer["tokens"][i]
                if (
                    self.fault == "swap"
                    and token == top[0]
                    and top[1] - runner_up[1] >= self.min_gap
                ):
                    replacement = runner_up
                elif self.fault == "greedy" and token != top[0] and rng.random() < self.rate:
                    replacement = top
                elif self.fault == "wrong_temp":
                    drawn = _draw(candidates, self.temp, rng)
                    replacement = drawn if drawn[0] != token else None
            if replacement is not None:
                answer, rows = self._continue(request, answer, rows, i, replacement)
                with self._lock:
                    self.faults += 1
                if self.fault == "swap":
                    break
            i += 1
        return answer

    def _continue(
        self,
        request: dict[str, Any],
        answer: dict[str, Any],
        rows: list[int | None],
        i: int,
        token: tuple[int, float],
    ) -> tuple[dict[str, Any], list[int | None] | None]:
        """``answer`` with token i replaced by ``token`` and the rest generated after it, with
        each token's row in it (the rows of the rest None where they cannot be placed: the
        proxy corrupts no further, and equiv places them with the tokens' bytes)."""
        probs = answer["completion_probabilities"]
        entry = dict(probs[rows[i]])  # a replaced token has a row
        chosen = next(c for c in entry["top_logprobs"] if int(c["id"]) == token[0])
        entry.update(id=token[0], token=chosen["token"], bytes=chosen.get("bytes"))
        entry["logprob"] = token[1]
        head_tokens = [*answer["tokens"][:i], token[0]]
        head_probs = [*(probs[j] for j in rows[:i] if j is not None), entry]
        numbered = iter(range(len(head_probs)))  # the head keeps only its rows, in order
        head_rows = [None if j is None else next(numbered) for j in rows[:i]] + [next(numbered)]
        at = len(head_probs)
        remaining = int(request["n_predict"]) - len(head_tokens)
        out = dict(answer)  # the original timings (draft counts) are kept
        out["stop_type"] = "limit"
        tail_tokens: list[int] = []
        tail_probs: list[dict[str, Any]] = []
        tail_rows: list[int | None] | None = []
        if remaining > 0:
            follow = dict(request, prompt=[*request["prompt"], *head_tokens], n_predict=remaining)
            rest = self._complete(follow)
            tail_tokens = list(rest.get("tokens", []))
            tail_probs = list(rest.get("completion_probabilities", []))
            out["stop_type"] = rest.get("stop_type", "limit")
            tail_rows = _rows(rest)
        out["tokens"] = head_tokens + tail_tokens
        out["completion_probabilities"] = head_probs + tail_probs
        out["content"] = "".join(_text(p) for p in out["completion_probabilities"])
        if tail_rows is None:
            return out, None
        return out, head_rows + [None if j is None else j + at for j in tail_rows]


def _rows(answer: dict[str, Any]) -> list[int | None] | None:
    """Each token's row in ``answer`` (None: the server sent it none), matched by ID; None
    where two byte pieces share an ID and the rows fit either (only the tokens' bytes tell,
    and the proxy has none: it passes the answer on uncorrupted, as the server sent it)."""
    ids = [int(p["id"]) for p in answer.get("completion_probabilities", [])]
    try:
        return rows_of_tokens(answer.get("tokens", []), ids, url="upstream")
    except EngineError:
        return None


def _candidates(entry: dict[str, Any]) -> list[tuple[int, float]]:
    """A row's real candidates, best first; none for a placeholder (speculative-step token)."""
    pairs = [
        (int(c["id"]), float(c["logprob"]))
        for c in entry.get("top_logprobs") or []
        if c.get("logprob") is not None
    ]
    if len(pairs) < 2 or sum(2.718281828459045**lp for _, lp in pairs) > 1.001:
        return []
    return sorted(pairs, key=lambda p: -p[1])


def _draw(
    candidates: list[tuple[int, float]], temp: float, rng: random.Random
) -> tuple[int, float]:
    """One candidate drawn with weights ``exp(logprob / temp)``."""
    best = candidates[0][1]
    weights = [math.exp((lp - best) / temp) for _, lp in candidates]
    return rng.choices(candidates, weights=weights)[0]


def _text(entry: dict[str, Any]) -> str:
    raw = entry.get("bytes")
    if isinstance(raw, list):
        return bytes(raw).decode("utf-8", errors="replace")
    return str(entry.get("token", ""))
