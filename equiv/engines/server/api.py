"""Request bodies and response parsing for the two HTTP APIs the server engine speaks.

``llama``: llama.cpp's ``llama-server`` ``/completion``. The prompt goes as token IDs, the answer
comes with the emitted token IDs (``return_tokens``), for every token the top ``n_probs``
candidates as log-probabilities of the softmax over the *raw* logits row (before any sampler;
``post_sampling_probs`` is off), and timings with ``draft_n`` / ``draft_n_accepted`` on a
speculative server.

``openai``: ``/v1/completions`` with ``logprobs`` (vLLM, SGLang, llama-server's own). Token IDs
come back only where the server offers them (vLLM's ``return_tokens_as_token_ids``, llama-server's
per-token ``id``); otherwise tokens are identified by their text (see `piece_id`).

Evidence recorded, and its limits:
- `TokenAlternatives.logits` holds log-probabilities, not logits. Within one row they differ by a
  constant (the log of the partition function), so margins and rank order are exactly those of the
  logits; absolute values are not comparable with the in-process engine's.
- Draft statistics are per request only (the server keeps no per-round record): they are recorded
  as one aggregated ``DraftStep(pos=DraftStep.PER_REQUEST, drafted=draft_n,
  accepted=draft_n_accepted)``: acceptance is known, rounds are not.
- A probability of 0 (log-probability -inf, sent as ``null``) is recorded as ``-1e9``.
- Tokens of a speculative step carry no probabilities on llama-server (see `_candidates`).
- A token that leaves a UTF-8 character unfinished (a byte piece of an emoji, say) has no row at
  all on llama-server: its ``process_token`` adds a row only once the text ends in a whole
  character, while every token is returned. Rows are matched to tokens by ID (`rows_of_tokens`);
  a token without a row is recorded with no candidates, like a speculative step's.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from equiv.config import DraftConfig, SamplingConfig
from equiv.errors import EngineError
from equiv.json_types import JSONDict
from equiv.records import DraftStep, TokenAlternatives

__all__ = [
    "LLAMA_SAMPLERS",
    "Parsed",
    "candidate_bytes",
    "llama_body",
    "openai_body",
    "parse_llama",
    "parse_openai",
    "piece_id",
    "rows_of_tokens",
]

#: The sampler chain sent with every llama-server request: llama-cpp-python's order, so both
#: engines sample alike (llama-server appends ``dist``).
LLAMA_SAMPLERS = ("penalties", "top_k", "typ_p", "top_p", "min_p", "temperature")
_STOP = {"eos": "eos", "limit": "length", "word": "stop", "length": "length", "stop": "eos"}
_NEG_INF = -1e9
_TOKEN_ID = re.compile(r"token_id:(\d+)")


def piece_id(piece: str) -> int:
    """A stable stand-in ID for a token known only by its text: negative, never a real ID."""
    return -1 - zlib.crc32(piece.encode("utf-8"))


@dataclass(frozen=True)
class Parsed:
    tokens: tuple[int, ...]
    pieces: tuple[str, ...]
    text: str
    stop_reason: str
    alternatives: tuple[TokenAlternatives, ...]
    t_prompt_s: float | None
    t_decode_s: float | None
    draft_steps: tuple[DraftStep, ...]
    ids_known: bool


def llama_body(
    prompt_tokens: Sequence[int],
    *,
    sampling: SamplingConfig,
    seed: int,
    max_tokens: int,
    n_probs: int,
    draft: DraftConfig | None,
) -> JSONDict:
    body: JSONDict = {
        "prompt": list(prompt_tokens),
        "n_predict": max_tokens,
        "temperature": sampling.temp,
        "top_k": sampling.top_k,
        "top_p": sampling.top_p,
        "min_p": sampling.min_p,
        "typical_p": sampling.typical_p,
        "repeat_penalty": sampling.repeat_penalty,
        "repeat_last_n": 64,  # llama-cpp-python's last_n_tokens_size
        "frequency_penalty": sampling.frequency_penalty,
        "presence_penalty": sampling.presence_penalty,
        "samplers": list(LLAMA_SAMPLERS),
        "seed": seed,
        "n_probs": n_probs,
        "post_sampling_probs": False,
        "return_tokens": True,
        "cache_prompt": False,
        "stream": False,
    }
    if draft is not None:
        # Honoured by llama-server builds that take per-request speculative settings, ignored by
        # the others (which get the same values as command-line flags when equiv starts them).
        body["speculative.n_max"] = draft.draft_max
        body["speculative.n_min"] = draft.draft_min
        body["speculative.p_min"] = draft.p_min
    return body


def openai_body(
    prompt_tokens: Sequence[int],
    *,
    model: str,
    sampling: SamplingConfig,
    seed: int,
    max_tokens: int,
    n_probs: int,
) -> JSONDict:
    return {
        "model": model,
        "prompt": list(prompt_tokens),
        "max_tokens": max_tokens,
        "temperature": sampling.temp,
        "top_p": sampling.top_p,
        "top_k": sampling.top_k if sampling.top_k > 0 else -1,  # vLLM/SGLang extensions
        "min_p": sampling.min_p,
        "repetition_penalty": sampling.repeat_penalty,
        "frequency_penalty": sampling.frequency_penalty,
        "presence_penalty": sampling.presence_penalty,
        "seed": seed,
        "logprobs": n_probs,
        "echo": False,
        "stream": False,
        "return_tokens_as_token_ids": True,  # vLLM: "token_id:123" instead of the text
        "skip_special_tokens": False,
        # llama-server: evaluate the whole prompt (a reused KV prefix changes the batch shapes,
        # hence the numbers); vLLM and SGLang have no per-request switch for prefix caching.
        "cache_prompt": False,
    }


def _logprob(value: Any) -> float:
    return _NEG_INF if value is None else round(max(float(value), _NEG_INF), 5)


def _alternatives(pairs: Sequence[tuple[int, float]]) -> TokenAlternatives:
    ordered = sorted(pairs, key=lambda p: (-p[1], p[0]))
    return TokenAlternatives(
        ids=tuple(i for i, _ in ordered), logits=tuple(lp for _, lp in ordered)
    )


def _piece(entry: Mapping[str, Any]) -> str:
    raw = entry.get("bytes")
    if isinstance(raw, list):
        return bytes(raw).decode("utf-8", errors="replace")
    return str(entry.get("token", ""))


def _timings(data: Mapping[str, Any]) -> tuple[float | None, float | None, tuple[DraftStep, ...]]:
    timings = data.get("timings")
    if not isinstance(timings, dict):
        return None, None, ()
    t_prompt = timings.get("prompt_ms")
    t_decode = timings.get("predicted_ms")
    steps: tuple[DraftStep, ...] = ()
    if "draft_n" in timings:
        drafted, accepted = int(timings["draft_n"]), int(timings.get("draft_n_accepted", 0))
        steps = (DraftStep(DraftStep.PER_REQUEST, drafted, accepted),)
    return (
        None if t_prompt is None else float(t_prompt) / 1000,
        None if t_decode is None else float(t_decode) / 1000,
        steps,
    )


def _bad(url: str, what: str, data: object) -> EngineError:
    shown = repr(data)
    return EngineError(
        f"{url} answered without {what} ({shown[:200]}{'...' if len(shown) > 200 else ''}); "
        "is this a llama-server /completion (or OpenAI /v1/completions with logprobs) endpoint, "
        "and a build recent enough to return it?"
    )


def parse_llama(
    data: Any, *, url: str, n_probs: int, pieces: Callable[[int], bytes] | None = None
) -> Parsed:
    """A llama-server ``/completion`` answer (non-streaming); ``pieces``: a token's bytes, to
    place rows where byte pieces make it ambiguous (`rows_of_tokens`)."""
    if not isinstance(data, dict) or not isinstance(data.get("content"), str):
        raise _bad(url, "'content'", data)
    if data.get("truncated"):
        raise EngineError(
            f"{url} truncated the prompt (it does not fit the server's context); equiv never "
            "compares truncated prompts: start the server with a larger -c or lower --max-tokens"
        )
    probs = data.get("completion_probabilities") or []
    tokens = data.get("tokens")
    if not tokens and probs:
        tokens = [int(p["id"]) for p in probs]
    if not isinstance(tokens, list):
        raise _bad(url, "'tokens' (return_tokens)", data)
    tokens = [int(t) for t in tokens]
    rows: list[Mapping[str, Any] | None] = []
    if n_probs > 0 or probs:  # a token without a row: no candidates, no piece (generate asks)
        owners = rows_of_tokens(tokens, [int(p["id"]) for p in probs], url=url, pieces=pieces)
        rows = [None if j is None else probs[j] for j in owners]
    t_prompt, t_decode, steps = _timings(data)
    return Parsed(
        tokens=tuple(tokens),
        pieces=tuple("" if p is None else _piece(p) for p in rows),
        text=data["content"],
        stop_reason=_STOP.get(str(data.get("stop_type", "")), str(data.get("stop_type", ""))),
        alternatives=tuple(
            TokenAlternatives((), ()) if p is None else _candidates(p, n_probs) for p in rows
        ),
        t_prompt_s=t_prompt,
        t_decode_s=t_decode,
        draft_steps=steps,
        ids_known=True,
    )


def rows_of_tokens(
    tokens: Sequence[int],
    row_ids: Sequence[int],
    *,
    url: str,
    pieces: Callable[[int], bytes] | None = None,
) -> list[int | None]:
    """For each token the index of its row of probabilities, None for a token without one.

    llama-server leaves out the row of a token that ends its text inside a UTF-8 character, so
    the rows' IDs are a subsequence of the tokens. Where only one placement exists (the
    earliest and the latest placement of every row agree) it is the answer. Two byte pieces
    with one ID and only the second with a row (``E2 80 80``, U+2000) fit either way: then
    ``pieces`` (a token's bytes, `equiv.models.token_bytes`) replays llama-server's rule, and
    the rows go where it says, provided their IDs are exactly those tokens'. An answer whose
    rows are not a subsequence of its tokens, or that stays ambiguous, is refused.
    """
    earliest = _placement(tokens, row_ids)
    latest = _placement(tokens[::-1], row_ids[::-1])
    if earliest is None or latest is None:
        raise EngineError(
            f"{url} returned {len(tokens)} tokens and {len(row_ids)} rows of probabilities whose "
            "IDs are not among the tokens in order: the rows are not this answer's (a proxy "
            "rewrote it?); equiv cannot tell which token a row belongs to"
        )
    latest = [len(tokens) - 1 - i for i in reversed(latest)]
    if earliest != latest and pieces is not None:
        rowed = [i for i, whole in enumerate(_whole_after(tokens, pieces)) if whole]
        if [tokens[i] for i in rowed] == list(row_ids):
            earliest = latest = rowed
    if earliest != latest:
        at = next(a for a, b in zip(earliest, latest, strict=True) if a != b)
        raise EngineError(
            f"{url} returned {len(tokens)} tokens but {len(row_ids)} rows of probabilities, and "
            f"row {earliest.index(at)} (token {tokens[at]}) fits token {at} as well as a later "
            "one: llama-server gives no row to a token that leaves a UTF-8 character unfinished "
            "(byte pieces), and here two such tokens share an ID, so equiv cannot tell which "
            "token a row belongs to"
            + (
                ". Leave that prompt out (a rerun asks the same seed)"
                if pieces is not None
                else " without the vocabulary's bytes: pass --target with the served GGUF, or "
                "leave that prompt out"
            )
        )
    owner: list[int | None] = [None] * len(tokens)
    for j, i in enumerate(earliest):
        owner[i] = j
    return owner


def _whole_after(tokens: Sequence[int], pieces: Callable[[int], bytes]) -> list[bool]:
    """After each token, whether llama-server finds its text whole (its ``validate_utf8``: none
    of the last four bytes starts a character longer than the bytes left after it)."""
    tail, whole = b"", []
    for token in tokens:
        tail = (tail + pieces(token))[-4:]
        cut = any(
            ((c & 0xE0) == 0xC0 and i < 2)
            or ((c & 0xF0) == 0xE0 and i < 3)
            or ((c & 0xF8) == 0xF0 and i < 4)
            for i, c in enumerate(reversed(tail), start=1)
        )
        whole.append(not cut)
    return whole


def _placement(tokens: Sequence[int], row_ids: Sequence[int]) -> list[int] | None:
    """The earliest token index of each row, in order (None: the rows are no subsequence)."""
    placed: list[int] = []
    for i, token in enumerate(tokens):
        if len(placed) < len(row_ids) and token == row_ids[len(placed)]:
            placed.append(i)
    return placed if len(placed) == len(row_ids) else None


def _candidates(entry: Mapping[str, Any], n_probs: int) -> TokenAlternatives:
    """One token's candidates; none where the server sent a placeholder instead of them.

    llama-server computes no probabilities for the tokens of a speculative step: this build
    sends an empty list, newer ones ``logprob 0.0`` (p = 1) for every candidate
    (ggml-org/llama.cpp#27972; #27196 would fix it). Fewer than two candidates when ``n_probs
    >= 2`` was asked, or probabilities summing above 1, cannot be real: recorded as missing.
    """
    pairs = [(int(c["id"]), _logprob(c.get("logprob"))) for c in entry.get("top_logprobs") or []]
    total = sum(math.exp(lp) for _, lp in pairs)
    if (n_probs >= 2 and len(pairs) < 2) or total > 1.0 + 1e-3:
        return TokenAlternatives((), ())
    return _alternatives(pairs)


def candidate_bytes(data: Any) -> dict[int, bytes]:
    """Every candidate's bytes in a llama-server ``/completion`` answer (each candidate of
    ``top_logprobs`` comes with its piece's ``bytes``); empty where it sent none."""
    out: dict[int, bytes] = {}
    probs = data.get("completion_probabilities") if isinstance(data, dict) else None
    for entry in probs or []:
        for c in entry.get("top_logprobs") or []:
            raw = c.get("bytes")
            if isinstance(raw, list) and "id" in c:
                out[int(c["id"])] = bytes(int(b) for b in raw)
    return out


def _openai_id(token: str) -> int | None:
    match = _TOKEN_ID.fullmatch(token)
    return int(match.group(1)) if match else None


def parse_openai(data: Any, *, url: str) -> Parsed:
    """An OpenAI-compatible ``/v1/completions`` answer with ``logprobs``."""
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _bad(url, "'choices'", data)
    choice = choices[0]
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict):
        raise _bad(url, "'logprobs' (equiv needs per-token log-probabilities)", choice)
    stop = _STOP.get(str(choice.get("finish_reason")), str(choice.get("finish_reason")))
    t_prompt, t_decode, steps = _timings(data)
    if isinstance(logprobs.get("content"), list):  # llama-server's shape: IDs included
        inner = parse_llama(
            {"content": choice.get("text", ""), "completion_probabilities": logprobs["content"]},
            url=url,
            n_probs=1,
        )
        return Parsed(
            inner.tokens, inner.pieces, inner.text, stop, inner.alternatives, t_prompt, t_decode,
            steps, True,
        )  # fmt: skip
    names = logprobs.get("tokens")
    tops = logprobs.get("top_logprobs") or [{} for _ in names or ()]
    if not isinstance(names, list) or len(tops) != len(names):
        raise _bad(url, "'logprobs.tokens' and 'logprobs.top_logprobs' of equal length", logprobs)
    ids = [_openai_id(str(t)) for t in names]
    ids_known = bool(ids) and all(i is not None for i in ids)
    tokens = [
        i if ids_known and i is not None else piece_id(str(t))
        for i, t in zip(ids, names, strict=True)
    ]
    alternatives = []
    for top in tops:
        pairs = []
        for key, value in (top or {}).items():
            tid = _openai_id(key)
            pairs.append((tid if ids_known and tid is not None else piece_id(key), _logprob(value)))
        alternatives.append(_alternatives(pairs))
    return Parsed(
        tokens=tuple(tokens),
        pieces=tuple("" if ids_known else str(t) for t in names),
        text=str(choice.get("text", "")),
        stop_reason=stop,
        alternatives=tuple(alternatives),
        t_prompt_s=t_prompt,
        t_decode_s=t_decode,
        draft_steps=steps,
        ids_known=ids_known,
    )
