"""OpenAI chat format: reading chat logs in it, and writing conversations back out.

Accepted shapes: a list of messages; an object with ``messages`` (and optionally ``tools`` or
legacy ``functions``); a list of such objects; and JSON Lines with one conversation (object or
message list) per line. Both tool-call styles are read: ``tool_calls`` + ``tool`` results linked by
id, and the legacy ``function_call`` + ``function`` results, linked by function name in call order
(the legacy style has no ids, so the loader gives each call a deterministic one).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from ctxpress.tools.traces.model import (
    MALFORMED_DATA_ERRORS,
    Conversation,
    TraceFormat,
    TraceFormatError,
    TracePayload,
    finalize_conversation,
    message_content,
    new_tool_call,
    openai_tool_schema,
    provider_tool_call,
    read_payload,
    synthetic_call_id,
    tool_calls_from_provider,
)

FORMAT_NAME = "openai"


def convert_openai_messages(raw_messages: Sequence[Any]) -> list[BaseMessage]:
    """OpenAI chat messages to LangChain messages (not yet finalized: see ``finalize_conversation``)."""
    messages: list[BaseMessage] = []
    legacy_waiting: list[tuple[str, str]] = []  # (function name, call id) of unanswered legacy calls
    for position, raw in enumerate(raw_messages):
        if not isinstance(raw, dict):
            raise TraceFormatError(f"message {position} is a {type(raw).__name__}, not an object")
        role = raw.get("role")
        content = message_content(raw.get("content"))
        if role in ("system", "developer"):
            messages.append(SystemMessage(content=content))
        elif role == "user":
            messages.append(HumanMessage(content=content, name=raw.get("name")))
        elif role == "assistant":
            calls = tool_calls_from_provider(raw.get("tool_calls"), position)
            legacy = raw.get("function_call")
            if legacy:
                call_id = synthetic_call_id(position, len(calls))
                calls.append(new_tool_call(legacy.get("name", ""), legacy.get("arguments"), call_id))
                legacy_waiting.append((legacy.get("name", ""), call_id))
            messages.append(AIMessage(content=content, tool_calls=calls, name=raw.get("name")))
        elif role == "tool":
            call_id = raw.get("tool_call_id") or ""
            messages.append(ToolMessage(content=content, tool_call_id=call_id, name=raw.get("name")))
        elif role == "function":
            call_id = _answer_legacy_call(legacy_waiting, raw.get("name"))
            messages.append(ToolMessage(content=content, tool_call_id=call_id, name=raw.get("name")))
        else:
            raise TraceFormatError(f"message {position} has unknown role {role!r}")
    return messages


def _answer_legacy_call(waiting: list[tuple[str, str]], name: str | None) -> str:
    """The id of the oldest unanswered legacy call with this name (else the oldest one), or ""."""
    for index, (call_name, call_id) in enumerate(waiting):
        if call_name == name:
            del waiting[index]
            return call_id
    return waiting.pop(0)[1] if waiting else ""


def tool_schemas(container: dict[str, Any]) -> list[dict[str, Any]]:
    """OpenAI-format tools from an object's ``tools`` or legacy ``functions`` list."""
    definitions = container.get("tools") or container.get("functions") or []
    return [openai_tool_schema(definition) for definition in definitions if isinstance(definition, dict)]


def messages_to_openai(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """LangChain messages to OpenAI chat messages, for writing a trace back out."""
    converted: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            converted.append({"role": "system", "content": message.content})
        elif isinstance(message, HumanMessage):
            converted.append({"role": "user", "content": message.content})
        elif isinstance(message, AIMessage):
            entry: dict[str, Any] = {"role": "assistant", "content": message.content}
            if message.tool_calls:
                entry["tool_calls"] = [provider_tool_call(call) for call in message.tool_calls]
                if message.content == "":
                    entry["content"] = None  # what the OpenAI API itself returns for a pure tool call
            converted.append(entry)
        elif isinstance(message, ToolMessage):
            converted.append(
                {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
            )
        else:
            raise TypeError(f"no OpenAI role for {type(message).__name__}")
    return converted


def conversation_to_openai(conversation: Conversation) -> dict[str, Any]:
    """A conversation as one OpenAI-format object (a JSON file, or one line of a JSONL file)."""
    return {"messages": messages_to_openai(conversation.messages), "tools": conversation.tools}


def load_openai_chat(path_or_obj: Path | str | Any) -> list[Conversation]:
    """Conversations from an OpenAI-format chat file (JSON or JSONL) or an already-parsed object."""
    if isinstance(path_or_obj, Path | str):
        path = Path(path_or_obj)
        payload = read_payload(path)
        label = path.name
    else:
        payload = TracePayload(path_or_obj, json_lines=False)
        label = FORMAT_NAME
    try:
        return load_openai_payload(payload, label)
    except MALFORMED_DATA_ERRORS as exc:
        raise TraceFormatError(f"{label}: not an OpenAI chat trace ({exc})") from exc


def load_openai_payload(payload: TracePayload, label: str) -> list[Conversation]:
    conversations = []
    for index, (raw_messages, tools) in enumerate(_conversation_parts(payload)):
        name = f"{label}#{index}"
        conversations.append(
            finalize_conversation(FORMAT_NAME, name, convert_openai_messages(raw_messages), tools)
        )
    return conversations


def _conversation_parts(payload: TracePayload) -> list[tuple[list[Any], list[dict[str, Any]]]]:
    data = payload.data
    if not payload.json_lines and _is_message_list(data):
        return [(data, [])]
    parts = []
    for position, record in enumerate(payload.records()):
        if isinstance(record, dict) and isinstance(record.get("messages"), list):
            parts.append((record["messages"], tool_schemas(record)))
        elif _is_message_list(record):
            parts.append((record, []))
        else:
            raise TraceFormatError(f"conversation {position} is neither a message list nor has 'messages'")
    return parts


def _is_message_list(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(item, dict) and "role" in item for item in value)
    )


def looks_like_openai(payload: TracePayload) -> bool:
    if not payload.json_lines and _is_message_list(payload.data):
        return True
    records = payload.records()
    first = records[0] if records else None
    return (isinstance(first, dict) and isinstance(first.get("messages"), list)) or _is_message_list(first)


OPENAI_FORMAT = TraceFormat(FORMAT_NAME, looks_like_openai, load_openai_payload)
