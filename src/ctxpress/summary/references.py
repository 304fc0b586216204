"""The references a summary message carries verbatim: what an agent acts on later and a summary
model tends to paraphrase or drop (issue 21).

A summary is prose. The file paths, URLs, identifiers and error lines of the summarised messages
are what the agent later opens, quotes or looks up, and a model that summarises -- a small one
especially, or none at all when the summary call fails -- rewrites them or leaves them out. Their
context stays in the conversation file the summary names; this section only keeps the strings
themselves in view, so the agent can act on them without reading that file first.

The rules, plain regular expressions over each message's text (content and the string values of
its tool calls' arguments), the whole original message as the state holds it (not its preview):

- `url`: `http://` or `https://` up to whitespace, a quote, a bracket or CJK punctuation, without
  trailing `.,;:!?`;
- `path`: a path with at least one `/` and a last segment with an extension, or a rooted path of
  at least two segments (`/etc/hosts`, `~/src/app`), or a file name with a common extension;
- `identifier`: a date (with its time), a UUID, a hexadecimal hash of 7 to 64 digits holding a
  letter and a digit, a ticket key (`ABC-123`), a number after `#`, a code of at least 5 letters,
  digits, `_` or `-` holding a letter and at least two digits (`W2378156`, `mia_li_3668`), a run of
  at least 6 digits;
- `error`: a line reporting an error -- an exception name with a colon after it or at the line's
  end (`KeyError: 'id'`), `Traceback (most recent call last)`, `FAILED`, `error:` / `fatal:`,
  `失败`, `错误`, `异常`, `报错` -- but not a line of source code naming one (`raise`, `except`,
  `class`, `def`, `import`, with or without a line number before it), not a JSON document (a
  one-line tool result holding such a word), and not a line over `MAX_ERROR_LINE_CHARS`: a
  reference is always whole, never a piece cut by a budget (issue 44).

Which ones fit (`references_section`): the newest message first; each message first gives up to
`REFERENCES_PER_MESSAGE_FIRST_ROUND` of its own (in the order they occur), so one long listing
does not crowd out the rest, then the remaining ones in the same order. The previous summary's
references come after the new span's (they are older), so the section is cumulative across
summaries within its budget. A reference the request already shows (in the summary text, a kept
message or the quoted question) or that a longer listed one contains is not repeated. The section
takes only room the request leaves (`summary/step.py: carried_sections`), like the quoted question.

Cost: the rules read only the runs of words that can hold a reference (`_WORDS_THAT_CAN_HOLD_ONE`),
newest message first, and stop at `SCANNED_CHARS_PER_TOKEN` characters per token of the section's
budget: the section's size bounds the work, not the span's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from langchain_core.messages import AIMessage, BaseMessage

from ctxpress.compaction.content import content_text
from ctxpress.tokens import estimate_tokens

REFERENCES_HEADING = "## References in the summarised messages (verbatim, newest first)"
#: The share of the summary threshold the references may take in a summary message (an upper bound;
#: the free room of the request bounds them first).
REFERENCES_SHARE_OF_THRESHOLD = 0.125
#: ... and never more than this many tokens: a longer list is more than an agent reads through,
#: and a large threshold would otherwise spend thousands of tokens on it in every request.
MAX_REFERENCES_TOKENS = 1024
#: How many references each message gives in the first round (newest message first).
REFERENCES_PER_MESSAGE_FIRST_ROUND = 6
#: Text read per token of the section's budget, newest message first: with the budget's cap, an
#: upper bound of the work of a summary's section (128 KB; the rules read about 12 MB a second here).
SCANNED_CHARS_PER_TOKEN = 128
MAX_ERROR_LINE_CHARS = 160
#: Shorter strings say nothing on their own.
MIN_REFERENCE_CHARS = 4
_ITEM_PREFIX = "- "

_URL = re.compile(r"https?://[^\s\"'<>\[\]{}()`\\，。、；：！？（）【】《》「」]+")
_COMMON_EXTENSIONS = (
    "py|js|ts|tsx|jsx|json|jsonl|yaml|yml|toml|ini|cfg|md|rst|txt|csv|html|css|sql|sh|c|h|cpp|hpp|rs|go|"
    "java|kt|rb|php|swift|cs|lua|xml|log|lock|ipynb|pdf|png|jpg|svg|zip|gz|tar|db|sqlite"
)
_PATH = re.compile(
    r"(?<![\w/.~@+-])(?:"
    r"(?:~|\.{1,2})?(?:/[\w.@+-]+){2,}/?"  # rooted, two segments at least
    r"|[\w.@+-]+(?:/[\w.@+-]+)+\.[A-Za-z0-9]{1,10}(?![\w/])"  # relative, with an extension
    rf"|[\w@+-][\w.@+-]*\.(?:{_COMMON_EXTENSIONS})(?![\w/.-])"  # a file name
    r")"
)
_IDENTIFIER = re.compile(
    r"(?<![\w\\-])(?:"
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?(?![\w:-])"  # date, with its time
    r"|[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}"  # UUID
    r"|(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,64}"  # hash
    r"|[A-Z][A-Z0-9]{1,9}-\d+"  # ticket key
    r"|(?=[\w-]*[A-Za-z])(?=(?:[A-Za-z_-]*\d){2})[A-Za-z0-9](?:[A-Za-z0-9]|[_-](?=[A-Za-z0-9])){4,}"  # code
    r"|\d{6,}"  # order, phone and account numbers
    r")(?![\w-])"
    r"|(?<![\w#&])#\d{2,}(?!\w)"  # issue or order number
)
#: A line reporting an error, not one that names an exception class (`raise ValueError(`,
#: `except KeyError:` in a listing of source code are not errors that happened).
_ERROR_LINE = re.compile(
    r"\b[A-Z]\w*(?:Error|Exception)(?::|$)|\bTraceback \(most recent call last\)|\bFAILED\b"
    r"|\b(?:fatal|error|Error|ERROR):|失败|错误|异常|报错"
)
#: The words an error line needs, as literals: found fast, before `_ERROR_LINE` looks at the line.
_ERROR_WORD = re.compile(r"Error|Exception|Traceback|FAILED|fatal:|error:|失败|错误|异常|报错")
_NOT_AN_ERROR = re.compile(r"^\s*(?:\d+:\s*)?(?:raise|except|class|def|from|import)\b")
_URL_TAIL = ".,;:!?"
#: One pass for the three kinds: at each place a URL is tried first, then a path, then an
#: identifier, and what one takes is not looked at again (a path's `v2` is no identifier).
_REFERENCE = re.compile(rf"(?P<url>{_URL.pattern})|(?P<path>{_PATH.pattern})|{_IDENTIFIER.pattern}")
#: Characters no reference holds and none of the rules' boundaries looks for.
_GAP = r"\s\"'<>\[\]{}()`"
#: Runs of words holding a digit, a `/` or a `.` -- what every reference needs -- with single gap
#: characters between them (a date and its time): `_REFERENCE` only reads these, about a fifth of
#: typical tool output, and finds in them exactly what it finds in the whole text.
_WORDS_THAT_CAN_HOLD_ONE = re.compile(
    rf"(?<![^{_GAP}])(?=[^{_GAP}]*?[\d/.])[^{_GAP}]++(?:[{_GAP}](?=[^{_GAP}]*?[\d/.])[^{_GAP}]++)*+"
)


def message_references(message: BaseMessage) -> list[str]:
    """The references of one message, in the order they occur, once each (see the module doc)."""
    return _references_in(_texts(message))


def _references_in(texts: Iterable[str]) -> list[str]:
    found: list[str] = []
    for text in texts:
        found.extend(_urls_paths_and_identifiers(text))
        found.extend(_error_lines(text))
    return [ref for ref in dict.fromkeys(found) if len(ref) >= MIN_REFERENCE_CHARS]


def span_references(
    messages: Sequence[BaseMessage], earlier: Sequence[str] = (), budget: int | None = None
) -> list[str]:
    """The references of `messages` and then the `earlier` ones, in the order they earn a place:
    newest message first, `REFERENCES_PER_MESSAGE_FIRST_ROUND` of each in the first round.

    With the section's `budget` (tokens), older messages are not read once the newer ones gave
    `budget` references (at least twice what fits: a listed one takes two tokens or more) or held
    `SCANNED_CHARS_PER_TOKEN` characters per token: the section's size bounds the work, not the
    span's (a first summary may pass megabytes of tool results)."""
    per_message: list[list[str]] = []
    found = 0
    scanned = 0
    for message in reversed(messages):
        if budget is not None and (found >= budget or scanned >= budget * SCANNED_CHARS_PER_TOKEN):
            break
        texts = _texts(message)
        per_message.append(_references_in(texts))
        found += len(per_message[-1])
        scanned += sum(map(len, texts))
    first = REFERENCES_PER_MESSAGE_FIRST_ROUND
    ordered = [ref for refs in per_message for ref in refs[:first]]
    ordered += [ref for refs in per_message for ref in refs[first:]]
    return list(dict.fromkeys([*ordered, *earlier]))


