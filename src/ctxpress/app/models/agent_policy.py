"""`OfflineAgentPolicy`: how the built-in model decides its next step in an agent loop.

After a user message it follows `intents.parse_intent` (search the knowledge base, read / list /
grep workdir files, write or edit a note, ask the user), using only the tools bound for the call.
After tool results it answers extractively from them, in the language of the user's latest
message: for `query_kb` / `web_search` the sentences of each result that match the question, with
the result's id, title, source and score; for an offloaded result (S8/S9) the same from its
structured preview, plus the workdir path to read it back; for `read_file` the sentences that
match the question the file was read for; for `grep` / `ls` the lines they returned.

It never calls a tool twice on its own: every tool call answers a user message (or the user's
answer to `ask_user`), so an agent loop always ends with a text reply.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.messages.tool import ToolCall

from ctxpress.app.kb.terms import QueryTerms, query_terms
from ctxpress.app.models.extractive import RetrievalView, bounded, matching_sentences, read_retrieval
from ctxpress.app.models.intents import Intent, clean_query, parse_intent
from ctxpress.app.models.language import Language, detect_language, list_separator, say
from ctxpress.app.models.reply import BUILTIN_LABEL, BuiltinReply
from ctxpress.compaction.content import content_text
from ctxpress.compaction.markers import parse_offload_reference
from ctxpress.compaction.offload import LARGE_RESULTS_DIR
from ctxpress.summary.event import is_summary_message

ECHO_LIMIT_CHARS = 500
TOOL_EXTRACT_CHARS = 800
ANSWER_RECORDS = 5
LISTED_LINES = 12
NOTES_FOLDER = "notes"
READ_LIMIT_CHARS = 4000
LIST_TOOLS = ("ls", "list_files")


class OfflineAgentPolicy:
    """The default `ReplyPolicy` of `BuiltinChatModel` (see the module docstring)."""

    def reply(self, messages: Sequence[BaseMessage], tool_names: Sequence[str]) -> BuiltinReply:
        language = _user_language(messages)
        results = _trailing_tool_results(messages)
        if results:
            return self._answer_results(results, messages, tool_names, language)
        last = messages[-1] if messages else None
        if isinstance(last, HumanMessage) and not is_summary_message(last):
            return self._decide(last.text, messages, tool_names, language)
        return _text(say(language, "nothing_new"))

    # --- deciding the next step from what the user said -----------------------------------------

    def _decide(
        self, text: str, messages: Sequence[BaseMessage], tools: Sequence[str], language: Language
    ) -> BuiltinReply:
        intent = parse_intent(text)
        kind = intent.kind
        if kind == "ask_command":
            return _call_or_missing("ask_user", {"question": intent.text}, messages, tools, language)
        if kind == "tool_command":
            return _tool_command(intent, messages, tools, language)
        if kind == "greeting":
            return _text(say(language, "greeting", abilities=_abilities(tools, language)))
        if kind == "edit_file" and "edit_file" in tools:
            args = {"path": intent.path, "old_string": intent.old, "new_string": intent.new}
            return _call("edit_file", args, messages)
        if kind == "write_file" and "write_file" in tools:
            path = intent.path or _next_note_path(messages)
            return _call("write_file", {"path": path, "content": intent.text.rstrip() + "\n"}, messages)
        if kind == "grep" and "grep" in tools:
            args = {"pattern": intent.pattern, **({"path": intent.path} if intent.path else {})}
            return _call("grep", args, messages)
        if kind == "list_files" and (tool := next((name for name in LIST_TOOLS if name in tools), None)):
            return _call(tool, {}, messages)
        if kind == "read_full_result" and "read_file" in tools:
            offloaded = _latest_offloaded_path(messages)
            if offloaded is None:
                return _text(say(language, "no_full_result"))
            return _call("read_file", {"path": offloaded, "limit": READ_LIMIT_CHARS}, messages)
        if kind == "read_file" and "read_file" in tools:
            return _call("read_file", {"path": intent.path, "limit": READ_LIMIT_CHARS}, messages)
        if kind == "web_search" and "web_search" in tools:
            return _call("web_search", {"query": intent.query}, messages)
        query = intent.query or clean_query(text)
        if kind in ("search", "web_search") and "query_kb" in tools and query_terms(query):
            return _call("query_kb", {"query": query}, messages)
        if kind == "clarify":
            if "ask_user" in tools:
                return _call("ask_user", {"question": say(language, "clarify")}, messages)
            return _text(say(language, "clarify_no_tool"))
        return _text(say(language, "echo", text=bounded_keep_lines(text.strip(), ECHO_LIMIT_CHARS)))

    # --- answering from tool results --------------------------------------------------------------

    def _answer_results(
        self,
        results: list[tuple[ToolCall | None, ToolMessage]],
        messages: Sequence[BaseMessage],
        tools: Sequence[str],
        language: Language,
    ) -> BuiltinReply:
        sections: list[str] = []
        for call, message in results:
            name = message.name or (call["name"] if call else "tool")
            args: dict[str, Any] = dict(call["args"]) if call else {}
            text = content_text(message.content)
            if name == "ask_user":
                # The user's answer is a new instruction: decide again from it.
                follow_up = self._decide(text, messages, tools, language)
                received = say(language, "answer_received", answer=bounded(text, 200))
                then = follow_up.text.removeprefix(BUILTIN_LABEL)
                return BuiltinReply(BUILTIN_LABEL + _join(received, then), follow_up.tool_calls)
            sections.append(self._answer_one(name, args, text, message, messages, language))
        return _text("\n\n".join(sections))

    def _answer_one(
        self,
        name: str,
        args: dict[str, Any],
        text: str,
        message: ToolMessage,
        messages: Sequence[BaseMessage],
        language: Language,
    ) -> str:
        if message.status == "error" or text.startswith("error:"):
            return say(
                language, "tool_error", name=name, error=bounded(text.removeprefix("error:").strip(), 300)
            )
        # A search result, or a saved search result read back with read_file.
        view = read_retrieval(text) if name in ("query_kb", "web_search", "read_file") else None
        if view is not None:
            query = str(args.get("query") or view.query or _latest_query(messages) or "")
            return _answer_retrieval(view, name, query, language)
        if name == "read_file":
            return _answer_read(args, text, messages, language)
        if name == "grep":
            return _answer_lines(
                text,
                say(language, "grep_heading", pattern=args.get("pattern", "")),
                say(language, "grep_none", pattern=args.get("pattern", "")),
            )
        if name in LIST_TOOLS:
            return _answer_lines(text, say(language, "ls_heading"), say(language, "ls_none"))
        if name == "write_file":
            return say(language, "written", result=bounded(text, 300))
        if name == "edit_file":
            return say(language, "edited", result=bounded(text, 300))
        reference = parse_offload_reference(text)
        extract = bounded_keep_lines(text, TOOL_EXTRACT_CHARS)
        note = f"\n{say(language, 'kb_offloaded', path=reference.path)}" if reference else ""
        return f"{say(language, 'tool_extract', name=name)}\n{extract}{note}"


def _answer_retrieval(view: RetrievalView, tool: str, query: str, language: Language) -> str:
    if view.error:
        return say(language, "kb_error", error=view.error)
    if not view.records:
        return say(language, "kb_none", query=query)
    terms = query_terms(query)
    heading_key = "web_heading" if tool == "web_search" else "kb_heading"
    lines = [say(language, heading_key, query=query, total=view.total)]
    for record in view.records[:ANSWER_RECORDS]:
        lines.append(_record_line(record.rank, record.title, record.identifier, record.fields, language))
        lines.extend(f"   {sentence}" for sentence in _record_sentences(record.content, terms))
    hidden = view.total - min(len(view.records), ANSWER_RECORDS)
    if hidden > 0:
        lines.append(say(language, "kb_more", count=hidden))
    if view.offloaded_path:
        lines.append(say(language, "kb_offloaded", path=view.offloaded_path))
    return "\n".join(lines)


def _record_line(
    rank: int, title: str | None, identifier: str | None, fields: dict[str, str], language: Language
) -> str:
    where = [fields[key] for key in ("source", "url") if key in fields]
    if "score" in fields:
        where.append(("得分 " if language == "zh" else "score ") + fields["score"])
    name = f"《{title}》" if language == "zh" and title else (f'"{title}" ' if title else "")
    ident = f"[{identifier}]" if identifier else ""
    detail = f"（{'，'.join(where)}）" if language == "zh" else f" ({', '.join(where)})"
    return f"{rank}. {name}{ident}{detail if where else ''}"


def _record_sentences(content: str, terms: QueryTerms) -> list[str]:
    if not content.strip():
        return []
    if not terms:
        return [bounded(content, 160)]
    return matching_sentences(content, terms)


def _answer_read(args: dict[str, Any], text: str, messages: Sequence[BaseMessage], language: Language) -> str:
    path = str(args.get("path", ""))
    terms = _reading_terms(messages)
    more = "\n…(" in text
    reference = parse_offload_reference(text)
    if reference is not None:
        # What was read is itself large and was offloaded again: quote its preview, say where it is.
        text = text.split("\nPreview:\n", 1)[-1]
        more = False
    if terms:
        sentences = matching_sentences(text, terms, limit=4)
        heading = say(language, "read_relevant", path=path, query=" ".join(terms.terms[:4]))
    else:
        sentences = [bounded_keep_lines(text, TOOL_EXTRACT_CHARS)]
        heading = say(language, "read_heading", path=path)
    body = "\n".join(f"- {sentence}" for sentence in sentences) if terms else sentences[0]
    notes = [say(language, "read_more")] if more else []
    if reference is not None:
        notes.append(say(language, "read_offloaded", path=reference.path))
    return "\n".join([heading, body, *notes])


def _reading_terms(messages: Sequence[BaseMessage]) -> QueryTerms:
    """What a file is read for: the user's question, or (for "read the full result") the last search."""
    question = _latest_user_text(messages)
    if question and parse_intent(question).kind not in ("read_file", "read_full_result"):
        terms = query_terms(clean_query(question))
        if terms:
            return terms
    return query_terms(_latest_query(messages) or "")


