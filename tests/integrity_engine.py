"""A model-free engine for the results-integrity tests, named on the command line as
``--engine integrity_engine:make_engine`` (with this directory on PYTHONPATH).

Both paths emit the same tokens, a function of the prompt's text, so every verdict is
`equivalent`. A test catches a run in the middle (holding the lock, or between a result and its
control) with ``EQUIV_TEST_HOLD_AFTER=N``: every `generate` call of the process after the N-th
waits until the file ``EQUIV_TEST_GATE`` exists.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from equiv.config import RunConfig, SamplingConfig
from equiv.engines.base import Capabilities
from equiv.prompts import Prompt
from equiv.records import DraftStep, Generation, TokenAlternatives

VOCAB = 64
_calls = 0


def _hold() -> None:
    global _calls
    _calls += 1
    after = os.environ.get("EQUIV_TEST_HOLD_AFTER")
    gate = os.environ.get("EQUIV_TEST_GATE", "")
    if after is not None and _calls > int(after):
        while not os.path.exists(gate):
            time.sleep(0.01)


class IntegrityEngine:
    capabilities = Capabilities(full_logits=False, deterministic_seed=True)

    def __init__(self, config: RunConfig, *, speculative: bool) -> None:
        self.config = config
        self.path = "speculative" if speculative else "baseline"

    def prompt_tokens(self, prompt: Prompt) -> list[int]:
        return [1, *(ord(c) % VOCAB for c in prompt.display)][:64]

    def generate(
        self,
        prompt_tokens: Sequence[int],
        *,
        sampling: SamplingConfig,
        seed: int | None,
        max_tokens: int,
    ) -> Generation:
        _hold()
        tokens = tuple((sum(prompt_tokens) + 7 * k) % VOCAB for k in range(max_tokens))
        pieces = tuple(self.token_text(t) for t in tokens)
        spec = self.path == "speculative"
        return Generation(
            path=self.path,
            prompt_tokens=tuple(prompt_tokens),
            tokens=tokens,
            pieces=pieces,
            text="".join(pieces),
            stop_reason="length",
            alternatives=tuple(TokenAlternatives((t, (t + 1) % VOCAB), (2.0, 1.0)) for t in tokens),
            t_prompt_s=0.001,
            t_decode_s=0.001 * max_tokens,
            draft_steps=(DraftStep(0, max_tokens, max_tokens),) if spec else (),
            seed=seed,
        )

    def token_text(self, token: int) -> str:
        return "é" if token == 5 else f"t{token} "

    def fingerprint(self) -> dict[str, Any]:
        return {"engine": "integrity", "vocab": VOCAB}

    def close(self) -> None:
        pass


def make_engine(config: RunConfig, *, speculative: bool) -> IntegrityEngine:
    return IntegrityEngine(config, speculative=speculative)
