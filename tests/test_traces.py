"""Trace import: every real data set loads provider-valid, with counts checked against the raw files."""

from __future__ import annotations

import itertools
import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from ctxpress.tools.traces import (
    NO_RESULT_PLACEHOLDER,
    RAW_ARGUMENTS_KEY,
    Conversation,
    TraceFormatError,
    UnknownTraceFormatError,
    conversation_to_openai,
    iter_conversations,
    load_openai_chat,
    load_trace,
    messages_to_openai,
)
from ctxpress.tools.traces.discover import sniff_format
from ctxpress.tools.traces.model import read_payload
from tests.conftest import require_shared_data

SOURCES = ("swe-agent", "tau-bench", "toolbench", "openhands", "acebench", "glaive")


# ---------------------------------------------------------------------------------------------
# helpers


def assert_provider_valid(conversation: Conversation) -> None:
    """Each call answered exactly once, right after its AIMessage; ids unique; provider mirror right."""
    messages = conversation.messages
    message_ids = [message.id for message in messages]
    assert all(message_ids), conversation.name
    assert len(set(message_ids)) == len(message_ids), conversation.name
    call_ids = [call["id"] for m in messages if isinstance(m, AIMessage) for call in m.tool_calls]
    assert all(call_ids), conversation.name
    assert len(set(call_ids)) == len(call_ids), conversation.name
    system_positions = [i for i, m in enumerate(messages) if isinstance(m, SystemMessage)]
    assert system_positions == list(range(len(system_positions))), conversation.name
    index = 0
    while index < len(messages):
        message = messages[index]
        assert not isinstance(message, ToolMessage), f"{message.id}: tool result without its call"
        if isinstance(message, AIMessage) and message.tool_calls:
            expected = [call["id"] for call in message.tool_calls]
            results = messages[index + 1 : index + 1 + len(expected)]
            assert all(isinstance(result, ToolMessage) for result in results), message.id
            assert [r.tool_call_id for r in results if isinstance(r, ToolMessage)] == expected, message.id
            mirror = message.additional_kwargs["tool_calls"]
            assert [entry["id"] for entry in mirror] == expected
            for call, entry in zip(message.tool_calls, mirror, strict=True):
                assert isinstance(call["args"], dict)
                assert entry["type"] == "function" and entry["function"]["name"] == call["name"]
                if set(call["args"]) != {RAW_ARGUMENTS_KEY}:
                    assert json.loads(entry["function"]["arguments"]) == call["args"]
            index += 1 + len(expected)
        else:
            index += 1
    placeholders = sum(
        1
        for m in messages
        if isinstance(m, ToolMessage) and m.status == "error" and m.content == NO_RESULT_PLACEHOLDER
    )
    assert placeholders == conversation.missing_results, conversation.name


def signature(messages: list[BaseMessage]) -> list[tuple[Any, ...]]:
    """What a round trip must keep: kinds, contents, tool calls, result links and tool names."""
    return [
        (
            type(m).__name__,
            m.content,
            [(c["name"], c["args"], c["id"]) for c in m.tool_calls] if isinstance(m, AIMessage) else None,
            (m.tool_call_id, m.name) if isinstance(m, ToolMessage) else None,
        )
        for m in messages
    ]


def tool_messages(conversation: Conversation) -> list[ToolMessage]:
    return [m for m in conversation.messages if isinstance(m, ToolMessage)]


def tool_calls(conversation: Conversation) -> list[Any]:
    return [call for m in conversation.messages if isinstance(m, AIMessage) for call in m.tool_calls]


def json_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ---------------------------------------------------------------------------------------------
# real data


@pytest.fixture(scope="module")
def traces_root() -> Path:
    return require_shared_data("traces")


@pytest.fixture(scope="module")
def by_source(traces_root: Path) -> dict[str, list[Conversation]]:
    grouped: dict[str, list[Conversation]] = {source: [] for source in SOURCES}
    for conversation in iter_conversations(traces_root):
        grouped[conversation.source].append(conversation)
    return grouped


