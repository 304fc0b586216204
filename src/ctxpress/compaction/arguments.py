"""S7: long tool-call arguments are cut in the view, and nothing is lost.

Long string arguments of `write_file` / `edit_file` become a hint: the call already wrote the
content, so the model can read it back. An over-budget argument of any other tool is saved in the
workdir and replaced by its file path and a preview (`ctxpress.compaction.argument_offload`).
Both the LangChain `tool_calls` and the provider-format `additional_kwargs["tool_calls"]` are cut,
because some providers' converters read the latter.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage

from ctxpress.compaction.argument_offload import ARGUMENT_CHAR_LIMIT, ArgumentOffloader
from ctxpress.compaction.markers import is_omitted_argument, omitted_argument_hint
from ctxpress.compaction.offload import failure_reason
from ctxpress.compaction.result import CompactionFailure, TruncatedArgument

FILE_WRITING_TOOLS = frozenset({"write_file", "edit_file"})


@dataclass
class _Records:
    """What one message's cuts did: arguments replaced and arguments that could not be saved."""

    truncated: list[TruncatedArgument] = field(default_factory=list)
    failures: list[CompactionFailure] = field(default_factory=list)


@dataclass
class _ArgumentCutter:
    tool_name: str
    records: _Records
    message_id: str | None
    tool_call_id: str
    offloader: ArgumentOffloader | None

    def cut(self, args: dict[str, Any]) -> dict[str, Any] | None:
        """New args with long values replaced, or None when nothing needed cutting."""
        changed = False
        new_args = dict(args)
        for key, value in args.items():
            replacement = self._replacement(key, value)
            if replacement is not None:
                new_args[key] = replacement
                changed = True
        return new_args if changed else None

    def _replacement(self, key: str, value: Any) -> str | None:
        if self.tool_name in FILE_WRITING_TOOLS:
            if isinstance(value, str) and len(value) > ARGUMENT_CHAR_LIMIT and not is_omitted_argument(value):
                self._record(key, len(value))
                return omitted_argument_hint(self.tool_name, key, len(value))
            return None
        if self.offloader is None:
            return None
        try:
            offloaded = self.offloader.offload(self.tool_name, key, value)
        except Exception as exc:  # any backend failure: keep the argument as it is (S13)
            self.records.failures.append(
                CompactionFailure(self.message_id, self.tool_call_id, self.tool_name, failure_reason(exc))
            )
            return None
        if offloaded is None:
            return None
        self._record(key, offloaded.chars, offloaded.path, offloaded.written_now)
        return offloaded.text

    def _record(self, key: str, chars: int, path: str | None = None, written_now: bool = False) -> None:
        self.records.truncated.append(
            TruncatedArgument(
                self.message_id, self.tool_call_id, self.tool_name, key, chars, path, written_now
            )
        )


def _cut_provider_tool_call(
    raw: Any, records: _Records, message_id: str | None, offloader: ArgumentOffloader | None
) -> Any:
    """One provider-format call (`{"function": {"name", "arguments": "<json>"}}`) with long args cut."""
    if not isinstance(raw, dict):
        return raw
    function = raw.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        return raw
    if offloader is None and function["name"] not in FILE_WRITING_TOOLS:
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
    cutter = _ArgumentCutter(function["name"], records, message_id, str(raw.get("id", "")), offloader)
    new_args = cutter.cut(parsed)
    if new_args is None:
        return raw
    return {**raw, "function": {**function, "arguments": json.dumps(new_args, ensure_ascii=False)}}


def _cut_tool_calls(
    message: AIMessage, records: _Records, offloader: ArgumentOffloader | None
) -> list[Any] | None:
    new_calls: list[Any] = []
    changed = False
    for call in message.tool_calls:
        cutter = _ArgumentCutter(call["name"], records, message.id, call.get("id") or "", offloader)
        new_args = cutter.cut(call["args"])
        changed |= new_args is not None
        new_calls.append({**call, "args": new_args} if new_args is not None else call)
    return new_calls if changed else None


def _cut_provider_tool_calls(
    message: AIMessage, records: _Records, offloader: ArgumentOffloader | None
) -> list[Any] | None:
    raw_calls = message.additional_kwargs.get("tool_calls")
    if not isinstance(raw_calls, list):
        return None
    new_raw = [_cut_provider_tool_call(raw, records, message.id, offloader) for raw in raw_calls]
    return new_raw if any(new is not old for new, old in zip(new_raw, raw_calls, strict=True)) else None


def cut_long_arguments(
    message: AIMessage, offloader: ArgumentOffloader | None = None
) -> tuple[AIMessage, list[TruncatedArgument], list[CompactionFailure]]:
    """The message with long arguments cut (the same object when nothing changes).

    Without an `offloader` only `write_file` / `edit_file` arguments are cut (to a hint).
    """
    records = _Records()
    provider_records = _Records()
    new_calls = _cut_tool_calls(message, records, offloader)
    new_raw_calls = _cut_provider_tool_calls(message, provider_records, offloader)
    failures = records.failures or provider_records.failures
    if new_calls is None and new_raw_calls is None:
        return message, [], failures
    update: dict[str, Any] = {}
    if new_calls is not None:
        update["tool_calls"] = new_calls
    if new_raw_calls is not None:
        update["additional_kwargs"] = {**message.additional_kwargs, "tool_calls": new_raw_calls}
    # Both formats usually describe the same calls: report each cut argument once.
    return message.model_copy(update=update), records.truncated or provider_records.truncated, failures
