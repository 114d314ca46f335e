"""The public engine contract.

An engine answers prompts for one *path*: ``baseline`` (the target alone) or ``speculative``
(target + draft). equiv builds two engines from one `RunConfig` through an `EngineFactory` and
compares what they produce. A user engine is any callable ``factory(config, *, speculative)``
returning an object with this protocol, named on the command line as ``module:attr``.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable

from equiv.config import RunConfig, SamplingConfig
from equiv.errors import ConfigError
from equiv.prompts import Prompt
from equiv.records import Generation

__all__ = ["Capabilities", "Engine", "EngineFactory", "load_factory"]


@dataclass(frozen=True)
class Capabilities:
    """What evidence an engine can give; the verdicts degrade when evidence is missing.

    full_logits: every `Generation` carries the full logits row its sampler used per token.
    deterministic_seed: the same seed gives the same output.
    rescoring: it can score a given token sequence (teacher forcing).
    token_ids: tokens are real token IDs; False when a server returns only their text, so tokens
        are compared by text (stand-in IDs, see `equiv.engines.server.api.piece_id`).
    judgements: the speculative path verifies drafts by rejection sampling (accept with
        probability min(1, p/q)) and reports every judged draft token with the draft's row
        (`equiv.records.Judgement`), so each stage of its sampler can be tested on its own.
    """

    full_logits: bool
    deterministic_seed: bool
    rescoring: bool = False
    token_ids: bool = True
    judgements: bool = False

    def to_dict(self) -> dict[str, bool]:
        return asdict(self)


@runtime_checkable
class Engine(Protocol):
    """One path (baseline or speculative) that turns prompts into generations.

    An engine that can serve concurrent `generate` calls from several threads (an HTTP client
    of a serving stack) may also set ``max_in_flight: int``; the runner then keeps up to the
    smaller of the two paths' values of prompts in flight. Without it, prompts run one at a time.
    """

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

    def fingerprint(self) -> dict[str, Any]:
        """Everything about this path that can change its output."""
        ...

    def close(self) -> None:
        """Release the models."""
        ...


class EngineFactory(Protocol):
    def __call__(self, config: RunConfig, *, speculative: bool) -> Engine: ...


def load_factory(spec: str) -> EngineFactory:
    """``llamacpp``, ``server`` (the built-in engines) or ``module:attr`` naming a user factory."""
    if spec == "llamacpp":
        from equiv.engines.llamacpp import make_engine

        return make_engine
    if spec == "server":
        from equiv.engines.server.engine import make_engine as server_factory

        return server_factory
    if spec == "reference" or spec.startswith("reference:"):
        from equiv.engines.reference import RULE_FACTORIES

        rule = spec.partition(":")[2] or "correct"
        if rule not in RULE_FACTORIES:
            raise ConfigError(
                f"reference engine rule {rule!r} is unknown; use one of {', '.join(RULE_FACTORIES)}"
            )
        return RULE_FACTORIES[rule]
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(
            f"engine {spec!r} is neither 'llamacpp', 'server' nor 'module:attr'; "
            "name a factory such as 'mypackage.engines:make_engine'"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import engine module {module_name!r}: {exc}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ConfigError(f"engine {spec!r}: {module_name} has no callable {attr!r}")
    return factory  # type: ignore[no-any-return]
