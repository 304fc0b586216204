"""S7: long string arguments of `write_file` / `edit_file` calls are cut to a hint in the view.

The content was already written by the call, so the model loses nothing it cannot read back.
Both the LangChain `tool_calls` and the provider-format `additional_kwargs["tool_calls"]` are cut,
because some providers' converters read the latter.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage

from ctxpress.compaction.markers import is_omitted_argument, omitted_argument_hint
from ctxpress.compaction.result import TruncatedArgument

FILE_WRITING_TOOLS = frozenset({"write_file", "edit_file"})
ARGUMENT_CHAR_LIMIT = 2000


@dataclass
class _ArgumentCutter:
    tool_name: str
    truncated: list[TruncatedArgument]
    message_id: str | None
    tool_call_id: str

    def cut(self, args: dict[str, Any]) -> dict[str, Any] | None:
        """New args with long strings replaced, or None when nothing needed cutting."""
        changed = False
        new_args = dict(args)
        for key, value in args.items():
            if isinstance(value, str) and len(value) > ARGUMENT_CHAR_LIMIT and not is_omitted_argument(value):
                new_args[key] = omitted_argument_hint(self.tool_name, key, len(value))
                self.truncated.append(
                    TruncatedArgument(self.message_id, self.tool_call_id, self.tool_name, key, len(value))
                )
                changed = True
        return new_args if changed else None


def _cut_provider_tool_call(raw: Any, records: list[TruncatedArgument], message_id: str | None) -> Any:
    """One provider-format call (`{"function": {"name", "arguments": "<json>"}}`) with long args cut."""
    if not isinstance(raw, dict):
        return raw
    function = raw.get("function")
    if not isinstance(function, dict) or function.get("name") not in FILE_WRITING_TOOLS:
        return raw
    arguments = function.get("arguments")
    if not isinstance(arguments, str) or len(arguments) <= ARGUMENT_CHAR_LIMIT:
        return raw
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return raw  # malformed JSON from the model: leave it as the provider sent it
    if not isinstance(parsed, dict):
        return raw
    cutter = _ArgumentCutter(str(function["name"]), records, message_id, str(raw.get("id", "")))
    new_args = cutter.cut(parsed)
    if new_args is None:
        return raw
    return {**raw, "function": {**function, "arguments": json.dumps(new_args, ensure_ascii=False)}}


def _cut_tool_calls(message: AIMessage, records: list[TruncatedArgument]) -> list[Any] | None:
    new_calls: list[Any] = []
    changed = False
    for call in message.tool_calls:
        new_args = None
        if call["name"] in FILE_WRITING_TOOLS:
            cutter = _ArgumentCutter(call["name"], records, message.id, call.get("id") or "")
            new_args = cutter.cut(call["args"])
        changed |= new_args is not None
        new_calls.append({**call, "args": new_args} if new_args is not None else call)
    return new_calls if changed else None


def _cut_provider_tool_calls(message: AIMessage, records: list[TruncatedArgument]) -> list[Any] | None:
    raw_calls = message.additional_kwargs.get("tool_calls")
    if not isinstance(raw_calls, list):
        return None
    new_raw = [_cut_provider_tool_call(raw, records, message.id) for raw in raw_calls]
    return new_raw if any(new is not old for new, old in zip(new_raw, raw_calls, strict=True)) else None


def cut_long_file_arguments(message: AIMessage) -> tuple[AIMessage, list[TruncatedArgument]]:
    """The message with long file-writing arguments cut (the same object when nothing changes)."""
    records: list[TruncatedArgument] = []
    provider_records: list[TruncatedArgument] = []
    new_calls = _cut_tool_calls(message, records)
    new_raw_calls = _cut_provider_tool_calls(message, provider_records)
    if new_calls is None and new_raw_calls is None:
        return message, []
    update: dict[str, Any] = {}
    if new_calls is not None:
        update["tool_calls"] = new_calls
    if new_raw_calls is not None:
        update["additional_kwargs"] = {**message.additional_kwargs, "tool_calls": new_raw_calls}
    # Both formats usually describe the same calls: report each cut argument once.
    return message.model_copy(update=update), records or provider_records
