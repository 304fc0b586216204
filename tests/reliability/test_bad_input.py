"""Bad input, end to end (S8–S13, S23–S25). Unit-level cases (path validation, config errors, 50 MB
results through L1) live in tests/engine; these add the paths through the agent, the service and
the summary, with the usual oracles.

- Paths and tool names: `..`, absolute, NUL, very long, Unicode look-alikes, bidi controls — given
  to the model's file tools and used as tool names — are rejected or sanitised; nothing is read or
  written outside the workdir; no host path in any message, event or error.
- Symlinks planted in the workdir pointing outside (the large-result folder, the history folder, a
  file): nothing is written or read through them (S13/S27/S28 semantics hold instead).
- Tool results: 20 MB, lone surrogates, deeply nested and malformed JSON for `query_kb` /
  `web_search`, 100,000 small results: bounded views and summary requests, lossless files.
- Config: every mistake is an error when the agents file is loaded, before any conversation.
"""

from __future__ import annotations

import json
import os
import tempfile
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from ctxpress import CompressionConfig, ContextCompressionMiddleware, LocalWorkdir
from ctxpress.app.server.agents_file import AgentConfigError, parse_agents
from ctxpress.compaction.markers import parse_offload_reference
from ctxpress.manual import ManualCompressionError, compress_now
from ctxpress.summary.recovery import recover_messages
from ctxpress.tokens import count_request_tokens, estimate_tokens
from ctxpress.workdir import read_text
from tests.fakes import ScriptedChatModel
from tests.server.fakes import new_call_id

from .faults import HISTORY_DIR, LARGE_DIR, workdir_problems
from .support import (
    TOPICS,
    assert_checkpoint_consistent,
    assert_offload_references_exist,
    kb_agent,
    state_values,
    turn,
    workdir_root,
)

SQLITE_ONLY = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

BAD_PATHS = [
    "../escape.txt",
    "notes/../../escape.txt",
    str(Path(tempfile.gettempdir()) / "ctxpress-escape.txt"),  # absolute
    "C:\\escape.txt",
    "a\x00b.txt",
    "x" * 300 + ".txt",
    "/".join(["d"] * 600),
    "．．／．．／escape.txt",  # full-width look-alikes of ../
    "notes∕..∕..∕escape.txt",  # U+2215 division slash
    "notes/\u202etxt.exe",  # right-to-left override
    "skills/planted.md",  # the public, read-only area
    "",
]


# --- the model's file tools, through the service --------------------------------------------------------


def _file_tool_script(paths: Sequence[str]) -> Any:
    """Each user message `N` makes the model write, then read, BAD_PATHS[N]; then it answers."""

    def script(messages: Sequence[BaseMessage]) -> AIMessage:
        last = messages[-1]
        human = next(m for m in reversed(messages) if isinstance(m, HumanMessage))
        path = paths[int(human.text)]
        done = [m for m in messages[messages.index(human) :] if isinstance(m, ToolMessage)]
        if len(done) == 0:
            args = {"path": path, "content": "planted by the model"}
            return AIMessage("", tool_calls=[{"name": "write_file", "args": args, "id": new_call_id("w")}])
        if len(done) == 1:
            return AIMessage(
                "", tool_calls=[{"name": "read_file", "args": {"path": path}, "id": new_call_id("r")}]
            )
        return AIMessage(f"结果：{last.text[:40]}")

    return script


