"""Turning the summarised messages into the `{messages}` text of the summary prompt, within a budget,
and the deterministic digest used when the summary model fails (S27).

The transcript is one `[n] role: text` entry per message; each non-text block (image, file, audio)
is one placeholder line naming it and where it lives. The whole transcript -- prefixes,
placeholders, cut texts and their markers -- stays within the budget. Squeezing goes in steps:
long texts are cut to head, middle and tail (short ones stay whole); when not every message can
keep `MIN_TOKENS_PER_MESSAGE` of its text, messages from the middle are replaced by one line saying
how many were left out, keeping the earliest and the latest.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from ctxpress.compaction.content import block_placeholder, content_text, non_text_blocks
from ctxpress.compaction.markers import parse_offload_reference
from ctxpress.compaction.text_preview import head_middle_tail_preview
from ctxpress.summary.event import is_summary_message
from ctxpress.tokens import TokenCounter, estimate_tokens

#: A shown message keeps at least this much of its text, when it has that much: a cut one keeps
#: a sentence or two of head and tail beside its marker (more than `smallest_preview_budget` of
#: any text below a trillion characters, so a cut message always has a preview).
MIN_TOKENS_PER_MESSAGE = 64
#: Non-text blocks named per message; the rest are counted in one line.
MAX_PLACEHOLDERS_PER_MESSAGE = 8
ENTRY_SEPARATOR = "\n\n"
#: Re-renders with a smaller budget when the measured transcript is over (estimates that did not
#: add up); after these the transcript is the one left-out line.
SHRINK_ROUNDS = 4
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
    """The text of a message and its tool calls; non-text blocks are in `message_placeholders`."""
    text = content_text(message.content)
    if isinstance(message, AIMessage):
        for call in message.tool_calls:
            arguments = json.dumps(call["args"], ensure_ascii=False, default=str)
            text += f"\n→ called {call['name']}({arguments})"
    return text


def message_placeholders(message: BaseMessage) -> str:
    """One line per non-text block of the message (at most `MAX_PLACEHOLDERS_PER_MESSAGE`)."""
    if message.content.__class__ is str:
        return ""
    named = [line for line in map(block_placeholder, non_text_blocks(message.content)) if line is not None]
    lines = named[:MAX_PLACEHOLDERS_PER_MESSAGE]
    if len(named) > len(lines):
        lines.append(f"[… {len(named) - len(lines)} more non-text blocks]")
    return "\n".join(lines)


@dataclass(slots=True)
class _Entry:
    """One message of the transcript: the fixed parts and the text that may be cut."""

    number: int
    prefix: str
    text: str
    text_tokens: int
    placeholders: str
    fixed_tokens: int  # prefix, placeholders and the separator before the next entry
    floor_tokens: int  # the least of the text kept when the entry is shown

    @property
    def full_tokens(self) -> int:
        return self.fixed_tokens + self.text_tokens

    @property
    def least_tokens(self) -> int:
        return self.fixed_tokens + self.floor_tokens

    def render(self, allowance: int, profile: str) -> str:
        text = self.text
        if self.text_tokens > allowance:
            text = head_middle_tail_preview(text, allowance, profile, self.text_tokens)
        return self.prefix + "\n".join(part for part in (text, self.placeholders) if part)


class _EntryBuilder:
    """Builds the entries of one transcript, measuring what repeats once."""

    def __init__(self, profile: str, counter: TokenCounter) -> None:
        self.profile = profile
        self.counter = counter
        self.separator_tokens = estimate_tokens(ENTRY_SEPARATOR, profile)
        # The estimate counts character classes, so a prefix's depends only on its role and the
        # number of digits of its number: one measure per shape.
        self._prefix_tokens: dict[tuple[str, int], int] = {}

    def _prefix(self, number: int, role: str) -> tuple[str, int]:
        prefix = f"[{number}] {role}: "
        shape = (role, len(str(number)))
        tokens = self._prefix_tokens.get(shape)
        if tokens is None:
            tokens = self._prefix_tokens[shape] = estimate_tokens(prefix, self.profile)
        return prefix, tokens

    def _text_tokens(self, message: BaseMessage, text: str) -> int:
        if message.content.__class__ is str:
            # The cached count (text, tool calls and a little framing): an upper bound of the text,
            # free when the middleware has counted the message already.
            return self.counter.count_message(message, self.profile)
        # List content: the text alone -- an image's ~1,000 counted tokens are not text to cut.
        return estimate_tokens(text, self.profile)

    def entry(self, number: int, message: BaseMessage) -> _Entry:
        prefix, prefix_tokens = self._prefix(number, _role(message))
        text = message_text(message)
        text_tokens = self._text_tokens(message, text)
        placeholders = message_placeholders(message)
        fixed = prefix_tokens + self.separator_tokens
        if placeholders:
            fixed += estimate_tokens(placeholders, self.profile) + 1  # and the line break before them
        floor = min(text_tokens, MIN_TOKENS_PER_MESSAGE)
        return _Entry(number, prefix, text, text_tokens, placeholders, fixed, floor)


def _left_out_line(entries: Sequence[_Entry]) -> str:
    first, last = entries[0].number, entries[-1].number
    tokens = sum(entry.full_tokens for entry in entries)
    span = f"message {first}" if first == last else f"messages {first}–{last}, {len(entries)} in all"
    # The same "[… … left out …]" form as every other marker, so readers of a transcript know it.
    return f"[… {span} (~{tokens:,} tokens) left out …]"


def _shown_ends(entries: Sequence[_Entry], budget: int, profile: str) -> tuple[int, int]:
    """How many entries are shown from the start and from the end of the transcript: all when each
    can keep its least, else the earliest and the latest, alternately, as many as can keep their
    least beside the line that stands for the middle."""
    if sum(entry.least_tokens for entry in entries) <= budget:
        return len(entries), 0
    used = estimate_tokens(_left_out_line(entries), profile) + estimate_tokens(ENTRY_SEPARATOR, profile)
    front, back = 0, 0
    while front + back < len(entries):
        take_front = back >= front
        entry = entries[front] if take_front else entries[len(entries) - 1 - back]
        if used + entry.least_tokens > budget:
            break
        used += entry.least_tokens
        front, back = (front + 1, back) if take_front else (front, back + 1)
    return front, back


def _allowance(entries: Sequence[_Entry], room: int) -> int:
    """The highest text allowance with `sum(min(text, max(allowance, floor)))` within `room`."""

    def needed(cap: int) -> int:
        return sum(min(entry.text_tokens, max(cap, entry.floor_tokens)) for entry in entries)

    low, high = 0, max((entry.text_tokens for entry in entries), default=0)
    while low < high:
        middle = (low + high + 1) // 2
        if needed(middle) <= room:
            low = middle
        else:
            high = middle - 1
    return low


def _squeezed(entries: Sequence[_Entry], budget: int, profile: str) -> str:
    front, back = _shown_ends(entries, budget, profile)
    shown = [*entries[:front], *entries[len(entries) - back :]]
    left_out = entries[front : len(entries) - back]
    line = _left_out_line(left_out) if left_out else ""
    room = budget - sum(entry.fixed_tokens for entry in shown)
    if line:
        room -= estimate_tokens(line, profile) + estimate_tokens(ENTRY_SEPARATOR, profile)
    allowance = _allowance(shown, room)
    pieces = [entry.render(max(allowance, entry.floor_tokens), profile) for entry in entries[:front]]
    if line:
        pieces.append(line)
    pieces.extend(
        entry.render(max(allowance, entry.floor_tokens), profile) for entry in entries[len(entries) - back :]
    )
    return ENTRY_SEPARATOR.join(pieces)


def render_messages(
    messages: Sequence[BaseMessage],
    budget: int,
    profile: str = "default",
    *,
    counter: TokenCounter | None = None,
) -> str:
    """The transcript of `messages` within `budget` estimated tokens ("" when not even one line fits).

    `counter`: the middleware's, so the per-message counts are free warm."""
    builder = _EntryBuilder(profile, counter if counter is not None else TokenCounter())
    entries = [builder.entry(number, message) for number, message in enumerate(messages, 1)]
    if not entries or budget <= 0:
        return ""
    if sum(entry.full_tokens for entry in entries) <= budget:
        transcript = ENTRY_SEPARATOR.join(entry.render(entry.text_tokens, profile) for entry in entries)
        if estimate_tokens(transcript, profile) <= budget:
            return transcript
    squeeze = budget
    for _ in range(SHRINK_ROUNDS):
        transcript = _squeezed(entries, squeeze, profile)
        tokens = estimate_tokens(transcript, profile)
        if tokens <= budget:
            return transcript
        squeeze -= tokens - budget
    line = _left_out_line(entries)
    return line if estimate_tokens(line, profile) <= budget else ""


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
