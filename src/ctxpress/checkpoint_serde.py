"""A LangGraph checkpoint serializer that hands back the message objects it already wrote or read.

Every run of a thread starts by reading its checkpoint, and LangGraph's serializer rebuilds every
stored message as a new object. For the token count that is a reload: an equal message in new
objects, which the whole-message memo (`tokens/message_memo.py`) can only tell from a replacement
under the same id by reading and comparing all of its fields. This serializer keeps, per process,
each message it wrote or read together with its stored bytes; a later checkpoint that stores the
same bytes gets the same object back. The next run's first model call then receives the objects the
previous run's calls counted: the memo's warm path (identity checks), not a reload. Pass it to any
LangGraph saver: ``AsyncPostgresSaver(pool, serde=CheckpointSerializer())``.

What it saves:

- a message is decoded from its bytes at most once per process: a repeat is one dictionary lookup by
  the bytes themselves (equal bytes, the same fields), and a message this process wrote (with an id:
  ``add_messages`` sets the id of a message that has none, in place) is never decoded at all;
- a message decoded for the first time is rebuilt with ``model_construct``, without validating
  it again: what a checkpoint holds of a message is ``model_dump()`` of a message validated when it
  was made (full validation plus ``AIMessage``'s compatibility validators is ~25 µs a message). Only
  the standard message classes of ``langchain_core.messages`` take that path, and only when the
  stored value is the expected mapping; everything else -- other pydantic models, the allowlist of
  ``LANGGRAPH_STRICT_MSGPACK``, custom types -- goes to LangGraph's own decoder unchanged;
- a kept message is written as its kept bytes instead of being dumped and packed again (both savers
  write the whole message list whenever it changes). Everything else is written by LangGraph's own
  encoder (its ``default`` hook and options), byte for byte.

Large payloads read again whole (the run's end, the next manual compression and the status panel
read the same checkpoint) are decoded once too: the last few are kept by digest, and each read gets
fresh containers (dicts, lists, tuples) around the same leaf objects.

Messages are values in a LangGraph state: reducers and ctxpress replace a message, they do not edit
one. Code that does reassign a field of a message (LangChain's ``HumanInTheLoopMiddleware`` sets
``tool_calls`` on the state's last AI message) is seen: each kept message remembers its field
objects, and one whose field was reassigned since is neither handed back nor written as its old
bytes. A nested list or dict edited in place (one tool call's ``args`` changed item by item) is not
seen -- the premise the token memo states too.

Bounds: the kept messages' bytes (``kept_message_bytes``, two generations: a message not used
since the older one was dropped is decoded again), and the kept payloads (``kept_payloads``).
Neither bound changes a value, only how often one is decoded or encoded. A copy LangGraph makes
with ``with_msgpack_allowlist`` (strict mode, a graph's own state types) keeps its own: what was
decoded under one allowlist is never answered under another.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterable
from operator import is_
from typing import Any, Final

import ormsgpack
from langchain_core import messages as lc_messages
from langgraph.checkpoint.serde import jsonplus
from langgraph.checkpoint.serde.jsonplus import EXT_PYDANTIC_V2, JsonPlusSerializer

__all__ = [
    "KEPT_MESSAGE_BYTES",
    "KEPT_PAYLOADS",
    "MESSAGE_CLASSES",
    "CheckpointSerializer",
    "StoredMessages",
    "fresh_containers",
]

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
_KEPT_CLASSES: Final = frozenset(MESSAGE_CLASSES.values())
_OPTIONS: Final = ormsgpack.OPT_NON_STR_KEYS
#: Default bound of the stored bytes of the messages kept per serializer: about the memo's own
#: bound on the text it keeps alive (`MESSAGE_MEMO_MAX_TOKENS`, ~4 characters a token).
KEPT_MESSAGE_BYTES: Final = 32 * 1024 * 1024
#: Large payloads kept decoded whole per serializer, and the smallest payload worth keeping (bytes): a
#: small one decodes in microseconds.
KEPT_PAYLOADS: Final = 8
KEPT_PAYLOAD_MIN_BYTES: Final = 16 * 1024


#: One kept message: the message, the bytes stored for it, and its field values when they were
#: stored (the objects themselves: a field reassigned since then is told by identity).
Kept = tuple[lc_messages.BaseMessage, bytes, tuple[Any, ...]]


def _snapshot(message: lc_messages.BaseMessage) -> tuple[Any, ...]:
    return tuple(message.__dict__.values())


def _unchanged(kept: Kept) -> bool:
    """Whether no field of the kept message was reassigned since its bytes were stored (LangChain's
    own `HumanInTheLoopMiddleware` reassigns `tool_calls` on the state's last AI message, for one)."""
    values = kept[0].__dict__.values()
    return len(values) == len(kept[2]) and all(map(is_, values, kept[2]))


class StoredMessages:
    """Messages with the bytes stored for them (decoded from, or encoded to), found by those bytes
    (decoding) and by the object (writing it back), in two generations: new and re-used messages go
    to the young one; when its bytes reach half of `max_bytes` it becomes the old one and the
    previous old one is dropped. A message whose fields were reassigned since is never answered:
    its bytes no longer describe it."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._young: dict[bytes, Kept] = {}
        self._old: dict[bytes, Kept] = {}
        self._young_by_object: dict[int, Kept] = {}
        self._old_by_object: dict[int, Kept] = {}
        self._young_bytes = self._old_bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._young) + len(self._old)

    @property
    def kept_bytes(self) -> int:
        """The stored bytes of the messages kept (at most `max_bytes`)."""
        return self._young_bytes + self._old_bytes

    def find(self, stored: bytes) -> Kept | None:
        """The unchanged message kept for `stored` (with its record), or None."""
        kept = self._young.get(stored)
        if kept is None:
            kept = self._old.get(stored)
            if kept is None or not _unchanged(kept):
                return None
            self._keep(kept)  # in use again: into the young generation
        elif not _unchanged(kept):
            return None
        return kept

    def stored(self, message: object) -> bytes | None:
        """The bytes kept for `message` (this very object, unchanged), or None."""
        key = id(message)
        kept = self._young_by_object.get(key) or self._old_by_object.get(key)
        if kept is None or kept[0] is not message or not _unchanged(kept):
            return None
        return kept[1]

    def keep(self, stored: bytes, message: lc_messages.BaseMessage) -> Kept:
        """Remember that `stored` are the bytes of `message` as its fields are now."""
        kept = (message, stored, _snapshot(message))
        self._keep(kept)
        return kept

    def _keep(self, kept: Kept) -> None:
        size = len(kept[1])
        if 2 * size > self.max_bytes:
            return  # too big to keep: decoded (or encoded) each time, still right
        with self._lock:
            if 2 * (self._young_bytes + size) > self.max_bytes:
                self._old, self._old_by_object = self._young, self._young_by_object
                self._old_bytes = self._young_bytes
                self._young, self._young_by_object, self._young_bytes = {}, {}, 0
            previous = self._young.get(kept[1])
            if previous is not None:
                self._young_bytes -= size
                if self._young_by_object.get(id(previous[0])) is previous:
                    del self._young_by_object[id(previous[0])]
            self._young[kept[1]] = kept
            self._young_by_object[id(kept[0])] = kept
            self._young_bytes += size


class CheckpointSerializer(JsonPlusSerializer):
    """`JsonPlusSerializer` that decodes a stored message once per process and hands the same object
    back for the same bytes (see the module docstring); every other value is decoded as LangGraph
    does. `kept_message_bytes` and `kept_payloads` bound what it keeps (0 keeps nothing)."""

    def __init__(
        self,
        *args: Any,
        kept_message_bytes: int = KEPT_MESSAGE_BYTES,
        kept_payloads: int = KEPT_PAYLOADS,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.messages = StoredMessages(kept_message_bytes)
        self.kept_payloads = kept_payloads
        #: payload digest -> the value decoded from it, and the records of its messages
        self._payloads: OrderedDict[bytes, tuple[Any, list[Kept]]] = OrderedDict()
        self._payloads_lock = threading.Lock()

    def with_msgpack_allowlist(self, extra_allowlist: Iterable[tuple[str, ...] | type]) -> JsonPlusSerializer:
        """LangGraph's copy with a wider allowlist, keeping nothing of this one's: what was decoded
        under one allowlist (a message's fields may hold other types) is never answered under
        another."""
        clone = super().with_msgpack_allowlist(extra_allowlist)
        if clone is not self and isinstance(clone, CheckpointSerializer):
            clone.messages = StoredMessages(self.messages.max_bytes)
            clone._payloads, clone._payloads_lock = OrderedDict(), threading.Lock()
        return clone

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if obj is None or isinstance(obj, bytes | bytearray):
            return super().dumps_typed(obj)
        try:
            return "msgpack", ormsgpack.packb(obj, default=self._encode_default, option=jsonplus._option)
        except ormsgpack.MsgpackEncodeError:
            return super().dumps_typed(obj)  # LangGraph's own fallbacks (and its error)

    def _encode_default(self, obj: Any) -> Any:
        stored = self.messages.stored(obj)
        if stored is not None:
            return ormsgpack.Ext(EXT_PYDANTIC_V2, stored)
        if type(obj) in _KEPT_CLASSES and obj.id is not None:
            # What LangGraph's own `default` writes for a pydantic model, kept for the next read.
            stored = jsonplus._msgpack_enc(
                (type(obj).__module__, type(obj).__name__, obj.model_dump(), "model_validate_json")
            )
            self.messages.keep(stored, obj)
            return ormsgpack.Ext(EXT_PYDANTIC_V2, stored)
        return jsonplus._msgpack_default(obj)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        kind, payload = data
        if kind != "msgpack":
            return super().loads_typed(data)
        if len(payload) < KEPT_PAYLOAD_MIN_BYTES or self.kept_payloads <= 0:
            return self._unpack(payload, None)
        key = hashlib.blake2b(payload, digest_size=32).digest()
        with self._payloads_lock:
            entry = self._payloads.get(key)
            if entry is not None:
                self._payloads.move_to_end(key)
        if entry is None or not all(map(_unchanged, entry[1])):
            read: list[Kept] = []
            entry = (self._unpack(payload, read), read)
            with self._payloads_lock:
                self._payloads[key] = entry
                while len(self._payloads) > self.kept_payloads:
                    self._payloads.popitem(last=False)
        return fresh_containers(entry[0])

    def _unpack(self, payload: bytes, read: list[Kept] | None) -> Any:
        """Decode `payload`; each message in it goes into `read` with its record."""

        def ext_hook(code: int, data: bytes) -> Any:
            return self._ext_hook(code, data, read)

        return ormsgpack.unpackb(payload, ext_hook=ext_hook, option=_OPTIONS)

    def _ext_hook(self, code: int, data: bytes, read: list[Kept] | None) -> Any:
        if code == EXT_PYDANTIC_V2:
            kept = self.messages.find(data)
            if kept is None:
                stored = ormsgpack.unpackb(
                    data, ext_hook=lambda c, d: self._ext_hook(c, d, read), option=_OPTIONS
                )
                if isinstance(stored, list | tuple) and len(stored) >= 3 and isinstance(stored[2], dict):
                    message_class = MESSAGE_CLASSES.get((stored[0], stored[1]))
                    if message_class is not None:
                        kept = self.messages.keep(data, message_class.model_construct(**stored[2]))
            if kept is not None:
                if read is not None:
                    read.append(kept)
                return kept[0]
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
