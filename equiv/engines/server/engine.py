"""The ``server`` engine: a real serving stack over HTTP, exactly as deployed; one server per path.

- llama.cpp's ``llama-server`` (``api="llama"``): ``/completion`` with the prompt as token IDs,
  ``n_probs``, ``seed``, ``return_tokens``, ``cache_prompt: false``; prompts tokenized by the server
  (``/tokenize``, ``/apply-template`` for chats); ``/props`` and ``/v1/models`` fingerprint it and
  catch a server whose model or context is not the configured one.
- equiv starts both servers (``--server-bin`` llama-server, ``--vllm-model`` vLLM:
  `equiv.engines.server.start`) or uses running ones (``--baseline-url``/``--speculative-url``;
  settings in `equiv.engines.server.settings`); what a server is, `equiv.engines.server.inspect`;
  its tokenizer, `equiv.engines.server.tokenizer`.
- any OpenAI-compatible server (``api="openai"``: vLLM, SGLang): ``/v1/completions`` with
  ``logprobs``. `Capabilities` says what HTTP cannot give (`equiv.engines.server.api` has details).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from equiv.config import Mode, RunConfig, SamplingConfig
from equiv.engines.base import Capabilities, RescoreCost
from equiv.engines.server.api import (
    Parsed,
    candidate_bytes,
    llama_body,
    openai_body,
    parse_llama,
    parse_openai,
)
from equiv.engines.server.http import HttpStatusError, JsonClient, normalize_url
from equiv.engines.server.inspect import (
    detect_api,
    inspect_llama,
    inspect_openai,
    openai_vocab_size,
)
from equiv.engines.server.process import log_tail
from equiv.engines.server.rescore import LlamaRescorer
from equiv.engines.server.scoring_openai import OpenAIRescorer, detect_openai_scorer
from equiv.engines.server.settings import (
    ServerSettings,
    settings_for,
)
from equiv.engines.server.start import rescore_candidates, start_server
from equiv.engines.server.tokenizer import ServerTokenizer
from equiv.engines.server.vllm import read_counters, refusal_fix
from equiv.errors import ConfigError, EngineError
from equiv.json_types import JSONDict, json_int
from equiv.models.gguf import read_gguf_info
from equiv.models.token_bytes import token_bytes
from equiv.prompts import Prompt
from equiv.records import DraftStep, Generation, PathName

__all__ = [
    "ServerEngine",
    "ServerSettings",
    "make_engine",
]


def make_engine(config: RunConfig, *, speculative: bool) -> ServerEngine:
    """The ``--engine server`` factory."""
    return ServerEngine(config, speculative=speculative, settings=settings_for(config))


class ServerEngine:
    """One path over HTTP; starts (and owns) its server when given ``server_bin`` (llama-server)
    or ``vllm_model`` (vLLM)."""

    # equiv.engines.base.BatchRescoring: a cold prompt is a batch, so the baseline server
    # re-scores both ways, and the path under test is asked for nothing.
    rescores_batched = True

    def __init__(
        self, config: RunConfig, *, speculative: bool, settings: ServerSettings | None = None
    ) -> None:
        self.config = config
        self.settings = settings = settings or settings_for(config)
        self.path: str = PathName.SPECULATIVE if speculative else PathName.BASELINE
        self.max_in_flight = settings.in_flight(config.mode)  # prompts the runner keeps in flight
        #: equiv.engines.base.SelfDrafting: a URL's drafter is unknown, taken to be a draft file
        self.drafts_from_file = True
        self._count_drafts = False  # vLLM: a request's draft counts from /metrics
        self._candidates: dict[int, bytes] = {}  # candidates' bytes from llama-server's rows
        self._started = start_server(
            config, settings, speculative=speculative, slots=self.max_in_flight
        )
        self._server = None if self._started is None else self._started.process
        self._server_version = None if self._started is None else self._started.version
        if self._started is not None:
            url = self._started.process.url
            self.drafts_from_file = self._started.drafts_from_file
        else:
            given = settings.speculative_url if speculative else settings.baseline_url
            assert given is not None
            url = normalize_url(given, option=f"--{self.path}-url")
        self.url = url
        self.client = JsonClient(
            url,
            role=self.path,
            timeout_s=settings.timeout_s,
            retries=settings.retries,
            backoff_s=settings.backoff_s,
            alive=None if self._server is None else self._server.alive,
        )
        try:  # a server equiv started is stopped whatever fails (or Ctrl-C) before the run
            self._facts = self._inspect()
            self._rescorer, self._rescoring_how = self._scorer()
        except BaseException:
            self.close()
            raise
        self.capabilities = Capabilities(
            full_logits=False,
            deterministic_seed=self.api == "llama",
            rescoring=self._rescorer is not None,
            token_ids=bool(self._facts.get("token_ids", True)),
            sampled_rows=self.api == "llama",  # server-context.cpp, populate_token_probs
        )

    # -- inspecting the server ---------------------------------------------------------------
    def _inspect(self) -> JSONDict:
        """The API the server speaks (``self.api``) and its facts
        (`equiv.engines.server.inspect`)."""
        self.api, props = detect_api(self.client, self.settings.api)
        if props is not None:
            served = self.config.target.served
            target = None if served else read_gguf_info(self.config.target.path)
            return inspect_llama(
                self.client, props, target=target, n_ctx=self.config.n_ctx, role=self.path,
                placebo=self._placebo(),
            )  # fmt: skip
        facts = inspect_openai(
            self.client, model=self.settings.model, role=self.path, placebo=self._placebo()
        )
        self.model = facts.model
        self._vllm = facts.vllm
        if self.settings.vllm_model:  # the vLLM equiv started: its version, as llama-server's
            try:
                version = self.client.get("/version")
            except HttpStatusError:  # a build without /version: the version stays unknown
                version = None
            if isinstance(version, dict) and version.get("version"):
                self._server_version = f"vLLM {version['version']}"
        probe = self._probe()
        one_at_a_time = self.path == "speculative" and self.max_in_flight == 1
        self._count_drafts = facts.has_counters and one_at_a_time  # their growth: exact
        return {**facts.to_dict(), "token_ids": probe.ids_known}

    def _placebo(self) -> bool:
        """One server given for both paths: a placebo by the user's choice (nothing speculates,
        on purpose), so whether it speculates is not checked."""
        s = self.settings
        return bool(s.baseline_url) and s.baseline_url == s.speculative_url

    def _probe(self) -> Parsed:
        """One token with the run's own sampler and log-probability count: a setting the server
        refuses (vLLM: `refusal_fix`) stops the run before it starts, with the fix."""
        own = self.config.for_path(speculative=self.path == "speculative").sampling
        sampling = own if self.config.mode is Mode.SAMPLING else None
        token = self.prompt_tokens(Prompt("probe", "probe", text="Hi"))[-1]
        try:
            return self._complete([token], 1, sampling=sampling)
        except HttpStatusError as exc:
            if exc.status != 400:
                raise
            sampling = sampling or SamplingConfig()
            fix = refusal_fix(str(exc), sampling, k=self._n_probs(sampling), path=self.path)
            raise ConfigError(f"{exc}\n{fix}") from None

    def _scorer(self) -> tuple[LlamaRescorer | OpenAIRescorer | None, str]:
        """This server's re-scoring and how it scores (`equiv.engines.base.Rescoring`)."""
        if self.api == "llama":
            rescorer = LlamaRescorer(
                self.client, n_vocab=self._llama_vocab(), n_probs=rescore_candidates(self.config)
            )
            return rescorer, "llama-server n_probs: forced decoding, batched one by one"
        if self._facts.get("token_ids"):
            return self._openai_scorer()
        return None, "none: the server returns no token IDs"

    def _llama_vocab(self) -> int:
        """The vocabulary size llama-server reports (``/v1/models``), else the target file's."""
        n_vocab = self._facts.get("n_vocab")
        if n_vocab is not None:
            return json_int(n_vocab)
        if self.config.target.served:
            raise EngineError(
                f"the {self.path} server at {self.url} reports no vocabulary size (n_vocab in "
                "/v1/models); pass --target with its GGUF file"
            )
        return read_gguf_info(self.config.target.path).vocab_size

    def _openai_scorer(self) -> tuple[OpenAIRescorer | None, str]:
        """vLLM's prompt_logprobs or SGLang's /generate, whichever this server answers."""
        if self.config.target.served:
            # vLLM bounds prompt IDs by its vocabulary, so its refusals find the size; another
            # server might index past its embeddings: it is not sent an ID it may not know
            n_vocab = openai_vocab_size(self.client, model=self.model) if self._vllm else None
            if n_vocab is None:
                return None, (
                    "none: the server does not say its vocabulary size (pass --target with its "
                    "GGUF)"
                )
        else:
            try:
                n_vocab = read_gguf_info(self.config.target.path).vocab_size
            except (OSError, ValueError) as exc:
                return None, f"none: the target's vocabulary size is unknown ({exc})"
        probe = self.prompt_tokens(Prompt("probe", "probe", text="Hello there, world"))
        return detect_openai_scorer(
            self.client, model=self.model, probe=probe, n_vocab=n_vocab,
            n_probs=rescore_candidates(self.config),
        )  # fmt: skip

    # -- prompts -----------------------------------------------------------------------------
    @functools.cached_property
    def _tokenizer(self) -> ServerTokenizer:
        """The server's own tokenizer (`equiv.engines.server.tokenizer`), once its API and
        model are known."""
        return ServerTokenizer(self.client, api=self.api, model=getattr(self, "model", None))

    def prompt_tokens(self, prompt: Prompt) -> list[int]:
        return self._tokenizer.prompt_tokens(prompt)

    def token_text(self, token: int) -> str:
        return self._tokenizer.token_text(token)

    def _token_bytes(self, token: int) -> bytes:
        """A token's bytes from the target's GGUF vocabulary (read once, where rows must be
        placed among byte pieces)."""
        vocab = token_bytes(str(self.config.target.path))
        return vocab[token] if 0 <= token < len(vocab) else b""

    def candidate_bytes(self, token: int) -> bytes:
        """``token``'s bytes as llama-server sent them for a candidate of a row, else from the
        target's GGUF where equiv has it (`PieceBytes`); empty where neither knows."""
        known = self._candidates.get(token)
        if known is None and not self.config.target.served:
            known = self._token_bytes(token)
        return known or b""

    # -- generation --------------------------------------------------------------------------
    def _complete(
        self,
        prompt_tokens: Sequence[int],
        max_tokens: int,
        *,
        sampling: SamplingConfig | None = None,
        seed: int | None = None,
    ) -> Parsed:
        sampling = sampling or SamplingConfig()
        seed = seed or 1  # temp 0 too gets a fixed seed, as the in-process engine
        k = self._n_probs(sampling)
        try:
            if self.api == "llama":
                draft = self.config.draft_config if self.path == "speculative" else None
                body = llama_body(
                    prompt_tokens, sampling=sampling, seed=seed, max_tokens=max_tokens,
                    n_probs=k, draft=draft,
                )  # fmt: skip
                answer = self.client.post("/completion", body)
                self._candidates.update(candidate_bytes(answer))
                pieces = None if self.config.target.served else self._token_bytes
                return parse_llama(answer, url=f"{self.url}/completion", n_probs=k, pieces=pieces)
            body = openai_body(
                prompt_tokens, model=self.model, sampling=sampling, seed=seed,
                max_tokens=max_tokens, n_probs=k,
            )  # fmt: skip
            answer = self.client.post("/v1/completions", body)
            return parse_openai(answer, url=f"{self.url}/v1/completions")
        except EngineError as exc:
            self._raise_if_dead()
            raise exc from None

    def _n_probs(self, sampling: SamplingConfig) -> int:
        """Log-probabilities asked per token: at temp > 0 on the baseline, and on llama-server
        on both paths (its rows are the ones sampled from), `rescore_candidates`."""
        if not sampling.greedy and (self.path == PathName.BASELINE or self.api == "llama"):
            return rescore_candidates(self.config)
        return self.config.top_k_record

    def _raise_if_dead(self) -> None:
        if self._server is not None and not self._server.alive():
            raise EngineError(
                f"the {self.path} {self._server.name} (started by equiv) exited with code "
                f"{self._server.proc.returncode} mid-run; its log ({self._server.log_path}) "
                f"ends with:\n{log_tail(self._server.log_path, 15)}\nfinished results are "
                "kept: rerun with --resume"
            ) from None

    def generate(
        self,
        prompt_tokens: Sequence[int],
        *,
        sampling: SamplingConfig,
        seed: int | None,
        max_tokens: int,
    ) -> Generation:
        before = read_counters(self.client) if self._count_drafts else None
        started = time.perf_counter()
        parsed = self._complete(prompt_tokens, max_tokens, sampling=sampling, seed=seed)
        wall = time.perf_counter() - started
        draft_steps = parsed.draft_steps
        after = read_counters(self.client) if before is not None else None
        if before is not None and after is not None:
            grew = after - before
            draft_steps = (DraftStep(DraftStep.PER_REQUEST, grew.drafted, grew.accepted),)
        self._tokenizer.remember(parsed.tokens, parsed.pieces)
        # a piece the answer left out (no rows, or a token without a row): the server's own
        pieces = tuple(
            (parsed.pieces[i] if i < len(parsed.pieces) else "")
            or (self.token_text(t) if t >= 0 else "")
            for i, t in enumerate(parsed.tokens)
        )
        return Generation(
            path=PathName(self.path),
            prompt_tokens=tuple(int(t) for t in prompt_tokens),
            tokens=parsed.tokens,
            pieces=tuple(pieces),
            text=parsed.text,
            stop_reason=parsed.stop_reason,
            alternatives=parsed.alternatives,
            t_prompt_s=parsed.t_prompt_s if parsed.t_prompt_s is not None else 0.0,
            t_decode_s=parsed.t_decode_s if parsed.t_decode_s is not None else wall,
            draft_steps=draft_steps,
            seed=seed,
        )

    # -- re-scoring (equiv.engines.base.Rescoring, RescoreCosting) ----------------------------
    def rescore(
        self, prompt_tokens: Sequence[int], tokens: Sequence[int], *, batched: bool
    ) -> npt.NDArray[np.float32]:
        """The target's rows on this server: on llama-server single-token rows by forced
        decoding (one request a sample), batched rows one request per position
        (`equiv.engines.server.rescore`); on vLLM / SGLang one prefill request
        (`equiv.engines.server.scoring_openai`); ``-inf`` outside the K candidates."""
        if self._rescorer is None:
            raise EngineError(
                f"the {self.path} server at {self.url} ({self.api} API) cannot re-score "
                f"({self._rescoring_how}); equiv scores given tokens on llama-server (n_probs), "
                "vLLM (prompt_logprobs) and SGLang (/generate with return_logprob)"
            )
        try:
            return self._rescorer.rescore(prompt_tokens, tokens, batched=batched)
        except EngineError as exc:
            self._raise_if_dead()
            raise exc from None

    def take_rescore_cost(self) -> RescoreCost:
        """What this thread's re-scoring requests cost since it last asked
        (`equiv.engines.base.RescoreCosting`)."""
        return RescoreCost() if self._rescorer is None else self._rescorer.take_cost()

    # -- facts -------------------------------------------------------------------------------
    def fingerprint(self) -> JSONDict:
        """Facts that must match between the paths (the draft's aside); per-server facts that
        differ by design (URL, log) are in `server_facts`."""
        cfg = self.config
        fp: JSONDict = {
            "engine": "server",
            "path": str(self.path),
            **self._facts,
            "started_by_equiv": self._server is not None,
            "sampler_chain": "penalties,top_k,typ_p,top_p,min_p,temperature,dist",
            "alternatives": "top-k log-probabilities of the raw logits row (not logits)",
        }
        started = self._started
        if started is not None:
            fp.update(server_version=self._server_version, server_argv=list(started.shared_argv))
        if self.path == "speculative":
            draft_config = fp["draft_config"] = cfg.draft_config.to_dict()
            if started is not None and "--model-draft" in started.draft_flags:  # a GGUF draft
                draft = read_gguf_info(cfg.draft.path)
                fp.update(draft_sha256=draft.sha256, draft_quant=draft.quant)
            if started is not None:
                draft_config["server_flags"] = list(started.draft_flags)
        return fp

    def server_facts(self) -> JSONDict:
        """Where this path's server is and what it said: URL, and for a server equiv started,
        its full command line, log file and the log's tail."""
        facts: JSONDict = {"url": self.url, "api": self.api, "rescoring": self._rescoring_how}
        if self._server is not None:
            facts.update(
                argv=self._server.argv,
                log=str(self._server.log_path),
                log_tail=log_tail(self._server.log_path, 12),
            )
        return facts

    def close(self) -> None:
        if self._server is not None:
            self._server.stop()
