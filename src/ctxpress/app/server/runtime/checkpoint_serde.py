"""The checkpointers' serializer: LangGraph's own, with LangChain messages rebuilt without validation.

Every read of a thread's checkpoint decodes all of its messages. LangGraph's msgpack decoder
rebuilds each one with ``cls(**fields)``: full pydantic validation plus ``AIMessage``'s
backwards-compatibility validators, about 25 µs a message -- on a 1,000-message thread most of the
time of a manual compression, which reads the checkpoint twice (``aget_state``, then
``aupdate_state``'s own read).

What a checkpoint holds of a message is ``model_dump()`` of a message that was validated when it was
made, so the fields are already in their validated form: ``model_construct(**fields)`` builds the
same message (equal fields, the same set fields) without validating them again. Only the standard
message classes of ``langchain_core.messages`` take that path, and only when the stored value is the
expected mapping; everything else -- other pydantic models, the allowlist of
``LANGGRAPH_STRICT_MSGPACK``, custom types -- goes to LangGraph's own decoder unchanged. Writing is
LangGraph's own code.
"""

from __future__ import annotations

from typing import Any, Final

import ormsgpack
from langchain_core import messages as lc_messages
from langgraph.checkpoint.serde.jsonplus import EXT_PYDANTIC_V2, JsonPlusSerializer

__all__ = ["MESSAGE_CLASSES", "CheckpointSerializer"]

#: (module, class name) as LangGraph stores them -> the class rebuilt without validation.
MESSAGE_CLASSES: Final[dict[tuple[str, str], type[lc_messages.BaseMessage]]] = {
    (cls.__module__, cls.__name__): cls
    for cls in (
        lc_messages.AIMessage,
        lc_messages.AIMessageChunk,
        lc_messages.ChatMessage,
        lc_messages.FunctionMessage,
        lc_messages.HumanMessage,
        lc_messages.RemoveMessage,
        lc_messages.SystemMessage,
        lc_messages.ToolMessage,
    )
}
_OPTIONS: Final = ormsgpack.OPT_NON_STR_KEYS


class CheckpointSerializer(JsonPlusSerializer):
    """`JsonPlusSerializer` whose msgpack decoding rebuilds stored LangChain messages with
    `model_construct` (see the module docstring); every other value is decoded as LangGraph does."""

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        kind, payload = data
        if kind != "msgpack":
            return super().loads_typed(data)
        return ormsgpack.unpackb(payload, ext_hook=self._ext_hook, option=_OPTIONS)

    def _ext_hook(self, code: int, data: bytes) -> Any:
        if code == EXT_PYDANTIC_V2:
            stored = ormsgpack.unpackb(data, ext_hook=self._ext_hook, option=_OPTIONS)
            if isinstance(stored, list | tuple) and len(stored) >= 3 and isinstance(stored[2], dict):
                message_class = MESSAGE_CLASSES.get((stored[0], stored[1]))
                if message_class is not None:
                    return message_class.model_construct(**stored[2])
        # Anything else, with LangGraph's allowlist and fallbacks (it decodes `data` itself).
        return self._unpack_ext_hook(code, data)
