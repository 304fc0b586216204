"""The shared model of an imported trace, and the helpers every format loader builds on.

Each loader turns its format into a rough list of LangChain messages (tool calls linked to their
results by id) and hands it to :func:`finalize_conversation`, which makes it provider-valid: every
ToolMessage sits right after the AIMessage that called it, every call has exactly one result, ids
are unique and deterministic, and ``additional_kwargs["tool_calls"]`` mirrors ``tool_calls`` in
OpenAI provider format.
"""

from __future__ import annotations

import json
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolCall, ToolMessage
from langchain_core.messages.tool import tool_call as make_tool_call

from ctxpress.errors import CtxpressError

NO_RESULT_PLACEHOLDER = "(no result recorded in the trace)"
RAW_ARGUMENTS_KEY = "__raw_arguments"

MessageContent = str | list[str | dict[str, Any]]


class TraceFormatError(CtxpressError, ValueError):
    """A trace file (or object) that cannot be read as the format it claims or is sniffed to be."""


class UnknownTraceFormatError(TraceFormatError):
    """Valid JSON, but not one of the known trace formats."""


# What data of the wrong shape raises inside a loader (pydantic's ValidationError is a ValueError);
# the public entry points turn these into a TraceFormatError that names the file.
MALFORMED_DATA_ERRORS = (ValueError, KeyError, TypeError, AttributeError, IndexError)


@dataclass(frozen=True)
class Conversation:
    """One imported conversation, provider-valid and ready to replay through an agent."""

    source: str  # format / data set name, e.g. "swe-agent", "tau-bench", "openai"
    name: str  # stable id: file-relative name plus index, e.g. "tau-bench/gpt-4o-airline.json#17"
    messages: list[BaseMessage]
    tools: list[dict[str, Any]]  # OpenAI-format tool schemas when the trace has them, else []
    missing_results: int = 0  # tool calls the trace never answered: a placeholder error result was added
    orphan_results: int = 0  # tool results with no matching call: kept as HumanMessage (text preserved)


class TracePayload(NamedTuple):
    """A parsed trace file: one JSON document, or the records of a JSON Lines file."""

    data: Any
    json_lines: bool

    def records(self) -> list[Any]:
        """The top-level records: JSONL lines, the items of a JSON list, or the one JSON object."""
        if self.json_lines or isinstance(self.data, list):
            return list(self.data)
        return [self.data]


class TraceFormat(NamedTuple):
    """A registered format: a cheap structural sniff and a loader (payload, name prefix) -> conversations."""

    name: str
    sniff: Callable[[TracePayload], bool]
    load: Callable[[TracePayload, str], list[Conversation]]


def read_payload(path: Path) -> TracePayload:
    """Parse a JSON or JSON Lines file; a ValueError names the file when it is neither."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TraceFormatError(f"{path}: not UTF-8 text ({exc})") from exc
    try:
        return TracePayload(json.loads(text), json_lines=False)
    except json.JSONDecodeError as whole_error:
        # Records end at "\n" (or "\r\n") only: a text may hold U+2028 or \x1c unescaped.
        lines = [line for line in text.split("\n") if line.strip()]
        if len(lines) < 2:
            raise TraceFormatError(f"{path}: not valid JSON ({whole_error})") from whole_error
        records = []
        for number, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as line_error:
                raise TraceFormatError(
                    f"{path}: neither JSON ({whole_error}) nor JSON Lines (line {number}: {line_error})"
                ) from line_error
        return TracePayload(records, json_lines=True)


def message_content(value: Any) -> MessageContent:
    """Message content as LangChain accepts it: None becomes "", strings and block lists are kept as is."""
    if value is None:
        return ""
    if isinstance(value, str | list):
        return value
    # Structured content (a dict, a number) has no message form: keep it as its JSON text.
    return json.dumps(value, ensure_ascii=False)


def parse_arguments(raw: Any) -> dict[str, Any]:
    """Tool call arguments as a dict; text that is not a JSON object is kept under ``__raw_arguments``."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            return {RAW_ARGUMENTS_KEY: raw}
        return parsed if isinstance(parsed, dict) else {RAW_ARGUMENTS_KEY: raw}
    return {RAW_ARGUMENTS_KEY: json.dumps(raw, ensure_ascii=False)}


def new_tool_call(name: str, arguments: Any, call_id: str | None) -> ToolCall:
    """A LangChain tool call from a name and arguments in any of the traces' shapes (dict or JSON text)."""
    return make_tool_call(name=name, args=parse_arguments(arguments), id=call_id or None)


def tool_calls_from_provider(raw_calls: Sequence[Any] | None, message_position: int) -> list[ToolCall]:
    """LangChain tool calls from OpenAI provider-format calls; a call without an id gets a synthetic one."""
    calls = []
    for call_position, raw in enumerate(raw_calls or []):
        function = raw.get("function") or {}
        call_id = raw.get("id") or synthetic_call_id(message_position, call_position)
        calls.append(new_tool_call(function.get("name", ""), function.get("arguments"), call_id))
    return calls


