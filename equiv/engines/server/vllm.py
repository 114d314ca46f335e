"""What vLLM says in its own words: its speculative-decoding counters (Prometheus ``/metrics``)
and its refusals of a request (HTTP 400), each turned into what equiv needs.

vLLM exports ``vllm:spec_decode_num_draft_tokens_total`` and
``vllm:spec_decode_num_accepted_tokens_total`` (``vllm/v1/spec_decode/metrics.py``) only when the
server runs with a ``--speculative-config``: their absence from a page that answers says the
server does not speculate, and their growth over one request is that request's drafted and
accepted tokens (exact while one request is in flight on the server). A refusal names the
setting to change (`refusal_fix`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from equiv.config import SamplingConfig
from equiv.engines.server.http import JsonClient

__all__ = ["ACCEPTED", "DRAFTED", "SpecCounters", "read_counters", "refusal_fix", "spec_counters"]

DRAFTED = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"


@dataclass(frozen=True)
class SpecCounters:
    """Tokens drafted and accepted since the server started, over all its engines."""

    drafted: int
    accepted: int

    def __sub__(self, earlier: SpecCounters) -> SpecCounters:
        return SpecCounters(self.drafted - earlier.drafted, self.accepted - earlier.accepted)


# a sample line of the Prometheus text format: name, optional {labels}, value
_SAMPLE = re.compile(r"^([A-Za-z_:][\w:]*)(?:\{[^}]*\})?\s+(\S+)")


def read_counters(client: JsonClient) -> SpecCounters | None:
    """The counters on the server's page now; None where it has no page or no counters."""
    page = client.get_text("/metrics")
    return None if page is None else spec_counters(page)


def spec_counters(page: str) -> SpecCounters | None:
    """The counters summed over label sets; None where the page has neither."""
    totals: dict[str, float] = {}
    for line in page.splitlines():
        match = _SAMPLE.match(line)
        if match and match[1] in (DRAFTED, ACCEPTED):
            try:
                totals[match[1]] = totals.get(match[1], 0.0) + float(match[2])
            except ValueError:
                continue
    if not totals:
        return None
    return SpecCounters(int(totals.get(DRAFTED, 0.0)), int(totals.get(ACCEPTED, 0.0)))


def refusal_fix(message: str, sampling: SamplingConfig, *, k: int, path: str) -> str:
    """What to change when a server refuses, with HTTP 400 ``message``, a probe of ``sampling``
    that asks for ``k`` log-probabilities per token."""
    lowered = message.lower()
    if "logprob" in lowered:
        return (
            f"equiv asks for {k} log-probabilities per token (--top-k-record, or on a sampling "
            "run's baseline the sampler's whole --top-k); vLLM caps them at --max-logprobs "
            f"(default 20): restart both servers with --max-logprobs {k}"
        )
    if "min_p" in lowered or "speculative decoding" in lowered:
        return (
            f"the {path} server cannot sample with min_p {sampling.min_p} while it speculates "
            "(vLLM supports neither min_p nor logit_bias with a speculative config): rerun with "
            "--min-p 0, which both paths then use"
        )
    return (
        f"equiv's probe (one token, temp {sampling.temp}, top_k {sampling.top_k}, top_p "
        f"{sampling.top_p}, min_p {sampling.min_p}, {k} log-probabilities) was refused: change "
        "the setting the server names, on both paths"
    )
