#!/usr/bin/env bash
# Build llama.cpp's llama-server from the llama.cpp sources that the llama-cpp-python sdist on PyPI
# vendors (the same llama.cpp the in-process engine runs), and cache the binary under
# ${EQUIV_CACHE:-~/.cache/equiv}/llama-server-<llama-cpp-python version>/llama-server.
#
# Prints the binary's path as the last line of stdout; everything else goes to stderr.
# A cached binary that runs is reused (seconds); a fresh build takes about 10-15 minutes on 2 cores.
#
# Environment: LLAMA_CPP_PYTHON_VERSION (default: the version pinned in pyproject.toml, 0.3.36),
# PYTHON (an interpreter with pip; default: python3), EQUIV_BUILD_JOBS (default 2),
# EQUIV_CACHE (cache root), CMAKE_ARGS_SERVER (extra cmake arguments, e.g. -DGGML_CUDA=ON).
set -euo pipefail

version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
python="${PYTHON:-python3}"
jobs="${EQUIV_BUILD_JOBS:-2}"
cache_root="${EQUIV_CACHE:-$HOME/.cache/equiv}"
dest="$cache_root/llama-server-$version"
bin="$dest/llama-server"

log() { printf 'build_llama_server: %s\n' "$*" >&2; }

# llama.cpp's AMX kernels segfault on the first decode on some hosts with AMX (llama.cpp issue
# 20824; seen here: scripts/amx_check.py), so they are compiled out (the compiler defines
# __AMX_INT8__ for such a CPU under -march=native; ggml builds its AMX backend only where it is
# defined). Elsewhere the flag changes nothing. A cached binary built without it is rebuilt.
flags="-U__AMX_INT8__"

if [[ -x "$bin" ]] && "$bin" --version >/dev/null 2>&1 &&
    grep -q -- "\"c_flags\": \"$flags\"" "$dest/build.json" 2>/dev/null; then
    log "cached: $bin"
    echo "$bin"
    exit 0
fi

started=$(date +%s)
work="$(mktemp -d "${TMPDIR:-/tmp}/equiv-llama-server.XXXXXX")"
trap 'rm -rf "$work"' EXIT

log "downloading the llama-cpp-python $version sdist from PyPI"
"$python" -m pip download --quiet --no-deps --no-binary :all: \
    "llama-cpp-python==$version" -d "$work" >&2
tar -xzf "$work"/llama_cpp_python-"$version".tar.gz -C "$work"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
if [[ ! -f "$src/CMakeLists.txt" ]]; then
    log "error: $src has no CMakeLists.txt; the sdist of llama-cpp-python $version does not" \
        "vendor llama.cpp where expected; set LLAMA_CPP_PYTHON_VERSION to another version"
    exit 1
fi

# Static libraries, so the cached binary does not depend on the (deleted) build directory; no web
# UI (it would be fetched from the network or built with npm), no HTTPS, no curl.
log "configuring (cmake) in $work/build"
# shellcheck disable=SC2086
cmake -S "$src" -B "$work/build" \
    -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE=ON \
    -DCMAKE_C_FLAGS="$flags" \
    -DCMAKE_CXX_FLAGS="$flags" \
    -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF \
    ${CMAKE_ARGS_SERVER:-} >&2

log "building llama-server with -j$jobs"
cmake --build "$work/build" --target llama-server -j"$jobs" >&2

built="$(find "$work/build" -type f -name llama-server -perm -u+x | head -n 1)"
if [[ -z "$built" ]]; then
    log "error: the build finished but produced no llama-server binary under $work/build"
    exit 1
fi
mkdir -p "$dest"
cp "$built" "$bin.tmp.$$"
mv "$bin.tmp.$$" "$bin" # atomic: a concurrent reader never sees half a binary
elapsed=$(($(date +%s) - started))
printf '{"llama_cpp_python": "%s", "c_flags": "%s", "seconds": %d, "built": "%s"}\n' \
    "$version" "$flags" "$elapsed" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$dest/build.json"
log "built in ${elapsed}s: $bin"
echo "$bin"
