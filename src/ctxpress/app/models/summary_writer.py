"""The offline model as a summary model: an extractive summary of the `{messages}` transcript.

The summary prompt (any template) contains the transcript as `[n] role: text` blocks. The summary
keeps, quoted as written and in the user's language:

- the user's goals and requests (their first sentences, most recent last);
- decisions and conclusions (sentences with a decision cue: 决定、确定、改为、must, decided, …);
- identifiers, file paths, URLs and numbers with their units (ids like `doc_x_002#1`, paths like
  `outputs/large_tool_results/…`, `300 元`, `$6.00`, `64K`, phone numbers);
- the tools that were called, with their query / path arguments;
- the latest request, which may still be open;
- what an earlier summary in the transcript kept, merged section by section, so summaries stack.

The summary's length is bounded by a share of the transcript's (sections lower in the list above
give way first). The default prompt's closing line is not mistaken for part of the last message.

Sentences are split the Chinese-aware way (`ctxpress.app.kb.sentences`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from ctxpress.app.kb.sentences import split_sentences
from ctxpress.app.models.extractive import bounded
from ctxpress.app.models.intents import ASK_COMMAND, TOOL_COMMAND
from ctxpress.app.models.language import PHRASES, Language, detect_language, say
from ctxpress.app.models.reply import BUILTIN_LABEL
from ctxpress.compaction.markers import OFFLOAD_MARKER, parse_offload_reference
from ctxpress.config import DEFAULT_SUMMARY_PROMPT, MESSAGES_PLACEHOLDER
from ctxpress.summary.event import SUMMARY_MARKER

_BLOCK = re.compile(r"^\[(\d+)\] (user|assistant|system|human|ai|tool(?: [^:\n]{0,80})?): ", re.MULTILINE)
_CALL = re.compile(r"^→ called ([A-Za-z0-9_.-]+)\((.*)\)\s*$", re.MULTILINE)
_DECISION = re.compile(
    r"决定|确定|决策|结论|选择|选定|采用|改为|改成|就用|同意|确认|约定|必须|不要|不能|计划|偏好|预算"
    r"|\b(?:decid|agree|chose|choose|confirm|must|should|will use|plan|prefer|budget|conclu)",
    re.IGNORECASE,
)
#: A quoted list line of an answer (`1. …`, `- …`) is a quote, not a decision.
_QUOTED_LINE = re.compile(r"^(?:[-*·]\s|\d+\.\s)")
_URL = re.compile(r"https?://[^\s)\]}>\"'，。]+")
#: Word characters for boundaries are ASCII only: an identifier right after Chinese text
#: ("用户ID是mia_li_3668") is still an identifier.
_W = "A-Za-z0-9_"
_PATH = re.compile(rf"(?<![{_W}/.-])(?:[{_W}.-]+/)+[{_W}.-]*[{_W}]")
_IDENTIFIER = re.compile(
    rf"(?<![{_W}/-])(?:(?=[A-Za-z-]*[_\d])[A-Za-z][A-Za-z0-9]*(?:[_-][A-Za-z0-9]+)+(?:#\d+)?"  # doc_x_002#1
    rf"|(?=[A-Za-z]*\d)(?=\d*[A-Za-z])[A-Za-z0-9]{{5,}})(?![{_W}/-])"  # INV12345, HAT069
)
_DATE = re.compile(rf"(?<![{_W}/-])\d{{4}}-\d{{1,2}}-\d{{1,2}}(?![{_W}/-])")
_NUMBER = re.compile(
    rf"(?<![{_W}.#/:-])[$¥€£]?\d[\d,]*(?:\.\d+)?"
    r"(?:\s?(?:%|元|美元|块|万|亿|K|k|M|MB|GB|KB|tokens?|个|条|次|天|小时|分钟|秒|年|月|日|号|人|间|晚|公里|km|倍))?"
    rf"(?![{_W}.#/:-])"
)
_JSON_KEY = re.compile(r'"[A-Za-z_][\w-]*"\s*:')
_OFFLOAD_LINE = re.compile(re.escape(OFFLOAD_MARKER) + r"[^\n]*")
#: A marker with the (possibly cut) words touching it on either side, across its line breaks.
_LEFT_OUT_WITH_EDGES = re.compile(r"\S*\s?\[… [^\]\n]{0,80} left out …\]\s?\S*")
_CUT_WORD_AT_ELLIPSIS = re.compile(r"\S*…")
_TOOL_LINE = re.compile(r"^(\S+) (?:(\d+)次|×(\d+))(?: \((.*)\))?$")
#: Digit runs this long are hashes or ids, not quantities.
MAX_NUMBER_DIGITS = 12
ARGUMENT_KEYS = ("query", "path", "file_path", "pattern", "question")
#: What the default prompt puts after `{messages}`; it is not part of the last message.
DEFAULT_PROMPT_SUFFIX = DEFAULT_SUMMARY_PROMPT.split(MESSAGES_PLACEHOLDER, 1)[1]
#: A summary is at most this share of the transcript's characters (but may always use MIN_SUMMARY_CHARS).
SUMMARY_SHARE = 0.5
MIN_SUMMARY_CHARS = 400
MAX_SUMMARY_CHARS = 6000
MAX_GOALS = 10
MAX_DECISIONS = 10
MAX_IDENTIFIERS = 30
MAX_EARLIER_POINTS = 12
MAX_TOOL_ARGUMENTS = 6
GOAL_CHARS = 200
LINE_CHARS = 180
#: The sections, most important first: when the budget runs out, what comes last is left out.
SECTION_KEYS = (
    "summary_goals",
    "summary_decisions",
    "summary_identifiers",
    "summary_pending",
    "summary_tools",
    "summary_earlier",
)


@dataclass(frozen=True)
class TranscriptBlock:
    index: int
    role: str
    text: str

    @property
    def is_user(self) -> bool:
        return self.role in ("user", "human") and not self.is_summary

    @property
    def is_assistant(self) -> bool:
        return self.role in ("assistant", "ai")

    @property
    def is_tool(self) -> bool:
        return self.role.startswith("tool")

    @property
    def is_summary(self) -> bool:
        return self.text.startswith(SUMMARY_MARKER)


def parse_transcript(prompt: str) -> list[TranscriptBlock]:
    """The `[n] role: text` blocks of a rendered summary prompt, in order."""
    if prompt.endswith(DEFAULT_PROMPT_SUFFIX):
        prompt = prompt[: -len(DEFAULT_PROMPT_SUFFIX)]
    matches = list(_BLOCK.finditer(prompt))
    blocks = []
    for position, match in enumerate(matches):
        end = matches[position + 1].start() if position + 1 < len(matches) else len(prompt)
        blocks.append(TranscriptBlock(int(match.group(1)), match.group(2), prompt[match.end() : end].strip()))
    return blocks


def looks_like_summary_prompt(prompt: str) -> bool:
    return bool(re.search(r"^\[1\] (?:user|assistant|system|tool)", prompt, re.MULTILINE))


def write_summary(prompt: str, label: str) -> str:
    """The extractive summary of the transcript inside `prompt` (see the module docstring)."""
    blocks = parse_transcript(prompt)
    language = _conversation_language(blocks, prompt)
    earlier = _earlier_sections(blocks)
    earlier.pop("summary_pending", None)  # superseded by what followed it
    sections: dict[str, list[str]] = {
        "summary_goals": _unique([*earlier.pop("summary_goals", []), *_goals(blocks)])[-MAX_GOALS:],
        "summary_decisions": _unique([*earlier.pop("summary_decisions", []), *_decisions(blocks)])[
            -MAX_DECISIONS:
        ],
        "summary_identifiers": _unique([*earlier.pop("summary_identifiers", []), *_identifiers(blocks)])[
            :MAX_IDENTIFIERS
        ],
        "summary_pending": _pending(blocks),
        "summary_tools": _tool_calls(blocks, language, earlier.pop("summary_tools", [])),
        "summary_earlier": [item for items in earlier.values() for item in items][-MAX_EARLIER_POINTS:],
    }
    transcript_chars = sum(len(block.text) for block in blocks)
    budget = min(MAX_SUMMARY_CHARS, max(MIN_SUMMARY_CHARS, int(transcript_chars * SUMMARY_SHARE)))
    chosen: dict[str, list[str]] = {}
    used = 0
    for key in SECTION_KEYS:
        for item in sections[key]:
            if used + len(item) + 3 > budget:
                break
            chosen.setdefault(key, []).append(item)
            used += len(item) + 3
    lines = [f"{label}{say(language, 'summary_title')}"]
    for key in SECTION_KEYS:
        if key in chosen:
            lines.append(say(language, key))
            if key == "summary_identifiers":
                lines.append("- " + ", ".join(chosen[key]))
            else:
                lines.extend(f"- {item}" for item in chosen[key])
    if not chosen:
        lines.append(say(language, "summary_empty"))
    return "\n".join(lines)


def _conversation_language(blocks: list[TranscriptBlock], prompt: str) -> Language:
    """The language people wrote in: their messages, with a command's own syntax left out (only the
    values of `/tool name {json}` count, so a Chinese query typed as a command is Chinese)."""
    words = "\n".join(_typed_words(block.text) for block in blocks if block.is_user)
    return detect_language(words if words.strip() else prompt)


def _typed_words(text: str) -> str:
    stripped = text.strip()
    if stripped.startswith(TOOL_COMMAND):
        _, _, raw_arguments = stripped[len(TOOL_COMMAND) :].strip().partition(" ")
        return " ".join(_argument_values(raw_arguments, keys=None))
    if stripped.startswith(ASK_COMMAND):
        return stripped[len(ASK_COMMAND) :]
    return stripped


def _body(block: TranscriptBlock) -> str:
    """The block's own words: without the tool-call lines the transcript appends to assistant
    messages, and without the offline model's label."""
    return _CALL.sub("", block.text).replace(BUILTIN_LABEL, "").strip()


