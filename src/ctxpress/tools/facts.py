"""Facts an agent typically needs later, extracted deterministically from a message's text.

Used by `bench/retention.py` to ask, after a compression, which of the facts of the compressed
messages the model still sees (or can read back from a file named in its request). The rules are
plain regular expressions, written down here and in `docs/benchmarks.md`. They are not the rules
of any summary writer. The references section of a ctxpress summary message
(`ctxpress.summary.references`) has rules of its own, written apart and stricter (no quantities,
no constraints, no line of source code as an error), but it looks for the same kinds of strings
by design -- both aim at what an agent needs later -- so the benchmark's facts in view measure
that section in part by a yardstick close to its own; `docs/benchmarks.md` says what that means.

A fact is a `(kind, text)` pair whose `text` occurs verbatim in the message it was taken from.
Kinds, in the order they are taken (a span taken by an earlier kind is blanked out for the later
ones, so `src/app/v2/main.py` is one path, not a path plus an identifier `v2`):

1. `url` -- `http://` or `https://` up to whitespace, a quote, a bracket, a backslash (JSON
   escapes inside tool output) or CJK punctuation;
   trailing `.,;:!?` are not part of it.
2. `path` -- a file path: either rooted (`/x`, `./x`, `../x`, `~/x`) with at least one more
   segment character, or relative with at least one `/` whose last segment has an extension
   (`src/app/main.py`), or a bare file name with a common extension (`missing_colon.py`,
   `config.toml`). Segments are ASCII letters, digits, `_ . - @ +`.
3. `identifier` -- a UUID; a date `2024-05-15` (with a time `15:00` or `15:00:00` after it when
   there is one); a hexadecimal hash of 7 to 64 digits with at least one letter and one
   digit (git commits, sha256); a ticket key `ABC-123`; an issue or order number `#1234`; a code
   of ASCII letters and digits (with `_` or `-` inside) holding at least one letter, at least two
   digits and at least 5 characters (`mia_li_3668`, `HAT069`, `W2378156`, `call_abc123`); an
   upper-case code of 5 to 12 letters and digits with at least one of each (`JG7FMM`, booking
   references); a run of at least 6 digits that is neither part of a decimal number nor followed
   by a unit (order, phone and account numbers; `500000元` is a quantity).
   Codes without a digit (`HATHAT`) are not recognised: nothing tells them from a shouted word.
   (Words like `sha256` pass the code rule too: the rule has no dictionary.) Nothing right after a
   backslash is an identifier (`\u00e9a` is an escape, not a code).
4. `quantity` -- a number with a unit: a currency sign before it (`$`, `¥`, `€`, `£`) or a unit
   after it, optionally after one space on the same line (`%`, time, size, tokens, counts, money and Chinese
   measure words such as `元`, `个`, `小时`, `公里`; the list is `QUANTITY_UNITS`).
5. `error` -- a line holding an error word: an exception class name (`ValueError`,
   `KeyError: 'x'`), `Exception`, `Traceback`, `error:` / `Error:` / `ERROR`, `FAILED`, `fatal:`,
   `panic:`, `Segmentation fault`, `失败`, `错误`, `异常`, `报错`. The fact is the stripped line, cut
   to its first `MAX_LINE_CHARS` characters.
6. `constraint` -- only in the user's own messages: a sentence (split at `.!?。！？;；` and line
   ends) holding an explicit instruction word: `must`, `must not`, `do not`, `don't`, `never`,
   `always`, `only`, `make sure`, `required`, `should not`, `必须`, `不要`, `不能`, `务必`, `禁止`,
   `只能`, `一定要`, `不得`, `请勿`, `千万别`, `不许` (`不能` not in the question `能不能`).
   Cut like error lines.

Word boundaries are ASCII only, so an identifier right after Chinese text (`用户ID是mia_li_3668`) is
still found. Facts are de-duplicated per text (the first kind wins); texts shorter than
`MIN_FACT_CHARS` are dropped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

FactKind = Literal["url", "path", "identifier", "quantity", "error", "constraint"]
FACT_KINDS: tuple[FactKind, ...] = ("url", "path", "identifier", "quantity", "error", "constraint")

#: Error lines and constraint sentences are cut to this many characters (a prefix is still verbatim).
MAX_LINE_CHARS = 200
#: Shorter texts are too likely to occur anywhere by chance.
MIN_FACT_CHARS = 3

_W = "A-Za-z0-9_"  # ASCII word characters: the only ones boundaries look at
_SEGMENT = r"[A-Za-z0-9_.@+-]+"
FILE_EXTENSIONS = (
    "py|pyi|ipynb|js|jsx|ts|tsx|mjs|cjs|json|jsonl|yaml|yml|toml|ini|cfg|conf|env|lock|txt|md|rst|csv|tsv|"
    "html|htm|css|scss|xml|sql|sh|bash|zsh|ps1|bat|c|h|cc|cpp|hpp|cxx|hh|rs|go|java|kt|kts|scala|rb|php|"
    "swift|m|mm|cs|fs|vb|pl|lua|r|jl|dart|ex|exs|erl|hs|ml|clj|pony|vue|svelte|proto|gradle|cmake|mk|"
    "dockerfile|log|out|err|patch|diff|pdf|png|jpg|jpeg|gif|svg|zip|gz|tgz|tar|whl|gguf|bin|so|dll|exe|db|"
    "sqlite|traj|parquet|pkl|pt|onnx"
)
_URL = re.compile(r"https?://[^\s\"'<>\[\]{}()`\\，。、；：！？（）【】《》「」]+")
_URL_TAIL = ".,;:!?"
_ROOTED_PATH = re.compile(rf"(?<![{_W}/.~-])(?:~|\.\.?)?/{_SEGMENT}(?:/{_SEGMENT})*/?")
_RELATIVE_PATH = re.compile(
    rf"(?<![{_W}/.@+-])(?:{_SEGMENT}/)+[A-Za-z0-9_@+-][A-Za-z0-9_.@+-]*\.(?:{FILE_EXTENSIONS})(?![{_W}/])",
    re.IGNORECASE,
)
_FILE_NAME = re.compile(
    rf"(?<![{_W}/.@+-])[A-Za-z0-9_@+-][A-Za-z0-9_.@+-]*\.(?:{FILE_EXTENSIONS})(?![{_W}/.-])",
    re.IGNORECASE,
)
_UUID = re.compile(rf"(?<![{_W}-])[0-9a-fA-F]{{8}}(?:-[0-9a-fA-F]{{4}}){{3}}-[0-9a-fA-F]{{12}}(?![{_W}-])")
_HEX = re.compile(rf"(?<![{_W}\\-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{{7,64}}(?![{_W}-])")
_TICKET = re.compile(rf"(?<![{_W}-])[A-Z][A-Z0-9]{{1,9}}-\d+(?![{_W}-])")
_NUMBER_SIGN = re.compile(rf"(?<![{_W}#&])#\d{{2,}}(?![{_W}])")
_CODE = re.compile(
    rf"(?<![{_W}.\\-])(?=[A-Za-z0-9_-]*[A-Za-z])(?=(?:[A-Za-z_-]*\d){{2}})"
    rf"[A-Za-z0-9](?:[A-Za-z0-9]|[_-](?=[A-Za-z0-9])){{4,}}(?![{_W}-])"
)
_UPPER_CODE = re.compile(rf"(?<![{_W}.\\-])(?=[A-Z0-9]*\d)(?=[A-Z0-9]*[A-Z])[A-Z0-9]{{5,12}}(?![{_W}-])")
_DATE = re.compile(rf"(?<![{_W}.-])\d{{4}}-\d{{2}}-\d{{2}}(?:[T ]\d{{2}}:\d{{2}}(?::\d{{2}})?)?(?![{_W}-])")
QUANTITY_UNITS = (
    "%|ms|µs|us|ns|s|sec|secs|seconds?|mins?|minutes?|h|hrs?|hours?|days?|weeks?|months?|years?|"
    "B|bytes?|KB|MB|GB|TB|KiB|MiB|GiB|TiB|kb|mb|gb|k|K|M|tokens?|lines?|chars|characters?|files?|tests?|"
    "items?|times|x|×|USD|EUR|CNY|RMB|dollars?|euros?|kg|g|km|mi|miles?|cm|mm|°C|°F|"
    "元|美元|块|万|亿|个|条|次|天|小时|分钟|秒|年|月|日|号|人|间|晚|公里|公斤|千克|克|件|张|岁|页|行|折|倍"
)
#: What may stand between a number and its unit: one space on the same line (a unit on the next
#: line belongs to something else: values listed one per line are not quantities).
_UNIT_GAP = r"[ \t\u00a0]?"
_LONG_DIGITS = re.compile(
    rf"(?<![{_W}.,])\d{{6,}}(?![{_W}]|[.,]\d)(?!{_UNIT_GAP}(?:{QUANTITY_UNITS})(?![A-Za-z0-9_]))"
)
_QUANTITY = re.compile(
    rf"(?<![{_W}.#/:])(?:[$¥€£]\d(?:[\d,]*\d)?(?:\.\d+)?|\d(?:[\d,]*\d)?(?:\.\d+)?{_UNIT_GAP}(?:{QUANTITY_UNITS})(?![A-Za-z0-9_]))"
)
_ERROR_WORD = re.compile(
    r"\b[A-Z][A-Za-z0-9]*(?:Error|Exception)\b|\bException\b|\bTraceback\b|\b(?:error|Error|ERROR)\b\s*:|"
    r"\bERROR\b|\bFAILED\b|\bfatal:|\bpanic:|Segmentation fault|失败|错误|异常|报错"
)
_CONSTRAINT_WORD = re.compile(
    r"\b(?:must|do not|don't|dont|never|always|only|make sure|required?|should not|shouldn't)\b"
    r"|必须|不要|(?<!能)不能|务必|禁止|只能|一定要|不得|请勿|千万别|不许",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|(?<=[。！？；])|\n+")


@dataclass(frozen=True)
class Fact:
    kind: FactKind
    text: str


def extract_facts(text: str, *, from_user: bool = False) -> list[Fact]:
    """The facts of one text, in the order of the kinds above; constraints only when `from_user`."""
    found: list[Fact] = []
    rest = text
    for kind, spans in (
        ("url", _urls),
        ("path", _paths),
        ("identifier", _identifiers),
        ("quantity", _quantities),
    ):
        matches = list(spans(rest))
        found.extend(Fact(kind, rest[start:end]) for start, end in matches)  # type: ignore[arg-type]
        rest = _blank(rest, matches)
    found.extend(Fact("error", line) for line in _error_lines(text))
    if from_user:
        found.extend(Fact("constraint", sentence) for sentence in _constraints(text))
    return _unique(found)


def message_text(message: BaseMessage) -> str:
    """The text of a message as a model reads it: its content (text blocks), then each tool call's
    name and the string values of its arguments, one per line."""
    parts = [_content_text(message.content)]
    if isinstance(message, AIMessage):
        for call in message.tool_calls:
            parts.append(call["name"])
            parts.extend(_leaf_strings(call["args"]))
    return "\n".join(part for part in parts if part)


def message_facts(message: BaseMessage) -> list[Fact]:
    """The facts of a user, assistant or tool message (system prompts have none: no compression
    ever touches them); constraints only from the user's own messages."""
    if not isinstance(message, HumanMessage | AIMessage | ToolMessage):
        return []
    return extract_facts(message_text(message), from_user=isinstance(message, HumanMessage))


