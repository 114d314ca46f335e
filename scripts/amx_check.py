"""Does llama.cpp's AMX matrix multiply run on this host?

llama.cpp built for a CPU with AMX-INT8 (``-march=native``) lays quantized weights out for its
AMX kernels (an "extra buffer type", `ggml_backend_amx_buffer_type` in
`ggml/src/ggml-cpu/amx/amx.cpp`) and multiplies them with `ggml_backend_amx_mul_mat`, which on
some hosts segfaults on the first decode (llama.cpp issue 20824; reports on virtualized Sapphire
and Granite Rapids). This script loads a GGUF with llama-cpp-python twice, each in a child
process: with the extra buffer types (llama.cpp's default) and without them (llama-server's
``--no-repack``, what `equiv.engines.llama_load` does where the build has the AMX kernels), and
evaluates 40 prompt tokens in each. It prints llama.cpp's system line and one JSON line a case
(the child's exit status: -11 is a segfault) and exits 0 whatever it finds:

    python scripts/amx_check.py [GGUF]   # default: the bundled target
"""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = """
import sys, llama_cpp
from llama_cpp import _internals
loader = _internals.LlamaModel
def model(**kwargs):
    kwargs["params"].use_extra_bufts = sys.argv[2] == "1"
    return loader(**kwargs)
vars(_internals)["LlamaModel"] = model
llm = llama_cpp.Llama(sys.argv[1], n_ctx=256, logits_all=True, verbose=False)
llm.eval(llm.tokenize(b"def gcd(a, b):\\n    " * 10)[:40])
"""


def main() -> None:
    import llama_cpp

    if len(sys.argv) > 1:
        path = sys.argv[1]
    else:
        from equiv.models.pair import default_target

        path = default_target().path
    print(llama_cpp.llama_print_system_info().decode(errors="replace").strip())
    for extra in (True, False):
        child = [sys.executable, "-c", CHILD, path, "1" if extra else "0"]
        done = subprocess.run(child, capture_output=True, check=False)
        print(json.dumps({"extra_buffer_types": extra, "exit_status": done.returncode}))


if __name__ == "__main__":
    main()
