"""Turn a Gemma 3 GGUF into a Hugging Face model directory that vLLM can serve.

Run by the vLLM venv's interpreter (scripts/build_vllm_cpu.sh): ``python hf_from_gguf.py GGUF OUT``.
transformers dequantizes the GGUF (``from_pretrained(dir, gguf_file=...)``) but refuses to save a
model that still carries its GGUF quantization config, so the weights are loaded into a fresh model
of the same class and saved as bf16 safetensors. The tokenizer transformers builds from the GGUF
adds no BOS (Gemma then writes garbage) and the bundled GGUF has no chat template: the directory
gets both, the template written as llama.cpp's built-in "gemma" one renders (a system message
opens the first user turn; "assistant" is "model"), so a chat prompt is the same tokens on either
server. Writes into ``OUT.partial`` and renames, so a killed run leaves no half directory.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

GEMMA_TEMPLATE = (
    "{{ bos_token }}"
    "{% set first = namespace(system='') %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}"
    "{% set first.system = message['content'] | trim ~ '\n\n' %}"
    "{% else %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' ~ role ~ '\n' ~ first.system ~ message['content'] | trim"
    " ~ '<end_of_turn>\n' }}"
    "{% set first.system = '' %}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)


def convert(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.bfloat16
    model = type(loaded)(config)
    model.load_state_dict(loaded.state_dict())
    model.to(torch.bfloat16).save_pretrained(partial)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer.add_bos_token = True
    tokenizer.chat_template = GEMMA_TEMPLATE
    tokenizer.save_pretrained(partial)
    ids = tokenizer("Hello")["input_ids"]
    if not ids or ids[0] != tokenizer.bos_token_id:
        raise SystemExit(f"hf_from_gguf: the tokenizer of {out} adds no BOS ({ids})")
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gguf", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    if not args.gguf.is_file():
        raise SystemExit(f"hf_from_gguf: {args.gguf} is not a file")
    started = time.monotonic()
    convert(args.gguf, args.out)
    print(f"hf_from_gguf: {args.out} in {time.monotonic() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
