"""Model-free engines for the engine contract's and the evidence stage's tests: `Plain` has the
core and re-scoring (target rows put all their mass on the given token), `Served` adds what a
server engine offers (`BatchRescoring`, `RescoreCosting`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from equiv.config import Mode, ModelSpec, RunConfig, SamplingConfig
from equiv.engines.base import Capabilities, RescoreCost
from equiv.errors import EngineError
from equiv.records import Generation

__all__ = ["CONFIG", "Plain", "Served"]

VOCAB = 8
CONFIG = RunConfig(
    target=ModelSpec("/models/target.gguf"),
    draft=ModelSpec("/models/draft.gguf"),
    mode=Mode.SAMPLING,
    sampling=SamplingConfig(temp=0.8, top_k=VOCAB),
    seeds=(1,),
)


class Plain:
    """The core of the contract and re-scoring; nothing else."""

    capabilities = Capabilities(full_logits=False, deterministic_seed=True, rescoring=True)

    def __init__(self, path: str = "baseline", *, fail: bool = False) -> None:
        self.path = path
        self.fail = fail
        self.asked: list[bool] = []

    def prompt_tokens(self, prompt: Any) -> list[int]:
        return [1]

    def generate(self, prompt_tokens: Sequence[int], **_: Any) -> Generation:
        raise NotImplementedError

    def token_text(self, token: int) -> str:
        return str(token)

    def fingerprint(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        pass

    def rescore(self, prompt_tokens: Sequence[int], tokens: Sequence[int], *, batched: bool) -> Any:
        self.asked.append(batched)
        if self.fail:
            raise EngineError("the server timed out\nat position 0")
        rows = np.zeros((len(tokens), VOCAB), dtype=np.float32)
        rows[np.arange(len(tokens)), list(tokens)] = 1.0
        return rows


class Served(Plain):
    """A server: re-scores batched on either path and counts what re-scoring costs."""

    rescores_batched = True

    def __init__(self, path: str = "baseline", *, fail: bool = False) -> None:
        super().__init__(path, fail=fail)
        self.cost = RescoreCost()

    def rescore(self, prompt_tokens: Sequence[int], tokens: Sequence[int], *, batched: bool) -> Any:
        self.cost = self.cost + RescoreCost(requests=len(tokens), rows=len(tokens))
        return super().rescore(prompt_tokens, tokens, batched=batched)

    def take_rescore_cost(self) -> RescoreCost:
        cost, self.cost = self.cost, RescoreCost()
        return cost