def _earlier_sections(blocks: list[TranscriptBlock]) -> dict[str, list[str]]:
    """An earlier summary's points by section (this writer's own headings, either language);
    bullet lines of any other summary go to `summary_earlier`."""
    headings = {text: key for key, pair in PHRASES.items() if key in SECTION_KEYS for text in pair}
    sections: dict[str, list[str]] = {}
    for block in blocks:
        if not block.is_summary:
            continue
        current = "summary_earlier"
        for line in block.text.splitlines():
            stripped = line.strip()
            if stripped in headings:
                current = headings[stripped]
            elif stripped.startswith("- ") and stripped[2:].strip():
                item = stripped[2:].strip()
                items = item.split(", ") if current == "summary_identifiers" else [item]
                sections.setdefault(current, []).extend(items)
    return sections


def _goals(blocks: list[TranscriptBlock]) -> list[str]:
    goals = []
    for block in blocks:
        if block.is_user:
            sentences = split_sentences(block.text)
            if sentences:
                goals.append(bounded(" ".join(sentences[:2]), GOAL_CHARS))
    return _unique(goals)


def _decisions(blocks: list[TranscriptBlock]) -> list[str]:
    found: list[str] = []
    for block in blocks:
        if block.is_user or block.is_assistant:
            found.extend(
                sentence
                for sentence in split_sentences(_body(block))
                if _DECISION.search(sentence) and not _QUOTED_LINE.match(sentence)
            )
    return [bounded(sentence, LINE_CHARS) for sentence in _unique(found)]


