"""Turning LangChain / LangGraph objects into JSON that both databases and SSE clients accept."""

from __future__ import annotations

import base64
import dataclasses
import math
import re
from collections.abc import Mapping
from datetime import date, datetime
from enum import Enum
from typing import Any
from uuid import UUID

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
)
from pydantic import BaseModel

MAX_DEPTH = 64
#: Integers the checkpoint's msgpack encoding (and a BIGINT) holds.
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
#: Nesting accepted in a JSON value the service stores (msgpack stops at 255 levels, with the
#: message around the value taking some of them).
MAX_STORED_JSON_DEPTH = 32
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def storable_text(text: str) -> str:
    """PostgreSQL text and JSONB refuse NUL and lone surrogates; both backends store the same repair (U+FFFD)."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = _LONE_SURROGATE.sub("\ufffd", text)
    return text


def storable_json(value: Any, _depth: int = 0) -> Any:
    """`value` with its strings repaired (`storable_text`); ValueError for what neither the checkpoint
    nor PostgreSQL can hold: integers beyond 64 bits, NaN / infinities, deeper nesting than allowed."""
    if _depth > MAX_STORED_JSON_DEPTH:
        raise ValueError(f"the value is nested more than {MAX_STORED_JSON_DEPTH} levels deep")
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise ValueError("integers must fit in 64 bits (-2**63 to 2**63-1); send larger numbers as text")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("numbers must be finite (no NaN or Infinity)")
        return value
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, Mapping):
        return {storable_text(str(key)): storable_json(item, _depth + 1) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [storable_json(item, _depth + 1) for item in value]
    raise ValueError(f"not a JSON value: {type(value).__name__}")


def to_jsonable(value: Any, _depth: int = 0) -> Any:
    """A JSON-compatible copy of `value` (messages become `message_to_dict` documents)."""
    if _depth > MAX_DEPTH:
        return "<nested too deeply>"
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, BaseMessage):
        return to_jsonable(message_to_dict(value), _depth + 1)
    if isinstance(value, BaseModel):
        return to_jsonable(value.model_dump(), _depth + 1)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_jsonable({f.name: getattr(value, f.name) for f in dataclasses.fields(value)}, _depth + 1)
    if isinstance(value, Mapping):
        return {storable_text(str(key)): to_jsonable(item, _depth + 1) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(item, _depth + 1) for item in value]
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, Enum):
        return to_jsonable(value.value, _depth + 1)
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode("ascii")}
    return storable_text(repr(value))


#: The chat record's role of a model reply (the page renders these as Markdown).
ASSISTANT_ROLE = "assistant"


def message_role(message: BaseMessage) -> str:
    if isinstance(message, HumanMessage):
        return "user"
    if isinstance(message, AIMessage):
        return ASSISTANT_ROLE
    if isinstance(message, ToolMessage):
        return "tool"
    if isinstance(message, SystemMessage):
        return "system"
    return message.type