@pytest.mark.shared_data
def test_every_real_conversation_is_provider_valid(by_source: dict[str, list[Conversation]]) -> None:
    for source in SOURCES:
        assert by_source[source], source
        for conversation in by_source[source]:
            assert_provider_valid(conversation)


@pytest.mark.shared_data
def test_names_are_unique_deterministic_and_skip_non_traces(traces_root: Path) -> None:
    first = [c.name for c in iter_conversations(traces_root)]
    second = [c.name for c in iter_conversations(traces_root)]
    assert first == second
    assert len(set(first)) == len(first)
    assert not any("possible_answer" in name or "LICENSE" in name or ".DS_Store" in name for name in first)
    assert "tau-bench/historical_trajectories/gpt-4o-airline.json#17" in first


@pytest.mark.shared_data
def test_whole_folder_loads_fast(traces_root: Path) -> None:
    started = time.perf_counter()
    count = sum(1 for _ in iter_conversations(traces_root))
    assert count > 1500
    assert time.perf_counter() - started < 15  # about 1.5 s on a laptop; generous for slow CI


@pytest.mark.shared_data
def test_tau_bench_matches_raw_file(traces_root: Path, by_source: dict[str, list[Conversation]]) -> None:
    raw = json.loads((traces_root / "tau-bench/historical_trajectories/gpt-4o-airline.json").read_text())
    conversations = by_source["tau-bench"]
    assert len(conversations) == len(raw) == 200
    for entry, conversation in zip(raw, conversations, strict=True):
        raw_results = [m["content"] for m in entry["traj"] if m["role"] == "tool"]
        assert [m.content for m in tool_messages(conversation)] == raw_results  # byte-for-byte
        assert conversation.missing_results == 0
        assert len(conversation.messages) == len(entry["traj"])


@pytest.mark.shared_data
def test_swe_agent_matches_raw_files(traces_root: Path, by_source: dict[str, list[Conversation]]) -> None:
    files = sorted((traces_root / "swe-agent").rglob("*.traj"))
    conversations = {c.name: c for c in by_source["swe-agent"]}
    assert len(conversations) == len(files) == 22
    textual_runs = 0
    for path in files:
        conversation = conversations[f"{path.relative_to(traces_root).as_posix()}#0"]
        history = json.loads(path.read_text())["history"]
        actions = [m for m in history if m["role"] == "assistant"]
        assert len(tool_calls(conversation)) == len(actions)  # every step is a call, textual or not
        if any(m["role"] == "tool" for m in history):
            raw_results = [m["content"] for m in history if m["role"] == "tool"]
        else:  # thought/action text: the observation is the user message after each action
            textual_runs += 1
            raw_results = [
                nxt["content"] for cur, nxt in itertools.pairwise(history) if cur["role"] == "assistant"
            ]
            assert {call["name"] for call in tool_calls(conversation)} == {"bash"}
        answered = [m.content for m in tool_messages(conversation) if m.status != "error"]
        assert answered == raw_results
        assert conversation.missing_results == len(actions) - len(raw_results)
    assert textual_runs >= 10


@pytest.mark.shared_data
def test_toolbench_matches_raw_files(traces_root: Path, by_source: dict[str, list[Conversation]]) -> None:
    answered = []
    for path in sorted((traces_root / "toolbench").rglob("*.json")):
        samples = json.loads(path.read_text())["answer_generation"].get("train_messages") or []
        if samples:
            answered.append(samples[-1])
    conversations = by_source["toolbench"]
    assert len(conversations) == len(answered) == 13
    for raw, conversation in zip(answered, conversations, strict=True):
        assert [m.content for m in tool_messages(conversation) if m.status != "error"] == [
            m["content"] for m in raw if m["role"] == "function"
        ]
        assert tool_calls(conversation)[-1]["name"] == "Finish"
        assert conversation.missing_results == 1  # Finish is never answered
        assert conversation.tools and all(tool["type"] == "function" for tool in conversation.tools)


