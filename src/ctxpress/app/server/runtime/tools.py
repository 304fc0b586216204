"""Tools agents can name in the agents file: `ask_user` (human in the loop) and workdir file tools.

The service adds its own named tools (`query_kb`, and `web_search` when configured: `ctxpress.app.kb`)
through `extra_tools`. Other tools are named by import path, `package.module:attribute` (a
LangChain tool or a function).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool, tool
from langgraph.types import interrupt

from ctxpress.app.server.runtime.workdirs import ConversationWorkdirs
from ctxpress.workdir import LocalWorkdir, WorkdirError, encode_text, read_text, write_text

READ_FILE_MAX_CHARS = 20_000
#: The largest integer every JSON reader keeps exactly; larger tool arguments are refused.
MAX_TOOL_INT = 2**53 - 1
GREP_MAX_MATCHES = 50
GREP_LINE_CHARS = 300
ToolSpec = str | BaseTool | Callable[..., Any]


def position_out_of_range(**positions: int) -> str | None:
    """The error the model reads for a count or position outside 0..MAX_TOOL_INT, else None.

    Checked here rather than as bounds in the tool's schema: schema bounds would be sent to the
    model with every request (~20 tokens) to guard a value models almost never produce.
    """
    for name, value in positions.items():
        if not 0 <= value <= MAX_TOOL_INT:
            return f"error: {name} must be between 0 and {MAX_TOOL_INT}, not {value}"
    return None


@tool
def ask_user(question: str) -> str:
    """Ask the user a question and wait for the answer. Use it when you cannot continue without the user."""
    answer = interrupt({"type": "ask_user", "question": question})
    return answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)


def workdir_tools(workdirs: ConversationWorkdirs) -> list[BaseTool]:
    """File tools bound to the current conversation's workdir (paths are workdir-relative)."""

    def list_files(prefix: str = "") -> str:
        """List the files in the conversation's workdir (optionally under a folder), one `path (size)` a line."""
        try:
            files = workdirs.for_current_thread().list_files(prefix)
        except WorkdirError as exc:
            return f"error: {exc}"
        return "\n".join(f"{item.path} ({item.size} bytes)" for item in files) or "(no files)"

    def read_file(path: str, offset: int = 0, limit: int = READ_FILE_MAX_CHARS) -> str:
        """Read a text file from the conversation's workdir, `limit` characters from `offset`."""
        out_of_range = position_out_of_range(offset=offset, limit=limit)
        if out_of_range:
            return out_of_range
        try:
            text = read_text(workdirs.for_current_thread(), path)
        except WorkdirError as exc:
            return f"error: {exc}"
        limit = max(1, min(limit, READ_FILE_MAX_CHARS))
        part = text[max(0, offset) : max(0, offset) + limit]
        remaining = len(text) - max(0, offset) - len(part)
        return part + (f"\n…({remaining} more characters; read on with offset)" if remaining > 0 else "")

    def within_quota(workdir: LocalWorkdir, path: str, new_size: int) -> None:
        if workdirs.quota is not None:
            workdirs.quota.check(workdir, path, new_size)

    def write_file(path: str, content: str) -> str:
        """Create or replace a text file in the conversation's workdir."""
        workdir = workdirs.for_current_thread()
        try:
            data = encode_text(content)
            within_quota(workdir, path, len(data))
            stored = workdir.write_bytes(path, data)
        except WorkdirError as exc:
            return f"error: {exc}"
        return f"wrote {stored} ({len(content)} characters)"

    def ls(path: str = "") -> str:
        """List the files in the conversation's workdir under `path` (default: all), one `path (size)` a line."""
        return list_files(path)

    def grep(pattern: str, path: str = "") -> str:
        """Find lines containing `pattern` (plain text, any case) in the workdir's text files under `path`.

        Returns `file:line: text` lines (at most 50). Use it to find something in a large tool result
        that was saved to `outputs/large_tool_results/`.
        """
        workdir = workdirs.for_current_thread()
        try:
            files = (
                [path] if path and workdir.exists(path) else [item.path for item in workdir.list_files(path)]
            )
        except WorkdirError as exc:
            return f"error: {exc}"
        needle = pattern.casefold()
        matches: list[str] = []
        for name in files:
            try:
                text = read_text(workdir, name)
            except (WorkdirError, UnicodeDecodeError):
                continue  # binary or unreadable: not searched
            for number, line in enumerate(text.splitlines(), start=1):
                if needle and needle in line.casefold():
                    matches.append(f"{name}:{number}: {line.strip()[:GREP_LINE_CHARS]}")
                    if len(matches) >= GREP_MAX_MATCHES:
                        return "\n".join([*matches, f"…(more than {GREP_MAX_MATCHES} matches)"])
        return "\n".join(matches) or "(no matches)"

    def edit_file(path: str, old_string: str, new_string: str, replace_all: bool = False) -> str:
        """Replace `old_string` by `new_string` in a workdir text file (it must occur exactly once unless `replace_all`)."""
        workdir = workdirs.for_current_thread()
        try:
            text = read_text(workdir, path)
        except WorkdirError as exc:
            return f"error: {exc}"
        count = text.count(old_string) if old_string else 0
        if count == 0:
            return f"error: the text to replace does not occur in {path}"
        if count > 1 and not replace_all:
            return (
                f"error: the text to replace occurs {count} times in {path}; give more context or replace_all"
            )
        replacements = count if replace_all else 1
        growth = len(encode_text(new_string)) - len(encode_text(old_string))
        try:
            # The size of the result, known before it is built (replace_all can multiply a file).
            within_quota(workdir, path, len(encode_text(text)) + replacements * growth)
            updated = (
                text.replace(old_string, new_string)
                if replace_all
                else text.replace(old_string, new_string, 1)
            )
            stored = write_text(workdir, path, updated)
        except WorkdirError as exc:
            return f"error: {exc}"
        return f"edited {stored} ({count if replace_all else 1} replacement{'s' if replace_all and count > 1 else ''})"

    return [
        StructuredTool.from_function(function)
        for function in (list_files, read_file, write_file, ls, grep, edit_file)
    ]


def builtin_tools(workdirs: ConversationWorkdirs) -> dict[str, BaseTool]:
    return {tool.name: tool for tool in [ask_user, *workdir_tools(workdirs)]}


def resolve_tools(
    specs: Sequence[ToolSpec],
    workdirs: ConversationWorkdirs,
    extra_tools: Mapping[str, BaseTool] | None = None,
    unavailable: Mapping[str, str] | None = None,
) -> list[BaseTool | Callable[..., Any]]:
    """Tool objects for an agent: built-in names, the service's `extra_tools`, `module:attribute`
    import paths, or tool objects. `unavailable` says why a known optional tool is missing."""
    available = {**builtin_tools(workdirs), **(extra_tools or {})}
    resolved: list[BaseTool | Callable[..., Any]] = []
    for spec in specs:
        if not isinstance(spec, str):
            resolved.append(spec)
        elif spec in available:
            resolved.append(available[spec])
        elif unavailable and spec in unavailable:
            raise ValueError(unavailable[spec])
        elif ":" in spec:
            resolved.append(_import_tool(spec))
        else:
            known = ", ".join(sorted(available))
            raise ValueError(
                f"unknown tool {spec!r}: use one of {known} or an import path 'module:attribute'"
            )
    return resolved


def _import_tool(path: str) -> BaseTool | Callable[..., Any]:
    module_name, _, attribute = path.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"tool {path!r} cannot be imported: {exc}") from None
    if not (isinstance(target, BaseTool) or callable(target)):
        raise ValueError(f"tool {path!r} is neither a LangChain tool nor a function")
    return target
