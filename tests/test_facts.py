"""Fact extraction (`ctxpress.tools.facts`, used by bench/retention.py): the written rules, on
small literal examples and on real snippets taken at test time from the shared traces.

The real-data tests use an oracle independent of the extraction's regular expressions where one
exists: tool-call arguments and JSON fields named `user_id` / `reservation_id` / `path`, lines
that a plain string test recognises as a traceback or an exception, `urllib.parse` for URLs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache
from urllib.parse import urlsplit

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from ctxpress.tools.facts import FACT_KINDS, MAX_LINE_CHARS, Fact, extract_facts, message_facts, message_text
from ctxpress.tools.traces import Conversation, iter_conversations
from tests.conftest import require_shared_data


def kinds(text: str, *, from_user: bool = False) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for fact in extract_facts(text, from_user=from_user):
        found.setdefault(fact.kind, set()).add(fact.text)
    return found


# ---------------------------------------------------------------------------------------------
# literal examples, one per rule


def test_urls_stop_at_brackets_quotes_and_trailing_punctuation() -> None:
    found = kinds('See https://github.com/o/r/issues/12. Also (http://x.example/a?b=1), "https://e.cn/p"。')
    assert found["url"] == {"https://github.com/o/r/issues/12", "http://x.example/a?b=1", "https://e.cn/p"}


def test_paths_rooted_relative_and_bare_file_names() -> None:
    found = kinds("Open /repo/tests/missing_colon.py, then src/app/v2/main.py and ./run.sh; edit config.toml")
    assert found["path"] == {"/repo/tests/missing_colon.py", "src/app/v2/main.py", "./run.sh", "config.toml"}
    # A path is one fact: its parts are not identifiers or quantities as well.
    assert "identifier" not in found and "quantity" not in found


def test_fractions_dates_and_and_or_are_not_paths() -> None:
    assert "path" not in kinds("1/2 of the tests, and/or 2024/05/15")


def test_identifiers() -> None:
    text = (
        "user mia_li_3668, order #W2378156, flight HAT069, ticket PROJ-1234, issue #4521, "
        "commit 3f2a9c1d, uuid 123e4567-e89b-12d3-a456-426614174000, phone 18612345678, on 2024-05-15"
    )
    assert kinds(text)["identifier"] == {
        "mia_li_3668",
        "W2378156",
        "HAT069",
        "PROJ-1234",
        "#4521",
        "3f2a9c1d",
        "123e4567-e89b-12d3-a456-426614174000",
        "18612345678",
        "2024-05-15",
    }


def test_plain_words_and_small_numbers_are_not_identifiers() -> None:
    assert "identifier" not in kinds(
        "python3 uses utf8 and version 1.2.3 at 7447 on line 12, see caf\\u00e9a"
    )


def test_identifier_right_after_chinese_text() -> None:
    assert kinds("用户ID是mia_li_3668，订单号W2378156")["identifier"] == {"mia_li_3668", "W2378156"}


def test_quantities_need_a_unit_or_a_currency_sign() -> None:
    found = kinds("It costs $1,200 or 300元, took 2 小时 and 45.5 MB, 12% of 3 s; 42 alone, paid $375, then")
    assert found["quantity"] == {"$1,200", "300元", "2 小时", "45.5 MB", "12%", "3 s", "$375"}


def test_a_number_and_a_unit_on_different_lines_are_no_quantity() -> None:
    """A unit belongs to the number before it on the same line: a column of values (`9` then a
    line `B`, as tool-call arguments joined one per line read) is not `9 B`; a long number followed
    by such a line stays an identifier."""
    found = kinds("scores\n5\n9\nB\n3\norder 20231104\nkm\nsize 9 B")
    assert found["quantity"] == {"9 B"}
    assert "20231104" in found["identifier"]


def test_error_lines_are_whole_stripped_lines() -> None:
    text = 'Traceback (most recent call last):\n  File "x.py", line 3\n    ValueError: bad value\n编译失败：找不到文件\nok'
    assert kinds(text)["error"] == {
        "Traceback (most recent call last):",
        "ValueError: bad value",
        "编译失败：找不到文件",
    }


def test_long_error_lines_are_cut_to_a_verbatim_prefix() -> None:
    line = "RuntimeError: " + "x" * 500
    (fact,) = [f for f in extract_facts(line) if f.kind == "error"]
    assert len(fact.text) == MAX_LINE_CHARS and line.startswith(fact.text)


def test_constraints_only_from_the_user() -> None:
    text = "You must not cancel the flight. Do not use the 7447 card! 请不要修改密码。必须在今天完成。能不能告诉我区别？"
    assert kinds(text, from_user=True)["constraint"] == {
        "You must not cancel the flight.",
        "Do not use the 7447 card!",
        "请不要修改密码。",
        "必须在今天完成。",
    }
    assert "constraint" not in kinds(text)
    assert message_facts(AIMessage(content=text)) == extract_facts(text)
    assert any(f.kind == "constraint" for f in message_facts(HumanMessage(content=text)))


def test_tool_call_arguments_are_part_of_an_assistant_message() -> None:
    message = AIMessage(
        content="",
        tool_calls=[
            {"name": "open", "args": {"path": "/repo/a.py", "line": 120}, "id": "c1", "type": "tool_call"}
        ],
    )
    assert message_text(message) == "open\n/repo/a.py\n120"
    assert Fact("path", "/repo/a.py") in message_facts(message)


def test_system_prompts_have_no_facts() -> None:
    assert message_facts(SystemMessage(content="Never touch /etc/passwd")) == []


def test_every_fact_is_verbatim_and_unique() -> None:
    text = "see /a/b.py and /a/b.py\nError: x\nError: x"
    facts = extract_facts(text)
    assert [f.text for f in facts] == ["/a/b.py", "Error: x"]
    assert all(f.kind in FACT_KINDS and f.text in text for f in facts)


# ---------------------------------------------------------------------------------------------
# real snippets from the shared traces


FOLDERS = {"glaive": "glaive-toolcall"}


@cache
def _source(source: str) -> tuple[Conversation, ...]:
    folder = FOLDERS.get(source, source)
    return tuple(c for c in iter_conversations(require_shared_data("traces", folder)) if c.source == source)


def source(name: str) -> tuple[Conversation, ...]:
    conversations = _source(name)
    assert conversations, f"no conversations in traces/{name}"
    return conversations


def messages(name: str) -> Iterator[tuple[Conversation, object]]:
    for conversation in source(name):
        for message in conversation.messages:
            yield conversation, message


def call_arguments(name: str, key: str) -> Iterator[tuple[AIMessage, str]]:
    for _, message in messages(name):
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                value = call["args"].get(key)
                if isinstance(value, str) and value:
                    yield message, value


@pytest.mark.parametrize("name", ["swe-agent", "tau-bench", "toolbench", "openhands", "acebench", "glaive"])
def test_real_facts_are_verbatim_in_their_message(name: str) -> None:
    count = 0
    for _, message in messages(name):
        text = message_text(message)  # type: ignore[arg-type]
        for fact in message_facts(message):  # type: ignore[arg-type]
            assert fact.text in text, fact
            count += 1
    assert count > 50, f"only {count} facts in {name}"


def test_real_paths_opened_by_swe_agent_are_path_facts() -> None:
    opened = [*call_arguments("swe-agent", "path"), *call_arguments("swe-agent", "file_name")]
    assert len(opened) > 5
    for message, path in opened:
        if " " not in path:
            assert Fact("path", path) in message_facts(message), path


def test_real_tracebacks_and_exception_lines_of_swe_agent() -> None:
    lines = 0
    for _, message in messages("swe-agent"):
        if not isinstance(message, ToolMessage):
            continue
        errors = {f.text for f in message_facts(message) if f.kind == "error"}
        for line in message_text(message).splitlines():
            stripped = line.strip()
            head = stripped.split(":", 1)[0]
            if stripped.startswith("Traceback (most recent call last)") or (
                ":" in stripped and head.isidentifier() and head.endswith("Error")
            ):
                assert stripped[:MAX_LINE_CHARS].rstrip() in errors, stripped
                lines += 1
    assert lines > 5


def test_real_tau_bench_user_and_reservation_ids() -> None:
    seen = without_digit = 0
    for key in ("user_id", "reservation_id"):
        for message, value in call_arguments("tau-bench", key):
            if not any(character.isdigit() for character in value):
                without_digit += 1  # `HATHAT`: the documented blind spot (no digit, no dictionary)
                continue
            assert Fact("identifier", value) in message_facts(message), value
            seen += 1
    assert seen > 100 and without_digit < seen / 10


def test_real_tau_bench_tool_results_keep_their_ids_and_error_lines() -> None:
    checked = 0
    for _, message in messages("tau-bench"):
        if not isinstance(message, ToolMessage):
            continue
        text = message_text(message)
        facts = message_facts(message)
        if text.startswith("Error: "):
            assert Fact("error", text.splitlines()[0].strip()[:MAX_LINE_CHARS].rstrip()) in facts
            checked += 1
            continue
        try:
            payload = json.loads(text)
        except ValueError:
            continue
        if isinstance(payload, dict) and isinstance(payload.get("reservation_id"), str):
            for value in (payload["reservation_id"], payload["user_id"]):
                if any(character.isdigit() for character in value):
                    assert Fact("identifier", value) in facts, value
            checked += 1
    assert checked > 20


def test_real_chinese_constraints_and_amounts() -> None:
    constraints = amounts = 0
    for _, message in [*messages("acebench"), *messages("glaive")]:
        if not isinstance(message, HumanMessage):
            continue
        text = message_text(message)
        facts = message_facts(message)
        for word in ("必须", "不要"):
            if word in text:
                assert any(f.kind == "constraint" and word in f.text for f in facts), text
                constraints += 1
        position = text.find("元")
        if position > 0 and text[position - 1].isdigit():
            assert any(f.kind == "quantity" and f.text.endswith(text[position - 1] + "元") for f in facts), (
                text
            )
            amounts += 1
    assert constraints > 5 and amounts > 5


def test_real_urls_of_toolbench_and_openhands_parse() -> None:
    urls = 0
    for name in ("toolbench", "openhands", "swe-agent"):
        for _, message in messages(name):
            text = message_text(message)  # type: ignore[arg-type]
            found = [f.text for f in message_facts(message) if f.kind == "url"]  # type: ignore[arg-type]
            for url in found:
                parts = urlsplit(url)
                assert parts.scheme in ("http", "https") and parts.netloc, url
                assert not url.endswith(("\\", ".", ",", ")")), url
            # Every "http(s)://" followed by a host is covered by one URL fact.
            for start in (i for i in range(len(text)) if text.startswith(("http://", "https://"), i)):
                rest = text[start:].split("://", 1)[1]
                if rest[:1].isalnum():
                    assert any(text.startswith(url, start) for url in found), text[start : start + 80]
                    urls += 1
    assert urls > 50


def test_real_openhands_workspace_paths() -> None:
    human = next(
        m for _, m in messages("openhands") if isinstance(m, HumanMessage) and "/workspace/" in m.text
    )
    paths = {f.text for f in message_facts(human) if f.kind == "path"}
    for token in human.text.split():
        if token.startswith("/workspace/") and token.rstrip(".,:;") == token:
            assert token in paths, token
