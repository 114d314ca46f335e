"""llama-server's answers to re-scoring requests (`equiv.engines.server.rescore`), checked
against the request and parsed: the candidates of each row, and what the request cost.

An answer must be for the tokens sent (``tokens_evaluated``), its candidates real (K of them,
probabilities summing to at most 1, no token twice); a malformed one is an `EngineError` naming
the server (these are JSON from the wire: ``Any`` until checked). A scoring answer that chose a
token without a row (a byte piece that leaves a UTF-8 character unfinished) says so, so that the
request is sent again with that token banned.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from equiv.engines.base import RescoreCost
from equiv.engines.server.api import rows_of_tokens
from equiv.errors import EngineError
from equiv.json_types import JSONObject, json_float, json_int

__all__ = ["MAX_BANNED", "Row", "parse_forced", "parse_scoring", "rowless_choice"]

_T = TypeVar("_T")
Row = tuple[list[int], list[float]]  # one position's candidates: IDs, log-probabilities
MAX_BANNED = 4  # the longest UTF-8 character: tokens banned from one scoring request at most


def rowless_choice(answer: Any) -> int | None:
    """The token a scoring answer chose without a row of probabilities, if it did."""
    if not isinstance(answer, dict) or answer.get("completion_probabilities"):
        return None
    tokens = answer.get("tokens")
    if isinstance(tokens, list) and len(tokens) == 1 and isinstance(tokens[0], int):
        return tokens[0]
    return None


def _row(candidates: Sequence[Mapping[str, Any]]) -> Row:
    """One answer's candidates: IDs and log-probabilities (a null is p = 0)."""
    ids = [int(c["id"]) for c in candidates]
    logprobs = [-math.inf if c.get("logprob") is None else float(c["logprob"]) for c in candidates]
    return ids, logprobs


def _real(ids: Sequence[int], logprobs: Sequence[float]) -> bool:
    """Not a placeholder: probabilities summing to at most 1, no token twice."""
    return sum(math.exp(lp) for lp in logprobs) <= 1.0 + 1e-3 and len(set(ids)) == len(ids)


def parse_forced(
    data: Any,
    *,
    url: str,
    prefix_len: int,
    rest: Sequence[int],
    n_probs: int,
    wall_s: float,
) -> tuple[list[Row | None], RescoreCost]:
    """The rows of a forced-decoding answer, in the order of ``rest``, up to where the answer
    stops following it (the row there is still the one after the shared context), with its
    cost; a malformed answer is an `EngineError` naming the server."""
    return _malformed_named(
        "a forced-decoding request", url, data,
        lambda: _parse_forced(data, url=url, prefix_len=prefix_len, rest=rest, n_probs=n_probs,
                              wall_s=wall_s),
    )  # fmt: skip


def _parse_forced(
    data: Any, *, url: str, prefix_len: int, rest: Sequence[int], n_probs: int, wall_s: float
) -> tuple[list[Row | None], RescoreCost]:
    answer = _answer_for(data, url=url, prefix_len=prefix_len, what="a forced-decoding request")
    tokens = [int(t) for t in answer.get("tokens") or []]
    probs = answer.get("completion_probabilities") or []
    try:
        owners = rows_of_tokens(tokens, [int(p["id"]) for p in probs], url=url)
    except EngineError:  # byte pieces that place rows ambiguously: each asked on its own
        owners = [None] * len(tokens)
    got: list[Row | None] = []
    for token, wanted, j in zip(tokens, rest, owners, strict=False):
        row = None if j is None else _row(probs[j].get("top_logprobs") or [])
        if row is not None and (len(row[0]) < min(n_probs, 2) or not _real(*row)):
            row = None  # a placeholder: asked on its own
        got.append(row)
        if token != wanted:
            break
    rows = sum(row is not None for row in got)
    return got, _cost(answer, rows=rows, decoded=len(got), wall_s=wall_s)


def _malformed_named(what: str, url: str, data: object, parse: Callable[[], _T]) -> _T:
    """``parse()``, with an answer whose fields have the wrong type or are missing turned into
    an `EngineError` naming the server."""
    try:
        return parse()
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise EngineError(
            f"{url} answered {what} with a malformed body ({type(exc).__name__}: "
            f"{exc}; {str(data)[:160]!r}): is it llama-server's /completion?"
        ) from None


def _answer_for(data: Any, *, url: str, prefix_len: int, what: str) -> dict[str, Any]:
    """``data`` as an answer to a request for a prefix of ``prefix_len`` tokens, or an
    `EngineError` where it is no answer or one for another prefix."""
    if not isinstance(data, dict):
        raise EngineError(f"{url} answered {what} with {str(data)[:120]!r}")
    evaluated = data.get("tokens_evaluated")
    if evaluated is not None and int(evaluated) != prefix_len:
        raise EngineError(
            f"{url} answered {what} for a prompt of {evaluated} tokens, but equiv sent "
            f"{prefix_len}: the answer is for another prefix (a proxy or cache in between?); "
            "re-scoring needs answers for the tokens sent"
        )
    return data


def _cost(
    answer: Mapping[str, Any], *, rows: int, decoded: int, wall_s: float, off_path: int = 0
) -> RescoreCost:
    """One request's cost from its answer's ``timings``: the prompt tokens evaluated, plus
    ``decoded`` tokens generated on them."""
    raw = answer.get("timings")
    timings: JSONObject = raw if isinstance(raw, dict) else {}
    return RescoreCost(
        requests=1,
        rows=rows,
        tokens_evaluated=max(json_int(timings.get("prompt_n", -1)), 0) + decoded,
        tokens_cached=json_int(timings.get("cache_n", 0)),
        server_s=(
            json_float(timings.get("prompt_ms", 0.0)) + json_float(timings.get("predicted_ms", 0.0))
        )
        / 1000,
        wall_s=wall_s,
        rows_off_path=off_path,
    )


def parse_scoring(
    data: Any, *, url: str, prefix_len: int, n_probs: int, single: bool, wall_s: float
) -> tuple[list[int], list[float], RescoreCost]:
    """Candidates and cost of one scoring answer, checked against the request; an answer whose
    fields have the wrong type or are missing is an `EngineError` naming the server."""
    return _malformed_named(
        "a scoring request", url, data,
        lambda: _parse_scoring(data, url=url, prefix_len=prefix_len, n_probs=n_probs,
                               single=single, wall_s=wall_s),
    )  # fmt: skip


def _parse_scoring(
    data: Any, *, url: str, prefix_len: int, n_probs: int, single: bool, wall_s: float
) -> tuple[list[int], list[float], RescoreCost]:
    data = _answer_for(data, url=url, prefix_len=prefix_len, what="a scoring request")
    if (chosen := rowless_choice(data)) is not None:
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
    ids, logprobs = _row(candidates)
    if not _real(ids, logprobs):
        raise EngineError(
            f"{url} returned placeholder probabilities for a scoring request (they sum above 1 "
            "or repeat a token): no evidence to score with"
        )
    raw = data.get("timings")
    prompt_n = json_int(raw.get("prompt_n", -1)) if isinstance(raw, dict) else -1
    on_path = prompt_n == 1 if single else prompt_n != 1  # a cold 1-token prompt is fine too
    off_path = 0 if on_path or prefix_len == 1 else 1
    return ids, logprobs, _cost(data, rows=1, decoded=0, wall_s=wall_s, off_path=off_path)
