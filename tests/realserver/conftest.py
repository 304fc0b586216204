"""Real OpenAI-compatible servers for the tests, both serving the tiny stories260K model.

- `llama_server`: llama.cpp's own `llama-server`, from `$CTXPRESS_LLAMA_SERVER` or the cache that
  `scripts/build-llama-server.sh` fills.
- `llama_cpp_python_server`: `llama-cpp-python[server]` (other wording, two quirks), run with the
  python from `$CTXPRESS_LLAMA_CPP_PYTHON` or the venv that `build-llama-server.sh --python-server`
  caches.

Both are built once and cached outside the repo, keyed by the llama-cpp-python version pinned in the
build script. Missing: the tests skip locally and fail under CI=true, like the shared data they need.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import IN_CI, REPO_ROOT, require_shared_data

BUILD_SCRIPT = REPO_ROOT / "scripts" / "build-llama-server.sh"
MODEL_ALIAS = "stories260K"
CONTEXT_SIZE = 256  # small on purpose: a few hundred words overflow it
STARTUP_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class RealServer:
    base_url: str  # OpenAI-style, ends in /v1
    model: str
    context_size: int
    log_path: Path


def pinned_llama_cpp_python_version() -> str:
    """The version pinned in the build script: one place to bump it."""
    match = re.search(r'^LLAMA_CPP_PYTHON_VERSION="([^"]+)"', BUILD_SCRIPT.read_text(), re.MULTILINE)
    assert match, f"no LLAMA_CPP_PYTHON_VERSION in {BUILD_SCRIPT.name}"
    return match.group(1)


def cached_executable(env_var: str, cache_subpath: str, how_to_build: str) -> Path:
    """`$env_var`, else the build script's cache path; skip (fail under CI=true) when it is missing."""
    configured = os.environ.get(env_var)
    if configured:
        candidate = Path(configured)
    else:
        cache_root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        candidate = cache_root / "ctxpress" / cache_subpath.format(version=pinned_llama_cpp_python_version())
    if not (candidate.is_file() and os.access(candidate, os.X_OK)):
        reason = f"{candidate} not found: run `{how_to_build}` (scripts/check.sh does) or set {env_var}"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    return candidate


def free_local_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_until_ready(process: subprocess.Popen[bytes], ready_url: str, log_path: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}:\n{log_path.read_text()[-2000:]}")
        try:
            if httpx.get(ready_url, timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass  # not listening yet
        time.sleep(0.1)
    raise RuntimeError(f"server not ready after {STARTUP_TIMEOUT_S} s:\n{log_path.read_text()[-2000:]}")


@contextmanager
def running_server(command: list[str], port: int, ready_path: str, log_path: Path) -> Iterator[RealServer]:
    """Start `command`, wait for `ready_path` to answer 200, stop it afterwards (terminate, then kill)."""
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_until_ready(process, f"http://127.0.0.1:{port}{ready_path}", log_path)
        yield RealServer(f"http://127.0.0.1:{port}/v1", MODEL_ALIAS, CONTEXT_SIZE, log_path)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealServer]:
    binary = cached_executable(
        "CTXPRESS_LLAMA_SERVER", "llama-server-{version}/llama-server", "bash scripts/build-llama-server.sh"
    )
    model_path = require_shared_data("models", "stories260K.gguf")
    port = free_local_port()
    command = [
        str(binary),
        *("-m", str(model_path), "-a", MODEL_ALIAS, "-c", str(CONTEXT_SIZE), "-np", "1", "-t", "1"),
        *("--host", "127.0.0.1", "--port", str(port)),
    ]
    log_path = tmp_path_factory.mktemp("llama-server") / "server.log"
    with running_server(command, port, "/health", log_path) as server:
        yield server


@pytest.fixture(scope="session")
def llama_cpp_python_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealServer]:
    python = cached_executable(
        "CTXPRESS_LLAMA_CPP_PYTHON",
        "llama-cpp-python-server-{version}/bin/python",
        "bash scripts/build-llama-server.sh --python-server",
    )
    model_path = require_shared_data("models", "stories260K.gguf")
    port = free_local_port()
    command = [
        str(python),
        *("-m", "llama_cpp.server", "--model", str(model_path), "--model_alias", MODEL_ALIAS),
        *("--n_ctx", str(CONTEXT_SIZE), "--n_threads", "1", "--host", "127.0.0.1", "--port", str(port)),
    ]
    log_path = tmp_path_factory.mktemp("llama-cpp-python-server") / "server.log"
    # This server has no /health; /v1/models answers once the model is loaded.
    with running_server(command, port, "/v1/models", log_path) as server:
        yield server
