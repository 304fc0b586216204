#!/usr/bin/env bash
# Installs everything the test suite needs into ./.venv, then runs lint, type checks and tests.
# The one test command of the project: README.md and .ci/run both call it.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
bash scripts/ensure-services.sh

.venv/bin/ruff check src tests bench
.venv/bin/ruff format --check src tests bench
.venv/bin/mypy
.venv/bin/pytest "$@"
