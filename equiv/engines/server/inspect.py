"""What a server says it is: which API it speaks, what it serves, and whether it speculates.

llama-server answers ``/props`` (model path, context, template), ``/v1/models`` (vocabulary,
parameters) and ``/slots`` (a speculative implementation per slot); an OpenAI-compatible server
(vLLM, SGLang) answers ``/v1/models``, and vLLM's ``/metrics`` carries its draft counters only
when it runs with a ``--speculative-config`` (`equiv.engines.server.vllm`). Each fact here is one
the two paths' fingerprints compare.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import PurePath

from equiv.engines.server.http import HttpStatusError, JsonClient
from equiv.engines.server.vllm import spec_counters
from equiv.errors import ConfigError, EngineError
from equiv.json_types import JSONDict, JSONObject, JSONValue
from equiv.models.gguf import GGUFInfo

__all__ = ["OpenAIFacts", "detect_api", "inspect_llama", "inspect_openai", "openai_vocab_size"]


def detect_api(client: JsonClient, api: str) -> tuple[str, JSONObject | None]:
    """``("llama", props)`` for a llama-server, ``("openai", None)`` otherwise; ``api`` is the
    one asked for (``auto``: whichever answers)."""
    if api == "openai":
        return api, None
    props: JSONValue = None
    try:
        props = client.get("/props")
    except HttpStatusError:
        if api == "llama":
            raise
    if isinstance(props, dict) and "default_generation_settings" in props:
        return "llama", props
    if api == "llama":
        raise EngineError(
            f"{client.base_url}/props is not llama-server's; pass --server-api openai for an "
            "OpenAI-compatible server (vLLM, SGLang)"
        )
    return "openai", None


def inspect_llama(
    client: JsonClient,
    props: JSONObject,
    *,
    target: GGUFInfo | None,
    n_ctx: int,
    role: str,
    placebo: bool,
) -> JSONDict:
    """A llama-server's facts, checked against the configured ``target`` (None: the models are
    the servers' own, and only the context is checked); ``placebo``: one server for both paths,
    whose speculating is not asked."""
    settings = _object(props.get("default_generation_settings"))
    models = client.get("/v1/models")
    data = _object(models).get("data")
    first = data[0] if isinstance(data, list) and data else {}
    meta = _object(_object(first).get("meta"))
    facts: JSONDict = {
        "api": "llama",
        "model_path": props.get("model_path"),
        "model_alias": props.get("model_alias"),
        "n_ctx": settings.get("n_ctx"),
        "total_slots": props.get("total_slots"),
        "build_info": props.get("build_info"),
        "chat_template": _sha(props.get("chat_template")),
        "n_vocab": meta.get("n_vocab"),
        "n_params": meta.get("n_params"),
        "model_size": meta.get("size"),
        "speculating": None if placebo else _slots_speculating(client),
    }
    check_served_model(
        facts, target=target, n_ctx=n_ctx, where=f"the {role} server at {client.base_url}",
        option=f"--{role}-url",
    )  # fmt: skip
    if target is not None:
        facts["target_sha256"] = target.sha256
        facts["target_quant"] = target.quant
    return facts


def check_served_model(
    facts: JSONObject, *, target: GGUFInfo | None, n_ctx: int, where: str, option: str
) -> None:
    """Refuse a llama-server whose model file name, vocabulary size or context per slot (from
    ``/props`` and ``/v1/models``) is not the configured target's (``target`` None: the model
    is the server's own, and only the context is checked)."""
    if target is not None:
        _check_target(facts, target=target, where=where, option=option)
    served_ctx = facts.get("n_ctx")
    if served_ctx is not None and served_ctx != n_ctx:
        raise ConfigError(
            f"{where} has n_ctx {served_ctx} per slot, the run {n_ctx}; pass --n-ctx "
            f"{served_ctx} (or restart the server with -c {n_ctx} x its slots) so both runs are "
            "the same experiment"
        )


