"""glaive-toolcall in LLaMA-Factory's ShareGPT layout (``glaive_toolcall_{en,zh}_demo.json``).

A JSON list of ``{"conversations": [{"from", "value"}, ...], "tools": "<JSON text>"}`` (an
optional ``system`` string is honoured). Turns map as: ``human`` -> HumanMessage, ``gpt`` ->
AIMessage, ``function_call`` -> AIMessage with a real tool call (its value is the JSON text
``{"name", "arguments"}``, or a list of them for parallel calls), ``observation`` -> ToolMessage
answering the oldest unanswered call. ``tools`` holds legacy function schemas as JSON text.

Two zh dialogues carry an ``observation`` after a plain ``gpt`` turn whose call was translated into
prose; there is no call to answer, so the observation is kept as a user message (counted in
``orphan_results``). A ``function_call`` value that is not valid JSON stays a plain AIMessage.
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolCall, ToolMessage

from ctxpress.tools.traces.model import (
    Conversation,
    TraceFormat,
    TraceFormatError,
    TracePayload,
    finalize_conversation,
    new_tool_call,
    openai_tool_schema,
    synthetic_call_id,
)

FORMAT_NAME = "glaive"


def looks_like_glaive(payload: TracePayload) -> bool:
    records = payload.records()
    first = records[0] if records else None
    if not isinstance(first, dict) or not isinstance(first.get("conversations"), list):
        return False
    turns = first["conversations"]
    return bool(turns) and isinstance(turns[0], dict) and "from" in turns[0] and "value" in turns[0]


def load_glaive(payload: TracePayload, label: str) -> list[Conversation]:
    conversations = []
    for index, record in enumerate(payload.records()):
        tools_text: Any = record.get("tools") or []
        definitions = json.loads(tools_text) if isinstance(tools_text, str) else tools_text
        tools = [openai_tool_schema(definition) for definition in definitions]
        messages: list[BaseMessage] = []
        if record.get("system"):
            messages.append(SystemMessage(content=record["system"]))
        messages.extend(turns_to_messages(record["conversations"]))
        conversations.append(finalize_conversation(FORMAT_NAME, f"{label}#{index}", messages, tools))
    return conversations


def turns_to_messages(turns: list[dict[str, Any]]) -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    unanswered: list[str] = []  # ids of the latest function_call turn, answered by observations in order
    for position, turn in enumerate(turns):
        speaker, value = turn.get("from"), turn.get("value") or ""
        if speaker in ("human", "gpt"):
            unanswered = []  # an observation after a new turn no longer answers an older call
            messages.append(HumanMessage(content=value) if speaker == "human" else AIMessage(content=value))
        elif speaker == "function_call":
            calls = _parse_calls(value, position)
            if calls is None:
                messages.append(AIMessage(content=value))
            else:
                unanswered = [call["id"] or "" for call in calls]
                messages.append(AIMessage(content="", tool_calls=calls))
        elif speaker == "observation":
            call_id = unanswered.pop(0) if unanswered else ""
            messages.append(ToolMessage(content=value, tool_call_id=call_id))
        elif speaker == "system":
            messages.append(SystemMessage(content=value))
        else:
            raise TraceFormatError(f"turn {position} comes from unknown speaker {speaker!r}")
    return messages


def _parse_calls(value: str, position: int) -> list[ToolCall] | None:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        return None
    requests = parsed if isinstance(parsed, list) else [parsed]
    if not all(isinstance(request, dict) and "name" in request for request in requests):
        return None
    return [
        new_tool_call(request["name"], request.get("arguments"), synthetic_call_id(position, call_position))
        for call_position, request in enumerate(requests)
    ]


GLAIVE_FORMAT = TraceFormat(FORMAT_NAME, looks_like_glaive, load_glaive)