def _content_text(content: str | list[Any]) -> str:
    if isinstance(content, str):
        return content
    texts = []
    for block in content:
        if isinstance(block, str):
            texts.append(block)
        elif isinstance(block, dict) and isinstance(block.get("text"), str):
            texts.append(block["text"])
    return "\n".join(texts)


def _leaf_strings(value: Any) -> Iterator[str]:
    """String and number leaves of tool-call arguments (the values a model wrote)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        yield json.dumps(value)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _leaf_strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _leaf_strings(item)


def _urls(text: str) -> Iterator[tuple[int, int]]:
    for match in _URL.finditer(text):
        end = match.end()
        while end > match.start() and text[end - 1] in _URL_TAIL:
            end -= 1
        yield match.start(), end


def _paths(text: str) -> Iterator[tuple[int, int]]:
    spans = [m.span() for pattern in (_ROOTED_PATH, _RELATIVE_PATH) for m in pattern.finditer(text)]
    spans = [(start, _strip_tail(text, start, end)) for start, end in spans]
    kept = list(_non_overlapping((start, end) for start, end in spans if _is_path(text[start:end])))
    names = [m.span() for m in _FILE_NAME.finditer(_blank(text, kept))]
    yield from sorted([*kept, *names])


def _is_path(candidate: str) -> bool:
    """A rooted candidate needs a segment with a letter (not `/1/2` or a lone `/`)."""
    return any(character.isalpha() for character in candidate) and candidate.strip("/.~") != ""


def _strip_tail(text: str, start: int, end: int) -> int:
    while end > start + 1 and text[end - 1] in ".-":
        end -= 1
    return end


def _identifiers(text: str) -> Iterator[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for pattern in (_UUID, _DATE, _HEX, _TICKET, _NUMBER_SIGN, _UPPER_CODE, _CODE, _LONG_DIGITS):
        taken = _blank(text, spans)
        spans.extend(m.span() for m in pattern.finditer(taken))
    yield from sorted(spans)


def _quantities(text: str) -> Iterator[tuple[int, int]]:
    yield from (m.span() for m in _QUANTITY.finditer(text))


def _error_lines(text: str) -> Iterator[str]:
    for line in text.splitlines():
        if _ERROR_WORD.search(line):
            yield line.strip()[:MAX_LINE_CHARS].rstrip()


def _constraints(text: str) -> Iterator[str]:
    for sentence in _SENTENCE_END.split(text):
        if _CONSTRAINT_WORD.search(sentence):
            yield sentence.strip()[:MAX_LINE_CHARS].rstrip()


def _non_overlapping(spans: Iterable[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """The longest span first at each start; later spans that overlap a taken one are dropped."""
    last_end = -1
    for start, end in sorted(spans, key=lambda span: (span[0], -span[1])):
        if start >= last_end:
            yield start, end
            last_end = end


def _blank(text: str, spans: Iterable[tuple[int, int]]) -> str:
    """`text` with the spans replaced by spaces (positions unchanged)."""
    chars = list(text)
    for start, end in spans:
        chars[start:end] = " " * (end - start)
    return "".join(chars)


def _unique(facts: Iterable[Fact]) -> list[Fact]:
    seen: dict[str, Fact] = {}
    for fact in facts:
        if len(fact.text) >= MIN_FACT_CHARS and fact.text not in seen:
            seen[fact.text] = fact
    return list(seen.values())
