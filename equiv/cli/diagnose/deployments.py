"""Two deployments: ``equiv diagnose -- BASELINE_CMD -- SPECULATIVE_CMD`` maps two llama.cpp
command lines onto one equiv run whose speculative path carries each setting in which they differ
(`RunConfig.spec_overrides`), with a finding per difference."""

from __future__ import annotations

from equiv.cli.diagnose.command import LlamaCommand
from equiv.cli.diagnose.findings import Finding
from equiv.cli.diagnose.mapping import RunMapping, map_to_run
from equiv.errors import ConfigError

__all__ = ["map_pair"]


#: Settings two deployments may differ in that equiv reproduces as speculative-path overrides
#: (`RunConfig.spec_overrides`): the command-line setting -> the override's key.
_PER_PATH = {
    "model": "target",
    "n_ctx": "n_ctx",
    "n_batch": "n_batch",
    "n_ubatch": "n_ubatch",
    "threads": "n_threads",
    "flash_attn": "flash_attn",
    "temp": "temp",
    "top_k": "top_k",
    "top_p": "top_p",
    "min_p": "min_p",
    "repeat_penalty": "repeat_penalty",
}


def map_pair(
    baseline: LlamaCommand,
    speculative: LlamaCommand,
    *,
    cpu_count: int | None = None,
    server_bin: str | None = None,
) -> tuple[RunMapping, list[Finding]]:
    """Two deployments, the baseline without a draft and the speculative one with it: the run
    that reproduces both (the speculative command's draft settings, and each setting in which
    they differ as a speculative-path override), and a finding per difference."""
    if not speculative.text("model_draft"):
        raise ConfigError(
            "the second command line (speculative) has no -md/--model-draft; give the "
            "baseline first and the speculative deployment second"
        )
    base = map_to_run(baseline, cpu_count=cpu_count, server_bin=server_bin)
    spec = map_to_run(speculative, cpu_count=cpu_count, server_bin=server_bin)
    values = {**base.values, **{k: v for k, v in spec.values.items() if k.startswith("draft")}}
    overrides: list[str] = []
    found: list[Finding] = []
    for key, override in _PER_PATH.items():
        a, b = baseline.get(key), speculative.get(key)
        if a == b:
            continue
        flag = speculative.spellings.get(key) or baseline.spellings.get(key) or key
        if b is None:  # set in the baseline only: the draft deployment ran its build's default
            found.append(
                Finding(
                    "misconfiguration",
                    f"{flag}: {a} in the baseline, your build's default with the draft",
                    "the two deployments are not the same experiment; equiv does not know your "
                    "build's default, so it runs both paths with the baseline's value and this "
                    "difference is not reproduced",
                    f"give the same {flag} to both command lines, then rerun",
                )
            )
            continue
        mapped = spec.values.get({"model": "target"}.get(key, key), b)
        overrides.append(f"{override}={mapped}")
        found.append(
            Finding(
                "misconfiguration",
                f"{flag}: {a if a is not None else 'default'} in the baseline, {b} with the draft",
                "the two deployments are not the same experiment, so their outputs may differ "
                "for this reason alone; equiv reproduces it (a speculative-path override) and "
                "labels the runs misconfiguration while it stands",
                f"use the same {flag} in both, then rerun to see what the draft alone changes",
            )
        )
    if overrides:
        values["spec"] = overrides
    notes = (*base.notes, *(n for n in spec.notes if n not in base.notes))
    if overrides:
        notes += (f"speculative path only: {', '.join(overrides)}",)
    return RunMapping(values, notes, spec.runs), found
