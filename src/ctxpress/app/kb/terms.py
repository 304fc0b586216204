"""Query terms for knowledge-base search, Chinese-aware.

Chinese has no spaces, and the questions users type are full sentences ("北京有什么好吃的烤鸭？").
A query is cut into segments at punctuation, spaces and common function words ("有什么", "的",
"请问"); each segment is a *concept*: a CJK segment of two characters is a term as it is (most
Chinese words have two characters), a longer one is matched by its overlapping character pairs plus
the whole segment as a phrase. Latin words are lower-cased and stop words dropped. Every term is matched as a substring,
case-insensitively, on both database backends.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Chinese function words and question phrases that carry no topic (longest first when cutting).
CHINESE_STOP_PHRASES = (
    "知识库中",
    "知识库里",
    "知识库",
    "有没有",
    "是什么",
    "为什么",
    "怎么样",
    "有什么",
    "有哪些",
    "是多少",
    "多少钱",
    "告诉我",
    "好吃的",
    "好玩的",
    "好吃",
    "好玩",
    "不错",
    "推荐",
    "介绍",
    "一家",
    "附近",
    "帮我查",
    "查一下",
    "找一下",
    "搜一下",
    "看一下",
    "一下",
    "请问",
    "什么",
    "怎么",
    "如何",
    "哪些",
    "哪个",
    "哪里",
    "哪儿",
    "多少",
    "可以",
    "能否",
    "是否",
    "关于",
    "以及",
    "还有",
    "或者",
    "搜索",
    "检索",
    "查询",
    "查找",
    "帮我",
    "我们",
    "你们",
    "他们",
    "一个",
    "这个",
    "那个",
    "一些",
    "需要",
    "想要",
    "想知",
    "知道",
    "吗",
    "呢",
    "吧",
    "啊",
    "的",
    "了",
    "请",
    "我",
    "你",
)
ENGLISH_STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "if",
        "of",
        "to",
        "in",
        "on",
        "at",
        "by",
        "for",
        "with",
        "from",
        "about",
        "as",
        "into",
        "over",
        "under",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "do",
        "does",
        "did",
        "have",
        "has",
        "had",
        "what",
        "which",
        "who",
        "whom",
        "whose",
        "when",
        "where",
        "why",
        "how",
        "can",
        "could",
        "would",
        "should",
        "will",
        "shall",
        "may",
        "might",
        "must",
        "i",
        "me",
        "my",
        "we",
        "our",
        "you",
        "your",
        "he",
        "she",
        "it",
        "its",
        "they",
        "them",
        "their",
        "this",
        "that",
        "these",
        "those",
        "there",
        "here",
        "any",
        "some",
        "all",
        "please",
        "tell",
        "show",
        "find",
        "search",
        "look",
        "up",
        "lookup",
        "knowledge",
        "base",
        "kb",
        "me",
        "give",
        "get",
        "want",
        "need",
        "know",
        "about",
        "than",
        "then",
        "so",
        "not",
        "no",
        "yes",
        "also",
        "just",
    ]
)

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TOKEN = re.compile(rf"[{_CJK}]+|[A-Za-z0-9][A-Za-z0-9_.+#-]*")
_STOP_PHRASE = re.compile("|".join(sorted(map(re.escape, CHINESE_STOP_PHRASES), key=len, reverse=True)))
_CJK_CHAR = re.compile(rf"[{_CJK}]")
#: Longest CJK segment that is also kept whole as a phrase term.
MAX_PHRASE_CHARS = 8
MAX_CONCEPTS = 16


@dataclass(frozen=True)
class Concept:
    """One thing the query asks about: a word, or a longer CJK segment (its phrase and its pairs)."""

    phrase: str | None
    parts: tuple[str, ...] = ()

    @property
    def terms(self) -> tuple[str, ...]:
        return (*((self.phrase,) if self.phrase else ()), *self.parts)


@dataclass(frozen=True)
class QueryTerms:
    """The concepts of one query, in order of appearance, without duplicates."""

    concepts: tuple[Concept, ...]

    def __bool__(self) -> bool:
        return bool(self.concepts)

    @property
    def terms(self) -> tuple[str, ...]:
        """Every distinct term, in order."""
        return tuple(dict.fromkeys(term for concept in self.concepts for term in concept.terms))

    @property
    def indexed(self) -> tuple[str, ...]:
        """Terms of three or more characters: a trigram index can find them."""
        return tuple(term for term in self.terms if len(term) >= 3)

    @property
    def short(self) -> tuple[str, ...]:
        """Terms under three characters: found with a LIKE scan (Chinese words are often two)."""
        return tuple(term for term in self.terms if len(term) < 3)


def has_cjk(text: str) -> bool:
    return _CJK_CHAR.search(text) is not None


def _cjk_concepts(run: str) -> list[Concept]:
    concepts: list[Concept] = []
    for segment in (part for part in _STOP_PHRASE.split(run) if part):
        if len(segment) <= 2:
            concepts.append(Concept(segment))
            continue
        pairs = tuple(dict.fromkeys(segment[i : i + 2] for i in range(len(segment) - 1)))
        concepts.append(Concept(segment if len(segment) <= MAX_PHRASE_CHARS else None, pairs))
    return concepts


def query_terms(query: str) -> QueryTerms:
    """The concepts of a query (see the module docstring); single CJK characters only if nothing else."""
    found: list[Concept] = []
    singles: list[Concept] = []
    for token in _TOKEN.findall(query):
        if has_cjk(token[0]):
            for concept in _cjk_concepts(token):
                (singles if concept.phrase and len(concept.phrase) == 1 else found).append(concept)
        else:
            word = token.lower().strip("._-+#")
            if word and word not in ENGLISH_STOP_WORDS and (len(word) > 1 or word.isdigit()):
                found.append(Concept(word))
    concepts = list(dict.fromkeys(found or singles))
    return QueryTerms(tuple(concepts[:MAX_CONCEPTS]))


def count_occurrences(haystack_folded: str, term: str) -> int:
    """Non-overlapping occurrences of `term` in a case-folded text."""
    return haystack_folded.count(term.casefold())
