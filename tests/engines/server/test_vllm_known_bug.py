"""The vLLM CPU build's known sampler bug, kept as a test: under speculative decoding
vllm-cpu 0.32.0 gives the verified positions uninitialised temperature, top-p and top-k
(scripts/vllm_cpu_expand_check.py says how; docs/servers.md#vllm what equiv saw of it).

The check calls the wheel's own functions in its own venv, so it is deterministic where the
sampling runs are not. On 0.32.0 it must find the bug; once a fixed vLLM is pinned
(`vllm_server.VLLM_CPU`), every case must expand correctly, and this test says so.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from vllm_server import VLLM_CPU, vllm_root

pytestmark = [pytest.mark.vllm]

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "vllm_cpu_expand_check.py"
BROKEN = {"0.32.0"}  # versions whose CPU expand_kernel writes a copy nobody reads


def test_the_cpu_build_expands_sampling_parameters_as_its_version_is_known_to():
    python = vllm_root() / "venv" / "bin" / "python"
    proc = subprocess.run(
        [str(python), str(SCRIPT)], capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    cases = {c["case"]: c for c in map(json.loads, proc.stdout.splitlines())}
    assert {c["vllm"] for c in cases.values()} == {VLLM_CPU}
    assert cases["control_int64"]["ok"]  # no copy for an int64 input: the op itself works
    wrong = {name for name, c in cases.items() if not c["ok"]}
    if VLLM_CPU in BROKEN:
        assert wrong == {"temperature", "top_p", "top_k"}, cases
    else:
        assert wrong == set(), f"vLLM {VLLM_CPU} still expands {wrong} wrongly: {cases}"
