"""The engine contract, written in full.

An engine answers prompts for one *path*: ``baseline`` (the target alone) or ``speculative``
(target + draft). equiv builds both paths from one `RunConfig` through an `EngineFactory`,
``factory(config, *, speculative)``, and compares what they produce. Engine-specific options
(a server's URL or binary, ...) travel inside the config as ``config.engine_options``, so they are
recorded in the results header and checked on ``--resume`` like every other setting.

The core every engine implements is `Engine`. Beyond it, an engine may offer optional
capabilities, each a small protocol below that the runner and the classifier ask for and degrade
without:

- `Rescoring`: the target's logits rows at given positions of a given token sequence,
  single-token (as plain decoding evaluates) and batched (as draft verification evaluates);
  `BatchRescoring`: its batched rows are verification's on either path, so the baseline (the path
  not under test) re-scores them (`batch_rescorer`); `RescoreCosting`: what re-scoring cost
  (`RescoreCost`), taken after each result and recorded beside it;
- `Concurrent`: how many `generate` calls it serves at once from several threads;
- `ServerBacked`: facts about the server behind it that differ between the paths by design
  (URL, command line, log), written into the results header beside the fingerprints.

`Capabilities` says which evidence an engine gives; `check_engine` checks a built engine against
this contract, so a user engine that does not fit fails at once with a clear error.
This module imports no engine: concrete engines are found by `equiv.engines.registry`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from equiv.config import RunConfig, SamplingConfig
from equiv.errors import ConfigError
from equiv.json_types import JSONDict, JSONObject
from equiv.prompts import Prompt
from equiv.records import Generation
from equiv.records.codec import ROUND, decode, encode

__all__ = [
    "FINGERPRINT_KEYS",
    "BatchRescoring",
    "Capabilities",
    "Concurrent",
    "Engine",
    "EngineFactory",
    "PieceBytes",
    "RescoreCost",
    "RescoreCosting",
    "Rescoring",
    "SelfDrafting",
    "ServerBacked",
    "batch_rescorer",
    "check_engine",
    "drafts_from_file",
    "in_flight",
    "piece_bytes",
    "rescore_cost",
    "rescorer",
    "server_facts",
]


@dataclass(frozen=True)
class Capabilities:
    """What evidence an engine can give; the verdicts degrade when evidence is missing.

    full_logits: every `Generation` carries the full logits row its sampler used per token.
    deterministic_seed: the same seed gives the same output.
    rescoring: it implements `Rescoring` (teacher forcing of a given token sequence).
    token_ids: tokens are real token IDs; False when a server returns only their text, so tokens
        are compared by text (stand-in IDs, see `equiv.engines.server.api.piece_id`).
    judgements: the speculative path verifies drafts by rejection sampling (accept with
        probability min(1, p/q)) and reports every judged draft token with the draft's row
        (`equiv.records.Judgement`), so each stage of its sampler can be tested on its own.
    sampled_rows: a token's alternatives, where a `Generation` has them, are the top of the raw
        row that token was sampled from, on either path, and the engine is a `PieceBytes`
        (llama-server: the speculative server reports a row only for a token sampled outside a
        speculative step, one at a time as plain decoding samples it).
    """

    full_logits: bool
    deterministic_seed: bool
    rescoring: bool = False
    token_ids: bool = True
    judgements: bool = False
    sampled_rows: bool = False

    def to_dict(self) -> dict[str, bool]:
        return asdict(self)


# Fingerprint keys the classifier knows by name (`equiv.verdicts.temp0.misconfiguration`): an
# engine that reports one of these must mean the same thing by it, and may add keys of its own.
# Keys that differ between the two paths by design are listed in `FINGERPRINT_KEYS["by_design"]`.
FINGERPRINT_KEYS: dict[str, tuple[str, ...]] = {
    "compared": (
        "target_sha256",
        "target_quant",
        "n_ctx",
        "n_batch",
        "n_ubatch",
        "n_threads",
        "flash_attn",
        "kv_type",
        "chat_template",
        "sampling",
        "seed_policy",
        "llama_cpp_python",
        "system_info",
    ),
    "by_design": (
        "path",
        "logits_all",
        "draft_sha256",
        "draft_quant",
        "draft_config",
        "engine",
        "verify",  # how the speculative path verifies drafts, when not as plain llama.cpp
        "speculating",  # the server's own word (llama-server /slots); checked by itself
    ),
}


@runtime_checkable
class Engine(Protocol):
    """One path (baseline or speculative) that turns prompts into generations."""

    path: str
    capabilities: Capabilities

    def prompt_tokens(self, prompt: Prompt) -> list[int]:
        """The token IDs the engine feeds for ``prompt`` (chat template applied)."""
        ...

    def generate(
        self,
        prompt_tokens: Sequence[int],
        *,
        sampling: SamplingConfig,
        seed: int | None,
        max_tokens: int,
    ) -> Generation:
        """Generate up to ``max_tokens`` tokens after ``prompt_tokens``."""
        ...

    def token_text(self, token: int) -> str:
        """A token's text, for showing evidence."""
        ...

    def fingerprint(self) -> JSONDict:
        """Everything about this path that can change its output (see `FINGERPRINT_KEYS`)."""
        ...

    def close(self) -> None:
        """Release the models (and stop any server the engine started)."""
        ...