@pytest.mark.shared_data
def test_openhands_matches_raw_files(traces_root: Path, by_source: dict[str, list[Conversation]]) -> None:
    root = traces_root / "openhands"
    histories = [
        r["history"] for r in json_lines(root / "evaluation/benchmarks/multi_swe_bench/examples/output.jsonl")
    ]
    histories += [json.loads(p.read_text()) for p in sorted((root / "tests/runtime/trajs").glob("*.json"))]
    conversations = by_source["openhands"]
    assert len(conversations) == len(histories) == 7
    for history, conversation in zip(histories, conversations, strict=True):
        raw_calls = {
            e["tool_call_metadata"]["tool_call_id"]
            for e in history
            if "action" in e and e.get("tool_call_metadata")
        }
        assert {call["id"] for call in tool_calls(conversation)} == raw_calls
        raw_results = Counter(
            e["content"] for e in history if "observation" in e and e.get("tool_call_metadata")
        )
        assert Counter(m.content for m in tool_messages(conversation) if m.status != "error") == raw_results
    assert all(len(c.tools) == 4 for c in conversations[:3])  # the system action carries the tool schemas


@pytest.mark.shared_data
def test_acebench_matches_raw_files(traces_root: Path, by_source: dict[str, list[Conversation]]) -> None:
    records = []
    for path in sorted((traces_root / "acebench/data_all/data_zh").glob("data_*.json")):
        records += [r for r in json_lines(path) if not r["id"].startswith("agent_multi_turn")]
    conversations = by_source["acebench"]
    assert len(conversations) == len(records) == 987
    for record, conversation in zip(records, conversations, strict=True):
        call_turns = len(re.findall(r"(?m)^system: \[", record["question"]))
        assert (
            sum(1 for m in conversation.messages if isinstance(m, AIMessage) and m.tool_calls) == call_turns
        )
        assert conversation.missing_results == len(tool_calls(conversation))  # results are never recorded
        assert len(conversation.tools) == len(record["function"])
        assert '"type": "dict"' not in json.dumps(conversation.tools)  # BFCL's "dict" became "object"
        user_turns = len(re.findall(r"(?m)^user: ", record["question"])) or 1
        assert sum(1 for m in conversation.messages if isinstance(m, HumanMessage)) == user_turns


@pytest.mark.shared_data
def test_glaive_matches_raw_files(traces_root: Path, by_source: dict[str, list[Conversation]]) -> None:
    raw = []
    for path in sorted((traces_root / "glaive-toolcall").rglob("*.json")):
        raw += json.loads(path.read_text())
    conversations = by_source["glaive"]
    assert len(conversations) == len(raw) == 600
    for record, conversation in zip(raw, conversations, strict=True):
        turns = record["conversations"]
        assert len(tool_calls(conversation)) == sum(1 for t in turns if t["from"] == "function_call")
        observations = [t["value"] for t in turns if t["from"] == "observation"]
        kept = [m.content for m in tool_messages(conversation)]
        assert len(kept) + conversation.orphan_results == len(observations)
        assert conversation.missing_results == 0
    assert (
        sum(c.orphan_results for c in conversations) == 2
    )  # two zh dialogues lost their call in translation


@pytest.mark.shared_data
def test_real_files_are_sniffed_to_their_format(traces_root: Path) -> None:
    expected = {
        "swe-agent/trajectories/demonstrations/function_calling_simple.traj": "swe-agent",
        "tau-bench/historical_trajectories/gpt-4o-airline.json": "tau-bench",
        "toolbench/data_example/answer/G1_answer/10_ChatGPT_DFS_woFilter_w2.json": "toolbench",
        "openhands/evaluation/benchmarks/multi_swe_bench/examples/output.jsonl": "openhands",
        "openhands/tests/runtime/trajs/basic.json": "openhands",
        "acebench/data_all/data_zh/data_normal_similar_api.json": "acebench",
        "glaive-toolcall/data/glaive_toolcall_zh_demo.json": "glaive",
    }
    for relative, name in expected.items():
        trace_format = sniff_format(read_payload(traces_root / relative))
        assert trace_format is not None and trace_format.name == name, relative
    answer_key = traces_root / "acebench/data_all/data_zh/possible_answer/data_normal_similar_api.json"
    assert sniff_format(read_payload(answer_key)) is None


