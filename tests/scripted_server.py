"""The scripted llama-server of the server engine's contract tests: a stdlib HTTP server on
127.0.0.1 whose replies each test scripts (`FakeServer`), its answers (`_json`, `_completion`,
`_vllm_answer`), and two ``--help`` texts of llama-server builds (`NEW_HELP`, `OLD_HELP`).
Shared by tests/engines/server/test_engine_server.py, test_served_models.py and
test_spec_types.py."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = tuple[int, str, bytes]  # status, content type, body


def _json(data: Any, status: int = 200) -> Reply:
    return status, "application/json", json.dumps(data).encode()


def _completion(tokens: list[int], *, draft: tuple[int, int] | None = None) -> dict[str, Any]:
    timings: dict[str, Any] = {"prompt_ms": 5.0, "predicted_ms": 20.0}
    if draft:
        timings.update(draft_n=draft[0], draft_n_accepted=draft[1])
    return {
        "content": "".join(f"tok{t}" for t in tokens),
        "tokens": tokens,
        "stop_type": "limit",
        "truncated": False,
        "timings": timings,
        "completion_probabilities": [
            {
                "id": t,
                "token": f"tok{t}",
                "bytes": list(f"tok{t}".encode()),
                "logprob": -0.1,
                "top_logprobs": [
                    {"id": t + 1, "token": "x", "logprob": -3.0},
                    {"id": t, "token": f"tok{t}", "logprob": -0.1},
                    {"id": 7, "token": "y", "logprob": None},
                ],
            }
            for t in tokens
        ],
    }


class FakeServer:
    """A llama-server look-alike; ``script[path]`` is a list of replies (the last one repeats)."""

    def __init__(self, model_path: str, *, n_ctx: int = 2048, n_vocab: int = 40) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.delay_s = 0.0
        self._lock = threading.Lock()
        self.script: dict[str, list[Reply | Callable[[Any], Reply]]] = {
            "/props": [
                _json(
                    {
                        "default_generation_settings": {"n_ctx": n_ctx, "params": {}},
                        "model_path": model_path,
                        "total_slots": 4,
                        "build_info": "b0-fake",
                    }
                )
            ],
            "/v1/models": [_json({"data": [{"id": "fake", "meta": {"n_vocab": n_vocab}}]})],
            "/tokenize": [_json({"tokens": [{"id": 1, "piece": "<s>"}, {"id": 9, "piece": "a"}]})],
            "/completion": [_json(_completion([5, 6, 7]))],
        }
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                path = self.path
                with fake._lock:
                    fake.calls.append((path, body))
                    fake.in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                    replies = fake.script.get(path, [(404, "text/plain", b"not found")])
                    reply = replies.pop(0) if len(replies) > 1 else replies[0]
                time.sleep(fake.delay_s)
                with fake._lock:
                    fake.in_flight -= 1
                if callable(reply):
                    reply = reply(body)
                status, ctype, data = reply
                if status == 0:  # drop the connection without an answer
                    self.close_connection = True
                    return
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                short = ctype.endswith("; short")  # promise more bytes than are sent
                self.send_header("Content-Length", str(len(data) + (7 if short else 0)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _reply

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def paths(self) -> list[str]:
        return [p for p, _ in self.calls]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _vllm_answer(tokens: list[str]) -> dict[str, Any]:
    return {
        "choices": [
            {
                "text": "".join(tokens),
                "finish_reason": "length",
                "logprobs": {
                    "tokens": tokens,
                    "token_logprobs": [-0.5] * len(tokens),
                    "top_logprobs": [{t: -0.5, "zz": -2.0} for t in tokens],
                },
            }
        ]
    }


NEW_HELP = """
-fa, --flash-attn [on|off|auto]   set Flash Attention use
--spec-draft-model, -md, --model-draft FNAME
--spec-type [none|draft-simple|ngram-simple]
--spec-draft-n-max N
--spec-draft-n-min N
--spec-draft-p-min, --draft-p-min P
--no-ui, --no-webui
"""
OLD_HELP = """
-fa, --flash-attn    enable Flash Attention
-md, --model-draft FNAME
--draft-max, --draft, --draft-n N
--draft-min, --draft-n-min N
--draft-p-min P
"""