@runtime_checkable
class Rescoring(Protocol):
    """Teacher forcing: the target's rows for a given continuation.

    Row i of the result is the target's logits row that predicts ``tokens[i]`` after
    ``prompt_tokens`` + ``tokens[:i]``. ``batched=False`` evaluates the continuation one token at
    a time (as plain decoding does); ``batched=True`` evaluates it in one batch with every row
    computed (as draft verification does). Rows an engine knows only in part (a server's top-k
    log-probabilities) hold ``-inf`` outside the candidates it returned.
    """

    def rescore(
        self, prompt_tokens: Sequence[int], tokens: Sequence[int], *, batched: bool
    ) -> npt.NDArray[np.float32]: ...


@runtime_checkable
class BatchRescoring(Protocol):
    """A `Rescoring` engine whose ``batched=True`` rows are evaluated as draft verification
    evaluates them whichever path it serves (a server: a cold prompt is a batch), so equiv asks
    the baseline, the path not under test, for them. Without it (in process: only the
    speculative path's context evaluates batches as verification does) the speculative path
    re-scores batched. ``rescores_batched`` False is the same as not having it."""

    rescores_batched: bool


@runtime_checkable
class SelfDrafting(Protocol):
    """A speculative engine whose drafter need not be the draft file (llama-server's n-gram and
    MTP types): ``drafts_from_file`` False means the draft file plays no part, so a draft equal
    to the target is no self-draft control."""

    drafts_from_file: bool


def drafts_from_file(engine: Engine) -> bool:
    """Whether ``engine`` drafts with the run's draft file (True unless it says otherwise)."""
    return not isinstance(engine, SelfDrafting) or engine.drafts_from_file


@dataclass(frozen=True)
class RescoreCost:
    """What re-scoring cost: requests, tokens the server evaluated, its time and the wall time.

    ``rows_off_path``: rows the server evaluated otherwise than asked (a single-token row whose
    prefix was not cached, a batched row that reused a cache); they are still rows of the target.
    ``rows_reused``: rows of a context asked before in the run, given again without a request
    (counted in ``rows`` too).
    """

    requests: int = 0
    rows: int = 0
    tokens_evaluated: int = 0
    tokens_cached: int = 0
    server_s: float = field(default=0.0, metadata={ROUND: 6})
    wall_s: float = field(default=0.0, metadata={ROUND: 6})
    rows_off_path: int = 0
    rows_reused: int = 0

    def __add__(self, other: RescoreCost) -> RescoreCost:
        return RescoreCost(
            requests=self.requests + other.requests,
            rows=self.rows + other.rows,
            tokens_evaluated=self.tokens_evaluated + other.tokens_evaluated,
            tokens_cached=self.tokens_cached + other.tokens_cached,
            server_s=self.server_s + other.server_s,
            wall_s=self.wall_s + other.wall_s,
            rows_off_path=self.rows_off_path + other.rows_off_path,
            rows_reused=self.rows_reused + other.rows_reused,
        )

    def to_dict(self) -> JSONDict:
        return encode(self)

    @classmethod
    def from_dict(cls, data: JSONObject) -> RescoreCost:
        """As `to_dict` wrote it; a count or time an older file lacks is 0."""
        return decode(cls, data, "rescore_cost")


@runtime_checkable
class PieceBytes(Protocol):
    """An engine that knows the bytes of the candidates in the rows it reported, and of the
    tokens it emitted where it can."""

    def candidate_bytes(self, token: int) -> bytes:
        """The token's bytes; empty where unknown."""
        ...


def piece_bytes(engine: Engine) -> PieceBytes | None:
    """``engine`` as a `PieceBytes` where its alternatives are the rows it sampled from
    (``Capabilities.sampled_rows``), else None."""
    if engine.capabilities.sampled_rows and isinstance(engine, PieceBytes):
        return engine
    return None