@pytest.mark.shared_data
def test_real_data_round_trips_through_openai_json_and_jsonl(
    tmp_path: Path, by_source: dict[str, list[Conversation]]
) -> None:
    everything = [c for source in SOURCES for c in by_source[source]]
    jsonl = tmp_path / "all.jsonl"
    jsonl.write_text(
        "".join(json.dumps(conversation_to_openai(c), ensure_ascii=False) + "\n" for c in everything)
    )
    back = load_trace(jsonl)
    assert len(back) == len(everything)
    for original, loaded in zip(everything, back, strict=True):
        assert loaded.source == "openai"
        assert signature(loaded.messages) == signature(original.messages), original.name
        assert loaded.tools == original.tools
    for original in (by_source[source][0] for source in SOURCES):
        single = tmp_path / "one.json"
        single.write_text(json.dumps(messages_to_openai(original.messages), ensure_ascii=False))
        (loaded,) = load_openai_chat(single)
        assert signature(loaded.messages) == signature(original.messages), original.name


# ---------------------------------------------------------------------------------------------
# synthetic edge cases (no shared data needed)


def test_openai_repairs_missing_results_orphans_and_bad_arguments() -> None:
    (conversation,) = load_openai_chat(
        {
            "messages": [
                {"role": "system", "content": "sys"},
                {"role": "user", "content": None},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}},
                        {"type": "function", "function": {"name": "g", "arguments": "{not json"}},
                    ],
                },
                {"role": "tool", "tool_call_id": "a", "content": "  keep  spacing\n"},
                {"role": "tool", "tool_call_id": "zzz", "content": "orphan"},
                {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
            ],
            "extra": "ignored",
        }
    )
    assert_provider_valid(conversation)
    kinds = [type(m).__name__ for m in conversation.messages]
    assert kinds == [
        "SystemMessage",
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "ToolMessage",
        "HumanMessage",
        "AIMessage",
    ]
    ai = conversation.messages[2]
    assert isinstance(ai, AIMessage)
    assert ai.tool_calls[0]["args"] == {"x": 1}
    assert ai.tool_calls[1]["args"] == {RAW_ARGUMENTS_KEY: "{not json"}
    assert ai.additional_kwargs["tool_calls"][1]["function"]["arguments"] == "{not json"
    assert conversation.messages[3].content == "  keep  spacing\n"
    placeholder = conversation.messages[4]
    assert isinstance(placeholder, ToolMessage) and placeholder.status == "error" and placeholder.name == "g"
    assert conversation.missing_results == 1 and conversation.orphan_results == 1
    assert conversation.messages[5].content == "orphan"
    assert conversation.messages[1].content == ""
    assert conversation.messages[-1].content == [{"type": "text", "text": "done"}]


def test_openai_legacy_function_calls_and_reused_ids() -> None:
    call = {"id": "dup", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    (conversation,) = load_openai_chat(
        [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "function_call": {"name": "lookup", "arguments": '{"q": "a"}'},
            },
            {"role": "function", "name": "lookup", "content": "A"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "dup", "content": "first"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "dup", "content": "second"},
        ]
    )
    assert_provider_valid(conversation)
    assert [m.content for m in tool_messages(conversation)] == ["A", "first", "second"]
    assert tool_calls(conversation)[0]["args"] == {"q": "a"}
    again = load_openai_chat(conversation_to_openai(conversation))
    assert [m.id for m in again[0].messages] == [m.id for m in conversation.messages]


def test_openai_jsonl_one_conversation_per_line(tmp_path: Path) -> None:
    path = tmp_path / "chats.jsonl"
    lines = [{"messages": [{"role": "user", "content": "一"}]}, [{"role": "user", "content": "二"}]]
    path.write_text(
        "\n".join(json.dumps(line, ensure_ascii=False) for line in lines) + "\n", encoding="utf-8"
    )
    conversations = load_trace(path)
    assert [c.name for c in conversations] == ["chats.jsonl#0", "chats.jsonl#1"]
    assert [c.messages[0].content for c in conversations] == ["一", "二"]
    assert conversations[0].messages[0].id == "chats.jsonl#0:0"