def _answer_lines(text: str, heading: str, empty: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or lines == ["(no files)"] or lines == ["(no matches)"]:
        return empty
    shown = [f"- {bounded(line, 200)}" for line in lines[:LISTED_LINES]]
    if len(lines) > LISTED_LINES:
        shown.append(f"- …(+{len(lines) - LISTED_LINES})")
    return "\n".join([heading, *shown])


# --- reading the conversation ---------------------------------------------------------------------


def _trailing_tool_results(messages: Sequence[BaseMessage]) -> list[tuple[ToolCall | None, ToolMessage]]:
    """The tool results after the last AI message, each with the call it answers."""
    results: list[ToolMessage] = []
    for message in reversed(messages):
        if not isinstance(message, ToolMessage):
            break
        results.append(message)
    if not results:
        return []
    results.reverse()
    calls: dict[str, ToolCall] = {}
    for message in messages:
        if isinstance(message, AIMessage):
            calls.update({call["id"]: call for call in message.tool_calls if call["id"]})
    return [(calls.get(result.tool_call_id), result) for result in results]


def _real_user_messages(messages: Sequence[BaseMessage]) -> list[HumanMessage]:
    return [m for m in messages if isinstance(m, HumanMessage) and not is_summary_message(m)]


def _latest_user_text(messages: Sequence[BaseMessage]) -> str:
    users = _real_user_messages(messages)
    return users[-1].text if users else ""


def _user_language(messages: Sequence[BaseMessage]) -> Language:
    return detect_language(_latest_user_text(messages))


def _latest_query(messages: Sequence[BaseMessage]) -> str | None:
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                if call["name"] in ("query_kb", "web_search") and isinstance(call["args"].get("query"), str):
                    return str(call["args"]["query"])
    return None


def _latest_offloaded_path(messages: Sequence[BaseMessage]) -> str | None:
    """The newest offloaded tool result: named by a compacted tool message, or — once that message
    was summarised — by the summary, which keeps the file paths it saw."""
    for message in reversed(messages):
        if isinstance(message, ToolMessage):
            reference = parse_offload_reference(content_text(message.content))
            if reference is not None:
                return reference.path
        elif is_summary_message(message):
            paths = _OFFLOADED_PATH.findall(content_text(message.content))
            if paths:
                return str(paths[-1])
    return None


#: An offloaded result's file as a summary quotes it (`outputs/large_tool_results/<tool>-<hash>.txt`).
_OFFLOADED_PATH = re.compile(re.escape(LARGE_RESULTS_DIR) + r"/[A-Za-z0-9_.-]+\.txt")


def _next_note_path(messages: Sequence[BaseMessage]) -> str:
    written = {
        str(call["args"].get("path"))
        for message in messages
        if isinstance(message, AIMessage)
        for call in message.tool_calls
        if call["name"] == "write_file" and str(call["args"].get("path", "")).startswith(NOTES_FOLDER + "/")
    }
    number = len(written) + 1
    while f"{NOTES_FOLDER}/note-{number}.md" in written:
        number += 1
    return f"{NOTES_FOLDER}/note-{number}.md"


# --- building replies -----------------------------------------------------------------------------


def _text(text: str) -> BuiltinReply:
    """A text reply, labelled as the built-in model's."""
    return BuiltinReply(BUILTIN_LABEL + text)


def _join(first: str, second: str) -> str:
    return f"{first}\n{second}" if second else first


def _abilities(tools: Sequence[str], language: Language) -> str:
    keys = []
    if "query_kb" in tools:
        keys.append("ability_search")
    if "read_file" in tools or any(name in tools for name in LIST_TOOLS):
        keys.append("ability_files")
    if "grep" in tools:
        keys.append("ability_grep")
    if "write_file" in tools:
        keys.append("ability_note")
    if not keys:
        return say(language, "none")
    return list_separator(language).join(say(language, key) for key in keys)


def _tool_command(
    intent: Intent, messages: Sequence[BaseMessage], tools: Sequence[str], language: Language
) -> BuiltinReply:
    if intent.error is not None:
        if intent.error.startswith("invalid_json:"):
            return _text(say(language, "invalid_json", error=intent.error.split(":", 1)[1]))
        return _text(say(language, "not_object"))
    return _call_or_missing(intent.tool, intent.args, messages, tools, language)


def _call_or_missing(
    name: str, args: dict[str, Any], messages: Sequence[BaseMessage], tools: Sequence[str], language: Language
) -> BuiltinReply:
    if name not in tools:
        available = ", ".join(tools) or say(language, "none")
        return _text(say(language, "no_such_tool", name=name, available=available))
    return _call(name, args, messages)


def _call(name: str, args: dict[str, Any], messages: Sequence[BaseMessage]) -> BuiltinReply:
    return BuiltinReply("", [ToolCall(name=name, args=args, id=stable_call_id(messages, name, args))])


def stable_call_id(messages: Sequence[BaseMessage], name: str, args: dict[str, Any]) -> str:
    """Same conversation, same call id: runs are reproducible."""
    digest = hashlib.sha256()
    digest.update(str(len(messages)).encode())
    for message in messages[-3:]:
        digest.update(message.text.encode("utf-8", "surrogatepass"))
    digest.update(name.encode())
    digest.update(json.dumps(args, sort_keys=True, ensure_ascii=False).encode())
    return "call_builtin_" + digest.hexdigest()[:16]


def bounded_keep_lines(text: str, limit: int) -> str:
    """`text` cut to `limit` characters (line breaks kept), saying how long it was."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"…（共 {len(text)} 字符 · {len(text)} chars）"


__all__ = ["BUILTIN_LABEL", "OfflineAgentPolicy", "stable_call_id"]
