"""Turning the summarised messages into the `{messages}` text of the summary prompt, within a budget,
and the deterministic digest used when the summary model fails (S27)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from ctxpress.compaction.content import content_text
from ctxpress.compaction.markers import parse_offload_reference
from ctxpress.compaction.text_preview import head_middle_tail_preview
from ctxpress.summary.event import is_summary_message
from ctxpress.tokens import TokenCounter

#: Every message keeps at least this much of its text when the input is squeezed to the budget.
MIN_TOKENS_PER_MESSAGE = 24
DIGEST_ITEM_CHARS = 160
DIGEST_MAX_ITEMS = 12
PATH_ARGUMENT_KEYS = ("path", "file_path", "filename", "file")
EARLIER_SUMMARY_CHARS = 1500


def _role(message: BaseMessage) -> str:
    if isinstance(message, HumanMessage):
        return "user"
    if isinstance(message, AIMessage):
        return "assistant"
    if isinstance(message, ToolMessage):
        return f"tool {message.name or ''}".rstrip()
    if isinstance(message, SystemMessage):
        return "system"
    return message.type


def message_text(message: BaseMessage) -> str:
    text = content_text(message.content)
    if isinstance(message, AIMessage):
        for call in message.tool_calls:
            arguments = json.dumps(call["args"], ensure_ascii=False, default=str)
            text += f"\n→ called {call['name']}({arguments})"
    return text


def render_messages(
    messages: Sequence[BaseMessage],
    budget: int,
    profile: str = "default",
    *,
    counter: TokenCounter | None = None,
) -> str:
    """`[n] role: text` lines; when over `budget` tokens each message is cut in proportion to its size."""
    texts = [message_text(message) for message in messages]
    # Per-message counts (content + tool calls): close enough to size the cut, and free warm (the
    # middleware's counter has just counted these messages).
    counter = counter if counter is not None else TokenCounter()
    sizes = [counter.count_message(message, profile) for message in messages]
    total = sum(sizes)
    if total > budget:
        scale = budget / total
        texts = [
            head_middle_tail_preview(text, max(MIN_TOKENS_PER_MESSAGE, int(size * scale)), profile, size)
            for text, size in zip(texts, sizes, strict=True)
        ]
    return "\n\n".join(
        f"[{index}] {_role(message)}: {text}"
        for index, (message, text) in enumerate(zip(messages, texts, strict=True), 1)
    )


def _short(text: str) -> str:
    flat = " ".join(text.split())
    return flat[:DIGEST_ITEM_CHARS] + ("…" if len(flat) > DIGEST_ITEM_CHARS else "")


def deterministic_digest(messages: Sequence[BaseMessage]) -> str:
    """What the summarised range contained, without a model: requests, tool calls, file paths."""
    earlier = [content_text(m.content) for m in messages if is_summary_message(m)]
    requests = [
        _short(content_text(m.content))
        for m in messages
        if isinstance(m, HumanMessage) and not is_summary_message(m)
    ]
    calls: dict[str, int] = {}
    paths: list[str] = []
    for message in messages:
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                calls[call["name"]] = calls.get(call["name"], 0) + 1
                args = call["args"] if isinstance(call["args"], dict) else {}
                paths.extend(str(args[key]) for key in PATH_ARGUMENT_KEYS if isinstance(args.get(key), str))
        elif isinstance(message, ToolMessage):
            reference = parse_offload_reference(content_text(message.content))
            if reference is not None:
                paths.append(reference.path)
    lines = [f"Messages summarised: {len(messages)}."]
    if earlier:
        # Carry the previous summary forward, so a failed summary does not erase what it held.
        body = earlier[-1].split("\n\n", 1)[-1]
        lines.append("Earlier summary: " + body[:EARLIER_SUMMARY_CHARS])
    if requests:
        lines.append("User requests (most recent last):")
        lines.extend(f"- {item}" for item in requests[-DIGEST_MAX_ITEMS:])
    if calls:
        lines.append("Tool calls made: " + ", ".join(f"{name} ×{count}" for name, count in calls.items()))
    if paths:
        unique = list(dict.fromkeys(paths))[-DIGEST_MAX_ITEMS:]
        lines.append("Files involved: " + ", ".join(unique))
    return "\n".join(lines)
