"""`ctxpress.checkpoint_serde.CheckpointSerializer`: LangGraph's checkpoint serializer, keeping per
process the messages it wrote or read (issue 18 item 13: a checkpoint reload hands back the objects
the token memo already counted, so the next run's first count is the warm path).

Oracles: decoded values equal LangGraph's own decoding field for field; a message stored in the same
bytes comes back as the same object (identity), a changed or edited one as a new object equal to
LangGraph's decoding; what is written is what LangGraph writes, byte for byte; a strict
serializer decodes what LangGraph's strict serializer decodes.
"""

from __future__ import annotations

import datetime
import itertools
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from pydantic import BaseModel

from ctxpress import ContextCompressionMiddleware, LocalWorkdir
from ctxpress.checkpoint_serde import CheckpointSerializer
from ctxpress.tools.traces import iter_conversations
from tests.fakes import ScriptedChatModel


class _Note(BaseModel):
    title: str
    tags: list[str]


def _assert_same_messages(expected: list[Any], decoded: list[Any]) -> None:
    assert len(decoded) == len(expected)
    for want, got in zip(expected, decoded, strict=True):
        assert type(got) is type(want)
        assert got == want
        assert got.model_dump() == want.model_dump()
        assert got.model_fields_set == want.model_fields_set


def test_s1_every_real_message_decodes_exactly_as_langgraph_decodes_it(traces_dir: Path) -> None:
    standard, ours = JsonPlusSerializer(), CheckpointSerializer()
    checked = 0
    for conversation in itertools.islice(iter_conversations(traces_dir), 600):
        stored = standard.dumps_typed({"messages": conversation.messages})
        _assert_same_messages(standard.loads_typed(stored)["messages"], ours.loads_typed(stored)["messages"])
        checked += len(conversation.messages)
    assert checked > 1000


def _long_thread(count: int) -> dict[str, Any]:
    messages: list[Any] = []
    for index in range(count):
        if index % 2:
            messages.append(HumanMessage(f"问题 {index} " * 20, id=f"h{index}"))
        else:
            call = {"name": "query_kb", "args": {"q": index}, "id": f"c{index}"}
            messages.append(AIMessage(f"answer {index} " * 10, id=f"a{index}", tool_calls=[call]))
    return {"messages": messages, "_summarization_event": {"cutoff_index": 3, "summary": "s"}}


def test_s1_a_reread_payload_is_shared_safely_and_written_back_unchanged() -> None:
    """Reading the same large payload again gives equal values in fresh containers (changing one
    read's lists or dicts changes no other read); a changed payload is decoded anew; writing back
    what was read gives LangGraph's own bytes, and a message added or replaced is written too."""
    serde, langgraph = CheckpointSerializer(), JsonPlusSerializer()
    values = _long_thread(400)
    stored = langgraph.dumps_typed(values)
    first, second = serde.loads_typed(stored), serde.loads_typed(stored)
    assert first == second == values
    assert first is not second and first["messages"] is not second["messages"]
    first["messages"].append(HumanMessage("only in the first read", id="extra"))
    first["_summarization_event"]["cutoff_index"] = 99
    third = serde.loads_typed(stored)
    assert third == values, "a change to one read's containers reached a later read"
    assert serde.dumps_typed(second) == stored
    # The first read with its new message and changed event is written as LangGraph writes it.
    assert serde.dumps_typed(first) == langgraph.dumps_typed(first)
    assert langgraph.loads_typed(serde.dumps_typed(first)) == first
    # A replaced message (same id, new content) is written with its new content.
    replaced = dict(second, messages=[*second["messages"][:-1], HumanMessage("replaced", id="h399")])
    assert langgraph.loads_typed(serde.dumps_typed(replaced))["messages"][-1].content == "replaced"
    changed = langgraph.dumps_typed(_long_thread(401))
    assert serde.loads_typed(changed) == _long_thread(401)


