"""LangGraph's Agent Server (`langgraph dev`, its in-memory runtime) as a peer process (issue 17).

    .venv/bin/python bench/agent_server.py      # only make (or check) its virtualenv, print its versions

`langgraph-cli[inmem]` cannot go into the project's virtualenv: `langgraph-api` pins `jsonschema-rs`
below what schemathesis (a dev dependency) needs, and it brings uvloop and httptools, which uvicorn
would pick up silently for the service itself. So the Agent Server gets a virtualenv of its own,
`.venv-agent-server/` in the repository, made here on first use: `python -m venv`, then
`pip install 'langgraph-cli[inmem]' -e '.[server]'` (the project itself: the peer serves the same
graph code and offline model, `bench/agent_server_graph.py`) with the langgraph / langchain
packages pinned to the versions of the project's virtualenv. It is made again when that
requirement changes (a stamp file records it); nothing else uses it.

The server runs `langgraph dev --no-browser --no-reload` in a scratch folder holding its
`langgraph.json`, with `LANGSMITH_TRACING=false`, its run concurrency given explicitly
(`--n-jobs-per-worker`: `langgraph dev` uses 1 when it is not given, the documented default of the
setting is 10).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from agent_server_graph import COMPRESSION_ENV, DATA_ENV
from common import REPO_ROOT
from ctxpress.app.testing.ports import free_port

VENV = REPO_ROOT / ".venv-agent-server"
STAMP = VENV / "ctxpress-bench.json"
REQUIREMENTS: tuple[str, ...] = ("langgraph-cli[inmem]", "-e", ".[server]")
#: Pinned to the project virtualenv's versions, so both sides run the same LangGraph and LangChain.
PINNED_PREFIXES: tuple[str, ...] = ("langgraph", "langchain", "langsmith")
#: Pinned only when the project has them; never forced into the Agent Server's environment otherwise.
NOT_PINNED: frozenset[str] = frozenset({"langgraph-api", "langgraph-cli", "langgraph-runtime-inmem"})
#: What the report names beside the figures.
REPORTED: tuple[str, ...] = (
    "langgraph-api",
    "langgraph-runtime-inmem",
    "langgraph-cli",
    "langgraph",
    "langchain",
    "langchain-core",
    "uvicorn",
    "uvloop",
)
GRAPH_NAME = "ctxpress"
GRAPH_FILE = Path(__file__).resolve().parent / "agent_server_graph.py"
START_TIMEOUT_S = 120.0
INSTALL_TIMEOUT_S = 1200.0


def constraints() -> list[str]:
    """`name==version` of this virtualenv's langgraph / langchain / langsmith packages."""
    pins: dict[str, str] = {}
    for distribution in importlib.metadata.distributions():
        name = (distribution.metadata["Name"] or "").lower().replace("_", "-")
        if name.startswith(PINNED_PREFIXES) and name not in NOT_PINNED:
            pins[name] = distribution.version
    return [f"{name}=={version}" for name, version in sorted(pins.items())]


def venv_python() -> Path:
    return VENV / "bin" / "python"


def ensure_venv() -> Path:
    """The Agent Server's virtualenv, made or brought up to date (see the module docstring)."""
    wanted = {
        "python": sys.version.split()[0],
        "requirements": list(REQUIREMENTS),
        "constraints": constraints(),
    }
    if STAMP.exists() and json.loads(STAMP.read_text(encoding="utf-8")) == wanted:
        return VENV
    print(f"making {VENV.name}/ for the Agent Server (pip install; a few minutes the first time)", flush=True)
    if not venv_python().exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, timeout=INSTALL_TIMEOUT_S)
    constraints_file = VENV / "constraints.txt"
    constraints_file.write_text("\n".join(wanted["constraints"]) + "\n", encoding="utf-8")
    subprocess.run(
        [str(venv_python()), "-m", "pip", "install", "--quiet", "-c", str(constraints_file), *REQUIREMENTS],
        check=True,
        cwd=REPO_ROOT,
        timeout=INSTALL_TIMEOUT_S,
    )
    STAMP.write_text(json.dumps(wanted, indent=1) + "\n", encoding="utf-8")
    return VENV


def versions() -> dict[str, str]:
    """Versions of the reported packages inside the Agent Server's virtualenv."""
    script = (
        "import importlib.metadata as m, json, sys\n"
        "out = {}\n"
        "for name in sys.argv[1:]:\n"
        "    try: out[name] = m.version(name)\n"
        "    except m.PackageNotFoundError: out[name] = 'not installed'\n"
        "print(json.dumps(out))\n"
    )
    output = subprocess.run(
        [str(venv_python()), "-c", script, *REPORTED], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    found: dict[str, str] = json.loads(output)
    return found


def project_versions() -> dict[str, str]:
    """The same packages in the project's virtualenv (the Agent Server's packages are absent)."""
    found = {}
    for name in REPORTED:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def write_config(root: Path) -> Path:
    """`langgraph.json` in `root`: the one graph, by file path."""
    config = {"dependencies": ["."], "graphs": {GRAPH_NAME: f"{GRAPH_FILE}:graph"}}
    path = root / "langgraph.json"
    path.write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    return path


@dataclass
class AgentServer:
    process: subprocess.Popen[bytes]
    port: int
    jobs: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid


@contextlib.contextmanager
def running_agent_server(root: Path, jobs: int, *, compression: bool = True) -> Iterator[AgentServer]:
    """`langgraph dev` on a free 127.0.0.1 port, in `root` (stopped on exit, whatever happened)."""
    root.mkdir(parents=True, exist_ok=True)
    config = write_config(root)
    port = free_port()
    env = {
        **os.environ,
        "LANGSMITH_TRACING": "false",
        "LANGCHAIN_TRACING_V2": "false",
        DATA_ENV: str(root / "data"),
        COMPRESSION_ENV: "1" if compression else "0",
    }
    env.pop("VIRTUAL_ENV", None)
    command = [
        str(VENV / "bin" / "langgraph"),
        "dev",
        "--no-browser",
        "--no-reload",
        "--port",
        str(port),
        "--config",
        str(config),
        "--n-jobs-per-worker",
        str(jobs),
    ]
    log = root / "agent-server.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            command, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    server = AgentServer(process, port, jobs)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"langgraph dev exited: {log.read_text(errors='replace')[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{server.base_url}/ok", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"langgraph dev did not start: {log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)  # uvicorn's clean shutdown
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds so far of a process and its live descendants (`/proc`)."""
    clock = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the process ended meanwhile
        parents[int(entry.name)] = int(fields[1])
        times[int(entry.name)] = (int(fields[11]) + int(fields[12])) / clock
    members, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, ppid in parents.items() if ppid == parent and child not in members]
        members.update(children)
        frontier.extend(children)
    return sum(times.get(member, 0.0) for member in members)


def main() -> None:
    ensure_venv()
    print(json.dumps({"agent server venv": versions(), "project venv": project_versions()}, indent=1))


if __name__ == "__main__":
    main()