def synthetic_call_id(message_position: int, call_position: int = 0) -> str:
    """A deterministic id for a call the trace gave none; the characters suit every provider."""
    return f"call_{message_position}_{call_position}"


def provider_tool_call(call: ToolCall) -> dict[str, Any]:
    """One tool call in OpenAI provider format, arguments as JSON text (raw text when it never parsed)."""
    args = call["args"]
    raw = args.get(RAW_ARGUMENTS_KEY) if len(args) == 1 else None
    arguments = raw if isinstance(raw, str) else json.dumps(args, ensure_ascii=False)
    return {"id": call["id"], "type": "function", "function": {"name": call["name"], "arguments": arguments}}


def openai_tool_schema(definition: dict[str, Any]) -> dict[str, Any]:
    """A tool schema in OpenAI format from an OpenAI tool, a legacy function or a BFCL-style function.

    BFCL-style data (ACEBench) writes ``"type": "dict"`` and sometimes ``arguments`` instead of
    ``parameters``; the benchmarks convert both before calling a provider, so the same is done here.
    """
    if definition.get("type") == "function" and isinstance(definition.get("function"), dict):
        return definition
    function: dict[str, Any] = {"name": definition.get("name", "")}
    if "description" in definition:
        function["description"] = definition["description"]
    parameters = definition.get("parameters", definition.get("arguments"))
    if parameters is not None:
        function["parameters"] = _json_schema_types(parameters)
    return {"type": "function", "function": function}


def _json_schema_types(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            key: "object" if key == "type" and value == "dict" else _json_schema_types(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_json_schema_types(item) for item in node]
    return node


@dataclass
class _CallTurn:
    """An AIMessage with tool calls, and the results found for each call (by position)."""

    message: AIMessage
    calls: list[ToolCall]
    results: list[ToolMessage | None] = field(default_factory=list)


def finalize_conversation(
    source: str, name: str, messages: Iterable[BaseMessage], tools: Sequence[dict[str, Any]] = ()
) -> Conversation:
    """Make a loader's message list provider-valid, give it deterministic ids, and wrap it."""
    items: list[BaseMessage | _CallTurn] = []
    # Results are matched to the earliest unanswered call with their id: real traces reuse ids
    # (tau-bench repeats an id across turns), so an id alone does not identify a call.
    waiting: defaultdict[str, deque[tuple[_CallTurn, int]]] = defaultdict(deque)
    orphan_results = 0
    for message in messages:
        if isinstance(message, AIMessage) and message.tool_calls:
            turn = _CallTurn(message, list(message.tool_calls))
            turn.results = [None] * len(turn.calls)
            for position, call in enumerate(turn.calls):
                if call["id"]:
                    waiting[call["id"]].append((turn, position))
            items.append(turn)
        elif isinstance(message, ToolMessage):
            queue = waiting.get(message.tool_call_id)
            if queue:
                turn, position = queue.popleft()
                turn.results[position] = message
            else:
                # A result with no call cannot be sent to a provider as a tool message; keep its text.
                orphan_results += 1
                items.append(HumanMessage(content=message.content))
        else:
            items.append(message)

    finished: list[BaseMessage] = []
    used_ids: set[str] = set()
    missing_results = 0
    for item in items:
        if not isinstance(item, _CallTurn):
            finished.append(item.model_copy(update={"id": f"{name}:{len(finished)}"}))
            continue
        turn_index = len(finished)
        calls: list[ToolCall] = []
        for position, call in enumerate(item.calls):
            call_id = call["id"]
            if not call_id or call_id in used_ids:
                call_id = _unused_id(synthetic_call_id(turn_index, position), used_ids)
            used_ids.add(call_id)
            calls.append(make_tool_call(name=call["name"], args=call["args"], id=call_id))
        finished.append(
            item.message.model_copy(
                update={
                    "id": f"{name}:{turn_index}",
                    "tool_calls": calls,
                    "additional_kwargs": {
                        **item.message.additional_kwargs,
                        "tool_calls": [provider_tool_call(call) for call in calls],
                    },
                }
            )
        )
        for call, result in zip(calls, item.results, strict=True):
            update = {"id": f"{name}:{len(finished)}", "tool_call_id": call["id"]}
            if result is None:
                missing_results += 1
                result = ToolMessage(content=NO_RESULT_PLACEHOLDER, tool_call_id=call["id"], status="error")
            finished.append(result.model_copy(update={**update, "name": result.name or call["name"]}))
    return Conversation(
        source=source,
        name=name,
        messages=finished,
        tools=list(tools),
        missing_results=missing_results,
        orphan_results=orphan_results,
    )


def _unused_id(candidate: str, used: set[str]) -> str:
    suffix = 0
    unique = candidate
    while unique in used:
        suffix += 1
        unique = f"{candidate}_{suffix}"
    return unique