def _identifiers(blocks: list[TranscriptBlock]) -> list[str]:
    """Paths and URLs first, then ids, dates and numbers: from the conversation, then from tool output."""
    conversation = [
        _cut_edges(_body(block)) for block in blocks if not block.is_tool and not block.is_summary
    ]
    arguments = [
        value
        for block in blocks
        if block.is_assistant
        for _, raw in _CALL.findall(block.text)
        for value in _argument_values(raw, keys=None)
    ]
    tool_output = [_tool_text(block.text) for block in blocks if block.is_tool]
    found: list[str] = []
    for texts in ([*conversation, *arguments], tool_output):
        joined = "\n".join(texts)
        found.extend(_URL.findall(joined))
        without_urls = _URL.sub(" ", joined)
        found.extend(_PATH.findall(without_urls))
        found.extend(_IDENTIFIER.findall(without_urls))
        found.extend(_DATE.findall(without_urls))
        numbers = (number.strip().rstrip(",") for number in _NUMBER.findall(without_urls))
        found.extend(number for number in numbers if _significant_number(number))
    unique = _unique(found)
    # A path cut short in a tool output is the prefix of one seen whole: keep the whole one.
    return [item for item in unique if not any(other != item and other.startswith(item) for other in unique)]


def _tool_text(text: str) -> str:
    """Tool output without what compaction added: an offload header keeps only its path, JSON keys
    and "left out" markers go."""
    reference = parse_offload_reference(text)
    if reference is not None:
        text = reference.path + "\n" + _OFFLOAD_LINE.sub("", text, count=1)
    return _JSON_KEY.sub(" ", _cut_edges(text))


