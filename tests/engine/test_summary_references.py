"""The references a summary message carries verbatim (`ctxpress.summary.references`, issue 21):
the written rules on literal snippets shaped like real tool output, the order in which they earn a
place, the budget, and the section read back by the next summary (S14, S15)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from ctxpress.summary import references
from ctxpress.summary.references import (
    MAX_REFERENCES_TOKENS,
    REFERENCES_HEADING,
    REFERENCES_PER_MESSAGE_FIRST_ROUND,
    message_references,
    references_budget,
    references_in_summary,
    references_section,
    span_references,
)
from ctxpress.tokens import estimate_tokens

PYTEST_RUN = """\
============================= test session starts ==============================
collected 3 items

tests/test_parser.py F..                                                 [100%]

=================================== FAILURES ===================================
___________________________ test_trailing_comma ________________________________
    def test_trailing_comma():
>       assert parse_header("a, b,") == ["a", "b"]
E       ValueError: empty field at column 5
src/parser.py:41: ValueError
FAILED tests/test_parser.py::test_trailing_comma - ValueError: empty field at column 5
"""

SOURCE_LISTING = """\
38:    def parse_header(text):
39:        if not text:
40:            raise ValueError("empty header")
41:        try:
42:            return split(text)
43:        except KeyError:
44:            return []
"""

ORDER_LOOKUP = (
    '{"order_id": "#W2378156", "user_id": "mia_li_3668", "status": "delivered", '
    '"payment_method_id": "credit_card_7407366", "placed": "2024-05-01T16:39:34", '
    '"tracking": "https://track.example.org/p/5RJ7UH?lang=en", "total": 302.5}'
)

CHINESE_RESULT = "退款申请 #4471 处理失败：支付网关返回错误码 E1043，订单号 880023719。"


def tool(text: str, call_id: str = "c1") -> ToolMessage:
    return ToolMessage(content=text, tool_call_id=call_id)


def test_a_test_run_gives_its_paths_and_the_lines_reporting_the_failure() -> None:
    refs = message_references(tool(PYTEST_RUN))
    assert "tests/test_parser.py" in refs
    assert "src/parser.py" in refs
    assert "E       ValueError: empty field at column 5" in refs
    assert "FAILED tests/test_parser.py::test_trailing_comma - ValueError: empty field at column 5" in refs


def test_source_code_naming_an_exception_is_not_an_error_line() -> None:
    refs = message_references(tool(SOURCE_LISTING))
    assert not [ref for ref in refs if "ValueError" in ref or "KeyError" in ref]


def test_a_record_gives_its_identifiers_url_and_date_whole() -> None:
    refs = message_references(tool(ORDER_LOOKUP))
    for expected in (
        "W2378156",
        "mia_li_3668",
        "credit_card_7407366",
        "2024-05-01T16:39:34",
        "https://track.example.org/p/5RJ7UH?lang=en",
    ):
        assert expected in refs
    assert "5RJ7UH" not in refs, "inside the URL: the URL holds it"
    assert "302.5" not in refs and "delivered" not in refs


def test_chinese_text_gives_its_codes_numbers_and_failure_line() -> None:
    refs = message_references(tool(CHINESE_RESULT))
    assert {"#4471", "E1043", "880023719", CHINESE_RESULT} <= set(refs)


def test_tool_call_arguments_are_read_too() -> None:
    call = AIMessage(
        content="",
        tool_calls=[{"name": "read_file", "args": {"path": "/srv/app/config.toml", "limit": 40}, "id": "c9"}],
    )
    assert message_references(call) == ["/srv/app/config.toml"]


def test_newest_message_first_and_each_message_gets_a_first_round() -> None:
    """A long listing (the newest message) does not crowd out the references of the one before."""
    older = tool("see docs/guide.md", "c1")
    listing = tool("\n".join(f"src/pkg/module_{n}.py" for n in range(20)), "c2")
    refs = span_references([older, listing])
    first_round = REFERENCES_PER_MESSAGE_FIRST_ROUND
    assert refs[:first_round] == [f"src/pkg/module_{n}.py" for n in range(first_round)]
    assert refs[first_round] == "docs/guide.md"
    assert refs[-1] == "src/pkg/module_19.py"


def test_earlier_references_come_after_the_new_span_and_once() -> None:
    refs = span_references([tool("opened src/a.py and src/b.py")], earlier=["src/b.py", "docs/old.md"])
    assert refs == ["src/a.py", "src/b.py", "docs/old.md"]


def test_the_budget_bounds_how_many_older_messages_are_read() -> None:
    old = tool("ORDER-9999 was the first one", "c0")
    newer = [tool(f"checked order W{1_000_000 + n}", f"c{n + 1}") for n in range(40)]
    assert "ORDER-9999" in span_references([old, *newer])
    assert "ORDER-9999" not in span_references([old, *newer], budget=20)


def test_section_leaves_out_what_is_shown_and_what_a_longer_one_holds() -> None:
    refs = ["src/parser.py", "W2378156", "/repo/src/parser.py", "parser.py", "tests/test_parser.py"]
    section = references_section(refs, shown="the order W2378156 is in view", budget=200)
    assert section is not None
    lines = section.split("\n")
    assert lines[0] == REFERENCES_HEADING
    assert lines[1:] == ["- src/parser.py", "- /repo/src/parser.py", "- tests/test_parser.py"]


def test_section_stays_within_its_budget() -> None:
    refs = [f"W{1_000_000 + n}" for n in range(500)]
    for budget in (0, 10, 25, 60, 400):
        section = references_section(refs, shown="", budget=budget)
        if section is None:
            continue
        assert estimate_tokens(section) <= budget
        assert len(section.split("\n")) > 1


def test_the_next_summary_reads_the_section_back() -> None:
    refs = ["src/parser.py", "- E999 SyntaxError: unmatched ')'", "W2378156"]
    section = references_section(refs, shown="", budget=500)
    assert section is not None
    summary = f"[ctxpress:summary] Summary.\n\nThe user fixed a bug.\n\n{section}\n\n## Another section\n- x"
    assert references_in_summary(summary) == refs
    assert references_in_summary("[ctxpress:summary] Summary without references.") == []


def test_messages_without_references_give_none() -> None:
    messages: list[BaseMessage] = [
        HumanMessage(content="Please check it."),
        AIMessage(content="Done, all good."),
    ]
    assert span_references(messages) == []
    assert references_section([], shown="", budget=100) is None


def test_the_budget_is_an_eighth_of_the_threshold_and_never_over_its_cap() -> None:
    assert references_budget(4 * 1024) == 512
    assert references_budget(100 * 1024) == MAX_REFERENCES_TOKENS < 100 * 1024 // 8


def _read_whole(text: str) -> list[str]:
    """The three kinds read from the whole text, without the filter of words that can hold one."""
    found = []
    for match in references._REFERENCE.finditer(text):
        ref, kind = match.group(0), match.lastgroup
        found.append(ref.rstrip(".,;:!?") if kind == "url" else ref.rstrip(".") if kind == "path" else ref)
    return found


#: Words that are or hold references, and what may stand between two of them.
WORDS = (
    "2024-05-19",
    "13:00",
    "09:30:00",
    "https://x.org/a",
    "src/main.py",
    "main.py",
    "W2378156",
    "#123",
    "ABC-12",
    "8da0b9b",
    "mia_li_3668",
    "880023719",
    "~/src",
    "../a.py",
    "v2",
    "T10:00",
    "ok",
    "中文",
    "end.",
    "a/b",
    "-7",
    "x\\y1234567",
)
GAPS = (" ", "\n", '"', " ok ", '", "', "(", ",", "", ":", "。", "T", "/", ".", "-", "_")


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(WORDS), st.sampled_from(GAPS)), max_size=12))
def test_reading_only_the_words_that_can_hold_one_finds_what_the_whole_text_holds(
    pairs: list[tuple[str, str]],
) -> None:
    """The filter is an optimisation only: the same references, in the same order."""
    text = "".join(word + gap for word, gap in pairs)
    assert references._urls_paths_and_identifiers(text) == _read_whole(text)


def test_the_filter_keeps_a_date_with_its_time_and_splits_what_a_gap_splits() -> None:
    text = 'at 2024-05-19 13:00 and "2024-05-20","14:00" then 2024-05-21T09:30:00'
    assert references._urls_paths_and_identifiers(text) == _read_whole(text)
    assert "2024-05-19 13:00" in _read_whole(text) and "2024-05-20" in _read_whole(text)