@SQLITE_ONLY
def test_s25_file_tools_reject_bad_paths_and_never_leave_the_workdir(
    start_server: Any, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text("host secret")
    # No compression here (high threshold): the model's view keeps each turn's request.
    agent, _ = kb_agent(
        main=_file_tool_script(BAD_PATHS), compression=CompressionConfig(summary_threshold=100)
    )
    server = start_server(agents=[agent])
    client = server.client(server.create_user("alice"))
    conversation_id = client.post("/api/conversations", json={}).json()["id"]
    settings = server.services.settings
    root = workdir_root(settings, conversation_id)
    # A symlink the "model" could try to read through: outside the workdir.
    (root / "notes").mkdir(parents=True, exist_ok=True)
    (root / "notes" / "link.txt").symlink_to(secret)
    data_dir_files = {p for p in settings.data_dir.rglob("*") if p.is_file()}
    tmp_files = set(Path(tempfile.gettempdir()).glob("ctxpress-escape*"))

    for index, path in enumerate(BAD_PATHS):
        result = turn(client, conversation_id, str(index))
        assert result.status == "succeeded", (path, result.run)
        results = [e.data for e in result.events if e.type == "tool_result"]
        assert len(results) == 2, path
        written, read = (str(r.get("content") or r.get("preview") or r) for r in results)
        assert written.startswith("error:"), f"{path!r} was accepted for writing: {written}"
        assert read.startswith("error:"), f"{path!r} was read: {read}"
        text = json.dumps([e.data for e in result.events], ensure_ascii=False)
        assert str(settings.data_dir) not in text and str(tmp_path) not in text, "a host path leaked"
    through_link = client.get(f"/api/conversations/{conversation_id}/files/notes/link.txt")
    assert through_link.status_code in (400, 404) and "host secret" not in through_link.text

    # Nothing was created outside the workdir, nor inside it by the rejected writes.
    assert set(Path(tempfile.gettempdir()).glob("ctxpress-escape*")) == tmp_files
    new_files = {p for p in settings.data_dir.rglob("*") if p.is_file()} - data_dir_files
    assert not [p for p in new_files if root not in p.parents or p.name != "link.txt"]
    assert secret.read_text() == "host secret" and [p.name for p in outside.iterdir()] == ["secret.txt"]
    assert not (root / "skills").exists()


# --- symlinks planted in the workdir ---------------------------------------------------------------------


@SQLITE_ONLY
@pytest.mark.parametrize("planted", [LARGE_DIR, HISTORY_DIR])
def test_s13_s27_planted_symlink_folders_are_never_written_through(
    start_server: Any, tmp_path: Path, planted: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    agent, recorder = kb_agent()
    server = start_server(agents=[agent])
    client = server.client(server.create_user("alice"))
    conversation_id = client.post("/api/conversations", json={}).json()["id"]
    settings = server.services.settings
    root = workdir_root(settings, conversation_id)
    (root / planted).parent.mkdir(parents=True, exist_ok=True)
    (root / planted).symlink_to(outside, target_is_directory=True)

    sent = []
    compressed_l2 = False
    for topic in TOPICS[:6]:
        sent.append(topic)
        result = turn(client, conversation_id, topic)
        assert result.status == "succeeded", result.run
        text = json.dumps([e.data for e in result.events], ensure_ascii=False)
        assert str(tmp_path) not in text and str(settings.data_dir) not in text, "a host path leaked"
        completed = result.compression("completed")
        compressed_l2 = compressed_l2 or any(e["level"] == "l2" for e in completed)
    assert list(outside.iterdir()) == [], "something was written through the planted symlink"
    assert compressed_l2, "the premise: a summary was made"
    values = state_values(client, conversation_id)
    event = values["_summarization_event"]
    if planted == HISTORY_DIR:
        assert event["file_path"] is None  # S27: summarised, said the history could not be saved
    else:
        assert assert_offload_references_exist(recorder.requests, root) == 0  # S13: never "saved at"
    (root / planted).unlink()
    assert_checkpoint_consistent(values, root)
    # The file endpoint does not follow a planted symlink to a file outside either.
    (root / "notes").mkdir(exist_ok=True)
    secret = outside / "secret.txt"
    secret.write_text("host secret")
    (root / "notes" / "leak.txt").symlink_to(secret)
    response = client.get(f"/api/conversations/{conversation_id}/files/notes/leak.txt")
    assert response.status_code in (400, 404) and "host secret" not in response.text
    assert str(tmp_path) not in response.text
    listing = client.get(f"/api/conversations/{conversation_id}/files").json()["files"]
    assert "notes/leak.txt" not in {item["path"] for item in listing}


async def test_s28_manual_compression_refuses_a_planted_history_symlink(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "wd"
    workdir = LocalWorkdir(root)
    agent, thread = _engine_agent(workdir, turns=3)
    (root / HISTORY_DIR).parent.mkdir(parents=True, exist_ok=True)
    (root / HISTORY_DIR).symlink_to(outside, target_is_directory=True)
    values = (await agent.aget_state(thread)).values
    with pytest.raises(ManualCompressionError) as failure:
        await compress_now(
            values["messages"],
            None,
            config=ENGINE_CONFIG,
            workdir=workdir,
            summary_model=ScriptedChatModel(script=[AIMessage("摘要")]),
        )
    assert failure.value.part == "history" and str(tmp_path) not in str(failure.value)
    assert list(outside.iterdir()) == []


# --- tool results: huge, broken, deeply nested, numerous ------------------------------------------------

ENGINE_CONFIG = CompressionConfig(
    summary_threshold=2, summary_keep_messages=2, summary_tool_result_token_limit=200
)


def _engine_agent(
    workdir: LocalWorkdir, turns: int = 3, results: Sequence[str] | None = None, name: str = "query_kb"
) -> tuple[Any, dict[str, Any]]:
    """A create_agent graph whose one tool returns `results[i]` on turn i."""
    payloads = list(results or [json.dumps({"results": [{"title": t, "content": t * 40}]}) for t in TOPICS])

    @tool(name)
    def lookup(query: str) -> str:
        """Look something up."""
        return payloads[int(query)]

    script: list[Any] = []
    for index in range(turns):
        script += [
            AIMessage("", tool_calls=[{"name": name, "args": {"query": str(index)}, "id": f"c{index}"}]),
            AIMessage(f"回答{index}"),
        ]
    thread = {"configurable": {"thread_id": f"bad-input-{name}"}}
    summary = ScriptedChatModel(script=[AIMessage(f"摘要{i}") for i in range(10)])
    middleware = ContextCompressionMiddleware(ENGINE_CONFIG, workdir=workdir, summary_model=summary)
    model = ScriptedChatModel(script=script)
    agent = create_agent(model, [lookup], middleware=[middleware], checkpointer=InMemorySaver())
    agent.model_for_tests = model  # type: ignore[attr-defined]
    agent.summary_for_tests = summary  # type: ignore[attr-defined]
    for index in range(turns):
        agent.invoke({"messages": [HumanMessage(f"第{index}问")]}, thread)
    return agent, thread


def _deep(depth: int) -> str:
    return '{"results": [' + '{"a": [' * depth + "1" + "]}" * depth + "]}"


def _big(chars: int) -> str:
    row = json.dumps(
        {"doc_id": "d", "title": "标题", "score": 0.5, "content": "北京故宫 开放时间 8:30 " * 10},
        ensure_ascii=False,
    )
    rows = ",".join([row] * (chars // len(row) + 1))
    return '{"results": [' + rows + "]}"


HOSTILE_RESULTS = {
    "20mb_json": _big(20_000_000),
    "lone_surrogates": "结果\ud800片段\udfff。" * 20_000,
    "deeply_nested": _deep(200_000),
    "malformed_json": '{"results": [{"title": "未闭合", "content": "' + "内容 " * 50_000,
    "small_results_100k": json.dumps({"results": [{"id": i, "title": f"t{i}"} for i in range(100_000)]}),
    "json_nan_and_huge_numbers": '{"results": [{"score": NaN, "rank": '
    + "9" * 5_000
    + ', "title": "x"}]}'
    + " 补充" * 4000,
}


@pytest.mark.parametrize("tool_name", ["query_kb", "web_search"])
@pytest.mark.parametrize("kind", sorted(HOSTILE_RESULTS))
def test_s8_s9_hostile_tool_results_stay_bounded_and_lossless(
    tmp_path: Path, kind: str, tool_name: str
) -> None:
    root = tmp_path / "wd"
    workdir = LocalWorkdir(root, durable=False)
    hostile = HOSTILE_RESULTS[kind]
    normal = json.dumps(
        {"results": [{"title": "故宫", "content": "开放时间 8:30 " * 200}]}, ensure_ascii=False
    )
    agent, thread = _engine_agent(workdir, turns=3, results=[hostile, normal, normal], name=tool_name)
    model, summary = agent.model_for_tests, agent.summary_for_tests
    limit = ENGINE_CONFIG.threshold_tokens
    # Every request after the hostile result is within the threshold (plus one kept message).
    for request in model.requests[1:]:
        assert count_request_tokens(request) < limit + 2 * estimate_tokens(normal), kind
    for request in summary.requests:
        assert count_request_tokens(request) < limit, "the summary request itself must fit"
    # The full result is stored losslessly and is recoverable.
    state = agent.get_state(thread).values
    stored = next(m for m in state["messages"] if isinstance(m, ToolMessage))
    # S2: the checkpoint keeps the original (LangGraph's serializer writes a lone surrogate as "?";
    # the workdir file below keeps it exactly).
    assert stored.content in (hostile, hostile.encode("utf-8", "replace").decode()), "S2"
    views = [m for r in model.requests for m in r if isinstance(m, ToolMessage) and m.tool_call_id == "c0"]
    reference = next(
        (parse_offload_reference(str(v.content)) for v in views if parse_offload_reference(str(v.content))),
        None,
    )
    assert reference is not None, "the hostile result was offloaded"
    assert read_text(workdir, reference.path) == hostile
    event = state.get("_summarization_event")
    if event and event["file_path"]:
        recovered = recover_messages(workdir, event["file_path"])
        assert any(m.content == hostile for m in recovered), "history + files recover the result"
    assert workdir_problems(root) == []


def test_s12_one_long_letter_run_counts_like_text() -> None:
    """A 1 MB result with no spaces (a minified blob) must not count as a single token, or it never
    reaches L1 and the main model gets all of it."""
    blob = "abcdefghij" * 100_000
    assert estimate_tokens(blob) >= len(blob) // 20, "the estimate ignores the length of a letter run"


# --- config: errors at load time ---------------------------------------------------------------------------

BAD_CONFIGS = {
    "prompt without {messages}": ({"summary_prompt": "请总结。"}, "summary_prompt"),
    "zero threshold": ({"summary_threshold": 0}, "summary_threshold"),
    "negative threshold": ({"summary_threshold": -5}, "summary_threshold"),
    "huge threshold": ({"summary_threshold": 1e12}, "summary_threshold"),
    "nan threshold": ({"summary_threshold": float("nan")}, "summary_threshold"),
    "infinite threshold": ({"summary_threshold": float("inf")}, "summary_threshold"),
    "threshold as text": ({"summary_threshold": "a lot"}, "summary_threshold"),
    "threshold as boolean": ({"summary_threshold": True}, "summary_threshold"),
    "keep zero": ({"summary_keep_messages": 0}, "summary_keep_messages"),
    "keep fractional": ({"summary_keep_messages": 2.5}, "summary_keep_messages"),
    "negative tool limit": ({"summary_tool_result_token_limit": -1}, "summary_tool_result_token_limit"),
    "tool limit as list": ({"summary_tool_result_token_limit": [300]}, "summary_tool_result_token_limit"),
    "unknown key": ({"summary_treshold": 64}, "summary_treshold"),
    "unknown profile": ({"token_profile": "gpt-9"}, "token_profile"),
}


@pytest.mark.parametrize("name", sorted(BAD_CONFIGS))
def test_s23_bad_config_fails_when_the_agents_file_loads(name: str) -> None:
    values, field = BAD_CONFIGS[name]
    document = {"agents": {"kb": {"model": "builtin", "compression": values}}}
    with pytest.raises(AgentConfigError) as failure:
        parse_agents(json.loads(json.dumps(document, allow_nan=True)))
    assert field in str(failure.value) and "agents.kb" in str(failure.value)


def test_s23_bad_config_in_a_toml_file_fails_before_serving(tmp_path: Path) -> None:
    from ctxpress.app.server.agents_file import load_agents_file

    path = tmp_path / "agents.toml"
    path.write_text(
        '[agents.kb]\nmodel = "builtin"\n[agents.kb.compression]\nsummary_prompt = "没有占位符"\n'
    )
    with pytest.raises(AgentConfigError, match="summary_prompt") as failure:
        load_agents_file(path)
    assert str(tmp_path) not in str(failure.value), "errors name the file, not its folder"


async def test_s23_prompt_with_literal_braces_reaches_the_summary_model_unchanged(tmp_path: Path) -> None:
    prompt = '输出 JSON：{"summary": "..."}，不要用 {name} 或 {{0}}。\n对话：\n{messages}\n结束。'
    config = CompressionConfig(summary_prompt=prompt, summary_keep_messages=1)
    document = tomllib.loads(
        '[agents.kb]\nmodel = "builtin"\n[agents.kb.compression]\nsummary_prompt = '
        + json.dumps(prompt, ensure_ascii=False)
        + "\n"
    )
    assert parse_agents(document)[0].compression.summary_prompt == prompt
    summary_model = ScriptedChatModel(script=[AIMessage("摘要")])
    messages: list[BaseMessage] = [
        HumanMessage("你好", id="h0"),
        AIMessage("你好！", id="a0"),
        HumanMessage("再见", id="h1"),
        AIMessage("再见！", id="a1"),
    ]
    result = await compress_now(
        messages, None, config=config, workdir=LocalWorkdir(tmp_path / "wd"), summary_model=summary_model
    )
    assert result.compressed
    sent = str(summary_model.requests[0][-1].content)
    assert sent.startswith('输出 JSON：{"summary": "..."}，不要用 {name} 或 {{0}}。') and sent.endswith(
        "结束。"
    )
    assert "你好" in sent and "{messages}" not in sent


def test_s23_bad_environment_value_fails_when_the_default_agent_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bad value in the environment is refused when the default agent is built (at start)."""
    from ctxpress.app.server.agents_file import default_agent

    monkeypatch.setenv("CTXPRESS_SUMMARY_THRESHOLD", "-1")
    with pytest.raises(ValueError, match="summary_threshold"):
        default_agent()
    monkeypatch.delenv("CTXPRESS_SUMMARY_THRESHOLD")
    assert (
        os.environ.get("CTXPRESS_SUMMARY_THRESHOLD") is None
        and default_agent().compression.summary_threshold == 100
    )
