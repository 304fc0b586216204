"""The library works without `langchain-openai` (the `openai` extra); only the ChatOpenAI subclass needs it.

Each check runs in a fresh interpreter, because this test process has imported `langchain_openai`
long before (tests/test_overflow.py), and `sys.modules` cannot be made to forget it for real.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

# Makes `import langchain_openai` (and its submodules) fail as if the package were not installed,
# and remembers who tried.
BLOCK_LANGCHAIN_OPENAI = """
import importlib.abc
import sys

attempts = []

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "langchain_openai" or name.startswith("langchain_openai."):
            attempts.append(name)
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Blocker())
"""


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )


def test_library_and_overflow_import_without_langchain_openai() -> None:
    result = run_python(
        BLOCK_LANGCHAIN_OPENAI
        + """
import ctxpress
import ctxpress.overflow
from ctxpress.overflow import *  # noqa: F403
from ctxpress.overflow import OverflowMappingMiddleware, fill_null_tool_call_content

assert OverflowMappingMiddleware().empty_stream_as_overflow is False
assert ctxpress.ContextCompressionMiddleware is not None
print("attempts", attempts)
"""
    )
    assert result.returncode == 0, result.stderr
    assert "attempts []" in result.stdout  # nothing even tried to import it


def test_every_library_module_imports_without_langchain_openai() -> None:
    # The library is everything below ctxpress except the application and the tools on top of it;
    # `ctxpress.overflow.openai` is the one module that needs the extra.
    result = run_python(
        BLOCK_LANGCHAIN_OPENAI
        + """
import importlib
import pkgutil

import ctxpress

needs_extra = {"ctxpress.overflow.openai"}
on_top = ("ctxpress.app", "ctxpress.tools")
imported = []
for module in pkgutil.walk_packages(ctxpress.__path__, "ctxpress."):
    name = module.name
    if name in needs_extra or name.startswith(on_top):
        continue
    importlib.import_module(name)
    imported.append(name)
assert "ctxpress.overflow.classify" in imported and "ctxpress.middleware" in imported, imported
print("attempts", attempts)
"""
    )
    assert result.returncode == 0, result.stderr
    assert "attempts []" in result.stdout


def test_openai_subclass_names_the_extra_when_langchain_openai_is_missing() -> None:
    result = run_python(
        BLOCK_LANGCHAIN_OPENAI
        + """
import ctxpress.overflow

for load in (
    lambda: ctxpress.overflow.ChatOpenAINoNullContent,
    lambda: __import__("ctxpress.overflow.openai"),
):
    try:
        load()
    except ImportError as error:
        print("error:", error)
    else:
        raise SystemExit("no ImportError")
"""
    )
    assert result.returncode == 0, result.stderr
    errors = [line for line in result.stdout.splitlines() if line.startswith("error:")]
    assert len(errors) == 2
    assert all("pip install 'ctxpress[openai]'" in line for line in errors), errors


def test_openai_subclass_is_loaded_only_when_asked_for() -> None:
    result = run_python(
        """
import sys

import ctxpress.overflow

before = "langchain_openai" in sys.modules
model_type = ctxpress.overflow.ChatOpenAINoNullContent
from langchain_openai import ChatOpenAI

print(before, issubclass(model_type, ChatOpenAI))
"""
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "True"]
