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

Decoded payloads are reused: the same 1,000-message checkpoint is read at the end of a run (for its
interrupts), by the next manual compression, by the status panel... Each serializer keeps the
last few large payloads it decoded (``DECODED_CACHE_SIZE``, keyed by the payload's digest, so a
changed checkpoint is never answered from an older one). A hit returns fresh containers (dicts,
lists, tuples copied) around the same leaf objects: the messages themselves are shared between
reads. That is safe as long as nothing changes a stored message in place -- LangGraph's reducers
and ctxpress build new lists and new messages (``add_messages`` only sets the id of a message
that has none, and every stored message has one).

Writing reuses them too: a message that came out of a kept payload is written back as the bytes it
was read from (the same object, so the same fields) instead of being dumped and packed again -- on
SQLite every checkpoint write stores the whole message list, so the manual compression's state
update would otherwise re-encode the thousand messages it just read. Everything else is written by
LangGraph's own encoder (its ``default`` hook and options).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any, Final

import ormsgpack
from langchain_core import messages as lc_messages
from langgraph.checkpoint.serde import jsonplus
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
#: Decoded payloads kept per serializer, and the smallest payload worth keeping (bytes): a small
#: one decodes in microseconds, a 1,000-message list in about 10 ms.
DECODED_CACHE_SIZE: Final = 8
DECODED_CACHE_MIN_BYTES: Final = 16 * 1024


class CheckpointSerializer(JsonPlusSerializer):
    """`JsonPlusSerializer` whose msgpack decoding rebuilds stored LangChain messages with
    `model_construct` (see the module docstring); every other value is decoded as LangGraph does."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: payload digest -> (decoded value, ids of the messages decoded from it)
        self._decoded: OrderedDict[bytes, tuple[Any, list[int]]] = OrderedDict()
        #: id of a message decoded from a kept payload -> (the message, the bytes it was read from)
        self._encoded: dict[int, tuple[lc_messages.BaseMessage, bytes]] = {}
        self._decoded_lock = threading.Lock()

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if obj is None or isinstance(obj, bytes | bytearray):
            return super().dumps_typed(obj)
        try:
            return "msgpack", ormsgpack.packb(obj, default=self._encode_default, option=jsonplus._option)
        except ormsgpack.MsgpackEncodeError:
            return super().dumps_typed(obj)  # LangGraph's own fallbacks (and its error)

    def _encode_default(self, obj: Any) -> Any:
        kept = self._encoded.get(id(obj))
        if kept is not None and kept[0] is obj:
            return ormsgpack.Ext(EXT_PYDANTIC_V2, kept[1])
        return jsonplus._msgpack_default(obj)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        kind, payload = data
        if kind != "msgpack":
            return super().loads_typed(data)
        if len(payload) < DECODED_CACHE_MIN_BYTES:
            return self._unpack(payload)
        key = hashlib.blake2b(payload, digest_size=32).digest()
        with self._decoded_lock:
            entry = self._decoded.get(key)
            if entry is not None:
                self._decoded.move_to_end(key)
        if entry is None:
            read: list[tuple[lc_messages.BaseMessage, bytes]] = []
            entry = (self._unpack(payload, read), [id(message) for message, _ in read])
            with self._decoded_lock:
                self._decoded[key] = entry
                self._encoded.update((id(message), (message, data)) for message, data in read)
                while len(self._decoded) > DECODED_CACHE_SIZE:
                    _, (_, ids) = self._decoded.popitem(last=False)
                    for message_id in ids:
                        self._encoded.pop(message_id, None)
        return fresh_containers(entry[0])

    def _unpack(self, payload: bytes, read: list[tuple[lc_messages.BaseMessage, bytes]] | None = None) -> Any:
        """Decode `payload`; each message rebuilt goes into `read` with the bytes it came from."""

        def ext_hook(code: int, data: bytes) -> Any:
            return self._ext_hook(code, data, read)

        return ormsgpack.unpackb(payload, ext_hook=ext_hook, option=_OPTIONS)

    def _ext_hook(
        self, code: int, data: bytes, read: list[tuple[lc_messages.BaseMessage, bytes]] | None = None
    ) -> Any:
        if code == EXT_PYDANTIC_V2:
            stored = ormsgpack.unpackb(
                data, ext_hook=lambda c, d: self._ext_hook(c, d, read), option=_OPTIONS
            )
            if isinstance(stored, list | tuple) and len(stored) >= 3 and isinstance(stored[2], dict):
                message_class = MESSAGE_CLASSES.get((stored[0], stored[1]))
                if message_class is not None:
                    message = message_class.model_construct(**stored[2])
                    if read is not None:
                        read.append((message, data))
                    return message
        # Anything else, with LangGraph's allowlist and fallbacks (it decodes `data` itself).
        return self._unpack_ext_hook(code, data)


def fresh_containers(value: Any) -> Any:
    """`value` with its dicts, lists and tuples copied (recursively) and every other object shared."""
    if isinstance(value, dict):
        return {key: fresh_containers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [fresh_containers(item) for item in value]
    if type(value) is tuple:
        return tuple(fresh_containers(item) for item in value)
    return value
