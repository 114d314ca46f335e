"""A tiny deterministic engine for the plugin's fast tests: no model, a 16-token vocabulary.

Named on the command line as ``--equiv-engine fake_engine:make_engine`` (the tests copy this file
beside the pytester project). Both paths emit the same tokens, except at token 2 when the prompt
says so:

- ``drift``: the speculative path's logits differ from the baseline's by 0.02 at a near tie, and
  each path emits its own argmax (what kernel differences do);
- ``bug``: the speculative path emits the runner-up of its own logits (what a sampler bug does);
- ``flaky``: the baseline path emits the runner-up on every other call (a nondeterministic engine:
  the determinism control fails when this prompt runs first).

Every factory call appends a line to ``$FAKE_ENGINE_LOG``, so a test can count model loads.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from equiv.config import RunConfig, SamplingConfig
from equiv.engines.base import Capabilities
from equiv.prompts import Prompt
from equiv.records import DraftStep, Generation, TokenAlternatives

VOCAB = 16
AT = 2  # where the paths part


class FakeEngine:
    capabilities = Capabilities(full_logits=True, deterministic_seed=True)

    def __init__(self, config: RunConfig, *, speculative: bool) -> None:
        self.config = config
        self.path = "speculative" if speculative else "baseline"
        self._kind: dict[tuple[int, ...], str] = {}
        self._calls = 0

    def prompt_tokens(self, prompt: Prompt) -> list[int]:
        tokens = [1, *(ord(c) % VOCAB for c in prompt.display)]
        words = prompt.display.split()
        kinds = ("drift", "bug", "flaky")
        self._kind[tuple(tokens)] = next((w for w in kinds if w in words), "same")
        return tokens

    def generate(
        self,
        prompt_tokens: Sequence[int],
        *,
        sampling: SamplingConfig,
        seed: int | None,
        max_tokens: int,
    ) -> Generation:
        kind = self._kind.get(tuple(prompt_tokens), "same")
        spec = self.path == "speculative"
        self._calls += 1
        flip = kind == "flaky" and not spec and self._calls % 2 == 0
        rows = np.zeros((max_tokens, VOCAB), dtype=np.float32)
        tokens = []
        for k in range(max_tokens):
            best, second = 3 + k % 10, 4 + k % 10
            rows[k, best], rows[k, second] = 5.0, 1.0
            pick = best
            if k == AT and kind in ("drift", "bug"):
                rows[k, second] = 4.99
                if spec and kind == "drift":
                    rows[k, best], rows[k, second] = 4.99, 5.01
                    pick = second
                elif spec:
                    pick = second
            if k == AT and flip:
                pick = second
            tokens.append(pick)
        steps = (DraftStep(0, max_tokens, max_tokens),) if spec else ()
        return Generation(
            path=self.path,
            prompt_tokens=tuple(prompt_tokens),
            tokens=tuple(tokens),
            pieces=tuple(f"t{t}" for t in tokens),
            text="".join(f"t{t}" for t in tokens),
            stop_reason="length",
            alternatives=tuple(TokenAlternatives.from_row(rows[i], 4) for i in range(max_tokens)),
            t_prompt_s=0.001,
            t_decode_s=0.001 * max_tokens,
            draft_steps=steps,
            seed=seed,
            logits=rows,
        )

    def token_text(self, token: int) -> str:
        return f"t{token}"

    def fingerprint(self) -> dict[str, Any]:
        return {"engine": "fake", "vocab": VOCAB}

    def close(self) -> None:
        pass


def make_engine(config: RunConfig, *, speculative: bool) -> FakeEngine:
    log = os.environ.get("FAKE_ENGINE_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(f"{'speculative' if speculative else 'baseline'}\n")
    return FakeEngine(config, speculative=speculative)
