"""Real vLLM servers for the tests: the CPU build and the bundled pair as Hugging Face directories
that scripts/build_vllm_cpu.sh caches (or a skip saying how to build them), started on a free port
with the flags both paths share."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from equiv.engines.server.process import free_port, log_tail
from equiv.models.pair import cache_dir
from equiv.records import ResultRecord, ResultsFile

VLLM_CPU = "0.32.0"  # scripts/build_vllm_cpu.sh's default
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
SHARED_FLAGS = "--dtype bfloat16 --enforce-eager"  # beside what equiv sets, on both paths

# four code prompts (n-gram lookup finds something to draft) and a chat prompt (the chat template
# the HF directory carries, BOS included: /tokenize refuses a chat without one)
PROMPTS = [
    "code/py_gcd",
    "code/fib_lt",
    "code/py_sum_list",
    "code/go_range_loop",
    "chat/capital_france",
]
TEMP0_ARGS = ["--max-tokens", "16", *(arg for key in PROMPTS for arg in ("--prompt", key))]


def vllm_root() -> Path:
    """``$EQUIV_VLLM``, else scripts/build_vllm_cpu.sh's cache; a skip when it is not built, a
    failure when ``$EQUIV_VLLM`` (set by CI) names a directory that holds no build."""
    given = os.environ.get("EQUIV_VLLM")
    root = Path(given) if given else cache_dir() / f"vllm-cpu-{VLLM_CPU}"
    if not (root / "venv" / ".installed").is_file() or not (root / "models" / "draft").is_dir():
        message = f"no vLLM CPU build at {root}: run scripts/build_vllm_cpu.sh"
        if given:
            pytest.fail(message)
        pytest.skip(message)
    return root


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/v1/models", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@contextlib.contextmanager
def vllm_server(
    root: Path, log: Path, *, speculative: dict[str, object] | None = None, core: int = 0
) -> Iterator[str]:
    """One vLLM server for the bundled target on one core; yields its URL. Both paths get the
    same flags (``--disable-hybrid-kv-cache-manager`` too: a Gemma 3 draft model needs it, and
    a flag on one path only would be a setup difference)."""
    port = free_port()
    argv = [
        str(root / "venv" / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(root / "models" / "target"), "--served-model-name", "gemma",
        *SHARED_FLAGS.split(), "--max-model-len", "2048", "--max-num-seqs", "8",
        "--max-logprobs", "40", "--disable-hybrid-kv-cache-manager",
        "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip
    if speculative is not None:
        argv += ["--speculative-config", json.dumps(speculative)]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": str(core)}
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 400
        while not _answers(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"vLLM did not start ({log}):\n{log_tail(log)}")
            time.sleep(1)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@contextlib.contextmanager
def vllm_pair(logs: Path, speculative: dict[str, object]) -> Iterator[tuple[str, str]]:
    """(baseline URL, speculative URL): the plain server on core 0, the one with this
    ``--speculative-config`` on core 1, their logs under ``logs``."""
    root = vllm_root()
    with (
        vllm_server(root, logs / "baseline.log", core=0) as baseline,
        vllm_server(root, logs / "speculative.log", speculative=speculative, core=1) as spec,
    ):
        yield baseline, spec


def draft_model_config() -> dict[str, object]:
    """The bundled Q4_0 draft, as its HF directory, drafting 4 tokens."""
    draft = vllm_root() / "models" / "draft"
    return {"method": "draft_model", "model": str(draft), "num_speculative_tokens": 4}


def equiv_run(
    baseline: str, speculative: str, out: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """``equiv run`` in URL mode against the two servers, as a vLLM user runs it: no model file
    (the servers' own model, its vocabulary found from the server)."""
    argv = [sys.executable, "-m", "equiv", "run", "--engine", "server"]
    argv += ["--baseline-url", baseline, "--speculative-url", speculative]
    argv += ["--out", str(out), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)


def equiv_starts_vllm(
    spec: dict[str, object], out: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """``equiv run --vllm-model``: equiv starts both vLLM servers itself (the bundled target's
    HF directory, the speculative one with ``spec``), with the flags the test servers get."""
    root = vllm_root()
    argv = [sys.executable, "-m", "equiv", "run", "--engine", "server"]
    argv += ["--vllm-model", str(root / "models" / "target")]
    argv += ["--vllm-python", str(root / "venv" / "bin" / "python")]
    argv += ["--vllm-spec-config", json.dumps(spec), "--server-args", SHARED_FLAGS]
    argv += ["--out", str(out), *args]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    return subprocess.run(argv, capture_output=True, text=True, timeout=1500, check=False, env=env)


def temp0_records(servers: tuple[str, str], out: Path) -> list[ResultRecord]:
    """``equiv run`` at temp 0 on `PROMPTS` (16 tokens) against the pair, checked by
    `check_temp0`."""
    return check_temp0(equiv_run(*servers, out, *TEMP0_ARGS), out)


def check_temp0(proc: subprocess.CompletedProcess[str], out: Path) -> list[ResultRecord]:
    """A temp-0 run on `PROMPTS` checked as every correct deployment must pass: the
    speculative server speculates and the baseline does not, every prompt has a result, and a
    near-tie flipped under batched verification (numeric drift) is the only difference
    allowed."""
    assert proc.returncode == 0, proc.stderr  # 1 would be a failed control (determinism)
    assert "Traceback" not in proc.stderr
    assert "target the servers' own (equiv reads no model file)" in proc.stderr
    results = ResultsFile(out / "results.jsonl")
    fingerprints = results.header().fingerprints
    assert fingerprints["speculative"]["speculating"] is True  # its /metrics counters exist
    assert fingerprints["baseline"]["speculating"] is False
    records = results.results()
    assert {r.key for r in records} == {f"{k}::temp0" for k in PROMPTS}
    assert {r.verdict.label.value for r in records if r.verdict} <= {"equivalent", "numeric-drift"}
    return records
