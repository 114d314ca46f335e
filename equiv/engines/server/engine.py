"""The ``server`` engine: a real serving stack over HTTP, exactly as deployed; one server per path.

- llama.cpp's ``llama-server`` (``api="llama"``): ``/completion`` with the prompt as token IDs,
  ``n_probs``, ``seed``, ``return_tokens``, ``cache_prompt: false``; prompts tokenized by the server
  (``/tokenize``, ``/apply-template`` for chats); ``/props`` and ``/v1/models`` fingerprint it and
  catch a server whose model or context is not the configured one. equiv starts both servers
  (``--server-bin``) or uses running ones (``--baseline-url``/``--speculative-url``; settings in
  `equiv.engines.server.settings`).
- any OpenAI-compatible server (``api="openai"``: vLLM, SGLang): ``/v1/completions`` with
  ``logprobs``. `Capabilities` says what HTTP cannot give (`equiv.engines.server.api` has details).
"""

from __future__ import annotations

import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from equiv.config import Mode, RunConfig, SamplingConfig
from equiv.engines.base import Capabilities, RescoreCost
from equiv.engines.server.api import (
    Parsed,
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
from equiv.engines.server.llama_command import detect_flags, llama_server_argv, split_draft
from equiv.engines.server.process import ServerProcess, log_tail
from equiv.engines.server.rescore import LlamaRescorer
from equiv.engines.server.scoring_openai import OpenAIRescorer, detect_openai_scorer
from equiv.engines.server.settings import (
    ServerSettings,
    settings_for,
)
from equiv.engines.server.vllm import read_counters, refusal_fix
from equiv.engines.server.vllm_command import (
    drafts_with_model,
    spec_config,
    split_vllm_draft,
    vllm_argv,
    vllm_env,
)
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
    """One path over HTTP; starts (and owns) its llama-server when given ``server_bin``."""

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
        self._server: ServerProcess | None = None
        #: equiv.engines.base.SelfDrafting: a URL's drafter is unknown, taken to be a draft file
        self.drafts_from_file = True
        self._pieces: dict[int, str] = {}
        self._bos: list[int] | None = None
        self._count_drafts = False  # vLLM: a request's draft counts from /metrics
        self._shared_argv: list[str] = []  # a started server's flags both paths share
        self._draft_flags: list[str] = []  # ... and the speculative server's own
        self._server_version: str | None = None
        if settings.server_bin:
            url = self._start_server(settings.server_bin)
        elif settings.vllm_model:
            url = self._start_vllm(settings.vllm_model)
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
        try:
            self._facts = self._inspect()
        except BaseException:
            self.close()
            raise
        self._rescorer: LlamaRescorer | OpenAIRescorer | None = None
        self._rescoring_how = "none: the server returns no token IDs"
        if self.api == "llama":
            self._rescorer = LlamaRescorer(
                self.client, n_vocab=self._llama_vocab(), n_probs=rescore_candidates(config)
            )
            self._rescoring_how = "llama-server n_probs: forced decoding, batched one by one"
        elif self._facts.get("token_ids"):
            self._rescorer, self._rescoring_how = self._openai_scorer()
        self.capabilities = Capabilities(
            full_logits=False,
            deterministic_seed=self.api == "llama",
            rescoring=self._rescorer is not None,
            token_ids=bool(self._facts.get("token_ids", True)),
        )

    # -- starting and inspecting the server --------------------------------------------------
    def _start_server(self, binary: str) -> str:
        flags = detect_flags(binary)
        argv = llama_server_argv(
            str(Path(binary).expanduser().resolve()),  # "./llama-server" stays a path
            flags,
            self.config,
            speculative=self.path == "speculative",
            slots=self.max_in_flight,
            extra=shlex.split(self.settings.extra_args),
            draft_extra=shlex.split(self.settings.draft_args),
            spec_type=self.settings.spec_type,
        )
        self._shared_argv, self._draft_flags = split_draft(argv, flags)
        self._server_version = flags.version
        self.drafts_from_file = "--model-draft" in self._draft_flags
        self._server = ServerProcess.start(
            argv, log_path=self._log_path("llama-server"), timeout_s=self.settings.start_timeout_s
        )
        return self._server.url

    def _start_vllm(self, model: str) -> str:
        """Start vLLM on ``model`` for this path (`equiv.engines.server.vllm_command`)."""
        s = self.settings
        spec = spec_config(s.vllm_spec_config, self.config)
        argv = vllm_argv(
            s.vllm_python or sys.executable, model, self.config,
            speculative=self.path == "speculative", slots=self.max_in_flight,
            logprobs=rescore_candidates(self.config), spec=spec,
            extra=shlex.split(s.extra_args), draft_extra=shlex.split(s.draft_args),
        )  # fmt: skip
        self._shared_argv, self._draft_flags = split_vllm_draft(argv)
        self.drafts_from_file = drafts_with_model(spec)
        self._server = ServerProcess.start(
            argv, log_path=self._log_path("vllm"), timeout_s=max(s.start_timeout_s, 900.0),
            name="vLLM", env=vllm_env(self.path == "speculative"),
        )  # fmt: skip
        return self._server.url

    def _log_path(self, server: str) -> Path:
        log_dir = Path(self.settings.log_dir or tempfile.mkdtemp(prefix="equiv-server-"))
        return log_dir / f"{server}-{self.path}.log"

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
        if self.settings.vllm_model:  # the vLLM equiv started: its version, as llama-server's
            version = self.client.get("/version")
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
            n_vocab = openai_vocab_size(self.client, model=self.model)
            if n_vocab is None:
                return None, "none: the server does not say its vocabulary size"
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
    def prompt_tokens(self, prompt: Prompt) -> list[int]:
        if self.api == "openai":  # vLLM's /tokenize; "content"/"add_special": llama-server's
            body: JSONDict = {"model": self.model, "add_special_tokens": True}
            if prompt.messages is None:
                body.update(prompt=prompt.text, content=prompt.text, add_special=True)
            else:
                body["messages"] = [{"role": r, "content": c} for r, c in prompt.messages]
                body["add_generation_prompt"] = True
                body["add_special_tokens"] = False
            ids = [int(t) for t in self._tokens(self.client.post("/tokenize", body))]
            if not ids:
                raise EngineError(
                    f"{self.url}/tokenize returned no tokens for prompt {prompt.key!r}; for "
                    "llama-server use --server-api llama (its /tokenize takes no chat messages)"
                )
            return ids
        if prompt.messages is None:
            return self._tokenize(str(prompt.text), add_special=True, parse_special=False)
        messages = [{"role": r, "content": c} for r, c in prompt.messages]
        rendered = self.client.post("/apply-template", {"messages": messages}).get("prompt")
        if not isinstance(rendered, str):
            raise EngineError(f"{self.url}/apply-template returned no prompt for {prompt.key!r}")
        ids = self._tokenize(rendered, add_special=False, parse_special=True)
        if self._bos is None:  # what the vocabulary adds: [BOS] or nothing
            self._bos = self._tokenize("", add_special=True, parse_special=False)
        if self._bos and (not ids or ids[0] != self._bos[0]):
            ids.insert(0, self._bos[0])  # exactly one BOS, as the in-process engine
        return ids

    def _tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        body: JSONDict = {
            "content": text,
            "add_special": add_special,
            "parse_special": parse_special,
        }
        body["with_pieces"] = True
        ids = []
        for entry in self._tokens(self.client.post("/tokenize", body)):
            if isinstance(entry, dict):
                piece = entry.get("piece", "")
                if isinstance(piece, list):
                    piece = bytes(piece).decode("utf-8", errors="replace")
                self._pieces.setdefault(int(entry["id"]), str(piece))
                ids.append(int(entry["id"]))
            else:
                ids.append(int(entry))
        return ids

    def _tokens(self, data: Any) -> list[Any]:
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list):
            raise EngineError(
                f"{self.url}/tokenize returned no 'tokens' ({str(data)[:120]!r}); equiv needs the "
                "server's tokenizer (llama-server and vLLM have /tokenize)"
            )
        return tokens

    def token_text(self, token: int) -> str:
        if token not in self._pieces:
            body: JSONDict = {"tokens": [token]}
            if self.api == "openai":
                body["model"] = self.model
            data = self.client.post("/detokenize", body)
            self._pieces[token] = str(data.get("content", data.get("prompt", "")))
        return self._pieces[token]

    def _token_bytes(self, token: int) -> bytes:
        """A token's bytes from the target's GGUF vocabulary (read once, where rows must be
        placed among byte pieces)."""
        vocab = token_bytes(str(self.config.target.path))
        return vocab[token] if 0 <= token < len(vocab) else b""

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
        """Log-probabilities asked per token (on the sampling baseline: `rescore_candidates`)."""
        if self.path == PathName.BASELINE and not sampling.greedy:
            return rescore_candidates(self.config)
        return self.config.top_k_record

    def _raise_if_dead(self) -> None:
        if self._server is not None and not self._server.alive():
            raise EngineError(
                f"the {self.path} llama-server (started by equiv) exited with code "
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
        for token, piece in zip(parsed.tokens, parsed.pieces, strict=False):
            if piece:
                self._pieces.setdefault(token, piece)
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
        if self._server is not None:
            fp.update(server_version=self._server_version, server_argv=self._shared_argv)
        if self.path == "speculative":
            draft_config = fp["draft_config"] = cfg.draft_config.to_dict()
            if "--model-draft" in self._draft_flags:  # the draft equiv gave llama-server
                draft = read_gguf_info(cfg.draft.path)
                fp.update(draft_sha256=draft.sha256, draft_quant=draft.quant)
            if self._server is not None:
                draft_config["server_flags"] = list(self._draft_flags)
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


def rescore_candidates(config: RunConfig) -> int:
    """K of the scoring requests: enough candidates to cover the sampler chain's whole support
    when it has a top_k (then its probabilities are exact), and at least ``top_k_record``."""
    top_k = config.sampling.top_k
    return max(config.top_k_record, top_k if top_k > 0 else 0)
