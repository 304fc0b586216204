"""Issue 44: rules that read untrusted shapes, generated (Hypothesis), with the invariant each keeps.

- A history file (S14, S27) gives back every message it was written with, whatever characters
  the messages hold: line and paragraph separators, NUL, CJK, emoji.
- A cutoff (S14) never separates a tool result from the latest call of its id before it, also when
  a provider reuses tool-call ids in every AI message.
"""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from ctxpress.summary.cutoff import choose_cutoff, unsafe_cutoffs
from ctxpress.summary.history import HistoryRange, read_history, write_history
from ctxpress.workdir import LocalWorkdir

#: Characters `str.splitlines` splits at besides "\n", which JSON does not escape.
LINE_BREAKERS = "\u2028\u2029\u0085\x1c\x1d\x1e\x0b\x0c\r"
TEXTS = st.text(
    alphabet=st.one_of(
        st.sampled_from([*LINE_BREAKERS, "\n", "\x00", "汉", "🙂", '"', "\\"]),
        st.characters(exclude_categories=["Cs"]),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(TEXTS, min_size=1, max_size=5))
def test_a_history_file_gives_back_every_message_whatever_it_holds(tmp_path: Path, texts: list[str]) -> None:
    workdir = LocalWorkdir(tmp_path / "history")
    messages: list[BaseMessage] = [HumanMessage(text, id=f"m{index}") for index, text in enumerate(texts)]
    path = write_history(workdir, HistoryRange("t", 0, len(messages)), messages)
    _header, read = read_history(workdir, path)
    assert [(m.id, m.content) for m in read] == [(m.id, m.content) for m in messages]


def _turn(index: int, calls: int, result: str) -> list[BaseMessage]:
    """A turn whose AI message calls `calls` tools with ids reused by every turn (`call_0`, …)."""
    ids = [f"call_{n}" for n in range(calls)]
    ai = AIMessage("", id=f"ai{index}", tool_calls=[{"name": "search", "args": {}, "id": i} for i in ids])
    return [HumanMessage(f"q{index}"), ai, *(ToolMessage(result, tool_call_id=i) for i in ids)]


@settings(max_examples=100, deadline=None)
@given(
    turns=st.lists(st.tuples(st.integers(0, 3), st.booleans()), min_size=1, max_size=5),
    keep=st.integers(1, 12),
)
def test_a_cutoff_never_orphans_a_result_when_ids_are_reused(
    turns: list[tuple[int, bool]], keep: int
) -> None:
    messages: list[BaseMessage] = []
    for index, (calls, answered) in enumerate(turns):
        messages += _turn(index, calls, "r")
        if answered:
            messages.append(AIMessage(f"a{index}"))
    cutoff = choose_cutoff(messages, keep)
    if cutoff is not None:
        assert not isinstance(messages[cutoff], ToolMessage), "the kept part starts with a result"
        assert not unsafe_cutoffs(messages)[cutoff]


def test_d2_reused_ids_example() -> None:
    """The fuzzed flow's shrunk example: every AI message calls `call_0`."""
    messages = [*_turn(1, 1, "r1"), AIMessage("a1"), *_turn(2, 1, "r2")]
    cutoff = choose_cutoff(messages, 5)
    assert cutoff is not None and not isinstance(messages[cutoff], ToolMessage)


# --- issue 44 item 4: a reference is a whole token of the original text -------------------------

WORDISH = st.text(alphabet=st.sampled_from(list('abc019_-./:#错误 失败{}"\n')), max_size=60)


def _whole_in(reference: str, text: str) -> bool:
    """`reference` occurs in `text` with no letter or digit glued to either end of it."""
    start = text.find(reference)
    while start >= 0:
        before = text[start - 1] if start > 0 else " "
        after = text[start + len(reference)] if start + len(reference) < len(text) else " "
        if not (before.isalnum() and reference[0].isalnum()) and not (
            after.isalnum() and reference[-1].isalnum()
        ):
            return True
        start = text.find(reference, start + 1)
    return False


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(WORDISH, min_size=1, max_size=4))
def test_every_reference_is_a_whole_token_of_its_message(texts: list[str]) -> None:
    from ctxpress.summary.references import span_references

    messages = [ToolMessage(text, tool_call_id=f"c{index}") for index, text in enumerate(texts)]
    for reference in span_references(messages):
        assert any(_whole_in(reference, text) for text in texts), reference


def test_item4_a_one_line_json_result_is_no_error_line_and_long_lines_are_not_cut() -> None:
    from ctxpress.summary.references import MAX_ERROR_LINE_CHARS, message_references

    result = '{"query": "排查", "total": 8, "results": [{"id": "doc-1", "content": "历史文件写入错误时……"}]}'
    long_line = "error: " + "x" * MAX_ERROR_LINE_CHARS
    refs = message_references(ToolMessage(f"{result}\n{long_line}\nerror: disk full", tool_call_id="c1"))
    assert "error: disk full" in refs
    assert not any(ref.startswith("{") or ref.startswith("error: xx") for ref in refs), refs


def test_item4_the_offline_summary_lists_no_pieces_cut_by_a_preview_and_no_bare_numbers() -> None:
    from ctxpress.app.models.summary_writer import write_summary
    from ctxpress.config import DEFAULT_SUMMARY_PROMPT, MESSAGES_PLACEHOLDER

    transcript = (
        "[1] user: 搜索 summary_keep_messages 的作用\n"
        "[2] tool query_kb: 8 results; score 2.825 and 206 hits; doc_x_002#1 sha25\n"
        "[… 4,000 characters (~1,000 tokens) left out …]\n"
        "e6744 tail of the result with INV12345 and 300 元\n"
    )
    summary = write_summary(DEFAULT_SUMMARY_PROMPT.replace(MESSAGES_PLACEHOLDER, transcript), "")
    assert "doc_x_002#1" in summary and "INV12345" in summary and "300 元" in summary
    for fragment in ("sha25", "e6744", "2.825", "206"):
        assert fragment not in summary, (fragment, summary)


@settings(max_examples=150, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from(list("汉字 ab\n\t 🙂0")), min_size=50, max_size=3000),
    budget=st.integers(1, 400),
)
def test_a_text_preview_never_shows_an_empty_piece(text: str, budget: int) -> None:
    """S10: within its budget, and no piece beside a marker is empty."""
    from ctxpress.compaction.text_preview import head_middle_tail_preview
    from ctxpress.tokens import estimate_tokens

    preview = head_middle_tail_preview(text, budget)
    assert estimate_tokens(preview) <= budget
    if preview and preview != text:
        pieces = [piece for piece in re.split(r"\n\[… [^\]\n]* left out …\]\n", preview)]
        assert all(pieces), pieces
