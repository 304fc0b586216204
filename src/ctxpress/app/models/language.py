"""The user's language (Chinese or English) and the offline model's phrases in both.

The language is decided by the share of CJK characters against Latin letters in the user's text,
so a Chinese question with English identifiers in it (`Evergreen 账户的月费`) is still Chinese.
"""

from __future__ import annotations

import re
from typing import Literal

Language = Literal["zh", "en"]

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_LATIN = re.compile(r"[A-Za-z]")
#: One CJK character carries about as much as this many Latin letters.
CJK_LETTER_EQUIVALENT = 3

PHRASES: dict[str, tuple[str, str]] = {
    "nothing_new": ("（没有可回应的新消息）", "(nothing new to answer)"),
    "invalid_json": ("工具参数不是合法的 JSON：{error}", "the tool arguments are not valid JSON: {error}"),
    "not_object": ("工具参数必须是 JSON 对象。", "the tool arguments must be a JSON object."),
    "no_such_tool": (
        "没有名为 {name!r} 的工具。可用工具：{available}",
        "there is no tool {name!r}. Tools: {available}",
    ),
    "none": ("（无）", "(none)"),
    "echo": (
        "尚未配置大语言模型，我不能理解这句话，只能按规则行动（检索知识库、读写工作目录文件、提问）。你的消息：{text}",
        "No language model is configured, so I cannot understand this; I act by rules only (search the "
        "knowledge base, read and write workdir files, ask you). Your message: {text}",
    ),
    "greeting": (
        "你好！我是内置的离线模型，没有理解能力，只按规则行动。可以这样用我：{abilities}",
        "Hello! I am the built-in offline model: no understanding, only rules. You can: {abilities}",
    ),
    "ability_search": (
        "提问或给出关键词，我会检索知识库（query_kb）",
        "ask a question and I search the knowledge base (query_kb)",
    ),
    "ability_files": (
        "说“列出文件”或给出文件路径，我会查看工作目录",
        "say 'list files' or give a file path to read it",
    ),
    "ability_grep": ("说“在文件中查找 X”，我会用 grep 查找", "say 'find X in the files' to grep them"),
    "ability_note": ("说“记下：……”，我会写一条笔记", "say 'note: …' to write a note"),
    "clarify": (
        "你想在知识库里查什么？请给出具体的关键词（例如名称、编号或主题）。",
        "What should I look up in the knowledge base? Please give concrete keywords (a name, an id, a topic).",
    ),
    "clarify_no_tool": ("请给出具体的关键词。", "Please give concrete keywords."),
    "kb_heading": (
        "在知识库中检索“{query}”，共 {total} 条结果。以下是原文摘录（抽取式回答，未经理解或改写）：",
        'Searched the knowledge base for "{query}": {total} results. Extracts, quoted as written (not understood or rephrased):',
    ),
    "kb_none": (
        "在知识库中检索“{query}”没有找到结果。可以换一个关键词，或者用 `ctxpress kb add` 添加文档。",
        'Nothing found in the knowledge base for "{query}". Try other keywords, or add documents with `ctxpress kb add`.',
    ),
    "kb_error": ("检索失败：{error}", "The search failed: {error}"),
    "kb_offloaded": (
        "完整结果较大，已保存到工作目录 {path}；需要时可以说“读取完整结果”。",
        "The full result is large and was saved in the workdir at {path}; say 'read the full result' to see it.",
    ),
    "kb_more": ("另有 {count} 条结果未在此列出。", "{count} more results are not listed here."),
    "web_heading": ("网页搜索“{query}”，共 {total} 条结果：", 'Web search for "{query}": {total} results:'),
    "read_heading": ("文件 {path} 的内容（摘录）：", "From the file {path} (extract):"),
    "read_relevant": ("文件 {path} 中与“{query}”相关的句子：", 'Sentences in {path} about "{query}":'),
    "read_offloaded": (
        "读到的内容本身也较大，已另存到 {path}；可以说“在文件中查找 关键词”只看相关的行。",
        "What was read is large too and was saved at {path}; say 'find \"word\" in the files' to see matching lines.",
    ),
    "read_more": ("（文件还有更多内容，可以继续读取）", "(the file has more; read on with an offset)"),
    "grep_heading": ("在工作目录中查找“{pattern}”的结果：", 'Lines matching "{pattern}" in the workdir:'),
    "grep_none": ("工作目录中没有找到“{pattern}”。", '"{pattern}" was not found in the workdir.'),
    "ls_heading": ("工作目录中的文件：", "Files in the workdir:"),
    "ls_none": ("工作目录中还没有文件。", "The workdir has no files yet."),
    "written": ("已保存：{result}", "Saved: {result}"),
    "edited": ("已修改：{result}", "Edited: {result}"),
    "tool_error": ("工具 {name} 出错：{error}", "The tool {name} failed: {error}"),
    "tool_extract": ("工具 {name} 的结果（摘录）：", "The result of {name} (extract):"),
    "answer_received": ("收到你的回答（ask_user）：{answer}", "Your answer (ask_user): {answer}"),
    "no_full_result": (
        "这段对话里没有保存到工作目录的完整结果可读。",
        "There is no offloaded full result in this conversation to read.",
    ),
    "summary_title": ("【抽取式摘要】", "[Extractive summary]"),
    "summary_goals": ("用户的目标与要求：", "User goals and requests:"),
    "summary_decisions": ("决定与结论：", "Decisions and conclusions:"),
    "summary_identifiers": ("关键标识符、文件路径与数字：", "Identifiers, file paths and numbers:"),
    "summary_tools": ("已调用的工具：", "Tools called:"),
    "summary_earlier": ("此前摘要的要点：", "From the earlier summary:"),
    "summary_pending": ("最近的请求（可能尚未完成）：", "Latest request (may be unfinished):"),
    "summary_empty": ("（没有可摘要的内容）", "(nothing to summarise)"),
}


def detect_language(text: str) -> Language:
    """ "zh" when CJK characters outweigh Latin letters (one CJK character ~ three letters)."""
    cjk = len(_CJK.findall(text))
    latin = len(_LATIN.findall(text))
    return "zh" if cjk and cjk * CJK_LETTER_EQUIVALENT >= latin else "en"


def say(language: Language, key: str, **values: object) -> str:
    """The phrase `key` in `language`, formatted with `values`."""
    chinese, english = PHRASES[key]
    return (chinese if language == "zh" else english).format(**values)


def list_separator(language: Language) -> str:
    """Between the items of an inline list: the ideographic semicolon in Chinese."""
    return "；" if language == "zh" else "; "
