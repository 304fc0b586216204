"""What a user message asks the offline model to do, decided by rules (Chinese and English).

Rules are tried in a fixed order; the first that matches wins:

1. commands: `/ask <question>`, `/tool <name> <json args>`;
2. a greeting or thanks alone;
3. edit a file: `把 notes/a.md 中的“旧”改成“新”`, `replace "old" with "new" in notes/a.md`;
4. write: `写入 notes/a.md：…`, `write to notes/a.md: …`, or a note: `记下：…`, `note: …`;
5. grep: `在文件中查找“X”`, `grep X [path]`, `find "X" in the files`;
6. list files: `列出文件`, `ls`, `list the files`;
7. read the full (offloaded) result: `读取完整结果`, `read the full result`;
8. read a file: a workdir path with a read verb (`读取 outputs/…/x.txt`, `open notes/a.md`), or a path alone;
9. web search: `网上搜索 …`, `search the web for …`;
10. anything else is a knowledge-base question; without any search term it needs clarification.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from ctxpress.app.kb.terms import query_terms

IntentKind = Literal[
    "ask_command",
    "tool_command",
    "greeting",
    "edit_file",
    "write_file",
    "grep",
    "list_files",
    "read_full_result",
    "read_file",
    "web_search",
    "search",
    "clarify",
]

ASK_COMMAND = "/ask"
TOOL_COMMAND = "/tool"

_PATH = r"(?:[\w.-]+/)+[\w.-]+|[\w-][\w.-]*\.(?:txt|md|json|jsonl|csv|log|yaml|yml|toml|py|html)"
_OPEN_QUOTE = "[“\"'「『‘]"
_CLOSE_QUOTE = "[”\"'」』’]"
_END = r"\s*[。.!！?？]*\s*$"

_GREETING = re.compile(
    r"^\s*(?:你好|您好|嗨|哈喽|早上好|下午好|晚上好|谢谢|谢谢你|多谢|hi|hello|hey|thanks|thank you)"
    r"[\s!！。.,，~～]*$",
    re.IGNORECASE,
)
_EDIT_ZH = re.compile(
    rf"(?:把|将)\s*(?P<path>{_PATH})\s*(?:中|里|里面|内)?的?\s*{_OPEN_QUOTE}(?P<old>.+?){_CLOSE_QUOTE}\s*"
    rf"(?:改成|改为|替换成|替换为|换成)\s*{_OPEN_QUOTE}(?P<new>.*?){_CLOSE_QUOTE}"
)
_EDIT_EN = re.compile(
    rf"replace\s+{_OPEN_QUOTE}(?P<old>.+?){_CLOSE_QUOTE}\s+with\s+{_OPEN_QUOTE}(?P<new>.*?){_CLOSE_QUOTE}"
    rf"\s+in\s+(?P<path>{_PATH})",
    re.IGNORECASE,
)
_WRITE_PATH_ZH = re.compile(
    rf"^\s*(?:请)?(?:把|将)?(?:以下|下面的?)?(?:内容)?(?:写入|写到|保存到|存到|记到)\s*(?P<path>{_PATH})\s*[:：，,]?\s*(?P<text>[\s\S]+)$"
)
_WRITE_PATH_EN = re.compile(
    rf"^\s*(?:please\s+)?(?:write|save)\s+(?:this\s+)?(?:to|into|in)\s+(?P<path>{_PATH})\s*[:,-]?\s*(?P<text>[\s\S]+)$",
    re.IGNORECASE,
)
_NOTE_ZH = re.compile(
    r"^\s*(?:请)?(?:帮我)?(?:再|又)?(?:记下|记录一下|记录|记一下|记住|保存笔记|写笔记|写个笔记"
    r"|写一条笔记|写一个笔记|记一条笔记|添加笔记|加一条笔记|笔记)\s*[:：，,]?\s*(?P<text>[\s\S]+)$"
)
_NOTE_EN = re.compile(
    r"^\s*(?:please\s+)?(?:(?:take|write|save|add)\s+(?:a|another|one more)\s+note|note|remember)"
    r"\s*[:,-]?\s*(?P<text>[\s\S]+)$",
    re.IGNORECASE,
)
_GREP_COMMAND = re.compile(r"^\s*grep\s+(?P<pattern>\S+)(?:\s+(?P<path>\S+))?\s*$", re.IGNORECASE)
_GREP_ZH = re.compile(
    rf"在\s*(?:(?P<path>{_PATH})|文件|工作目录|目录|笔记|文件夹)\s*(?:中|里|里面|内)?\s*(?:查找|搜索|找|搜)\s*"
    rf"{_OPEN_QUOTE}?(?P<pattern>.+?){_CLOSE_QUOTE}?{_END}"
)
_GREP_EN = re.compile(
    rf"^\s*(?:find|search for|look for|grep for)\s+{_OPEN_QUOTE}?(?P<pattern>.+?){_CLOSE_QUOTE}?\s+in\s+(?:the\s+)?"
    rf"(?:(?P<path>{_PATH})|files?|workdir|notes){_END}",
    re.IGNORECASE,
)
_LIST_FILES = re.compile(
    r"^\s*ls\s*$|(?:列出|列一下|看看|查看|显示)\s*(?:工作目录|目录|文件夹|所有文件|全部文件|文件)"
    r"|工作目录\s*(?:里|中)?\s*有(?:哪些|什么)"
    r"|\b(?:list|show)\s+(?:me\s+)?(?:the\s+|all\s+|my\s+)?(?:files|workdir|directory)\b"
    r"|\bwhat\s+files\s+(?:are|do\s+I\s+have|exist)\b|\bfiles\s+in\s+the\s+(?:workdir|directory)\b",
    re.IGNORECASE,
)
_READ_FULL_RESULT = re.compile(
    r"(?:读取|打开|查看|显示|看看|读)\s*(?:一下)?\s*(?:完整|全部)\s*(?:的)?\s*(?:检索)?(?:结果|内容|输出)"
    r"|\b(?:read|show|open)\s+(?:me\s+)?the\s+(?:full|complete|whole)\s+(?:results?|output)\b",
    re.IGNORECASE,
)
_READ_VERB = re.compile(
    r"读|打开|查看|看看|显示|内容|\b(?:read|open|show|cat|view|display|contents?)\b", re.IGNORECASE
)
_PATH_IN_TEXT = re.compile(rf"(?<![\w/:.-])(?P<path>{_PATH})(?![\w/-])")
_WEB = re.compile(
    r"网上|联网|上网|互联网|网页搜索|\b(?:search the web|web search|on the web|online)\b", re.IGNORECASE
)
_SEARCH_PREFIXES = (
    re.compile(
        r"^\s*(?:请)?(?:帮我)?(?:在?(?:知识库|网上|互联网)(?:中|里)?)?(?:联网|上网)?"
        r"(?:搜索|检索|查询|查找|查一下|搜一下|查|搜)(?:一下)?(?:知识库|网页)?\s*[:：,，]?\s*"
    ),
    re.compile(
        r"^\s*(?:please\s+)?(?:search|look up|find)\s+(?:the\s+)?(?:knowledge base|kb|web)?\s*(?:for\s+)?[:,]?\s*",
        re.IGNORECASE,
    ),
)
_TRAILING = re.compile(r"[\s?？。.!！]+$")


@dataclass(frozen=True)
class Intent:
    kind: IntentKind
    query: str = ""
    path: str = ""
    pattern: str = ""
    text: str = ""
    old: str = ""
    new: str = ""
    tool: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def clean_query(text: str) -> str:
    """The question without a leading 'search the knowledge base for' and trailing punctuation."""
    stripped = text
    for prefix in _SEARCH_PREFIXES:
        stripped = prefix.sub("", stripped, count=1)
    stripped = _TRAILING.sub("", stripped).strip()
    return stripped or _TRAILING.sub("", text).strip()


def parse_intent(text: str) -> Intent:
    """The first rule of the module docstring that matches `text`."""
    stripped = text.strip()
    command = _parse_command(stripped)
    if command is not None:
        return command
    if _GREETING.match(stripped):
        return Intent("greeting")
    if match := _EDIT_ZH.search(stripped) or _EDIT_EN.search(stripped):
        return Intent("edit_file", path=match["path"], old=match["old"], new=match["new"])
    if match := _WRITE_PATH_ZH.match(stripped) or _WRITE_PATH_EN.match(stripped):
        return Intent("write_file", path=match["path"], text=match["text"].strip())
    if match := _NOTE_ZH.match(stripped) or _NOTE_EN.match(stripped):
        return Intent("write_file", text=match["text"].strip())
    if match := _GREP_COMMAND.match(stripped) or _GREP_ZH.search(stripped) or _GREP_EN.match(stripped):
        return Intent("grep", pattern=match["pattern"].strip(), path=match["path"] or "")
    if _LIST_FILES.search(stripped):
        return Intent("list_files")
    if _READ_FULL_RESULT.search(stripped):
        return Intent("read_full_result")
    path = _PATH_IN_TEXT.search(stripped)
    if (
        path is not None
        and "://" not in stripped
        and (_READ_VERB.search(stripped) or stripped == path["path"])
    ):
        return Intent("read_file", path=path["path"])
    query = clean_query(stripped)
    if _WEB.search(stripped):
        return Intent("web_search", query=query)
    if not query_terms(query):
        return Intent("clarify")
    return Intent("search", query=query)


def _parse_command(text: str) -> Intent | None:
    if _is_command(text, ASK_COMMAND):
        return Intent("ask_command", text=text[len(ASK_COMMAND) :].strip())
    if not _is_command(text, TOOL_COMMAND):
        return None
    name, _, raw_args = text[len(TOOL_COMMAND) :].strip().partition(" ")
    try:
        args = json.loads(raw_args) if raw_args.strip() else {}
    except json.JSONDecodeError as exc:
        return Intent("tool_command", tool=name, error=f"invalid_json:{exc.msg}")
    if not isinstance(args, dict):
        return Intent("tool_command", tool=name, error="not_object")
    return Intent("tool_command", tool=name, args=args)


def _is_command(text: str, command: str) -> bool:
    return text == command or text.startswith(command + " ") or text.startswith(command + "\n")