def test_s1_other_values_still_decode_the_langgraph_way() -> None:
    standard, ours = JsonPlusSerializer(), CheckpointSerializer()
    value = {
        "note": _Note(title="退货政策", tags=["kb", "faq"]),
        "when": datetime.datetime(2026, 12, 2, 15, 45, tzinfo=datetime.UTC),
        "id": uuid.UUID(int=42),
        "messages": [
            HumanMessage("你好", id="h"),
            AIMessage("", tool_calls=[{"name": "ls", "args": {"path": "."}, "id": "c"}], id="a"),
            ToolMessage("a.txt", tool_call_id="c", id="t"),
        ],
        "plain": [1, 2.5, "三", None, True],
    }
    stored = standard.dumps_typed(value)
    expected, decoded = standard.loads_typed(stored), ours.loads_typed(stored)
    assert decoded["note"] == expected["note"] == value["note"]
    assert decoded["when"] == value["when"] and decoded["id"] == value["id"]
    assert decoded["plain"] == value["plain"]
    _assert_same_messages(expected["messages"], decoded["messages"])
    assert ours.loads_typed(standard.dumps_typed(None)) is None


def _stored(values: dict[str, Any]) -> tuple[str, bytes]:
    return JsonPlusSerializer().dumps_typed(values)


def test_s12_a_message_stored_again_is_read_back_as_the_object_already_decoded() -> None:
    """The next run reads a new checkpoint (the thread plus a turn): every message it shares with the
    checkpoint read before comes back as the very object decoded then; the new ones are decoded
    as LangGraph decodes them. Small and large payloads alike, and with the payload cache off."""
    for count, kept_payloads in ((6, 8), (400, 8), (400, 0)):
        serde = CheckpointSerializer(kept_payloads=kept_payloads)
        before = _long_thread(count)
        after = dict(before, messages=[*before["messages"], HumanMessage("下一轮", id="next")])
        first = serde.loads_typed(_stored(before))["messages"]
        second = serde.loads_typed(_stored(after))["messages"]
        assert all(again is earlier for again, earlier in zip(second, first, strict=False))
        assert len(second) == count + 1
        _assert_same_messages(JsonPlusSerializer().loads_typed(_stored(after))["messages"], second)


def test_s12_a_message_replaced_under_its_id_is_decoded_anew() -> None:
    """Equal bytes, not equal ids, decide: a replacement under the same id is a new object with the
    new content, and the message it replaced is still handed back for its own bytes."""
    serde = CheckpointSerializer()
    original = _long_thread(10)
    replaced_messages = [*original["messages"][:-1], HumanMessage("换了内容", id="h9")]
    first = serde.loads_typed(_stored(original))["messages"]
    second = serde.loads_typed(_stored(dict(original, messages=replaced_messages)))["messages"]
    assert second[-1] is not first[-1]
    assert second[-1].content == "换了内容" and first[-1].content != "换了内容"
    assert serde.loads_typed(_stored(original))["messages"][-1] is first[-1]