def references_budget(threshold_tokens: int) -> int:
    """The most tokens the section takes (`REFERENCES_SHARE_OF_THRESHOLD` of the threshold, at
    most `MAX_REFERENCES_TOKENS`)."""
    return min(MAX_REFERENCES_TOKENS, int(threshold_tokens * REFERENCES_SHARE_OF_THRESHOLD))


def references_section(
    references: Iterable[str], shown: str, budget: int, profile: str = "default"
) -> str | None:
    """The section of the `references` not already in `shown`, in their order, within `budget`
    tokens (heading included); None when none fits."""
    used = estimate_tokens(REFERENCES_HEADING, profile)
    lines: list[str] = []
    for ref in references:
        if ref in shown or any(ref in line for line in lines):  # shown already, or inside a longer one
            continue
        line = f"{_ITEM_PREFIX}{ref}"
        cost = estimate_tokens(f"{line}\n", profile)
        if used + cost > budget:
            break
        used += cost
        lines.append(line)
    return "\n".join([REFERENCES_HEADING, *lines]) if lines else None


def references_in_summary(summary_text: str) -> list[str]:
    """The references an earlier summary message listed (its section, if it has one)."""
    _, heading, rest = summary_text.partition(REFERENCES_HEADING)
    if not heading:
        return []
    refs: list[str] = []
    for line in rest.lstrip("\n").split("\n"):
        if not line.startswith(_ITEM_PREFIX):
            break
        refs.append(line.removeprefix(_ITEM_PREFIX))
    return refs


