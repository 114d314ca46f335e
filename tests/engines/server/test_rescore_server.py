"""Re-scoring on a real llama-server: the target's rows, single-token and batched, asked over HTTP.

The binary comes from ``$EQUIV_LLAMA_SERVER`` or the cache that scripts/build_llama_server.sh
fills; without one these tests are skipped with that instruction.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from divergences import require, scan
from llama_server import prompts, server_bin

from equiv.config import RunConfig, SamplingConfig
from equiv.engines import load_factory
from equiv.engines.base import RescoreCost, rescorer
from equiv.engines.server.engine import ServerEngine
from equiv.engines.server.rescore import BATCH_STRIDE, scoring_body
from equiv.engines.server.rescore_answers import parse_scoring
from equiv.engines.server.settings import ServerSettings
from equiv.errors import EngineError
from equiv.json_types import json_object
from equiv.models.gguf import read_token_texts
from equiv.records.verdict import Label
from equiv.run.plan import plan
from equiv.run.runner import Runner
from equiv.verdicts.verdict_evidence import Temp0Evidence

pytestmark = [pytest.mark.model, pytest.mark.server]

PROMPT = "code/fib_lt"


@pytest.fixture(scope="module")
def config(model_pair: Any) -> RunConfig:
    return RunConfig(target=model_pair.target, draft=model_pair.draft, max_tokens=24)


@pytest.fixture(scope="module")
def baseline(config: RunConfig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerEngine]:
    settings = ServerSettings(server_bin=server_bin(), log_dir=str(tmp_path_factory.mktemp("l")))
    engine = ServerEngine(config, speculative=False, settings=settings)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def swa_full(config: RunConfig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerEngine]:
    """A baseline server with ``--swa-full``: no context checkpoints, so a cached prefix is
    extended by evaluating one token (Gemma 3 uses sliding-window attention)."""
    settings = ServerSettings(
        server_bin=server_bin(), log_dir=str(tmp_path_factory.mktemp("l")), extra_args="--swa-full"
    )
    engine = ServerEngine(config, speculative=False, settings=settings)
    yield engine
    engine.close()


def test_the_server_engine_offers_rescoring(baseline):
    assert baseline.capabilities.rescoring
    assert rescorer(baseline) is baseline


# temp 0: the generation asked top_k_record candidates, re-scoring asks more, and llama-server
# sums the softmax in the order its partial sort over that many leaves (server-common.cpp,
# get_token_probabilities): the same logits normalized with another float sum, ~4e-5 apart.
@pytest.mark.parametrize(("temp", "atol"), [(0.0, 1e-4), (0.8, 6e-6)])
def test_single_token_rows_are_the_baselines_own(baseline, temp, atol):
    """Re-scoring the baseline's own sample by forced decoding gives back, candidate for
    candidate, the rows its generation reported: at temp > 0 (as many candidates asked) to the
    5 decimals the answer is recorded in. The same evaluations in the same order on the same
    server (Gemma 3's context checkpoints play no part: nothing is restored); one request."""
    tokens = baseline.prompt_tokens(prompts([PROMPT])[0])
    sampling = SamplingConfig(temp=temp)
    gen = baseline.generate(tokens, sampling=sampling, seed=3, max_tokens=16)
    baseline.take_rescore_cost()
    rows = baseline.rescore(tokens, gen.tokens, batched=False)
    cost = baseline.take_rescore_cost()
    assert rows.shape == (gen.n_tokens, baseline._rescorer.n_vocab)
    k = baseline._rescorer.n_probs
    for i, alt in enumerate(gen.alternatives):
        assert np.isfinite(rows[i]).sum() == k  # -inf outside the K candidates
        real = [j for j, lp in enumerate(alt.logits) if lp > -1e8]
        ids = [alt.ids[j] for j in real]
        assert set(ids) <= set(np.flatnonzero(np.isfinite(rows[i]))), f"position {i}"
        np.testing.assert_allclose(rows[i][ids], [alt.logits[j] for j in real], atol=atol)
    # a byte piece without a row in the answer (a sample may hold one) is asked on its own
    rowless = sum(not alt.ids for alt in gen.alternatives)
    assert (cost.requests, cost.rows) == (1 + rowless, gen.n_tokens)
    assert cost.rows_off_path <= rowless
    if not rowless:
        assert cost.tokens_evaluated == len(tokens) + gen.n_tokens
    assert cost.wall_s > 0


def test_one_position_at_a_time_rows_off_path_are_counted(baseline):
    """The fallback for a server without token grammars: one request per position on the cached
    prefix. Without --swa-full, llama-server keeps context checkpoints for a sliding-window
    model and restores one 4 tokens back instead of evaluating one token: the rows are still the
    target's (within drift of the generation's own) and the cost says how many were not
    single-token."""
    tokens = baseline.prompt_tokens(prompts([PROMPT])[0])
    gen = baseline.generate(tokens, sampling=SamplingConfig(), seed=None, max_tokens=12)
    baseline.take_rescore_cost()
    baseline._rescorer._rows.clear()  # no row known from the tests before
    baseline._rescorer.forced = False
    try:
        rows = baseline.rescore(tokens, gen.tokens, batched=False)
    finally:
        baseline._rescorer.forced = True
    cost = baseline.take_rescore_cost()
    assert cost.requests == gen.n_tokens
    assert cost.rows_off_path == gen.n_tokens - 1  # every row after the cold prompt
    assert cost.tokens_evaluated > len(tokens) + gen.n_tokens - 1
    for i, alt in enumerate(gen.alternatives):
        assert abs(float(rows[i, alt.ids[0]]) - alt.logits[0]) < 0.5


def test_batched_rows_come_from_batches_and_stay_close_to_single_token(swa_full):
    """Interleaved chains: each chain's first row cold, every next one 4 tokens on top of the
    cached prefix; every row the last of a batch of at least 2 tokens."""
    baseline = swa_full
    tokens = baseline.prompt_tokens(prompts([PROMPT])[0])
    gen = baseline.generate(tokens, sampling=SamplingConfig(), seed=None, max_tokens=12)
    baseline.take_rescore_cost()
    batched = baseline.rescore(tokens, gen.tokens, batched=True)
    cost = baseline.take_rescore_cost()
    n = gen.n_tokens
    assert n == 12
    assert cost.requests == n
    assert cost.rows_off_path == 0
    # 4 cold prefixes (positions 0-3), then 8 requests of 4 tokens each
    assert cost.tokens_evaluated == sum(len(tokens) + i for i in range(BATCH_STRIDE)) + 8 * 4
    for i, alt in enumerate(gen.alternatives):
        # the same target: the top candidate's log-probability moves by drift only
        assert abs(float(batched[i, alt.ids[0]]) - alt.logits[0]) < 0.5


def test_a_lead_byte_gets_no_row_and_a_ban_leaves_the_raw_row(baseline):
    """What re-scoring relies on where the greedy token starts a character in byte pieces: such a
    token (here E2, made greedy by a bias) comes without a row, and banning tokens (a sampler)
    leaves the row that is sent, the raw one, bit for bit (cold requests: the same evaluation)."""
    prompt = baseline.prompt_tokens(prompts([PROMPT])[0])
    lead = read_token_texts(baseline.config.target.path).index("<0xE2>")
    post = baseline.client.post
    forced = scoring_body(prompt, n_probs=8, cached=False)
    forced["logit_bias"] = [[lead, 100.0]]
    answer = post("/completion", forced)
    assert answer["tokens"] == [lead]
    assert not answer.get("completion_probabilities")  # "E2" leaves "€"-like text unfinished
    plain = post("/completion", scoring_body(prompt, n_probs=8, cached=False))
    top = plain["completion_probabilities"][0]["top_logprobs"]
    banned = [lead, plain["tokens"][0]]
    other = post("/completion", scoring_body(prompt, n_probs=8, cached=False, banned=banned))
    while not other.get("completion_probabilities") and len(banned) < 6:  # another lead byte
        banned.append(other["tokens"][0])
        other = post("/completion", scoring_body(prompt, n_probs=8, cached=False, banned=banned))
    assert other["tokens"][0] not in banned
    assert other["completion_probabilities"][0]["top_logprobs"] == top


def test_an_answer_for_another_prefix_or_without_probabilities_is_refused(baseline):
    tokens = baseline.prompt_tokens(prompts([PROMPT])[0])
    answer = baseline.client.post("/completion", scoring_body(tokens, n_probs=8, cached=False))
    url = f"{baseline.url}/completion"
    ids, _logprobs, cost = parse_scoring(
        answer, url=url, prefix_len=len(tokens), n_probs=8, single=False, wall_s=0.1
    )
    assert len(ids) == 8
    assert math.isclose(cost.wall_s, 0.1)
    with pytest.raises(EngineError, match="answer is for another prefix"):
        parse_scoring(
            answer, url=url, prefix_len=len(tokens) + 1, n_probs=8, single=False, wall_s=0.1
        )
    stripped = {k: v for k, v in answer.items() if k != "completion_probabilities"}
    with pytest.raises(EngineError, match="cannot re-score"):
        parse_scoring(stripped, url=url, prefix_len=len(tokens), n_probs=8, single=False, wall_s=0)


def test_temp0_against_llama_server_labels_every_divergence(config, tmp_path):
    """The runner on two llama-servers started by equiv: every divergence gets numeric-drift or
    sampler-bug from the server's own rows, never inconclusive, and what that cost is recorded."""
    options = (("server_bin", server_bin()), ("log_dir", str(tmp_path / "logs")))
    run = replace(config, max_tokens=48, engine_options=options)
    # With a draft the server verifies in batches, without it it does not: where that flips a
    # near-tie depends on this CPU, so candidates are scanned four at a time until one diverges.
    with Runner(run, load_factory("server"), tmp_path / "r.jsonl") as runner:
        scanned, records = scan(
            lambda batch, resume: runner.run(plan(batch, run), resume=resume),
            wanted=1,
            round_size=4,
        )
    diverged = require(records, scanned, "llama-server with and without a draft")
    for record in diverged:
        verdict = record.verdict
        assert verdict is not None
        assert verdict.label is Label.NUMERIC_DRIFT, verdict.reason
        rescored = Temp0Evidence.from_dict(verdict.evidence).rescored
        assert rescored is not None
        assert rescored.drift_bound is not None
        assert rescored.drift_bound.positions >= 8
        assert rescored.target_rows["single_token"]
        assert rescored.target_rows["batched"]
        cost = RescoreCost.from_dict(json_object(record.extra["rescore_cost"]))
        assert cost.requests >= rescored.drift_bound.positions
        print(record.key, verdict.reason, cost)