def test_truncated_json_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('[{"role": "user", "content": "cut here')
    with pytest.raises(ValueError, match=r"broken\.json"):
        load_trace(path)
    multi_line = tmp_path / "broken_lines.json"
    multi_line.write_text('{\n  "history": [\n    {"role": "user"')
    with pytest.raises(ValueError, match=r"broken_lines\.json"):
        load_trace(multi_line)


def test_unknown_format_and_mismatched_format_are_clear_errors(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text('{"theme": "dark"}')
    with pytest.raises(UnknownTraceFormatError, match=r"settings\.json.*not a known trace format"):
        load_trace(path)
    with pytest.raises(ValueError, match="unknown trace format 'nope'"):
        load_trace(path, fmt="nope")
    with pytest.raises(TraceFormatError, match=r"settings\.json.*toolbench"):
        load_trace(path, fmt="toolbench")
    with pytest.raises(TraceFormatError, match="unknown role"):
        load_openai_chat([{"role": "user", "content": "x"}, {"role": "robot", "content": "y"}])


def test_iter_conversations_skips_non_traces(tmp_path: Path) -> None:
    (tmp_path / ".DS_Store").write_bytes(b"\x00\x01binary")
    (tmp_path / "LICENSE").write_text("MIT")
    (tmp_path / "README.md").write_text("# traces")
    (tmp_path / "answers.json").write_text(
        '{"id": "x", "ground_truth": {}}\n{"id": "y", "ground_truth": {}}\n'
    )
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "chat.json").write_text(json.dumps([{"role": "user", "content": "hello"}]))
    (tmp_path / "a.jsonl").write_text(json.dumps({"messages": [{"role": "user", "content": "first"}]}) + "\n")
    assert [c.name for c in iter_conversations(tmp_path)] == ["a.jsonl#0", "b/chat.json#0"]


def test_glaive_and_swe_agent_textual_calls(tmp_path: Path) -> None:
    glaive = tmp_path / "g.json"
    glaive.write_text(
        json.dumps(
            [
                {
                    "conversations": [
                        {"from": "human", "value": "天气？"},
                        {
                            "from": "function_call",
                            "value": json.dumps({"name": "weather", "arguments": {"city": "北京"}}),
                        },
                        {"from": "observation", "value": '{"temp": 20}'},
                        {"from": "gpt", "value": "20度"},
                    ],
                    "tools": json.dumps(
                        [{"name": "weather", "parameters": {"type": "object", "properties": {}}}]
                    ),
                }
            ],
            ensure_ascii=False,
        ),
        encoding="utf-8",
    )
    (conversation,) = load_trace(glaive)
    assert conversation.source == "glaive"
    assert_provider_valid(conversation)
    assert tool_calls(conversation)[0]["args"] == {"city": "北京"}
    assert conversation.tools[0]["function"]["name"] == "weather"

    traj = tmp_path / "run.traj"
    traj.write_text(
        json.dumps(
            {
                "history": [
                    {"role": "system", "content": "sys"},
                    {"role": "user", "content": "demo", "is_demo": True},
                    {"role": "user", "content": "fix it"},
                    {
                        "role": "assistant",
                        "content": "look\n```\nls\n```",
                        "thought": "look",
                        "action": "ls\n",
                    },
                    {"role": "user", "content": "a.py\n"},
                    {"role": "assistant", "content": "done\n```\nsubmit\n```", "action": "submit\n"},
                ]
            }
        )
    )
    (run,) = load_trace(traj)
    assert_provider_valid(run)
    assert [type(m).__name__ for m in run.messages] == [
        "SystemMessage",
        "HumanMessage",
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "AIMessage",
        "ToolMessage",
    ]
    assert run.messages[3].content == "look\n```\nls\n```"  # the model's text, unchanged
    assert tool_calls(run)[0]["args"] == {"command": "ls\n"}
    assert run.missing_results == 1
