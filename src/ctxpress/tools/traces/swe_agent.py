"""SWE-agent trajectories (``*.traj``): one JSON object per run; ``history`` is what the model saw.

``history`` holds OpenAI-style messages with extra keys (``agent``, ``message_type``,
``thought``, ``action``, ``is_demo``). Two styles occur in the real files:

* function calling: assistant messages carry ``tool_calls`` and ``tool`` messages answer them via
  ``tool_call_ids`` (a list; SWE-agent makes one call per step, so the first id is used);
* thought/action text: the assistant writes its command in the message text and SWE-agent parses it
  into ``action``; the output comes back as the next ``user`` message. Such an assistant message
  becomes an AIMessage calling ``bash`` with ``{"command": action}`` (SWE-agent runs every action,
  its own commands included, in the shell), and the next user message becomes its ToolMessage. The
  message text is kept byte-for-byte, so it still contains the action that the call repeats.

Demonstrations (``is_demo``) stay plain user messages. A run's last action usually has no
observation in ``history``; it gets the placeholder result. Tool schemas are not in the files
(the config names tool bundles by path), so ``tools`` is empty.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from ctxpress.tools.traces.model import (
    Conversation,
    TraceFormat,
    TraceFormatError,
    TracePayload,
    finalize_conversation,
    message_content,
    new_tool_call,
    synthetic_call_id,
    tool_calls_from_provider,
)

FORMAT_NAME = "swe-agent"
ACTION_TOOL_NAME = "bash"


def looks_like_swe_agent(payload: TracePayload) -> bool:
    data = payload.data
    if payload.json_lines or not isinstance(data, dict) or not isinstance(data.get("history"), list):
        return False
    history = data["history"]
    return not history or (isinstance(history[0], dict) and "role" in history[0])


def load_swe_agent(payload: TracePayload, label: str) -> list[Conversation]:
    messages = history_to_messages(payload.data["history"])
    return [finalize_conversation(FORMAT_NAME, f"{label}#0", messages)]


def history_to_messages(history: list[dict[str, Any]]) -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    textual_call_id: str | None = None  # the textual action waiting for its observation
    for position, entry in enumerate(history):
        role = entry.get("role")
        content = message_content(entry.get("content"))
        if role == "system":
            messages.append(SystemMessage(content=content))
        elif role == "assistant":
            textual_call_id = None
            calls = tool_calls_from_provider(entry.get("tool_calls"), position)
            action = entry.get("action")
            if not calls and isinstance(action, str) and action.strip():
                textual_call_id = synthetic_call_id(position)
                calls = [new_tool_call(ACTION_TOOL_NAME, {"command": action}, textual_call_id)]
            messages.append(AIMessage(content=content, tool_calls=calls))
        elif role == "tool":
            ids = entry.get("tool_call_ids") or [entry.get("tool_call_id") or ""]
            messages.append(ToolMessage(content=content, tool_call_id=ids[0]))
        elif role == "user":
            if textual_call_id is not None and not entry.get("is_demo"):
                messages.append(
                    ToolMessage(content=content, tool_call_id=textual_call_id, name=ACTION_TOOL_NAME)
                )
            else:
                messages.append(HumanMessage(content=content))
            textual_call_id = None
        else:
            raise TraceFormatError(f"history entry {position} has unknown role {role!r}")
    return messages


SWE_AGENT_FORMAT = TraceFormat(FORMAT_NAME, looks_like_swe_agent, load_swe_agent)