def _check_target(facts: JSONObject, *, target: GGUFInfo, where: str, option: str) -> None:
    served, wanted = PurePath(str(facts.get("model_path") or "")).name, PurePath(target.path).name
    if served and served != wanted:
        raise ConfigError(
            f"{where} serves {served!r}, but the configured target is {wanted!r}; point {option} "
            "at a server of the target, or pass --target for the model it serves"
        )
    n_vocab = facts.get("n_vocab")
    if n_vocab is not None and n_vocab != target.vocab_size:
        raise ConfigError(
            f"{where} has a vocabulary of {n_vocab} tokens, the configured target "
            f"{target.vocab_size}: not the same model; point {option} at a server of the target"
        )


def _slots_speculating(client: JsonClient) -> bool | None:
    """Whether llama-server built a speculative implementation: ``/slots`` says it per slot
    (``"speculative"``); None where /slots is off (``--no-slots``) or does not say."""
    try:
        slots = client.get("/slots")
    except HttpStatusError:
        return None
    if not isinstance(slots, list):
        return None
    said = [s["speculative"] for s in slots if isinstance(s, dict) and "speculative" in s]
    return any(bool(v) for v in said) if said else None


@dataclass(frozen=True)
class OpenAIFacts:
    """What an OpenAI-compatible server serves: the model equiv asks for and all it lists; on
    vLLM (its ``/metrics`` page answered) whether its draft counters are there."""

    model: str
    models: tuple[str, ...]
    vllm: bool = False
    has_counters: bool = False  # vLLM's draft counters: it runs a --speculative-config
    placebo: bool = False  # one server for both paths: its speculating is not judged

    @property
    def speculating(self) -> bool | None:
        return None if self.placebo or not self.vllm else self.has_counters

    def to_dict(self) -> JSONDict:
        facts: JSONDict = {"api": "openai", "model": self.model, "models": list(self.models)}
        if self.vllm:
            facts["speculating"] = self.speculating
        return facts


def inspect_openai(
    client: JsonClient, *, model: str | None, role: str, placebo: bool
) -> OpenAIFacts:
    """The served model (``model``, as given with --server-model, must be one of them) and,
    on vLLM, whether it speculates."""
    data = _object(client.get("/v1/models")).get("data")
    entries = [_object(m) for m in data] if isinstance(data, list) else []
    ids = tuple(str(m.get("id")) for m in entries if m.get("id") is not None)
    chosen = model or (ids[0] if ids else None)
    if not chosen or (ids and chosen not in ids):
        raise ConfigError(
            f"the {role} server at {client.base_url} serves models {list(ids)}; pass "
            "--server-model with one of them"
        )
    page = client.get_text("/metrics")
    vllm = page is not None and "vllm:" in page
    has_counters = vllm and page is not None and spec_counters(page) is not None
    return OpenAIFacts(str(chosen), ids, vllm=vllm, has_counters=has_counters, placebo=placebo)


def openai_vocab_size(client: JsonClient, *, model: str, limit: int = 1 << 24) -> int | None:
    """The vocabulary of an OpenAI-compatible server, which ``/v1/models`` does not say: one more
    than the largest prompt token ID it accepts (vLLM refuses a larger one with HTTP 400, "Token
    id ... is out of vocabulary"), found by bisection in about 20 one-token requests. None where
    it refuses for another reason, or accepts every ID below ``limit``."""

    def accepts(token: int) -> bool:
        body: JSONDict = {"model": model, "prompt": [token], "max_tokens": 1, "temperature": 0}
        try:
            client.post("/v1/completions", body)
        except HttpStatusError as exc:
            if exc.status == 400 and "vocab" in str(exc).lower():
                return False
            raise
        return True

    accepted, refused = 0, 1 << 12
    try:
        while accepts(refused):
            accepted, refused = refused, refused * 2
            if refused > limit:
                return None
        while refused - accepted > 1:
            middle = (accepted + refused) // 2
            accepted, refused = (middle, refused) if accepts(middle) else (accepted, middle)
    except HttpStatusError:
        return None
    return refused


def _object(value: JSONValue | None) -> JSONObject:
    return value if isinstance(value, dict) else {}


def _sha(text: JSONValue | None) -> str | None:
    return hashlib.sha256(text.encode()).hexdigest()[:16] if isinstance(text, str) else None
