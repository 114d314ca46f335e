"""The server engine's options: ``--server-*``, ``--baseline-url`` and ``--speculative-url`` of
``equiv run`` (``--equiv-server-*`` in pytest, the same keys in TOML). `equiv.options.table`
gathers them into the run options; they reach the engine as ``config.engine_options``.
"""

from __future__ import annotations

import argparse

from equiv.options.option import Option

__all__ = ["OPTIONS"]


def _concurrency(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"--server-concurrency {value}: give a count >= 1")
    return value


OPTIONS: tuple[Option, ...] = (
    Option(
        "server-bin",
        "--engine server: start llama-server from this binary",
        metavar="PATH",
        engine="server",
        env="EQUIV_SERVER_BIN",
    ),
    Option(
        "vllm-model",
        "--engine server: start vLLM servers for both paths from this Hugging Face model "
        "directory, the speculative one with --vllm-spec-config",
        metavar="DIR",
        engine="server",
        serves_models=True,
    ),
    Option(
        "vllm-python",
        "--engine server with --vllm-model: the Python that has vLLM installed (default: the "
        "one running equiv)",
        metavar="PATH",
        engine="server",
    ),
    Option(
        "vllm-spec-config",
        "--engine server with --vllm-model: the speculative server's --speculative-config, as "
        "JSON (default: n-gram lookup, --draft-max tokens a step; a draft model: "
        '\'{"method": "draft_model", "model": "DIR", "num_speculative_tokens": 4}\')',
        metavar="JSON",
        engine="server",
    ),
    Option(
        "server-args",
        "--engine server with --server-bin or --vllm-model: more server flags for both paths, "
        "quoted (e.g. '-ngl 99 -ctk q8_0'; equiv sets llama-server's model, context, slots, "
        "batch, threads, seed; or vLLM's '--dtype bfloat16'; equiv sets its model, "
        "--max-model-len, --max-num-seqs, --max-logprobs)",
        metavar="FLAGS",
        engine="server",
    ),
    Option(
        "server-draft-args",
        "--engine server with --server-bin or --vllm-model: more flags for the speculative "
        "server only (e.g. '-ngld 99')",
        metavar="FLAGS",
        engine="server",
    ),
    Option(
        "server-spec-type",
        "--engine server with --server-bin: the speculative server's --spec-type, comma-"
        "separated (draft-simple, ngram-mod, draft-mtp, ...; default draft-simple), or "
        "'inferred' to pass none, as a command line without --spec-type; n-gram and MTP types "
        "get no draft model",
        metavar="TYPES",
        engine="server",
    ),
    Option(
        "baseline-url",
        "--engine server: a running server for the baseline",
        metavar="URL",
        engine="server",
        env="EQUIV_BASELINE_URL",
        serves_models=True,
    ),
    Option(
        "speculative-url",
        "--engine server: a running server with a draft model",
        metavar="URL",
        engine="server",
        env="EQUIV_SPECULATIVE_URL",
        serves_models=True,
    ),
    Option(
        "server-api",
        "llama (llama-server /completion), openai (/v1/completions), auto: llama if /props answers",
        default="auto",
        choices=("auto", "llama", "openai"),
        engine="server",
    ),
    Option(
        "server-model",
        "model name of OpenAI requests (default: first served)",
        metavar="M",
        engine="server",
    ),
    Option(
        "server-concurrency",
        "requests in flight per server (and llama-server slots); default 1 at temp 0 (servers "
        "are not batch-invariant), 4 in sampling mode",
        type=_concurrency,
        metavar="N",
        engine="server",
    ),
    Option(
        "server-timeout",
        "seconds to wait for one answer",
        type=float,
        default=600.0,
        metavar="S",
        engine="server",
    ),
)
