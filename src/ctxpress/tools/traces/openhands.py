"""OpenHands event logs: evaluation ``output.jsonl`` (one run per line, events under ``history``)
and saved trajectories (a JSON list of events, e.g. ``tests/runtime/trajs/*.json``).

An event is an action or an observation. The mapping follows what OpenHands sends to the model:

* the ``system`` action is the system prompt, and its ``args.tools`` are the tool schemas;
* ``message`` actions are user or assistant text;
* an action with ``tool_call_metadata`` came from an LLM response: the AIMessage is that response's
  own message (``model_response.choices[0].message``: its text and its tool calls with the
  arguments the model wrote), emitted once even when the response produced several actions;
* an observation answers the tool call named in its ``tool_call_metadata``, or the call of the
  action its ``cause`` points to; its ``content`` is the ToolMessage text, byte-for-byte;
* an observation that answers no call (e.g. an ``error`` for a malformed call) is shown to the
  model as a user message, so it becomes a HumanMessage.

Runtime bookkeeping that never reaches the model is skipped: ``recall`` (workspace context
lookups), agent state changes and ``null`` observations. A ``finish`` call has no observation in
the logs, so it gets the placeholder result.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from ctxpress.tools.traces.model import (
    Conversation,
    TraceFormat,
    TracePayload,
    finalize_conversation,
    message_content,
    new_tool_call,
    openai_tool_schema,
    synthetic_call_id,
    tool_calls_from_provider,
)

FORMAT_NAME = "openhands"
SKIPPED_ACTIONS = frozenset({"recall", "change_agent_state", "null"})
SKIPPED_OBSERVATIONS = frozenset({"recall", "agent_state_changed", "null"})


def _is_event(value: Any) -> bool:
    return isinstance(value, dict) and "source" in value and ("action" in value or "observation" in value)


def _is_event_list(payload: TracePayload) -> bool:
    data = payload.data
    return not payload.json_lines and isinstance(data, list) and bool(data) and _is_event(data[0])


def looks_like_openhands(payload: TracePayload) -> bool:
    if _is_event_list(payload):
        return True
    records = payload.records()
    first = records[0] if records else None
    if not isinstance(first, dict) or not isinstance(first.get("history"), list):
        return False
    return bool(first["history"]) and _is_event(first["history"][0])


def load_openhands(payload: TracePayload, label: str) -> list[Conversation]:
    histories = [payload.data] if _is_event_list(payload) else [r["history"] for r in payload.records()]
    conversations = []
    for index, history in enumerate(histories):
        messages, tools = events_to_messages(history)
        conversations.append(finalize_conversation(FORMAT_NAME, f"{label}#{index}", messages, tools))
    return conversations


def events_to_messages(history: list[dict[str, Any]]) -> tuple[list[BaseMessage], list[dict[str, Any]]]:
    messages: list[BaseMessage] = []
    tools: list[dict[str, Any]] = []
    emitted_responses: set[str] = set()
    call_id_by_action: dict[Any, str] = {}  # action event id -> tool call id, for observations' `cause`
    for position, event in enumerate(history):
        metadata = event.get("tool_call_metadata") or {}
        from_user = event.get("source") == "user"
        if "action" in event:
            action = event["action"]
            args = event.get("args") or {}
            if action in SKIPPED_ACTIONS:
                continue
            if action == "system":
                messages.append(SystemMessage(content=message_content(args.get("content"))))
                tools = [openai_tool_schema(tool) for tool in args.get("tools") or []]
            elif metadata:
                call_id_by_action[event.get("id")] = metadata.get("tool_call_id", "")
                response_id = str((metadata.get("model_response") or {}).get("id") or f"event-{position}")
                if response_id not in emitted_responses:
                    emitted_responses.add(response_id)
                    messages.append(_llm_response_message(metadata, args, position))
            else:
                text = message_content(args.get("content", event.get("message")))
                messages.append(HumanMessage(content=text) if from_user else AIMessage(content=text))
        elif "observation" in event:
            if event["observation"] in SKIPPED_OBSERVATIONS:
                continue
            content = message_content(event.get("content"))
            call_id = metadata.get("tool_call_id") or call_id_by_action.get(event.get("cause"))
            if call_id:
                messages.append(
                    ToolMessage(content=content, tool_call_id=call_id, name=metadata.get("function_name"))
                )
            else:
                messages.append(HumanMessage(content=content))
    return messages, tools


def _llm_response_message(metadata: dict[str, Any], args: dict[str, Any], position: int) -> AIMessage:
    choices = (metadata.get("model_response") or {}).get("choices") or []
    response = (choices[0].get("message") if choices else None) or {}
    if response.get("tool_calls"):
        calls = tool_calls_from_provider(response["tool_calls"], position)
        return AIMessage(content=message_content(response.get("content")), tool_calls=calls)
    # Logs without the raw response: rebuild the one call from the event itself.
    call_id = metadata.get("tool_call_id") or synthetic_call_id(position)
    arguments = {key: value for key, value in args.items() if key != "thought"}
    call = new_tool_call(metadata.get("function_name", ""), arguments, call_id)
    return AIMessage(content=message_content(response.get("content", args.get("thought"))), tool_calls=[call])


OPENHANDS_FORMAT = TraceFormat(FORMAT_NAME, looks_like_openhands, load_openhands)