def _urls_paths_and_identifiers(text: str) -> list[str]:
    """The three kinds, in the order they occur, read only where a reference can be."""
    found: list[str] = []
    for match in _REFERENCE.finditer("\n".join(_WORDS_THAT_CAN_HOLD_ONE.findall(text))):
        kind = match.lastgroup
        ref = match.group(0)
        found.append(ref.rstrip(_URL_TAIL) if kind == "url" else ref.rstrip(".") if kind == "path" else ref)
    return found


def shown_text(message: BaseMessage) -> str:
    """The text of a message a request shows, as the references are looked for in it."""
    return "\n".join(_texts(message))


def _texts(message: BaseMessage) -> list[str]:
    texts = [content_text(message.content)]
    if isinstance(message, AIMessage):
        for call in message.tool_calls:
            args = call["args"] if isinstance(call["args"], dict) else {}
            texts.extend(value for value in args.values() if isinstance(value, str))
    return texts


def _error_lines(text: str) -> list[str]:
    lines: list[str] = []
    end = 0
    for word in _ERROR_WORD.finditer(text):
        if word.start() < end:
            continue  # on a line already looked at
        start = text.rfind("\n", 0, word.start()) + 1
        end = text.find("\n", word.end())
        end = len(text) if end == -1 else end
        line = text[start:end].rstrip("\r").strip()
        if _is_error_line(line):
            lines.append(line)
    return lines


def _is_error_line(line: str) -> bool:
    """A short line of prose reporting an error: never a JSON document that happens to hold an
    error word, nor a long line (a reference is whole: a line cut short would be a fragment)."""
    return (
        len(line) <= MAX_ERROR_LINE_CHARS
        and not line.startswith(("{", "["))
        and _ERROR_LINE.search(line) is not None
        and not _NOT_AN_ERROR.match(line)
    )
