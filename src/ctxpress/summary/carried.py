"""What a summary message carries besides the summary: the current question and the earlier files.

*The current question.* In tool-heavy threads one user request is followed by dozens of tool
calls, and the S14 cutoff (keep the most recent messages, never split a call from its result)
soon passes it. The cutoff is not held back for it: a request made of the question plus every
tool call since could stay over the threshold forever. Instead, when the summarised range holds
the latest real user message (a HumanMessage that is not a ctxpress summary) and the kept part
holds none, the summary message quotes it verbatim in a marked section -- bounded: one over a
quarter of the summary threshold keeps its head and tail around a marker naming the history file
with the full text. The section is carried from summary to summary until a newer user message arrives.

*The earlier files.* So that every compressed fact is one read from a path named in the request,
the summary message names the thread's conversation file (`history.write_conversation`, in the
message's first line: `event.summary_message_text`): every message before the cutoff, whole, in
one file -- one path, however many summaries came before, and no list. When that file could not be
written, the summary names its own history file and lists what holds the compressed text piecewise:
each history file keeps one summarised span, and an offloaded result or argument that was
summarised stays in it as its reference, so the list holds every earlier history file of the
thread and every offload file the summarised messages referenced (cumulative through
`_summarization_event`). Those that fit in an eighth of the summary threshold are listed --
history files first (each holds a whole span), then offload files, newest first -- with the line
saying where the rest are counted in. The complete list is also in the header of the new history
file (`earlier_files`), which the summary message names, so a long thread's older files are one
read further, never lost.

*The references* of the summarised messages (paths, URLs, identifiers, error lines) are the third
section, after these two: `references.py`.

*Room.* Both sections take only room the request leaves: `summary/step.py` measures the summary
message without them plus the kept messages and reserves the size of the latest exchange (what the
next call adds). The question is quoted whole when it fits the rest (else its head and tail within
half of it); the file list takes half of what the question leaves; the shares above are upper
bounds. On a context overflow (S6, S30) the sections are dropped. So they are never what keeps a
request over the threshold or the window, and a fresh summary is never followed by another at the
next call.
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from ctxpress.compaction.budget import take_head, take_tail
from ctxpress.compaction.content import content_text
from ctxpress.compaction.markers import offloaded_argument_path, parse_offload_reference
from ctxpress.summary.event import is_summary_message
from ctxpress.summary.history import in_history_dir
from ctxpress.tokens import estimate_tokens

#: A quoted question longer than this share of the summary threshold keeps its head and tail only
#: (the summary message must leave most of the threshold to the summary and the kept messages).
QUESTION_SHARE_OF_THRESHOLD = 0.25
QUESTION_HEADING = "## The user's current request (verbatim; the messages after it answer it)"
FILES_HEADING = "## Earlier files of this conversation (read one to see its full text)"
#: The share of the summary threshold the list of earlier files may take in a summary message; the
#: history files and then the newest offload files that fit are listed, the rest only in the new
#: history file's header.
FILES_SHARE_OF_THRESHOLD = 0.125


def is_user_request(message: BaseMessage) -> bool:
    """A real user message: a HumanMessage that is not a ctxpress summary."""
    return isinstance(message, HumanMessage) and not is_summary_message(message)


def question_to_carry(summarised: Sequence[BaseMessage], kept: Sequence[BaseMessage]) -> str | None:
    """The text of the latest user request when the summary passes it, else None.

    None when the kept part holds a user request (the newest one is then in view as itself)."""
    if any(is_user_request(message) for message in kept):
        return None
    for message in reversed(summarised):
        if is_user_request(message):
            return content_text(message.content)
    return None


def question_budget(threshold_tokens: int) -> int:
    """The most tokens a quoted question keeps (`QUESTION_SHARE_OF_THRESHOLD` of the threshold)."""
    return int(threshold_tokens * QUESTION_SHARE_OF_THRESHOLD)


def question_section(text: str, history_file: str | None, budget: int, profile: str = "default") -> str:
    """The marked section quoting the question: whole, or its head and tail when over `budget`."""
    if estimate_tokens(text, profile) > budget:
        head = take_head(text, budget // 2, profile)
        tail = take_tail(text, budget // 2, profile)
        where = f"; the full text is in {history_file} " if history_file else " "
        left_out = len(text) - len(head) - len(tail)
        text = f"{head}\n[… {left_out:,} characters of the request left out{where}…]\n{tail}"
    return f"{QUESTION_HEADING}\n{text}"


def referenced_files(messages: Sequence[BaseMessage]) -> list[str]:
    """The offload files (results and arguments) the messages refer to, in order, once each."""
    paths: list[str] = []
    for message in messages:
        if isinstance(message, ToolMessage):
            reference = parse_offload_reference(content_text(message.content))
            if reference is not None:
                paths.append(reference.path)
        elif isinstance(message, AIMessage):
            for call in message.tool_calls:
                args = call["args"] if isinstance(call["args"], dict) else {}
                paths.extend(
                    path
                    for value in args.values()
                    if isinstance(value, str) and (path := offloaded_argument_path(value)) is not None
                )
    return list(dict.fromkeys(paths))


def cumulative_files(
    earlier: Sequence[str], previous_history: str | None, summarised: Sequence[BaseMessage]
) -> tuple[str, ...]:
    """Every file holding compressed text before the new summary's own history file, oldest first."""
    new = [*([previous_history] if previous_history else []), *referenced_files(summarised)]
    return tuple(dict.fromkeys([*earlier, *new]))


def files_budget(threshold_tokens: int) -> int:
    """The most tokens the list of earlier files takes (`FILES_SHARE_OF_THRESHOLD` of the threshold)."""
    return int(threshold_tokens * FILES_SHARE_OF_THRESHOLD)


def listing_order(files: Sequence[str]) -> list[str]:
    """The files in the order they earn a place in the list: history files first, then offload
    files, each newest first. A history file holds a whole summarised span (the previews and
    references of its offloaded results included), an offload file one result, so for the same
    tokens of path a history file puts far more compressed text one read away."""
    newest_first = list(reversed(files))
    history = [path for path in newest_first if in_history_dir(path)]
    return history + [path for path in newest_first if not in_history_dir(path)]


def files_section(
    files: Sequence[str], history_file: str | None, budget: int, profile: str = "default"
) -> str:
    """The marked list of earlier files within `budget` tokens (`listing_order` picks which, shown
    oldest first), and where the rest are; the line saying where counts against the budget too."""
    listed = _fitting(files, budget - estimate_tokens(FILES_HEADING, profile), profile)
    if len(listed) < len(files):
        rest = _overflow_line(len(files), history_file)  # the widest count: an upper bound
        listed = _fitting(files, budget - estimate_tokens(f"{FILES_HEADING}\n{rest}", profile), profile)
    lines = [FILES_HEADING, *(f"- {path}" for path in listed)]
    if len(files) > len(listed):
        lines.append(_overflow_line(len(files) - len(listed), history_file))
    return "\n".join(lines)


def _fitting(files: Sequence[str], budget: int, profile: str) -> list[str]:
    """The files `listing_order` picks within `budget` tokens of list lines, in their own order."""
    chosen: set[str] = set()
    used = 0
    for path in listing_order(files):
        used += estimate_tokens(f"- {path}\n", profile)
        if used > budget:
            break
        chosen.add(path)
    return [path for path in files if path in chosen]


def _overflow_line(count: int, history_file: str | None) -> str:
    where = f"in the header of {history_file} " if history_file else "in the earlier history files "
    return f"[… {count} older files are listed {where}(earlier_files) …]"
