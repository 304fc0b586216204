"""From LangGraph's stream (`updates`, `custom` modes) to SSE events and chat-record messages.

Pure and synchronous: the executor feeds each `(namespace, mode, data)` chunk in and persists what
comes out. (Token deltas do not pass through here: `token_tap.py` takes them from the model's
callbacks.) Rules:
- `updates`: each new assistant message becomes `message` (+ one `tool_call` per call), each tool
  message `tool_result`; both are appended to the chat record. Messages already seen (same id),
  `RemoveMessage`s and anything but assistant/tool messages are ignored: the record is append-only
  and compression's view changes never reach it.
- `custom`: the library's stream events (`ctxpress.events`: `context_compression`, S20, and
  `context_pressure`, S22) become the SSE event named by their `type`, with the same fields (1:1);
  any other custom payload becomes `custom`.
Events from a sub-agent (non-empty namespace) carry `namespace`; only the root agent's messages
are chat-record messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from langchain_core.messages import AIMessage, BaseMessage, RemoveMessage, ToolMessage

from ctxpress import events as library_events
from ctxpress.app.server.repositories.run_events import NewEvent
from ctxpress.app.server.runtime import events
from ctxpress.app.server.serialization import to_jsonable

#: The key under which LangGraph's `updates` stream reports a run stopped by `interrupt()`.
INTERRUPT_UPDATE_KEY: Final = "__interrupt__"

Namespace = tuple[str, ...]
#: Custom stream payloads `{"type": <one of these>, …}` become the SSE event of that name, fields unchanged.
NAMED_CUSTOM_EVENTS: frozenset[str] = frozenset(library_events.EVENT_NAMES)


@dataclass(frozen=True)
class RecordedMessage:
    """A chat-record message and the events announcing it (stored in one transaction)."""

    message: BaseMessage
    events: list[NewEvent] = field(default_factory=list)


MappedItem = NewEvent | RecordedMessage


class StreamMapper:
    def __init__(self, *, tool_result_preview_chars: int) -> None:
        self._preview_chars = tool_result_preview_chars
        self._seen_message_ids: set[str] = set()

    def mark_seen(self, message_ids: Iterable[str | None]) -> None:
        self._seen_message_ids.update(message_id for message_id in message_ids if message_id)

    def map(self, namespace: Namespace, mode: str, data: Any) -> list[MappedItem]:
        if mode == "updates":
            return self._map_updates(namespace, data)
        if mode == "custom":
            return [self._map_custom(namespace, data)]
        return []

    def _map_updates(self, namespace: Namespace, data: Any) -> list[MappedItem]:
        if not isinstance(data, dict):
            return []
        items: list[MappedItem] = []
        for node, update in data.items():
            if node == INTERRUPT_UPDATE_KEY:
                continue  # interrupts are read from the state when the stream ends (`execution.py`)
            for message in _messages_in(update):
                items.extend(self._map_message(namespace, node, message))
        return items

    def _map_message(self, namespace: Namespace, node: str, message: BaseMessage) -> list[MappedItem]:
        if isinstance(message, RemoveMessage) or not isinstance(message, AIMessage | ToolMessage):
            return []
        if message.id is not None:
            if message.id in self._seen_message_ids:
                return []
            self._seen_message_ids.add(message.id)
        announced = self.message_events(message, node=node, namespace=namespace)
        if namespace:
            return list(announced)  # a sub-agent's inner messages: shown, not part of the chat record
        return [RecordedMessage(message, announced)]

    def message_events(
        self, message: BaseMessage, *, node: str | None = None, namespace: Namespace = ()
    ) -> list[NewEvent]:
        if isinstance(message, ToolMessage):
            content = message.text
            preview = content[: self._preview_chars]
            payload = {
                "message_id": message.id,
                "tool_call_id": message.tool_call_id,
                "name": message.name,
                "status": message.status,
                "content": preview,
                "content_chars": len(content),
                "truncated": len(preview) < len(content),
            }
            return [NewEvent(events.TOOL_RESULT, _with_namespace(payload, namespace))]
        if isinstance(message, AIMessage):
            tool_calls = [to_jsonable(call) for call in message.tool_calls]
            announced = [
                NewEvent(
                    events.MESSAGE,
                    _with_namespace(
                        {
                            "message_id": message.id,
                            "role": "assistant",
                            "content": message.text,
                            "tool_calls": tool_calls,
                            "node": node,
                        },
                        namespace,
                    ),
                )
            ]
            for call in message.tool_calls:
                announced.append(
                    NewEvent(
                        events.TOOL_CALL,
                        _with_namespace(
                            {
                                "message_id": message.id,
                                "tool_call_id": call.get("id"),
                                "name": call["name"],
                                "args": call["args"],
                            },
                            namespace,
                        ),
                    )
                )
            return announced
        return []

    @staticmethod
    def _map_custom(namespace: Namespace, data: Any) -> NewEvent:
        if isinstance(data, dict) and data.get("type") in NAMED_CUSTOM_EVENTS:
            return NewEvent(str(data["type"]), _with_namespace(to_jsonable(data), namespace))
        return NewEvent(events.CUSTOM, _with_namespace({"data": to_jsonable(data)}, namespace))


def _messages_in(update: Any) -> list[BaseMessage]:
    """Messages written by one node; an update may be a dict, a list of dicts, or something else."""
    updates: Sequence[Any] = update if isinstance(update, list | tuple) else [update]
    found: list[BaseMessage] = []
    for item in updates:
        if not isinstance(item, dict):
            continue
        value = item.get("messages")
        if isinstance(value, BaseMessage):
            found.append(value)
        elif isinstance(value, list | tuple):
            found.extend(message for message in value if isinstance(message, BaseMessage))
    return found


def _with_namespace(payload: dict[str, Any], namespace: Namespace) -> dict[str, Any]:
    if namespace:
        payload["namespace"] = list(namespace)
    return payload
