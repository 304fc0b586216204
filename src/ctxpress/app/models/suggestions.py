"""Phrases the built-in offline agent understands, offered as suggestions in an empty conversation
(issue 20, item 13). Each names the tool its rule reaches (`tests` check them against `parse_intent`),
in the page's two languages. A knowledge-base search comes first: two of them pass a small
threshold (`ctxpress serve --demo`), so compression shows within a few messages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class Suggestion:
    zh: str
    en: str
    #: The `Intent.kind` the phrase reaches.
    intent: str


SUGGESTIONS: Final = (
    Suggestion(
        "在知识库中搜索：上下文压缩的阈值",
        "Search the knowledge base for the compression threshold",
        "search",
    ),
    Suggestion(
        "在知识库中搜索：工具结果转存", "Search the knowledge base for offloaded tool results", "search"
    ),
    Suggestion("读取完整结果", "Read the full result", "read_full_result"),
    Suggestion("记下：明天九点去故宫", "Note: visit the Forbidden City at nine", "write_file"),
    Suggestion("工作目录里有哪些文件？", "What files are in the workdir now?", "list_files"),
)


def suggestions_by_language() -> dict[str, list[str]]:
    return {"zh": [item.zh for item in SUGGESTIONS], "en": [item.en for item in SUGGESTIONS]}
