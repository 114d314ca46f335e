"""The misconfiguration rule: were the two paths the same experiment?

When the two paths' fingerprints differ in anything that can change output (target file or quant,
context or batch sizes, threads, flash attention, KV type, chat template, sampler settings,
library version), every result of the run is ``misconfiguration``, with each difference explained
(`fingerprint_differences`); so is a run whose speculative server does not speculate, or whose
baseline server does (`speculation_problem`). Keys that differ by design are named in the engine
contract (`equiv.engines.base.FINGERPRINT_KEYS`). The temp-0 classifier
(`equiv.verdicts.temp0.classify`) and the sampling verdicts apply the rule first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from equiv.engines.base import FINGERPRINT_KEYS
from equiv.json_types import JSONObject
from equiv.records.verdict import Label, Verdict

__all__ = ["fingerprint_differences", "misconfiguration", "speculation_problem"]

# Fingerprint keys that differ between the paths by design (named in the engine contract).
_EXPECTED = set(FINGERPRINT_KEYS["by_design"])
_WHY = {
    "target_sha256": "the speculative path ran another target file; a different quant or model "
    "is not the same experiment",
    "target_quant": "the target quantization differs",
    "n_ctx": "context sizes differ: a prompt that fits one may be truncated in the other",
    "n_batch": "batch sizes differ: kernels and reduction orders change with them",
    "n_ubatch": "micro-batch sizes differ: kernels and reduction orders change with them",
    "n_threads": "thread counts differ: reduction orders change with them",
    "flash_attn": "flash attention is on in one path only",
    "kv_type": "KV cache types differ",
    "chat_template": "the chat templates differ: the prompts were not the same tokens",
    "sampling": "sampling parameters differ",
    "seed_policy": "seed policies differ (llama-cpp-python's seed 0 means random)",
    "llama_cpp_python": "library versions differ",
    "system_info": "CPU features differ (other machines or builds)",
}


def fingerprint_differences(baseline: JSONObject, speculative: JSONObject) -> list[str]:
    """Every output-relevant difference between the two paths' fingerprints, in plain words;
    first a server that says it does (not) speculate against its path (`speculation_problem`)."""
    out = [p for p in (speculation_problem(baseline, speculative),) if p]
    for key in sorted(set(baseline) | set(speculative)):
        if key in _EXPECTED or baseline.get(key) == speculative.get(key):
            continue
        a, b = baseline.get(key), speculative.get(key)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            parts = [f"{k} {a.get(k)!r} vs {b.get(k)!r}" for k in sorted(a) if a.get(k) != b.get(k)]
            detail = ", ".join(parts)
        else:
            detail = f"{a!r} vs {b!r}"
        out.append(f"{key}: {detail} ({_WHY.get(key, 'settings differ')})")
    return out


def speculation_problem(baseline: JSONObject, speculative: JSONObject) -> str | None:
    """The run compared no speculative decoding: the speculative server built none (llama-server
    ``/slots`` ``"speculative": false``, e.g. ``-md`` without ``--spec-type`` on builds whose
    default type is ``none``), or the baseline server speculates too."""
    if speculative.get("speculating") is False and speculative.get("api") == "openai":
        return (
            "speculating: the speculative server does not speculate: its /metrics export no "
            "vllm:spec_decode counters, which vLLM creates only for a --speculative-config, so "
            "both paths ran plain decoding and speculation was never checked: restart it with "
            '--speculative-config (e.g. \'{"method": "ngram", "num_speculative_tokens": '
            '4, "prompt_lookup_max": 4}\')'
        )
    if speculative.get("speculating") is False:
        flags = speculative.get("draft_config")
        written = flags.get("server_flags") if isinstance(flags, Mapping) else None
        how = (
            f" (started with {' '.join(map(str, written))})"
            if isinstance(written, Sequence) and not isinstance(written, str) and written
            else ""
        )
        return (
            f"speculating: the speculative server does not speculate{how}: its /slots say "
            '"speculative": false, so both paths ran plain decoding and speculation was never '
            "checked; llama-server builds whose --spec-type defaults to none ignore -md alone: "
            "add --spec-type draft-simple (or the type you meant)"
        )
    if baseline.get("speculating") is True:
        if baseline.get("api") == "openai":
            return (
                "speculating: the baseline server speculates too (its /metrics export "
                "vllm:spec_decode counters): start the baseline without --speculative-config"
            )
        return (
            'speculating: the baseline server speculates too (its /slots say "speculative": '
            "true): start the baseline without -md / --spec-type"
        )
    return None


def misconfiguration(differences: Sequence[str], outputs: str) -> Verdict:
    """The verdict of each result of a run whose paths differ (``outputs``: whether they agree)."""
    return Verdict(
        Label.MISCONFIGURATION,
        f"the two paths were not the same experiment ({outputs}): {differences[0]}",
        {"differences": list(differences)},
    )