@runtime_checkable
class RescoreCosting(Protocol):
    """An engine that counts what its re-scoring costs (a server: requests, tokens, time).
    equiv takes the cost after each result, from the thread that asked for its re-scoring, and
    records it in the result (``rescore_cost``)."""

    def take_rescore_cost(self) -> RescoreCost:
        """What this thread's re-scoring cost since it last asked (and start counting anew)."""
        ...


@runtime_checkable
class Concurrent(Protocol):
    """An engine that serves up to ``max_in_flight`` concurrent `generate` calls (threads)."""

    max_in_flight: int


@runtime_checkable
class ServerBacked(Protocol):
    """An engine backed by a server: where it is and what it said (URL, argv, log tail)."""

    def server_facts(self) -> JSONDict: ...


class EngineFactory(Protocol):
    def __call__(self, config: RunConfig, *, speculative: bool) -> Engine: ...


_CORE = ("prompt_tokens", "generate", "token_text", "fingerprint", "close")


def check_engine(engine: object, *, name: str, speculative: bool) -> Engine:
    """``engine`` if it fulfils the contract, else a `ConfigError` saying what is missing."""
    path = "speculative" if speculative else "baseline"
    missing = [m for m in _CORE if not callable(getattr(engine, m, None))]
    if not isinstance(getattr(engine, "capabilities", None), Capabilities):
        missing.append("capabilities (an equiv.engines.Capabilities)")
    if getattr(engine, "path", None) != path:
        missing.append(f"path == {path!r} (got {getattr(engine, 'path', None)!r})")
    if missing:
        raise ConfigError(
            f"engine {name!r} built a {path} engine ({type(engine).__name__}) that does not "
            f"fulfil equiv's engine contract: missing {', '.join(missing)}; see "
            "equiv.engines.base.Engine"
        )
    caps: Capabilities = engine.capabilities  # type: ignore[attr-defined]
    if caps.rescoring and not isinstance(engine, Rescoring):
        raise ConfigError(
            f"engine {name!r} ({type(engine).__name__}) claims capabilities.rescoring but has no "
            "rescore(prompt_tokens, tokens, *, batched) method; see equiv.engines.base.Rescoring"
        )
    batches = getattr(engine, "rescores_batched", False)
    if not isinstance(batches, bool):
        raise ConfigError(
            f"engine {name!r} ({type(engine).__name__}) has rescores_batched {batches!r}; it must "
            "be a bool (see equiv.engines.base.BatchRescoring)"
        )
    if hasattr(engine, "take_rescore_cost") and not callable(engine.take_rescore_cost):
        raise ConfigError(
            f"engine {name!r} ({type(engine).__name__}) has a take_rescore_cost that is not a "
            "method; see equiv.engines.base.RescoreCosting"
        )
    limit = getattr(engine, "max_in_flight", 1)
    if not isinstance(limit, int) or limit < 1:
        raise ConfigError(
            f"engine {name!r} ({type(engine).__name__}) has max_in_flight {limit!r}; it must be "
            "an int >= 1 (see equiv.engines.base.Concurrent)"
        )
    assert isinstance(engine, Engine)
    return engine


def in_flight(engine: Engine) -> int:
    """How many `generate` calls ``engine`` serves at once (1 unless it is `Concurrent`)."""
    return engine.max_in_flight if isinstance(engine, Concurrent) else 1


def rescorer(engine: Engine) -> Rescoring | None:
    """``engine`` as a `Rescoring` when it offers re-scoring, else None."""
    if engine.capabilities.rescoring and isinstance(engine, Rescoring):
        return engine
    return None


def batch_rescorer(baseline: Engine, speculative: Engine) -> Engine:
    """The engine that re-scores batched: the baseline where it is a `BatchRescoring` (evidence
    from the path not under test), else the speculative path."""
    batches = isinstance(baseline, BatchRescoring) and baseline.rescores_batched
    return baseline if batches else speculative


def rescore_cost(engines: Sequence[Engine]) -> RescoreCost | None:
    """What re-scoring cost on ``engines`` (each counted once) since last asked, taken from the
    `RescoreCosting` ones; None where none counts."""
    costs = [
        engine.take_rescore_cost()
        for engine in {id(e): e for e in engines}.values()
        if isinstance(engine, RescoreCosting)
    ]
    return sum(costs[1:], costs[0]) if costs else None


def server_facts(engine: Engine) -> JSONDict | None:
    """The server facts of a `ServerBacked` engine, else None."""
    return engine.server_facts() if isinstance(engine, ServerBacked) else None
