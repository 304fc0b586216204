"""`pip install ctxpress` brings the library and only what the middleware needs (issue 15).

A fresh virtual environment (no system site-packages) gets `pip install .` from this checkout; in
it the middleware runs inside a real `create_agent` graph, the application's dependencies are
absent, and the `ctxpress` command names the extra to install instead of failing with a traceback.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

import pytest

from ctxpress.tokens import TokenCounter, estimate_tokens, features
from tests.conftest import IN_CI, REPO_ROOT

#: What the library may bring; everything else in the environment must come from these.
#: ormsgpack comes with langgraph already; it is named because `ctxpress.checkpoint_serde` imports it.
LIBRARY_REQUIREMENTS = ("langchain", "langchain-core", "langgraph", "ormsgpack", "pydantic")
#: Packages the application needs and the library must not pull in.
APPLICATION_ONLY = ("fastapi", "sqlalchemy", "alembic", "psycopg", "aiosqlite", "uvicorn", "typer", "rich")

MIDDLEWARE_RUN = r"""
import importlib.util, json, sys, tempfile
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from ctxpress import CompressionConfig, ContextCompressionMiddleware, LocalWorkdir
HISTORY

model = GenericFakeChatModel(messages=iter([AIMessage("done")]))
with tempfile.TemporaryDirectory() as root:
    middleware = ContextCompressionMiddleware(
        CompressionConfig(summary_threshold=1, summary_tool_result_token_limit=50),
        workdir=LocalWorkdir(root),
        summary_model=model,
    )
    agent = create_agent(model, tools=[], middleware=[middleware])
    history = make_history()
    result = agent.invoke({"messages": history})
    import os
    saved = sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)
from ctxpress.tokens import TokenCounter, estimate_tokens, features
print(json.dumps({
    "answer": result["messages"][-1].text,
    "saved": saved,
    "absent": [name for name in sys.argv[1:] if importlib.util.find_spec(name) is None],
    "compiled": features.COMPILED_SCAN is not None,
    "estimates": {profile: [estimate_tokens(text, profile) for text in SAMPLES] for profile in PROFILES},
    "thread": TokenCounter().count_request(history, immutable_messages=True),
}))
"""

#: The thread the middleware runs on in a fresh install (defines `make_history`).
HISTORY = """
def make_history():
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    return [
        HumanMessage("look it up: 查一下上下文压缩的文档", id="h1", name="用户"),
        AIMessage("", id="a1", tool_calls=[{"name": "lookup", "args": {"q": "上下文", "n": [1, 2.5]}, "id": "c1"}]),
        ToolMessage("ROW " * 3000, tool_call_id="c1", name="lookup", id="t1"),
    ]
"""

#: Texts whose estimates every install must agree on, whichever scan it counts with.
SAMPLES = [
    'plain English words, digits 12345 and punctuation: {"a": [1, 2]}',
    "上下文压缩保留完整的对话记录，只把模型看到的视图缩短。鲞鳜鳝",
    "ｆｕｌｌ－ｗｉｄｔｈ、かな、한국어 😀 ÉÀ \\u4e2d " + "x" * 40,
]
PROFILES = ("default", "cl100k", "o200k", "qwen", "deepseek")


def _fresh_venv(path: Path) -> Path:
    venv.EnvBuilder(with_pip=True, system_site_packages=False, clear=True).create(path)
    return path / "bin" / "python"


def _source_copy(destination: Path) -> Path:
    """The checkout's files as a clean clone would have them (tracked and new, not ignored): no
    build output of the development install, and nothing the install writes lands in the checkout."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO_ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination


def _install_checkout(tmp_path: Path, env: dict[str, str] | None = None) -> Path:
    """`pip install .` of a copy of the checkout into a fresh virtual environment; its python."""
    python = _fresh_venv(tmp_path / "venv")
    source = _source_copy(tmp_path / "source")
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(source)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    if install.returncode != 0:
        reason = f"pip install . failed (is the package registry reachable?): {install.stderr[-2000:]}"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    return python


def _run_middleware(python: Path, cwd: Path) -> dict[str, Any]:
    program = MIDDLEWARE_RUN.replace("HISTORY", HISTORY, 1).replace(
        "import importlib.util", f"SAMPLES, PROFILES = {SAMPLES!r}, {PROFILES!r}\nimport importlib.util", 1
    )
    run = subprocess.run(
        [str(python), "-c", program, *(name.replace("-", "_") for name in APPLICATION_ONLY)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    outcome: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return outcome


def _thread_count_here() -> int:
    namespace: dict[str, Any] = {}
    exec(HISTORY, namespace)
    return TokenCounter().count_request(namespace["make_history"](), immutable_messages=True)


def _estimates_here() -> dict[str, list[int]]:
    return {profile: [estimate_tokens(text, profile) for text in SAMPLES] for profile in PROFILES}


def test_plain_install_runs_the_middleware_without_the_application(tmp_path: Path) -> None:
    python = _install_checkout(tmp_path)
    outcome = _run_middleware(python, tmp_path)
    assert outcome["answer"] == "done"
    # Where this checkout's development install built the C scan, `pip install .` builds it too.
    assert outcome["compiled"] == (features.COMPILED_SCAN is not None)
    assert outcome["estimates"] == _estimates_here()
    assert outcome["thread"] == _thread_count_here()
    # L1 ran inside the real graph: the large tool result was offloaded to the workdir (S8).
    assert any(name.startswith("outputs/") for name in outcome["saved"]), outcome["saved"]
    assert sorted(outcome["absent"]) == sorted(name.replace("-", "_") for name in APPLICATION_ONLY)

    fastapi = subprocess.run([str(python), "-c", "import fastapi"], capture_output=True, text=True)
    assert fastapi.returncode != 0 and "No module named 'fastapi'" in fastapi.stderr

    command = subprocess.run(
        [str(tmp_path / "venv" / "bin" / "ctxpress"), "serve"], capture_output=True, text=True, timeout=120
    )
    assert command.returncode == 2
    assert "pip install 'ctxpress[server]'" in command.stderr
    assert "Traceback" not in command.stderr


def test_install_without_a_c_compiler_counts_the_same(tmp_path: Path) -> None:
    """Issue 18 item 13: the C scan is optional. Where it cannot be built (here: a compiler that
    always fails), `pip install .` still succeeds, and the pure scan gives the same estimates and
    the same whole-thread count."""
    env = {**os.environ, "CC": "/bin/false", "LDSHARED": "/bin/false"}
    python = _install_checkout(tmp_path, env)
    outcome = _run_middleware(python, tmp_path)
    assert outcome["compiled"] is False
    assert outcome["answer"] == "done"
    assert outcome["estimates"] == _estimates_here()
    assert outcome["thread"] == _thread_count_here()


def test_library_requirements_are_only_what_the_middleware_needs() -> None:
    """The declared requirements of the library match the list above (pyproject is the source)."""
    import tomllib

    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = {
        requirement.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip()
        for requirement in project["dependencies"]
    }
    assert names == set(LIBRARY_REQUIREMENTS), names
    assert sys.version_info >= (3, 11)
