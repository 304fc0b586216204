"""Imports point down only (issue 15; the map is in docs/architecture.md).

Every module under `src/ctxpress` is parsed; each `import` / `from … import` naming a ctxpress module
is checked against the layer rules, and the library's third-party imports against what
`pip install ctxpress` brings.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

PACKAGE_ROOT = REPO_ROOT / "src" / "ctxpress"
#: The library's own requirements (pyproject `dependencies`), as import names.
LIBRARY_THIRD_PARTY = frozenset({"langchain", "langchain_core", "langgraph", "ormsgpack", "pydantic"})
#: The one library module that may import an extra's package (lazily, naming the extra when absent).
OPTIONAL_EXTRA_IMPORTS = {
    "ctxpress.overflow.openai": frozenset({"langchain_openai", "openai"}),
    # the `tokenizers` extra, imported only when a token_profile names a real tokenizer
    "ctxpress.tokens.exact": frozenset({"tiktoken", "tokenizers"}),
    # the `fast` extra, imported inside a try: without it every scan takes the pure-Python path
    "ctxpress.tokens.class_counts": frozenset({"numpy"}),
    "ctxpress.tokens.features_batch": frozenset({"numpy"}),
}

#: (importing package prefix, forbidden imported prefixes).
FORBIDDEN: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ctxpress.tools", ("ctxpress.app",)),
    ("ctxpress.app.kb", ("ctxpress.app.server", "ctxpress.app.doctor", "ctxpress.app.cli")),
    ("ctxpress.app.models", ("ctxpress.app.server", "ctxpress.app.doctor", "ctxpress.app.cli")),
    ("ctxpress.app.server", ("ctxpress.app.doctor", "ctxpress.app.cli", "ctxpress.app.testing")),
    ("ctxpress.app.doctor", ("ctxpress.app.cli", "ctxpress.app.testing")),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_library(module: str) -> bool:
    return not module.startswith(("ctxpress.app", "ctxpress.tools"))


def imported_names(path: Path) -> Iterator[str]:
    """Absolute names of everything the module imports (relative imports resolved)."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                yield ".".join([*base, node.module] if node.module else base)
            elif node.module:
                yield node.module


def modules() -> list[Path]:
    return sorted(PACKAGE_ROOT.rglob("*.py"))


def test_the_tree_is_there() -> None:
    assert len(modules()) > 50


@pytest.mark.parametrize("path", modules(), ids=lambda path: module_name(path))
def test_imports_point_down(path: Path) -> None:
    module = module_name(path)
    for name in imported_names(path):
        if is_library(module):
            assert not name.startswith(("ctxpress.app", "ctxpress.tools")), f"{module} imports {name}"
        for importer, forbidden in FORBIDDEN:
            if module == importer or module.startswith(importer + "."):
                assert not name.startswith(forbidden), f"{module} imports {name}"


@pytest.mark.parametrize(
    "path", [path for path in modules() if is_library(module_name(path))], ids=lambda path: module_name(path)
)
def test_the_library_needs_only_its_own_requirements(path: Path) -> None:
    module = module_name(path)
    allowed = LIBRARY_THIRD_PARTY | OPTIONAL_EXTRA_IMPORTS.get(module, frozenset())
    for name in imported_names(path):
        top = name.split(".")[0]
        if top == "ctxpress" or top in sys.stdlib_module_names or top == "__future__":
            continue
        assert top in allowed, f"{module} imports {name}, which `pip install ctxpress` does not bring"
