#!/usr/bin/env bash
# Builds llama.cpp's own `llama-server` once and caches it outside the repo; prints the binary path.
#
# Why this way: the real-server tests (tests/realserver/) need a genuine OpenAI-compatible server,
# and the only place a pinned llama.cpp source can come from here is the PyPI sdist of
# llama-cpp-python, which vendors it under vendor/llama.cpp. The build takes about 4 minutes on
# 2 cores, so the binary is kept in ${XDG_CACHE_HOME:-$HOME/.cache}/ctxpress/llama-server-<version>/
# and reused on every later run (idempotent: a working cached binary means no work at all).
#
# With --python-server it instead installs llama-cpp-python[server] (the same pinned sdist, a second
# real server with other wording and quirks) into a venv in .../llama-cpp-python-server-<version>/
# and prints that venv's python. Also about 4-6 minutes to compile, also done once.
#
# Usage: bash scripts/build-llama-server.sh [--python-server]  -> stdout: one absolute path
# All progress goes to stderr so that `path=$(bash scripts/build-llama-server.sh)` works.
set -euo pipefail

# Pinned: bump deliberately; the cache directories are keyed by it, so a bump triggers one rebuild.
LLAMA_CPP_PYTHON_VERSION="0.3.36"

mode="llama-server"
if [ "${1:-}" = "--python-server" ]; then
  mode="python-server"
elif [ -n "${1:-}" ]; then
  echo "usage: $0 [--python-server]" >&2
  exit 2
fi

cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/ctxpress"
if [ "$mode" = "llama-server" ]; then
  target_dir="$cache_root/llama-server-$LLAMA_CPP_PYTHON_VERSION"
  product="$target_dir/llama-server"
else
  target_dir="$cache_root/llama-cpp-python-server-$LLAMA_CPP_PYTHON_VERSION"
  product="$target_dir/bin/python"
fi

log() { printf 'build-llama-server: %s\n' "$*" >&2; }

product_works() {
  if [ "$mode" = "llama-server" ]; then
    [ -x "$product" ] && "$product" --version >/dev/null 2>&1
  else
    # The marker is written only after a complete install, so a half-done venv is never used.
    [ -f "$target_dir/.complete" ] && "$product" -c 'import llama_cpp.server.app' >/dev/null 2>&1
  fi
}

if product_works; then
  printf '%s\n' "$product"
  exit 0
fi

mkdir -p "$cache_root"
# Two concurrent check.sh runs must not build twice into the same place.
exec 9>"$target_dir.lock"
if command -v flock >/dev/null 2>&1; then
  flock 9
fi
if product_works; then  # another run finished the build while we waited for the lock
  printf '%s\n' "$product"
  exit 0
fi

# Toolchain: cmake and a C++ compiler. Install from Debian only when missing (CI on a clean machine).
missing_packages=()
command -v cmake >/dev/null 2>&1 || missing_packages+=(cmake)
command -v c++ >/dev/null 2>&1 || missing_packages+=(g++)
command -v make >/dev/null 2>&1 || command -v ninja >/dev/null 2>&1 || missing_packages+=(make)
if [ "${#missing_packages[@]}" -gt 0 ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    log "installing ${missing_packages[*]}"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing_packages[@]}" >&2
  else
    log "missing ${missing_packages[*]} and cannot install them (need root and apt-get)"
    exit 1
  fi
fi

if [ "$mode" = "python-server" ]; then
  rm -rf "$target_dir"
  python3 -m venv "$target_dir"
  log "compiling and installing llama-cpp-python[server] $LLAMA_CPP_PYTHON_VERSION (about 4-6 minutes)"
  started=$SECONDS
  # Same reasons as below for GGML_NATIVE; the multimodal library and tools are not needed.
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TOOLS=OFF" \
    "$target_dir/bin/python" -m pip install -q \
    "llama-cpp-python[server]==$LLAMA_CPP_PYTHON_VERSION" >&2
  log "installed in $((SECONDS - started)) s"
  touch "$target_dir/.complete"
  product_works || { log "installed server does not import: $product"; exit 1; }
  printf '%s\n' "$product"
  exit 0
fi

repo_root="$(cd "$(dirname "$0")/.." && pwd)"
if [ -x "$repo_root/.venv/bin/python" ]; then
  python="$repo_root/.venv/bin/python"
else
  python="python3"
fi

work_dir="$(mktemp -d)"
trap 'rm -rf "$work_dir"' EXIT

log "downloading the llama-cpp-python $LLAMA_CPP_PYTHON_VERSION sdist"
"$python" -m pip download -q --no-deps --no-binary :all: \
  -d "$work_dir/sdist" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" >&2
tar -xzf "$work_dir"/sdist/llama_cpp_python-*.tar.gz -C "$work_dir"
source_dir="$(echo "$work_dir"/llama_cpp_python-*/vendor/llama.cpp)"
[ -f "$source_dir/CMakeLists.txt" ] || { log "no vendored llama.cpp in the sdist"; exit 1; }

generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)

log "configuring (the UI flags keep cmake from downloading a web UI; GGML_NATIVE=OFF keeps the"
log "cached binary runnable on another CPU of the same architecture)"
cmake -S "$source_dir" -B "$work_dir/build" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DGGML_NATIVE=OFF >&2

log "compiling llama-server (about 4 minutes on 2 cores)"
started=$SECONDS
cmake --build "$work_dir/build" --target llama-server -j "$(nproc)" >&2
log "compiled in $((SECONDS - started)) s"

# Copy then rename so that a half-written binary is never picked up from the cache.
mkdir -p "$target_dir"
cp "$work_dir/build/bin/llama-server" "$target_dir/llama-server.partial"
chmod 755 "$target_dir/llama-server.partial"
mv -f "$target_dir/llama-server.partial" "$product"
product_works || { log "built binary does not run: $product"; exit 1; }
printf '%s\n' "$product"
