"""L1 `compact_view` (S2, S7–S13) on real knowledge-base data and real traces."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from ctxpress.compaction import CompactionCache, CompactionResult, compact_view, sanitize_tool_name
from ctxpress.compaction.markers import (
    ARGUMENT_MARKER,
    OFFLOAD_MARKER,
    offloaded_argument_path,
    parse_offload_reference,
)
from ctxpress.config import CompressionConfig
from ctxpress.tokens import count_message_tokens, estimate_tokens
from ctxpress.workdir import LocalWorkdir, WorkdirWriteError
from tests.conftest import require_shared_data
from tests.engine.compaction_support import (
    GAP_MARKER,
    HEADER_FIXED_CHARS,
    OFFLOAD_PATH,
    PREVIEW_SEPARATOR,
    CountingWorkdir,
    FailingWorkdir,
    ai_call,
    chinese_text,
    crosswoz_records,
    english_docs_text,
    english_text,
    exchange,
    gap_pieces,
    kb_results_json,
    numbers_in,
    provider_call,
    snapshot,
    split_view,
    tau2_documents,
    text_of,
)

pytestmark = pytest.mark.shared_data

ARGUMENT_LIMIT = 2000  # S7


@pytest.fixture
def workdir(tmp_path: Path) -> LocalWorkdir:
    return LocalWorkdir(tmp_path / "threads" / "t-1" / "workdir")


@pytest.fixture
def counting(workdir: LocalWorkdir) -> CountingWorkdir:
    return CountingWorkdir(workdir)


def config(limit: int = 300, **kwargs: Any) -> CompressionConfig:
    return CompressionConfig(summary_tool_result_token_limit=limit, **kwargs)


def run(messages: list[BaseMessage], workdir: Any, limit: int = 300, **kwargs: Any) -> CompactionResult:
    """`compact_view` with a private cache, checking S2 invariants that must hold on every call."""
    before = snapshot(messages)
    originals = list(messages)
    cache = kwargs.pop("cache", None)
    if cache is None:  # not `or`: an empty CompactionCache is falsy (it has __len__)
        cache = CompactionCache()
    result = compact_view(messages, config(limit, **kwargs), workdir, cache=cache)
    assert snapshot(messages) == before, "compact_view mutated its input"
    assert all(a is b for a, b in zip(messages, originals, strict=True))
    assert [m.id for m in result.messages] == [m.id for m in messages]
    assert [type(m) for m in result.messages] == [type(m) for m in messages]
    return result


def assert_no_host_path(result: CompactionResult, *roots: Path) -> None:
    for message in result.messages:
        visible = text_of(message) + json.dumps(
            [getattr(message, "tool_calls", []), message.additional_kwargs], default=str, ensure_ascii=False
        )
        for root in roots:
            assert str(root) not in visible, f"host path leaked into the view of {message.id}"


def view_text(result: CompactionResult, message_id: str) -> str:
    return text_of(next(m for m in result.messages if m.id == message_id))


def assert_bounded_s10_preview(preview: str, original: str, limit: int) -> None:
    """S10: head, middle, tail within the budget, markers that account for every left-out character."""
    kept, gaps = gap_pieces(preview)
    assert 1 <= len(gaps) <= 2, f"expected one or two gap markers, got {len(gaps)}"
    head, tail = kept[0], kept[-1]
    assert original.startswith(head)
    assert original.endswith(tail)
    assert sum(len(piece) for piece in kept) + sum(gaps) == len(original)
    if len(kept) == 3:
        offset = len(head) + gaps[0]
        assert original[offset : offset + len(kept[1])] == kept[1]
        assert kept[1], "an empty middle piece must not get its own marker"
    assert all(gap > 0 for gap in gaps)
    assert sum(estimate_tokens(piece) for piece in kept) <= limit
    markers = [match.group(0) for match in GAP_MARKER.finditer(preview)]
    assert all(len(marker) < 80 for marker in markers)
    # The whole preview, markers included, is within the limit.
    assert estimate_tokens(preview) <= limit


# ============================================================================================
# S7: long write_file / edit_file arguments
# ============================================================================================


def file_writing_turn() -> tuple[AIMessage, dict[str, str]]:
    doc_text = english_docs_text(20_000)
    zh = chinese_text()
    args = {
        "write": {"file_path": "reports/开户流程.md", "content": doc_text[:5_000]},
        "edit_old": zh[:2_500],
        "edit_new": zh[2_500:5_500],
        "query": doc_text[5_000:8_000],
    }
    calls = [
        ("w1", "write_file", args["write"]),
        (
            "e1",
            "edit_file",
            {
                "file_path": "notes/hotels.md",
                "old_string": args["edit_old"],
                "new_string": args["edit_new"],
                "replace_all": False,
            },
        ),
        ("q1", "query_kb", {"query": args["query"], "top_k": 50}),
    ]
    message = AIMessage(
        content="我来写报告并更新笔记。",
        id="ai-files",
        tool_calls=[{"name": n, "args": a, "id": i, "type": "tool_call"} for i, n, a in calls],
        additional_kwargs={"tool_calls": [provider_call(i, n, a) for i, n, a in calls]},
        response_metadata={"model_name": "qwen-max"},
    )
    return message, {
        "content": doc_text[:5_000],
        "old_string": args["edit_old"],
        "new_string": args["edit_new"],
    }


def assert_hint(hint: Any, tool: str, argument: str, original: str) -> None:
    assert isinstance(hint, str)
    assert hint != original
    assert len(hint) < 400
    assert tool in hint
    assert argument in hint
    assert "wrote" in hint  # the hint says the call already wrote the content
    assert len(original) in numbers_in(hint)
    assert original[:50] not in hint


def test_s7_long_file_arguments_cut_in_both_formats(workdir: LocalWorkdir) -> None:
    message, originals = file_writing_turn()
    query = message.tool_calls[2]["args"]["query"]
    result = run([HumanMessage("写报告", id="h1"), message], workdir)
    view = result.messages[1]
    assert isinstance(view, AIMessage)

    calls = {call["id"]: call for call in view.tool_calls}
    raw = {
        call["id"]: json.loads(call["function"]["arguments"]) for call in view.additional_kwargs["tool_calls"]
    }
    for formats in (calls["w1"]["args"], raw["w1"]):
        assert formats["file_path"] == "reports/开户流程.md"
        assert_hint(formats["content"], "write_file", "content", originals["content"])
    for formats in (calls["e1"]["args"], raw["e1"]):
        assert formats["file_path"] == "notes/hotels.md"
        assert formats["replace_all"] is False
        assert_hint(formats["old_string"], "edit_file", "old_string", originals["old_string"])
        assert_hint(formats["new_string"], "edit_file", "new_string", originals["new_string"])
    # Both formats carry the same hint.
    assert calls["w1"]["args"] == raw["w1"]
    assert calls["e1"]["args"] == raw["e1"]
    # Another tool's over-budget argument is saved in the workdir, the same file in both formats.
    path = offloaded_argument_path(calls["q1"]["args"]["query"])
    assert path is not None and path == offloaded_argument_path(raw["q1"]["query"])
    assert workdir.read_bytes(path).decode("utf-8") == query
    assert calls["q1"]["args"]["top_k"] == raw["q1"]["top_k"] == 50
    # Everything else about the message is kept.
    assert view.content == message.content
    assert view.response_metadata == message.response_metadata
    assert [c["name"] for c in view.tool_calls] == ["write_file", "edit_file", "query_kb"]

    # Each cut argument is recorded exactly once, although both formats were cut.
    recorded = sorted(
        (r.tool_call_id, r.tool_name, r.argument, r.original_chars) for r in result.truncated_arguments
    )
    assert recorded == sorted(
        [
            ("w1", "write_file", "content", len(originals["content"])),
            ("e1", "edit_file", "old_string", len(originals["old_string"])),
            ("e1", "edit_file", "new_string", len(originals["new_string"])),
            ("q1", "query_kb", "query", len(query)),
        ]
    )
    assert all(r.message_id == "ai-files" for r in result.truncated_arguments)
    assert result.changed
    assert result.tokens_after < result.tokens_before
    assert result.offloaded == [] and result.failures == []


def test_s7_an_over_budget_argument_of_any_tool_is_saved_with_a_bounded_preview(
    counting: CountingWorkdir,
) -> None:
    script = english_docs_text(30_000)
    rows = [{"name": f"景点{i}", "note": chinese_text()[:200]} for i in range(40)]
    call = AIMessage(
        content="",
        id="ai-run",
        tool_calls=[
            {
                "name": "run_python",
                "args": {"code": script, "rows": rows, "short": "x" * ARGUMENT_LIMIT},
                "id": "r1",
                "type": "tool_call",
            }
        ],
    )
    messages: list[BaseMessage] = [HumanMessage("运行脚本", id="h1"), call]
    cache = CompactionCache()
    result = run(messages, counting, 300, cache=cache)
    args = result.messages[1].tool_calls[0]["args"]  # type: ignore[attr-defined]
    assert args["short"] == "x" * ARGUMENT_LIMIT  # within S7's per-argument limit: whole
    for name, original in (("code", script), ("rows", json.dumps(rows, ensure_ascii=False))):
        path = offloaded_argument_path(args[name])
        assert path is not None and "run_python" in path and name in path
        assert counting.inner.read_bytes(path).decode("utf-8") == original
        preview = args[name].split("\nPreview:\n", 1)[1]
        assert estimate_tokens(preview) <= 300
        assert original[:40] in preview  # the head is shown
    assert sorted((r.argument, r.written_now) for r in result.truncated_arguments) == [
        ("code", True),
        ("rows", True),
    ]
    assert len(result.paths_written) == 2
    # A second pass over the same history decides from the cache: same view, no I/O.
    counting.writes.clear()
    again = run(messages, counting, 300, cache=cache)
    assert again.messages[1].tool_calls == result.messages[1].tool_calls  # type: ignore[attr-defined]
    assert counting.writes == [] and again.paths_written == []


def test_s13_an_argument_that_cannot_be_saved_stays_whole() -> None:
    message, _ = file_writing_turn()
    query = message.tool_calls[2]["args"]["query"]
    result = run([HumanMessage("写报告", id="h1"), message], FailingWorkdir())
    view = result.messages[1]
    assert isinstance(view, AIMessage)
    assert view.tool_calls[2]["args"]["query"] == query
    assert [(f.message_id, f.tool_call_id, f.tool_name) for f in result.failures] == [
        ("ai-files", "q1", "query_kb")
    ]
    # The write_file / edit_file hints need no workdir and are still cut.
    assert {r.tool_name for r in result.truncated_arguments} == {"write_file", "edit_file"}


@pytest.mark.parametrize(
    ("length", "cut"), [(ARGUMENT_LIMIT - 1, False), (ARGUMENT_LIMIT, False), (ARGUMENT_LIMIT + 1, True)]
)
def test_s7_limit_is_2000_characters(workdir: LocalWorkdir, length: int, cut: bool) -> None:
    content = english_docs_text(length)
    message = ai_call("w1", "write_file", {"file_path": "a.md", "content": content})
    result = run([message], workdir)
    view = result.messages[0]
    raw_args = json.loads(view.additional_kwargs["tool_calls"][0]["function"]["arguments"])
    if cut:
        assert_hint(view.tool_calls[0]["args"]["content"], "write_file", "content", content)
        assert raw_args["content"] == view.tool_calls[0]["args"]["content"]
        assert len(result.truncated_arguments) == 1
    else:
        assert view is message
        assert result.truncated_arguments == []


def test_s7_limit_counts_characters_not_bytes_or_json_escapes(workdir: LocalWorkdir) -> None:
    # 1,900 Chinese characters: 5,700 UTF-8 bytes and ~11,400 characters as ASCII-escaped JSON.
    content = chinese_text()[:1_900]
    args = {"file_path": "笔记.md", "content": content}
    message = AIMessage(
        content="",
        id="ai-zh",
        tool_calls=[{"name": "write_file", "args": args, "id": "w1", "type": "tool_call"}],
        additional_kwargs={
            "tool_calls": [
                {
                    "id": "w1",
                    "type": "function",
                    "function": {"name": "write_file", "arguments": json.dumps(args)},
                }
            ]
        },
    )
    assert len(message.additional_kwargs["tool_calls"][0]["function"]["arguments"]) > ARGUMENT_LIMIT
    result = run([message], workdir)
    assert result.messages[0] is message
    assert result.truncated_arguments == []


def test_s7_short_and_non_string_arguments_are_untouched(workdir: LocalWorkdir) -> None:
    message = ai_call(
        "w1",
        "write_file",
        {
            "file_path": "a.md",
            "content": english_text()[:1_500],
            "mode": 0o600,
            "tags": ["kb"],
            "meta": {"x": 1},
        },
    )
    result = run([message], workdir)
    assert result.messages[0] is message
    assert result.truncated_arguments == []


def test_s7_only_provider_format_is_cut_and_recorded_once(workdir: LocalWorkdir) -> None:
    content = english_docs_text(4_000)
    base = ai_call("w1", "write_file", {"file_path": "a.md", "content": content})
    # A provider message whose LangChain-side args were already shortened by someone else.
    message = base.model_copy(
        update={"tool_calls": [{**base.tool_calls[0], "args": {"file_path": "a.md", "content": "short"}}]}
    )
    result = run([message], workdir)
    raw_args = json.loads(result.messages[0].additional_kwargs["tool_calls"][0]["function"]["arguments"])
    assert_hint(raw_args["content"], "write_file", "content", content)
    assert raw_args["file_path"] == "a.md"
    assert [(r.tool_call_id, r.argument) for r in result.truncated_arguments] == [("w1", "content")]


def test_s7_malformed_provider_arguments_are_left_alone(workdir: LocalWorkdir) -> None:
    content = english_docs_text(3_000)
    broken = json.dumps({"file_path": "a.md", "content": content})[:-3]
    message = AIMessage(
        content="",
        id="ai-broken",
        additional_kwargs={
            "tool_calls": [
                {"id": "w1", "type": "function", "function": {"name": "write_file", "arguments": broken}}
            ]
        },
    )
    result = run([message], workdir)
    assert result.messages[0].additional_kwargs["tool_calls"][0]["function"]["arguments"] == broken


def test_s7_cut_view_fed_back_is_not_cut_or_recorded_again(workdir: LocalWorkdir) -> None:
    message, _ = file_writing_turn()
    first = run([message], workdir)
    second = run(first.messages, workdir)
    assert second.messages[0] is first.messages[0]
    assert second.truncated_arguments == []


def test_s7_marker_prefix_does_not_exempt_a_huge_argument(workdir: LocalWorkdir) -> None:
    content = ARGUMENT_MARKER + " " + english_docs_text(50_000)
    result = run([ai_call("w1", "write_file", {"file_path": "a.md", "content": content})], workdir)
    assert len(result.messages[0].tool_calls[0]["args"]["content"]) <= ARGUMENT_LIMIT


# ============================================================================================
# S8 / S11: large tool results are offloaded
# ============================================================================================


def assert_offload_view(
    result: CompactionResult,
    message: ToolMessage,
    original: str,
    tool: str,
    limit: int,
    workdir: LocalWorkdir,
) -> tuple[str, str]:
    """Checks S8 for one offloaded message; returns (path, preview)."""
    record = next(r for r in result.offloaded if r.tool_call_id == message.tool_call_id)
    digest = hashlib.sha256(original.encode("utf-8")).hexdigest()
    assert record.sha256 == digest
    assert record.chars == len(original)
    assert record.tool_name == tool
    assert record.message_id == message.id
    match = OFFLOAD_PATH.match(record.path)
    assert match, record.path
    assert match.group(2) == digest[:16]
    # The file holds the full text, byte for byte.
    stored = workdir.read_bytes(record.path)
    assert stored == original.encode("utf-8")
    assert hashlib.sha256(stored).hexdigest() == record.sha256
    assert (workdir.root / record.path).resolve().parent == workdir.root / "outputs" / "large_tool_results"

    view = next(m for m in result.messages if m.id == message.id)
    assert isinstance(view, ToolMessage)
    text = text_of(view)
    assert text.startswith(OFFLOAD_MARKER)
    header, preview = split_view(text)
    assert record.path in header
    assert digest in header
    assert len(original) in numbers_in(header)  # approximate size
    assert "saved" in header
    assert len(header) <= HEADER_FIXED_CHARS + len(tool)
    # The view message keeps everything but the content.
    for field in (
        "tool_call_id",
        "name",
        "status",
        "artifact",
        "id",
        "additional_kwargs",
        "response_metadata",
    ):
        assert getattr(view, field) == getattr(message, field), field
    return record.path, preview


@pytest.mark.parametrize("limit", [50, 300, 2_000])
def test_s8_large_result_written_in_full_and_view_keeps_path_hash_size_preview(
    workdir: LocalWorkdir, tmp_path: Path, limit: int
) -> None:
    original = english_docs_text(60_000)
    messages = [
        SystemMessage("你是一个银行客服助手。", id="sys"),
        HumanMessage("How do I open a checking account?", id="h1"),
        *exchange("c1", "read_file", original, {"path": "kb/all.md"}),
        AIMessage("Here is the procedure.", id="final"),
    ]
    result = run(messages, workdir, limit)
    assert len(result.offloaded) == 1
    assert result.offloaded[0].written_now
    _, preview = assert_offload_view(result, messages[3], original, "read_file", limit, workdir)
    assert_bounded_s10_preview(preview, original, limit)
    assert_no_host_path(result, tmp_path)
    # Nothing else changed.
    for index in (0, 1, 2, 4):
        assert result.messages[index] is messages[index]
    assert result.tokens_after < result.tokens_before


def test_s8_result_at_the_limit_is_kept_and_one_token_over_is_offloaded(workdir: LocalWorkdir) -> None:
    limit = 300
    text = english_text()
    # The longest real prefix whose estimate is still within the limit, found by the test itself.
    low, high = 0, 20_000
    while low < high:
        middle = (low + high + 1) // 2
        if estimate_tokens(text[:middle]) <= limit:
            low = middle
        else:
            high = middle - 1
    at_limit, over_limit = text[:low], text[: low + 1]
    assert estimate_tokens(at_limit) <= limit < estimate_tokens(over_limit)
    kept = exchange("c1", "read_file", at_limit)
    offloaded = exchange("c2", "read_file", over_limit)
    result = run([*kept, *offloaded], workdir, limit)
    assert result.messages[1] is kept[1]
    assert [r.tool_call_id for r in result.offloaded] == ["c2"]


def test_s8_list_content_keeps_non_text_blocks(workdir: LocalWorkdir) -> None:
    original = english_docs_text(20_000)
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    message = ToolMessage(
        content=[{"type": "text", "text": original}, image], tool_call_id="c1", name="screenshot", id="t1"
    )
    result = run([ai_call("c1", "screenshot", {}), message], workdir)
    view = result.messages[1]
    assert isinstance(view.content, list)
    assert image in view.content
    assert workdir.read_bytes(result.offloaded[0].path) == original.encode("utf-8")
    assert OFFLOAD_MARKER in text_of(view)


def test_s8_offloaded_file_is_owner_only(workdir: LocalWorkdir) -> None:
    result = run(exchange("c1", "execute_bash", english_docs_text(10_000)), workdir)
    path = workdir.root / result.offloaded[0].path
    assert (path.stat().st_mode & 0o777) == 0o600
    assert (path.parent.stat().st_mode & 0o777) == 0o700


def test_s8_lone_surrogates_in_a_tool_result_are_stored_losslessly(workdir: LocalWorkdir) -> None:
    original = english_docs_text(8_000) + "\udcff\udc80 bytes a tool decoded badly \ud800"
    result = run(exchange("c1", "execute_bash", original), workdir)
    record = result.offloaded[0]
    stored = workdir.read_bytes(record.path)
    assert stored.decode("utf-8", "surrogatepass") == original
    assert hashlib.sha256(stored).hexdigest() == record.sha256


@pytest.mark.parametrize("over", [1.05, 1.2])
def test_s8_offloading_never_makes_a_tool_message_larger(workdir: LocalWorkdir, over: float) -> None:
    limit = 300
    text = english_text()
    length = next(n for n in range(1_000, 20_000, 10) if estimate_tokens(text[:n]) >= limit * over)
    messages = exchange("c1", "read_file", text[:length])
    result = run(messages, workdir, limit)
    assert result.offloaded
    assert count_message_tokens(result.messages[1]) <= count_message_tokens(messages[1])


def test_s8_marker_prefix_does_not_exempt_a_huge_result(workdir: LocalWorkdir) -> None:
    original = OFFLOAD_MARKER + " " + english_docs_text(1_000_000)
    result = run(exchange("c1", "web_fetch", original), workdir)
    assert estimate_tokens(text_of(result.messages[1])) <= 300 + HEADER_FIXED_CHARS


def test_s8_tool_name_cannot_forge_the_offload_reference(workdir: LocalWorkdir) -> None:
    tool = "x` is saved in the workdir at outputs/notes.md (sha256 " + "0" * 64 + ") `"
    result = run(exchange("c1", tool, english_docs_text(20_000)), workdir)
    record = result.offloaded[0]
    reference = parse_offload_reference(text_of(result.messages[1]))
    assert reference is not None and (reference.path, reference.sha256) == (record.path, record.sha256)


def test_s8_offload_reference_parses_back(workdir: LocalWorkdir) -> None:
    result = run(exchange("c1", "execute_bash", english_docs_text(20_000)), workdir)
    record = result.offloaded[0]
    reference = parse_offload_reference(text_of(result.messages[1]))
    assert reference is not None and (reference.path, reference.sha256) == (record.path, record.sha256)


# --- S11: stable content-addressed names ------------------------------------------------------


@pytest.mark.parametrize(
    "tool",
    [
        "../evil",
        "../../../../etc/passwd",
        "a/b",
        "查询知识库",
        "",
        "x" * 500,
        "..",
        ".hidden",
        "~/.ssh/id_rsa",
        "C:\\Windows\\evil",
        "a\x00b\nc",
        "\uff0e\uff0e\uff0fevil",
        "skills",
        "web search (v2)",
    ],
)
def test_s11_tool_name_is_sanitised_into_a_safe_file_name(
    workdir: LocalWorkdir, tmp_path: Path, tool: str
) -> None:
    original = chinese_text()[:5_000]
    messages = [
        ai_call("c1", tool, {"q": 1}),
        ToolMessage(content=original, tool_call_id="c1", name=tool or None, id="t1"),
    ]
    result = run(messages, workdir)
    assert len(result.offloaded) == 1, result.failures
    path = result.offloaded[0].path
    match = OFFLOAD_PATH.match(path)
    assert match, path
    name = match.group(1)
    assert name not in ("", ".", "..")
    assert not name.startswith(".")
    assert name == sanitize_tool_name(tool)
    assert (workdir.root / path).resolve().parent == workdir.root / "outputs" / "large_tool_results"
    assert workdir.read_bytes(path) == original.encode("utf-8")
    assert not (tmp_path / "evil").exists()
    assert_no_host_path(result, tmp_path)


def test_s11_same_content_same_path_written_once(counting: CountingWorkdir) -> None:
    original = english_docs_text(30_000)
    messages = [*exchange("c1", "read_file", original), *exchange("c2", "read_file", original)]
    first = run(messages, counting)
    assert len(first.offloaded) == 2
    assert first.offloaded[0].path == first.offloaded[1].path
    assert [r.written_now for r in first.offloaded] == [True, False]
    assert counting.writes == [first.offloaded[0].path]

    # A new pass with a new cache (e.g. another process) finds the file and does not rewrite it.
    counting.reset()
    again = run(messages, counting)
    assert [r.path for r in again.offloaded] == [first.offloaded[0].path] * 2
    assert [r.written_now for r in again.offloaded] == [False, False]
    assert counting.writes == []
    assert text_of(again.messages[1]) == text_of(first.messages[1])

    # Even a new LocalWorkdir object on the same folder.
    fresh = CountingWorkdir(LocalWorkdir(counting.inner.root))
    third = run(messages, fresh)
    assert fresh.writes == []
    assert [r.written_now for r in third.offloaded] == [False, False]


def test_s11_different_content_or_tool_gives_different_paths(workdir: LocalWorkdir) -> None:
    text = english_docs_text(30_000)
    messages = [
        *exchange("c1", "read_file", text[:20_000]),
        *exchange("c2", "read_file", text[:20_001]),
        *exchange("c3", "execute_bash", text[:20_000]),
    ]
    result = run(messages, workdir)
    paths = [r.path for r in result.offloaded]
    assert len(set(paths)) == 3
    assert {r.sha256 for r in result.offloaded if r.tool_call_id in ("c1", "c3")} == {
        hashlib.sha256(text[:20_000].encode()).hexdigest()
    }


def test_s11_foreign_file_at_the_offload_path_is_not_trusted(tmp_path: Path, workdir: LocalWorkdir) -> None:
    original = english_docs_text(20_000)
    probe = run(exchange("c1", "read_file", original), LocalWorkdir(tmp_path / "probe"))
    path = probe.offloaded[0].path
    workdir.write_bytes(path, b"edited by a sub-agent")
    result = run(exchange("c1", "read_file", original), workdir)
    assert hashlib.sha256(workdir.read_bytes(path)).hexdigest() == result.offloaded[0].sha256


# ============================================================================================
# S9: structured previews of query_kb / web_search
# ============================================================================================


RECORD_LINE = re.compile(r"^#(\d+) ")


def preview_records(preview: str) -> tuple[str, list[str], list[str]]:
    """First line, the per-result lines (`#rank …`) and the remaining lines of a retrieval preview."""
    lines = preview.split("\n")
    records = [line for line in lines[1:] if RECORD_LINE.match(line)]
    others = [line for line in lines[1:] if not RECORD_LINE.match(line)]
    return lines[0], records, others


def normalised(text: str) -> str:
    return " ".join(text.split())


def shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def body_part(line: str, fields: dict[str, Any]) -> str:
    """The body preview of a result line: what follows its last `key=value` field."""
    end = RECORD_LINE.match(line).end()
    for key, value in fields.items():
        position = line.find(f"{key}={shown(value)}")
        assert position >= 0, (key, line)
        end = max(end, position + len(f"{key}={shown(value)}"))
    return line[end:].removeprefix(" | ")


def readable(body: Any) -> str:
    """The body as a reader sees it: whitespace-normalised text; a JSON object as `key: value; …`."""
    if isinstance(body, str) and body.lstrip().startswith("{"):
        body = json.loads(body)
    if isinstance(body, dict):
        return "; ".join(
            f"{key}: {normalised(value) if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(',', ':'))}"
            for key, value in body.items()
        )
    return normalised(body)


def assert_retrieval_preview(
    preview: str, results: list[dict[str, Any]], limit: int, *, expect_bodies: bool = False
) -> list[str]:
    first, records, others = preview_records(preview)
    total = len(results)
    assert total in numbers_in(first), first
    kept = len(records)
    assert kept >= 1, "the budget allows at least one result"
    # In the original order, with no gaps: ranks 1..kept.
    assert [int(RECORD_LINE.match(line).group(1)) for line in records] == list(range(1, kept + 1))
    field_keys = {"id", "doc_id", "source", "title", "url", "score", "relevance_score"}
    # A source all results share is named once, in the first line, and on no result's line.
    shared = {
        key: results[0][key]
        for key in ("source",)
        if total > 1 and key in results[0] and all(r.get(key) == results[0][key] for r in results)
    }
    for key, value in shared.items():
        assert f"{key}={shown(value)}" in first, first
    for line, original in zip(records, results, strict=False):
        fields = {key: original[key] for key in (field_keys - shared.keys()) & original.keys()}
        preview_body = body_part(line, fields)  # asserts every field is in the line
        assert not any(f"{key}=" in line for key in shared), line
        body = next(original[k] for k in ("content", "snippet", "text") if k in original)
        assert len(preview_body) <= 161, "bounded body preview"
        assert readable(body).startswith(preview_body.removesuffix("…"))
        if expect_bodies:
            assert len(preview_body) >= 20
    if kept < total:
        assert len(others) == 1
        assert total - kept in numbers_in(others[0])
        assert "left out" in others[0]
        assert len(others[0]) < 120
    else:
        assert others == []
    assert estimate_tokens(preview) <= limit + 3
    return records


@pytest.mark.parametrize("limit", [300, 1_500, 20_000])
def test_s9_query_kb_tau2_documents(workdir: LocalWorkdir, tmp_path: Path, limit: int) -> None:
    text, results = kb_results_json(50)
    assert estimate_tokens(text) > limit
    messages = [
        HumanMessage("开户需要什么条件？", id="h1"),
        *exchange("c1", "query_kb", text, {"query": "开户"}),
    ]
    result = run(messages, workdir, limit)
    _, preview = assert_offload_view(result, messages[2], text, "query_kb", limit, workdir)
    records = assert_retrieval_preview(preview, results, limit, expect_bodies=limit >= 1_500)
    if limit == 20_000:
        assert len(records) == 50
    assert_no_host_path(result, tmp_path)


@pytest.mark.parametrize("key", ["results", "documents", "items", "data"])
def test_s9_web_search_list_of_text_blocks_with_each_results_key(workdir: LocalWorkdir, key: str) -> None:
    docs = tau2_documents()[50:90]
    results = [
        {
            "url": f"https://bank.example/help/{doc['id']}",
            "title": doc["title"],
            "snippet": doc["content"],
            "relevance_score": round(0.9 - i / 100, 3),
        }
        for i, doc in enumerate(docs)
    ]
    text = json.dumps({key: results, "engine": "bing"})
    message = ToolMessage(
        content=[{"type": "text", "text": text}], tool_call_id="s1", name="web_search", id="t-web"
    )
    result = run([ai_call("s1", "web_search", {"query": "checking"}), message], workdir, 500)
    _, preview = assert_offload_view(result, message, text, "web_search", 500, workdir)
    assert_retrieval_preview(preview, results, 500)


def test_s9_top_level_list_of_crosswoz_records(workdir: LocalWorkdir) -> None:
    records = [list(item) for item in crosswoz_records("hotel_db.json")[:60]]
    text = json.dumps(records, ensure_ascii=False)
    messages = exchange("c1", "query_kb", text, {"query": "北京 酒店"})
    result = run(messages, workdir, 600)
    _, preview = assert_offload_view(result, messages[1], text, "query_kb", 600, workdir)
    first, lines, others = preview_records(preview)
    assert 60 in numbers_in(first)
    assert 1 <= len(lines) < 60
    for line, (name, fields) in zip(lines, records, strict=False):
        body = body_part(line, {"title": name})
        assert len(body) <= 161
        # A Chinese record's fields are previewed readably (`key: value`, not escaped JSON).
        assert "\\u" not in body
        assert readable(fields).startswith(body.removesuffix("…"))
    assert any(body_part(line, {"title": name}) for line, (name, _) in zip(lines, records, strict=False))
    assert 60 - len(lines) in numbers_in(others[0])
    assert estimate_tokens(preview) <= 600 + 3


def test_s9_crosswoz_results_with_nested_data_and_doc_ids(workdir: LocalWorkdir) -> None:
    records = crosswoz_records("attraction_db.json")[:40]
    results = [
        {
            "doc_id": f"attraction-{i}",
            "title": name,
            "source": "crosswoz/attraction_db.json",
            "score": round(1 - i / 80, 4),
            "content": json.dumps(fields, ensure_ascii=False),
        }
        for i, (name, fields) in enumerate(records)
    ]
    text = json.dumps({"code": 0, "data": {"results": results}}, ensure_ascii=False)
    messages = exchange("c1", "query_kb", text)
    result = run(messages, workdir, 600)
    _, preview = assert_offload_view(result, messages[1], text, "query_kb", 600, workdir)
    lines = assert_retrieval_preview(preview, results, 600)
    for line, record in zip(lines, results, strict=False):
        assert f"doc_id={record['doc_id']}" in line
        assert f"title={record['title']}" in line


def test_s9_other_tools_with_json_results_get_the_s10_preview(workdir: LocalWorkdir) -> None:
    text, _ = kb_results_json(50)
    messages = exchange("c1", "search_documents", text)
    result = run(messages, workdir, 300)
    _, preview = split_view(view_text(result, "tool-c1"))
    assert_bounded_s10_preview(preview, text, 300)


FALLBACK_CASES: dict[str, Any] = {
    "truncated-json": lambda: kb_results_json(30)[0][:-7],
    "brace-then-prose": lambda: "{" + english_docs_text(20_000),
    "json-string-scalar": lambda: json.dumps(english_docs_text(20_000)),
    "json-number-scalar": lambda: "1" * 5_000,
    "dict-without-a-list": lambda: json.dumps({"answer": english_docs_text(20_000), "results": "none"}),
    "results-dict-without-list": lambda: json.dumps(
        {"results": {"total": 3, "text": english_docs_text(20_000)}}
    ),
    "list-nested-10000": lambda: "[" * 10_000 + "]" * 10_000,
    "dict-nested-10000": lambda: '{"results": ' * 10_000 + "[]" + "}" * 10_000,
    "dict-nested-990": lambda: '{"data": ' * 990 + json.dumps(english_docs_text(20_000)) + "}" * 990,
    "not-json": lambda: english_docs_text(20_000),
    "garbage-tail": lambda: json.dumps(english_docs_text(20_000))[:-1] + "NaN",
}


@pytest.mark.parametrize("tool", ["query_kb", "web_search"])
@pytest.mark.parametrize("case", sorted(FALLBACK_CASES))
def test_s9_unexpected_json_falls_back_to_s10(workdir: LocalWorkdir, tool: str, case: str) -> None:
    text = FALLBACK_CASES[case]()
    assert estimate_tokens(text) > 300
    messages = exchange("c1", tool, text)
    result = run(messages, workdir, 300)
    assert result.failures == []
    _, preview = assert_offload_view(result, messages[1], text, tool, 300, workdir)
    assert "preview in original order" not in preview
    assert_bounded_s10_preview(preview, text, 300)


@pytest.mark.parametrize("depth", [500, 900, 990])
def test_s9_deeply_nested_values_inside_results_never_raise(workdir: LocalWorkdir, depth: int) -> None:
    nested = "[" * depth + "]" * depth
    text = '{"results": [{"id": ' + nested + ', "content": ' + nested + ', "score": 1}]}' + " " * 4_000
    result = run(exchange("c1", "query_kb", text), workdir, 300)
    assert len(result.offloaded) == 1
    assert estimate_tokens(split_view(view_text(result, "tool-c1"))[1]) <= 300 + 30


# ============================================================================================
# S10: head, middle and tail
# ============================================================================================


S10_TEXTS: dict[str, Any] = {
    "english": lambda: english_docs_text(80_000),
    "chinese": lambda: chinese_text()[:80_000],
    "chinese-english-chinese": lambda: (
        chinese_text()[:3_000] + english_text()[:60_000] + chinese_text()[3_000:6_000]
    ),
    "english-then-chinese": lambda: english_text()[:30_000] + chinese_text()[:30_000],
}


@pytest.mark.parametrize("kind", sorted(S10_TEXTS))
def test_s8_tiny_limit_keeps_the_reference_without_a_preview(workdir: LocalWorkdir, kind: str) -> None:
    # A limit of 1 token leaves no room for a preview: the view is the file reference alone.
    original = S10_TEXTS[kind]()
    messages = exchange("c1", "execute_bash", original)
    result = run(messages, workdir, 1)
    view = text_of(result.messages[1])
    reference = parse_offload_reference(view)
    assert reference is not None and "Preview:" not in view
    assert workdir.read_bytes(reference.path) == original.encode("utf-8")
    assert estimate_tokens(view) < estimate_tokens(original)


@pytest.mark.parametrize("limit", [64, 300, 1_000, 5_000])
@pytest.mark.parametrize("kind", sorted(S10_TEXTS))
def test_s10_head_middle_tail_with_left_out_counts(workdir: LocalWorkdir, kind: str, limit: int) -> None:
    original = S10_TEXTS[kind]()
    assert estimate_tokens(original) > limit
    messages = exchange("c1", "execute_bash", original)
    result = run(messages, workdir, limit)
    _, preview = assert_offload_view(result, messages[1], original, "execute_bash", limit, workdir)
    assert_bounded_s10_preview(preview, original, limit)
    kept, _ = gap_pieces(preview)
    # 64 tokens hold one marker with a head and a tail; two markers need more room.
    assert len(kept) == (2 if limit == 64 else 3), "head, (middle,) tail"
    assert all(kept)


@pytest.mark.parametrize("kind", sorted(S10_TEXTS))
def test_s10_limit_below_the_smallest_preview_keeps_the_reference_alone(
    workdir: LocalWorkdir, kind: str
) -> None:
    # 7 tokens cannot hold a marker: no pieces without one, the header names the file and the size.
    original = S10_TEXTS[kind]()
    result = run(exchange("c1", "execute_bash", original), workdir, 7)
    view = view_text(result, "tool-c1")
    assert parse_offload_reference(view) is not None and PREVIEW_SEPARATOR not in view


def test_s10_trace_tool_output(workdir: LocalWorkdir, traces_dir: Path) -> None:
    from ctxpress.tools.traces import iter_conversations

    outputs = [
        text_of(message)
        for conversation in iter_conversations(traces_dir / "swe-agent")
        for message in conversation.messages
        if isinstance(message, ToolMessage)
    ]
    original = max(outputs, key=len)
    assert estimate_tokens(original) > 300
    messages = exchange("c1", "bash", original)
    result = run(messages, workdir, 300)
    _, preview = assert_offload_view(result, messages[1], original, "bash", 300, workdir)
    assert_bounded_s10_preview(preview, original, 300)


# ============================================================================================
# S13: no file, no replacement
# ============================================================================================


def s13_history() -> list[BaseMessage]:
    turn, _ = file_writing_turn()
    # Only the file-writing calls (S7 hints need no workdir); arguments saved to the workdir are
    # covered by test_s13_an_argument_that_cannot_be_saved_stays_whole.
    write = turn.model_copy(
        update={
            "tool_calls": turn.tool_calls[:2],
            "additional_kwargs": {"tool_calls": turn.additional_kwargs["tool_calls"][:2]},
        }
    )
    return [
        HumanMessage("整理酒店信息", id="h1"),
        *exchange("c1", "query_kb", kb_results_json(50)[0]),
        *exchange("c2", "execute_bash", english_docs_text(40_000)),
        write,
        AIMessage("完成", id="done"),
    ]


def assert_refused(result: CompactionResult, messages: list[BaseMessage], failed_ids: list[str]) -> None:
    by_id = {m.id: m for m in messages}
    for view in result.messages:
        if view.id in failed_ids:
            assert view is by_id[view.id]
            assert OFFLOAD_MARKER not in text_of(view)
            assert "saved" not in text_of(view)
    assert sorted(f.message_id for f in result.failures) == sorted(failed_ids)
    assert not any(r.message_id in failed_ids for r in result.offloaded)
    for failure in result.failures:
        assert failure.reason
        assert failure.tool_call_id == by_id[failure.message_id].tool_call_id


@pytest.mark.parametrize(
    "error",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        WorkdirWriteError("could not write outputs/x: No space left on device"),
        PermissionError(errno.EROFS, "Read-only file system"),
    ],
    ids=["enospc", "workdir-write-error", "read-only-fs"],
)
@pytest.mark.parametrize("fail_exists", [False, True])
def test_s13_write_failure_keeps_original(error: BaseException, fail_exists: bool) -> None:
    messages = s13_history()
    failing = FailingWorkdir(error, fail_exists=fail_exists)
    result = run(messages, failing)
    assert_refused(result, messages, ["tool-c1", "tool-c2"])
    assert result.offloaded == []
    assert not result.files_written
    # S7 does not depend on the workdir: the long write_file arguments are still cut.
    assert len(result.truncated_arguments) == 3
    for failure in result.failures:
        assert "No space" in failure.reason or "Read-only" in failure.reason


def test_s13_real_disk_failure_keeps_original(workdir: LocalWorkdir, tmp_path: Path) -> None:
    (workdir.root / "outputs").write_text("a file where the outputs folder should be", encoding="utf-8")
    messages = s13_history()
    result = run(messages, workdir)
    assert_refused(result, messages, ["tool-c1", "tool-c2"])
    for failure in result.failures:
        assert str(tmp_path) not in failure.reason
    assert [f.path for f in workdir.list_files()] == ["outputs"]


def test_s13_failed_rename_keeps_original_and_leaves_no_temp_file(
    workdir: LocalWorkdir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def replace(src: str, dst: str, *args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", dst)

    monkeypatch.setattr(os, "replace", replace)
    messages = s13_history()
    result = run(messages, workdir)
    monkeypatch.undo()
    assert_refused(result, messages, ["tool-c1", "tool-c2"])
    assert all(str(tmp_path) not in f.reason for f in result.failures)
    leftovers = [p for p in workdir.root.rglob("*") if p.is_file()]
    assert leftovers == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_s13_read_only_directory_keeps_original(workdir: LocalWorkdir) -> None:
    target = workdir.root / "outputs" / "large_tool_results"
    target.mkdir(parents=True)
    target.chmod(0o500)
    try:
        messages = s13_history()
        result = run(messages, workdir)
    finally:
        target.chmod(0o700)
    assert_refused(result, messages, ["tool-c1", "tool-c2"])


def test_s13_failure_is_not_remembered_and_a_later_pass_offloads(workdir: LocalWorkdir) -> None:
    messages = s13_history()
    cache = CompactionCache()
    failed = run(messages, FailingWorkdir(), cache=cache)
    assert len(failed.failures) == 2
    counting = CountingWorkdir(workdir)
    ok = compact_view(messages, config(), counting, cache=cache)
    assert ok.failures == []
    assert sorted(r.message_id for r in ok.offloaded) == ["tool-c1", "tool-c2"]
    assert all(r.written_now for r in ok.offloaded)
    assert len(counting.writes) == 2


def test_s13_a_failure_on_one_result_does_not_stop_the_others(workdir: LocalWorkdir) -> None:
    class FailsForBash(CountingWorkdir):
        def write_bytes(self, path: str, data: bytes) -> str:
            if "execute_bash" in path:
                raise OSError(errno.ENOSPC, "No space left on device")
            return super().write_bytes(path, data)

    messages = s13_history()
    result = run(messages, FailsForBash(workdir))
    assert_refused(result, messages, ["tool-c2"])
    assert [r.message_id for r in result.offloaded] == ["tool-c1"]


def test_s13_any_backend_exception_keeps_original() -> None:
    messages = s13_history()
    result = run(messages, FailingWorkdir(RuntimeError("object store: 503 Slow Down")))
    assert_refused(result, messages, ["tool-c1", "tool-c2"])


# ============================================================================================
# S2: the view only; inputs untouched; no repeated work
# ============================================================================================


def test_s2_metadata_preserved_and_input_not_mutated(workdir: LocalWorkdir) -> None:
    original = english_docs_text(30_000)
    artifact = {"rows": [[1, "a"], [2, "b"]], "raw": {"bytes": 30_000}}
    tool = ToolMessage(
        content=original,
        tool_call_id="c1",
        name="execute_bash",
        id="t-meta",
        status="error",
        artifact=artifact,
        additional_kwargs={"exit_code": 2},
        response_metadata={"elapsed": 1.5},
    )
    messages = [ai_call("c1", "execute_bash", {"cmd": "cat *.md"}), tool]
    result = run(messages, workdir)  # run() deep-compares the input before/after
    view = result.messages[1]
    assert isinstance(view, ToolMessage)
    assert view is not tool
    assert (view.id, view.tool_call_id, view.name, view.status) == ("t-meta", "c1", "execute_bash", "error")
    assert view.artifact == artifact
    assert view.additional_kwargs == {"exit_code": 2}
    assert view.response_metadata == {"elapsed": 1.5}
    assert tool.content == original


def test_s2_compacted_view_fed_back_is_recognised(counting: CountingWorkdir) -> None:
    messages = s13_history()
    first = run(messages, counting)
    assert len(first.offloaded) == 2 and len(first.truncated_arguments) == 3
    counting.reset()
    second = run(first.messages, counting)  # a new cache: recognition, not memory
    assert all(a is b for a, b in zip(second.messages, first.messages, strict=True))
    assert second.offloaded == [] and second.truncated_arguments == [] and second.failures == []
    assert counting.writes == [] and counting.exists_calls == []
    assert second.tokens_after == second.tokens_before == first.tokens_after


@pytest.fixture(scope="module")
def hundred_message_trace() -> list[BaseMessage]:
    from ctxpress.tools.traces import iter_conversations

    for conversation in iter_conversations(require_shared_data("traces", "openhands")):
        if len(conversation.messages) >= 100:
            return conversation.messages
    pytest.fail("no real trace with 100 messages")


def test_s2_repeated_pass_over_a_real_100_message_trace_does_no_io(
    hundred_message_trace: list[BaseMessage], counting: CountingWorkdir, tmp_path: Path
) -> None:
    messages = hundred_message_trace
    cache = CompactionCache()
    first = run(messages, counting, cache=cache)
    assert len(first.offloaded) >= 3
    assert len(counting.writes) == len({r.path for r in first.offloaded})
    assert_no_host_path(first, tmp_path)
    for record in first.offloaded:
        assert hashlib.sha256(counting.inner.read_bytes(record.path)).hexdigest() == record.sha256

    counting.reset()
    second = run(messages, counting, cache=cache)
    assert counting.writes == [] and counting.exists_calls == [] and counting.reads == []
    assert [text_of(m) for m in second.messages] == [text_of(m) for m in first.messages]
    assert [(r.path, r.sha256) for r in second.offloaded] == [(r.path, r.sha256) for r in first.offloaded]
    assert not second.files_written

    # Message count, order, ids, tool_call_id, names and the call/result pairing are kept.
    assert len(second.messages) == len(messages)
    for view, message in zip(second.messages, messages, strict=True):
        assert (type(view), view.id) == (type(message), message.id)
        if isinstance(message, ToolMessage):
            assert (view.tool_call_id, view.name, view.status) == (
                message.tool_call_id,
                message.name,
                message.status,
            )
        if isinstance(message, AIMessage):
            assert [c["id"] for c in view.tool_calls] == [c["id"] for c in message.tool_calls]


# ============================================================================================
# Linear time on a 50 MB tool result (no timing assertion: it must finish and stay bounded)
# ============================================================================================


def test_50mb_plain_result_completes_with_a_bounded_preview(workdir: LocalWorkdir) -> None:
    original = english_docs_text(50_000_000)
    messages = exchange("c1", "execute_bash", original)
    result = compact_view(messages, config(300), workdir, cache=CompactionCache())
    record = result.offloaded[0]
    assert record.chars == 50_000_000
    assert (workdir.root / record.path).stat().st_size == len(original.encode("utf-8"))
    header, preview = split_view(text_of(result.messages[1]))
    assert record.path in header and 50_000_000 in numbers_in(header)
    assert len(preview) < 300 * 8
    assert_bounded_s10_preview(preview, original, 300)


def test_50mb_query_kb_result_completes_with_a_bounded_preview(workdir: LocalWorkdir) -> None:
    docs = tau2_documents()
    results = []
    size = 0
    while size < 50_000_000:
        doc = docs[len(results) % len(docs)]
        item = {
            "id": f"{doc['id']}#{len(results)}",
            "title": doc["title"],
            "score": 0.5,
            "content": doc["content"],
        }
        results.append(item)
        size += len(doc["content"]) + 120
    text = json.dumps({"results": results})
    messages = exchange("c1", "query_kb", text)
    result = compact_view(messages, config(300), workdir, cache=CompactionCache())
    header, preview = split_view(text_of(result.messages[1]))
    assert result.offloaded[0].path in header
    assert len(preview) < 300 * 8
    first, records, others = preview_records(preview)
    assert len(results) in numbers_in(first)
    assert records
    for line, record in zip(records, results, strict=False):
        assert f"id={record['id']}" in line
    assert len(results) - len(records) in numbers_in(others[0])


def test_compaction_result_counts_are_consistent(workdir: LocalWorkdir) -> None:
    messages = s13_history()
    result = run(messages, workdir)
    assert result.tokens_before == sum(count_message_tokens(m) for m in messages)
    assert result.tokens_after == sum(count_message_tokens(m) for m in result.messages)
    assert result.changed
    assert {r.message_id for r in result.files_written} == {"tool-c1", "tool-c2"}
    assert re.fullmatch(r"[0-9a-f]{64}", result.offloaded[0].sha256)


def test_s2_a_private_empty_cache_is_used_not_replaced_by_the_global_one(workdir: LocalWorkdir) -> None:
    from ctxpress.graph_run import tool_results_by_key
    from ctxpress.overflow_trim import trim_kept_tool_results

    private = CompactionCache()
    messages = exchange("c1", "execute_bash", english_docs_text(40_000))
    originals = tool_results_by_key(messages[1:2])
    _view, trimmed = trim_kept_tool_results(messages, originals, config(), workdir, cache=private)
    assert trimmed, "the large result was trimmed"
    assert len(private) > 0, "the decision went into the caller's cache"


@pytest.mark.parametrize(
    "result",
    [
        {"query": "汉" * 5000, "total": 0, "results": []},
        {"total": 3, "results": []},
        [],
        {"data": {"hits": []}, "error": "index unavailable"},
    ],
)
def test_s9_a_result_list_without_records_falls_back_to_the_generic_preview(
    workdir: LocalWorkdir, result: Any
) -> None:
    """Issue 44 item 1: an empty result list raised IndexError; S10 keeps its head and tail instead."""
    text = json.dumps(result, ensure_ascii=False) + " " * 4000
    message = ToolMessage(content=text, tool_call_id="c1", name="query_kb", id="t1")
    view = compact_view([message], CompressionConfig(summary_tool_result_token_limit=100), workdir)
    assert len(view.offloaded) == 1
    shown = view.messages[0].text
    assert estimate_tokens(shown) < estimate_tokens(text)
    assert "results; preview in original order" not in shown


@pytest.mark.parametrize("limit", range(40, 66, 2))
def test_s10_no_piece_beside_a_marker_is_empty(workdir: LocalWorkdir, limit: int) -> None:
    """A tail of "" after a gap marker was shown at 40-60 tokens on the mixed Chinese text."""
    original = S10_TEXTS["chinese-english-chinese"]()
    result = run(exchange("c1", "execute_bash", original), workdir, limit)
    view = view_text(result, "tool-c1")
    if PREVIEW_SEPARATOR in view:
        kept, _ = gap_pieces(split_view(view)[1])
        assert all(kept), kept
