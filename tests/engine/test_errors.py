"""Issue 45: one root for the library's errors, each keeping the built-in base callers catch."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import ctxpress
from ctxpress import CtxpressError


def _library_modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(ctxpress.__path__, "ctxpress."):
        if info.name.startswith("ctxpress.app") or info.name.endswith("_scan"):
            continue  # the application keeps its own tree of errors
        names.append(info.name)
    return names


def test_every_error_the_library_defines_derives_from_the_one_root() -> None:
    errors = {
        obj
        for name in _library_modules()
        for _, obj in inspect.getmembers(importlib.import_module(name), inspect.isclass)
        if issubclass(obj, BaseException) and obj.__module__.startswith("ctxpress.")
    }
    assert len(errors) >= 8, "the premise: the library's errors were found"
    assert {error.__name__ for error in errors if not issubclass(error, CtxpressError)} == set()


def test_the_built_in_bases_are_kept() -> None:
    from ctxpress.summary.conflict import SummarizerConflictError
    from ctxpress.tokens.exact import ExactTokenizerError
    from ctxpress.workdir import WorkdirPathError, WorkdirWriteError

    assert issubclass(WorkdirPathError, ValueError) and issubclass(WorkdirWriteError, OSError)
    assert issubclass(SummarizerConflictError, RuntimeError)
    assert issubclass(ExactTokenizerError, ValueError)