def _cut_edges(text: str) -> str:
    """`text` without the "left out" markers and the words a cut went through: the word before a
    marker or a trailing "…", and the word after a marker, may be pieces (`sha25`, `e6744`)."""
    return _CUT_WORD_AT_ELLIPSIS.sub(" ", _LEFT_OUT_WITH_EDGES.sub(" ", text))


def _significant_number(number: str) -> bool:
    """A quantity with its unit or currency (`300 元`, `$6.00`, `64K`); a number alone (`206`,
    `2.825`) says nothing on its own and is no identifier (issue 44)."""
    digits = sum(character.isdigit() for character in number)
    if digits > MAX_NUMBER_DIGITS:
        return False
    return any(not (character.isdigit() or character in ".,") for character in number.strip())


def _tool_calls(blocks: list[TranscriptBlock], language: Language, earlier: list[str]) -> list[str]:
    """`name N次 (arguments)` per tool, counting the calls an earlier summary reported too."""
    counts: Counter[str] = Counter()
    arguments: dict[str, list[str]] = {}
    for line in earlier:
        match = _TOOL_LINE.match(line)
        if match:
            counts[match.group(1)] += int(match.group(2) or match.group(3))
            arguments.setdefault(match.group(1), []).extend((match.group(4) or "").split("; "))
    for block in blocks:
        if not block.is_assistant:
            continue
        for name, raw_arguments in _CALL.findall(block.text):
            counts[name] += 1
            arguments.setdefault(name, []).extend(_argument_values(raw_arguments))
    lines = []
    for name, count in counts.items():
        values = _unique(arguments.get(name, []))[-MAX_TOOL_ARGUMENTS:]
        detail = f" ({'; '.join(bounded(value, 60) for value in values)})" if values else ""
        lines.append(f"{name} {count}次{detail}" if language == "zh" else f"{name} ×{count}{detail}")
    return lines


def _argument_values(raw: str, keys: tuple[str, ...] | None = ARGUMENT_KEYS) -> list[str]:
    """The scalar arguments of a call (those named in `keys`, or all of them)."""
    try:
        arguments = json.loads(raw)
    except ValueError:
        return []
    if not isinstance(arguments, dict):
        return []
    names = keys if keys is not None else tuple(arguments)
    return [
        str(arguments[key])
        for key in names
        if isinstance(arguments.get(key), str | int) and not isinstance(arguments.get(key), bool)
    ]


def _pending(blocks: list[TranscriptBlock]) -> list[str]:
    last_user = next((block for block in reversed(blocks) if block.is_user), None)
    if last_user is None:
        return []
    answered = any(block.is_assistant and _body(block) for block in blocks if block.index > last_user.index)
    return [] if answered else [bounded(last_user.text, GOAL_CHARS)]


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(item for item in items if item))