def test_s12_kept_messages_are_bounded_by_their_stored_bytes() -> None:
    """Past `kept_message_bytes` the oldest generation is dropped: those messages are decoded again
    (equal, new objects), never answered wrongly; a message too big to keep is decoded every time."""
    thread = _long_thread(200)
    stored = _stored(thread)
    size = len(stored[1])
    serde = CheckpointSerializer(kept_message_bytes=size // 4, kept_payloads=0)
    first = serde.loads_typed(stored)["messages"]
    assert 0 < len(serde.messages) < 200
    second = serde.loads_typed(stored)["messages"]
    assert second == first == thread["messages"]
    assert any(again is not earlier for again, earlier in zip(second, first, strict=True))
    assert 0 < serde.messages.kept_bytes <= size // 4
    roomy = CheckpointSerializer(kept_message_bytes=4 * size, kept_payloads=0)
    kept = roomy.loads_typed(stored)["messages"]
    assert all(
        again is earlier for again, earlier in zip(roomy.loads_typed(stored)["messages"], kept, strict=True)
    )

    huge = {"messages": [HumanMessage("字" * 50_000, id="huge")]}
    small = CheckpointSerializer(kept_message_bytes=1024, kept_payloads=0)
    once, twice = (
        small.loads_typed(_stored(huge))["messages"][0],
        small.loads_typed(_stored(huge))["messages"][0],
    )
    assert once == twice and once is not twice and len(small.messages) == 0


def test_s12_a_kept_message_is_written_back_as_the_bytes_it_was_read_from() -> None:
    """A checkpoint written from a read (plus a new turn) is byte for byte what LangGraph writes."""
    serde = CheckpointSerializer(kept_payloads=0)
    read = serde.loads_typed(_stored(_long_thread(50)))
    read["messages"].append(AIMessage("新的回答", id="new"))
    assert serde.dumps_typed(read) == JsonPlusSerializer().dumps_typed(read)


def test_s1_a_message_edited_after_it_was_read_is_written_with_its_edit() -> None:
    """Code may reassign a field of a message it read from the state (LangChain's
    `HumanInTheLoopMiddleware` reassigns `tool_calls` on the last AI message). The checkpoint written
    after it holds the edit, and the checkpoint read before still reads as it was stored."""
    serde = CheckpointSerializer()
    stored = _stored(_long_thread(400))
    read = serde.loads_typed(stored)
    last_ai = read["messages"][-2]
    assert isinstance(last_ai, AIMessage)
    edited = [{**last_ai.tool_calls[0], "args": {"q": "edited"}}]
    last_ai.tool_calls = edited
    written = serde.dumps_typed(read)
    assert JsonPlusSerializer().loads_typed(written)["messages"][-2].tool_calls == edited
    again = serde.loads_typed(stored)["messages"][-2]
    assert again.tool_calls[0]["args"] == {"q": 398}
    assert serde.loads_typed(written)["messages"][-2].tool_calls == edited


def test_s1_a_message_edited_after_it_was_written_is_not_read_back_for_its_old_bytes() -> None:
    serde = CheckpointSerializer(kept_payloads=0)
    message = HumanMessage("原来的问题", id="q")
    written = serde.dumps_typed({"messages": [message]})
    assert serde.loads_typed(written)["messages"][0] is message
    message.content = "改过的问题"
    reread = serde.loads_typed(written)["messages"][0]
    assert reread is not message and reread.content == "原来的问题"
    assert (
        JsonPlusSerializer().loads_typed(serde.dumps_typed({"messages": [message]}))["messages"][0] == message
    )


def _echo(messages: list[BaseMessage]) -> AIMessage:
    return AIMessage(f"回声：{messages[-1].text}")


@pytest.mark.parametrize("saver_kind", ["memory", "sqlite"])
def test_s12_any_langgraph_saver_given_the_serializer_hands_the_next_run_its_objects(
    saver_kind: str, tmp_path: Path
) -> None:
    """The README's use: a LangGraph saver of the library user's own, given `serde=`. Through a real
    `create_agent` graph with ctxpress, each run's first model call receives the previous run's
    messages as the very objects that run's call received."""
    serde = CheckpointSerializer()
    connection = sqlite3.connect(tmp_path / "checkpoints.sqlite", check_same_thread=False)
    saver: BaseCheckpointSaver[Any] = (
        InMemorySaver(serde=serde) if saver_kind == "memory" else SqliteSaver(connection, serde=serde)
    )
    model = ScriptedChatModel(script=_echo)
    middleware = ContextCompressionMiddleware(workdir=LocalWorkdir(tmp_path / "workdir"))
    agent = create_agent(model, [], system_prompt="你是助手。", middleware=[middleware], checkpointer=saver)
    config = {"configurable": {"thread_id": "t"}}
    try:
        for turn in range(3):
            agent.invoke({"messages": [HumanMessage(f"第 {turn} 个问题", id=f"h{turn}")]}, config)
    finally:
        connection.close()
    calls = [request[1:] for request in model.requests]  # after the system prompt
    assert [len(call) for call in calls] == [1, 3, 5]
    for previous, current in itertools.pairwise(calls):
        assert all(again is earlier for again, earlier in zip(current, previous, strict=False))


def test_s1_a_payload_read_under_a_wider_allowlist_is_not_answered_under_a_narrower_one() -> None:
    """LangGraph gives a graph's own state types to a strict serializer with
    `with_msgpack_allowlist` (a copy). A large payload that copy decoded, custom type and all, is
    not handed to the serializer it was copied from, whose allowlist refuses that type."""
    strict = CheckpointSerializer(allowed_msgpack_modules=None)
    wider = strict.with_msgpack_allowlist([_Note])
    assert wider is not strict
    stored = _stored(dict(_long_thread(400), note=_Note(title="退货政策", tags=["kb"])))
    assert wider.loads_typed(stored)["note"] == _Note(title="退货政策", tags=["kb"])
    refused = JsonPlusSerializer(allowed_msgpack_modules=None).loads_typed(stored)["note"]
    assert not isinstance(refused, _Note)
    assert strict.loads_typed(stored)["note"] == refused
