"""A small JSON-over-HTTP client for the server engine: standard library only.

One fresh connection per request (generation takes far longer than a connect, and no pooled
connection can go stale). Retried, with exponential backoff, a bounded number of times: HTTP 502,
503 (a server still loading its model, or busy) and 504, refused and reset connections (a URL
that never answered is given up after two refusals: a typo, not a busy server). Not retried:
timeouts (a retry would double a long wait), unknown hosts, other HTTP errors. Every
failure is an `EngineError` (exit code 6) that names the URL and the way out; a body that is an
HTML page or truncated JSON is reported as such, never as a JSON traceback.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from equiv.errors import ConfigError, EngineError
from equiv.json_types import JSONObject

__all__ = ["HttpStatusError", "JsonClient", "normalize_url"]

_RETRY_STATUS = frozenset({502, 503, 504})
_RETRY_AFTER_CAP_S = 30.0


class HttpStatusError(EngineError):
    """The server answered with an HTTP error status (``status``)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def normalize_url(url: str, *, option: str) -> str:
    """``http(s)://host[:port][/prefix]`` without a trailing ``/`` or ``/v1``."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"{option} {url!r} is not an http(s) URL; give the server's root, "
            "e.g. http://127.0.0.1:8080"
        )
    path = re.sub(r"(/v1)?/*$", "", parts.path)
    return f"{parts.scheme}://{parts.netloc}{path}"


def _html_title(text: str) -> str:
    match = re.search(r"<title[^>]*>(.*?)</title>", text, re.IGNORECASE | re.DOTALL)
    snippet = match.group(1) if match else re.sub(r"<[^>]+>", " ", text)
    return " ".join(snippet.split())[:120]


class JsonClient:
    """GET/POST JSON to one server; ``role`` ('baseline', 'speculative') names it in errors."""

    def __init__(
        self,
        base_url: str,
        *,
        role: str,
        timeout_s: float = 600.0,
        retries: int = 4,
        backoff_s: float = 0.25,
        alive: Callable[[], bool] | None = None,
    ) -> None:
        self.base_url = base_url
        self.role = role
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.alive = alive  # False: the server process is gone, retrying is pointless
        parts = urlsplit(base_url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._prefix = parts.path
        self._answered = False  # once a server has answered, a refused connection means it died

    def get(self, path: str) -> Any:
        return self._request("GET", path, None)

    def post(self, path: str, body: JSONObject) -> Any:
        return self._request("POST", path, body)

    def get_text(self, path: str) -> str | None:
        """A plain-text page (Prometheus ``/metrics``), asked once; None where the server has
        none or does not answer (a missing page is a missing capability, not a failure)."""
        try:
            status, _ctype, data, _retry = self._once("GET", path, None)
        except (OSError, http.client.HTTPException):
            return None
        return data.decode("utf-8", errors="replace") if status == 200 else None

    # -- internals ---------------------------------------------------------------------------
    def _connection(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        return cls(self._host, self._port, timeout=self.timeout_s)

    def _once(self, method: str, path: str, payload: bytes | None) -> tuple[int, str, bytes, str]:
        conn = self._connection()
        try:
            headers = {"Accept": "application/json"}
            if payload is not None:
                headers["Content-Type"] = "application/json"
            conn.request(method, self._prefix + path, body=payload, headers=headers)
            resp = conn.getresponse()
            try:
                data = resp.read()
            except http.client.IncompleteRead as exc:
                data = exc.partial  # parsed below: reported as truncated JSON
            return (
                resp.status,
                resp.getheader("Content-Type", ""),
                data,
                resp.getheader("Retry-After", ""),
            )
        finally:
            conn.close()

    def _request(self, method: str, path: str, body: JSONObject | None) -> Any:
        url = self.base_url + path
        payload = None if body is None else json.dumps(body).encode("utf-8")
        last: str = ""
        for attempt in range(self.retries + 1):
            delay = self.backoff_s * 2**attempt
            try:
                status, ctype, data, retry_after = self._once(method, path, payload)
            except TimeoutError:
                raise EngineError(
                    f"the {self.role} server at {url} did not answer within "
                    f"{self.timeout_s:.0f} s; raise --server-timeout, lower --max-tokens, "
                    "or check that the server is not stuck (its log)"
                ) from None
            except socket.gaierror as exc:
                raise EngineError(
                    f"cannot resolve the host of the {self.role} server {url} ({exc}); "
                    f"fix --{self.role}-url"
                ) from None
            except (OSError, http.client.HTTPException) as exc:
                last = f"{type(exc).__name__}: {exc}"
                if self.alive is not None and not self.alive():
                    break
                if isinstance(exc, ConnectionRefusedError) and not self._answered and attempt >= 1:
                    break  # nothing ever listened there: a wrong URL, not a busy server
            else:
                if status in _RETRY_STATUS and attempt < self.retries:
                    last = f"HTTP {status}"
                    if retry_after.isdigit():
                        delay = min(float(retry_after), _RETRY_AFTER_CAP_S)
                    time.sleep(delay)
                    continue
                result = self._decode(url, status, ctype, data)
                self._answered = True
                return result
            if attempt < self.retries:
                time.sleep(delay)
        if self._answered:
            raise EngineError(
                f"the {self.role} server at {url} stopped answering ({last}): it died or "
                "restarted mid-run. Finished results are kept: restart it and rerun with --resume"
            )
        raise EngineError(
            f"cannot reach the {self.role} server at {url} ({last}); start it, fix "
            f"--{self.role}-url, or pass --server-bin PATH to let equiv start llama-server itself"
        )

    def _decode(self, url: str, status: int, ctype: str, data: bytes) -> Any:
        text = data.decode("utf-8", errors="replace")
        is_html = "html" in ctype.lower() or text.lstrip()[:15].lower().startswith(
            ("<!doctype", "<html", "<head", "<body")
        )
        if is_html:
            raise HttpStatusError(
                f"the {self.role} server at {url} answered HTTP {status} with an HTML page "
                f"({_html_title(text)!r}) instead of JSON; is --{self.role}-url the root of a "
                "llama-server or OpenAI-compatible server, and not a proxy, login or error page?",
                status,
            )
        try:
            decoded = json.loads(text)
        except json.JSONDecodeError as exc:
            if status != 200:
                raise HttpStatusError(
                    f"the {self.role} server at {url} answered HTTP {status}: {text[:300]!r}",
                    status,
                ) from None
            raise EngineError(
                f"the {self.role} server at {url} returned truncated or invalid JSON "
                f"({len(data)} bytes; {exc.msg} at char {exc.pos}; ends {text[-60:]!r}); it may "
                "have crashed while answering: check its log, then rerun with --resume"
            ) from None
        if status != 200:
            message = decoded
            if isinstance(decoded, dict):
                error = decoded.get("error", decoded)
                message = error.get("message", error) if isinstance(error, dict) else error
            raise HttpStatusError(
                f"the {self.role} server at {url} answered HTTP {status}: {message}", status
            )
        return decoded
