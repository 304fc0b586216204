"""The reply a cancelled run was streaming: kept in the chat record and the checkpoint, marked stopped.

Token deltas are live only, so without this a reply the user stopped would vanish on reload. While
the root agent's model streams, `PartialReply` gathers the text of the message being written (a
message the graph then finishes and records is forgotten). When the user cancels the run, the text
streamed so far becomes one assistant message with `response_metadata[STOPPED_KEY] = True` (the
page shows it as stopped), appended to the chat record (S1) with a `message` event carrying
`stopped: true`, and written into the conversation's checkpoint as the node that streamed it, so
the record and the checkpoint agree and the next turn's model sees what it had said. Nothing is kept when no text was streamed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from langchain_core.messages import AIMessage

#: `response_metadata` key of an assistant message cut short by the user's stop.
STOPPED_KEY: Final = "ctxpress_stopped"


@dataclass
class _Streaming:
    message_id: str
    node: str
    text: str


class PartialReply:
    """The root agent's message being streamed, from its `message_delta` payloads."""

    def __init__(self) -> None:
        self._current: _Streaming | None = None

    def add(self, delta: dict[str, Any]) -> None:
        if delta.get("namespace") or not delta.get("message_id") or not delta.get("node"):
            return  # a sub-agent's tokens are not chat-record messages
        message_id, node = str(delta["message_id"]), str(delta["node"])
        current = self._current
        if current is None or current.message_id != message_id or current.node != node:
            self._current = _Streaming(message_id, node, "")
        if self._current is not None:
            self._current.text += str(delta.get("delta") or "")

    def settled(self, message_id: str | None) -> None:
        """The graph finished (and recorded) the message: nothing of it is partial any more."""
        if self._current is not None and self._current.message_id == message_id:
            self._current = None

    def stopped_message(self) -> tuple[str, AIMessage] | None:
        """The node and the stopped assistant message to keep; None when no text was streamed."""
        current = self._current
        if current is None or not current.text:
            return None
        message = AIMessage(
            content=current.text, id=current.message_id, response_metadata={STOPPED_KEY: True}
        )
        return current.node, message
