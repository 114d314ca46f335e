"""A server's own tokenizer: prompts to token IDs and token IDs to text, asked over HTTP.

llama-server tokenizes text (``/tokenize`` with ``content``) and renders chats with its template
(``/apply-template``), then equiv adds exactly one BOS, as the in-process engine does; an
OpenAI-compatible server (vLLM) tokenizes text or chat ``messages`` itself (``/tokenize``, the
chat's BOS from its template). Token texts come with llama-server's pieces, else from
``/detokenize``, and are kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from equiv.engines.server.http import JsonClient
from equiv.errors import EngineError
from equiv.json_types import JSONDict
from equiv.prompts import Prompt

__all__ = ["ServerTokenizer"]


class ServerTokenizer:
    """The tokenizer of the server behind ``client`` (``api``: llama or openai; ``model``: the
    OpenAI requests' model)."""

    def __init__(self, client: JsonClient, *, api: str, model: str | None) -> None:
        self.client = client
        self.api = api
        self.model = model
        self._pieces: dict[int, str] = {}
        self._bos: list[int] | None = None

    def prompt_tokens(self, prompt: Prompt) -> list[int]:
        if self.api == "openai":
            return self._openai_prompt(prompt)
        if prompt.messages is None:
            return self._tokenize(str(prompt.text), add_special=True, parse_special=False)
        messages = [{"role": r, "content": c} for r, c in prompt.messages]
        rendered = self.client.post("/apply-template", {"messages": messages}).get("prompt")
        if not isinstance(rendered, str):
            raise EngineError(
                f"{self.client.base_url}/apply-template returned no prompt for {prompt.key!r}"
            )
        ids = self._tokenize(rendered, add_special=False, parse_special=True)
        if self._bos is None:  # what the vocabulary adds: [BOS] or nothing
            self._bos = self._tokenize("", add_special=True, parse_special=False)
        if self._bos and (not ids or ids[0] != self._bos[0]):
            ids.insert(0, self._bos[0])  # exactly one BOS, as the in-process engine
        return ids

    def _openai_prompt(self, prompt: Prompt) -> list[int]:
        """vLLM's /tokenize ("content"/"add_special" too: llama-server's spelling)."""
        body: JSONDict = {"model": self.model, "add_special_tokens": True}
        if prompt.messages is None:
            body.update(prompt=prompt.text, content=prompt.text, add_special=True)
        else:
            body["messages"] = [{"role": r, "content": c} for r, c in prompt.messages]
            body["add_generation_prompt"] = True
            body["add_special_tokens"] = False
        ids = [int(t) for t in self._tokens(self.client.post("/tokenize", body))]
        if not ids:
            raise EngineError(
                f"{self.client.base_url}/tokenize returned no tokens for prompt {prompt.key!r}; "
                "for llama-server use --server-api llama (its /tokenize takes no chat messages)"
            )
        return ids

    def _tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        body: JSONDict = {
            "content": text,
            "add_special": add_special,
            "parse_special": parse_special,
            "with_pieces": True,
        }
        ids = []
        for entry in self._tokens(self.client.post("/tokenize", body)):
            if isinstance(entry, dict):
                piece = entry.get("piece", "")
                if isinstance(piece, list):
                    piece = bytes(piece).decode("utf-8", errors="replace")
                self._pieces.setdefault(int(entry["id"]), str(piece))
                ids.append(int(entry["id"]))
            else:
                ids.append(int(entry))
        return ids

    def _tokens(self, data: Any) -> list[Any]:
        """The ``tokens`` of a /tokenize answer (JSON from the wire: ``Any`` until checked)."""
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list):
            raise EngineError(
                f"{self.client.base_url}/tokenize returned no 'tokens' ({str(data)[:120]!r}); "
                "equiv needs the server's tokenizer (llama-server and vLLM have /tokenize)"
            )
        return tokens

    def remember(self, tokens: Sequence[int], pieces: Sequence[str]) -> None:
        """The pieces a generation answer gave for its tokens (none asked again)."""
        for token, piece in zip(tokens, pieces, strict=False):
            if piece:
                self._pieces.setdefault(token, piece)

    def token_text(self, token: int) -> str:
        if token not in self._pieces:
            body: JSONDict = {"tokens": [token]}
            if self.api == "openai":
                body["model"] = self.model
            data = self.client.post("/detokenize", body)
            self._pieces[token] = str(data.get("content", data.get("prompt", "")))
        return self._pieces[token]
