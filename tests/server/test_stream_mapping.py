"""LangGraph stream chunks -> SSE events and chat-record messages (pure mapping, no service)."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, ToolMessage
from langgraph.constants import TAG_NOSTREAM

from ctxpress.app.server.repositories.run_events import NewEvent
from ctxpress.app.server.runtime.stream_mapping import RecordedMessage, StreamMapper
from ctxpress.app.server.runtime.usage_recording import is_summary_call


def mapper() -> StreamMapper:
    return StreamMapper(tool_result_preview_chars=10)


def test_summary_calls_are_recognised() -> None:
    assert is_summary_call(["ctxpress:summary", TAG_NOSTREAM], {}) and is_summary_call(
        [], {"lc_source": "summarization"}
    )
    assert not is_summary_call(["seq:step:1"], {"ls_provider": "openai"})


def test_updates_record_new_assistant_and_tool_messages_once() -> None:
    stream = mapper()
    call = {"name": "fetch", "args": {"q": 1}, "id": "c1"}
    ai = AIMessage("查一下", id="a1", tool_calls=[call])
    tool = ToolMessage("0123456789abcdef", tool_call_id="c1", name="fetch", id="t1")
    items = stream.map((), "updates", {"model": {"messages": [ai]}, "tools": [{"messages": [tool]}]})
    assert [type(item) for item in items] == [RecordedMessage, RecordedMessage]
    first, second = items
    assert isinstance(first, RecordedMessage) and isinstance(second, RecordedMessage)
    assert [event.type for event in first.events] == ["message", "tool_call"]
    assert first.events[1].data == {
        "message_id": "a1",
        "tool_call_id": "c1",
        "name": "fetch",
        "args": {"q": 1},
    }
    result = second.events[0].data
    assert result["content"] == "0123456789" and result["truncated"] is True and result["content_chars"] == 16
    # Seen ids, removals, other message kinds and the interrupt marker record nothing.
    again = {
        "model": {"messages": [ai, RemoveMessage(id="a1"), HumanMessage("摘要", id="h9")]},
        "__interrupt__": (),
    }
    assert stream.map((), "updates", again) == []
    assert stream.map((), "updates", {"model": None}) == []


def test_sub_agent_messages_are_shown_not_recorded() -> None:
    items = mapper().map(("task:1",), "updates", {"model": {"messages": AIMessage("子任务", id="sub")}})
    assert items == [
        NewEvent(
            "message",
            {
                "message_id": "sub",
                "role": "assistant",
                "content": "子任务",
                "tool_calls": [],
                "node": "model",
                "namespace": ["task:1"],
            },
        )
    ]


def test_custom_events_map_one_to_one() -> None:
    payload = {"type": "context_compression", "status": "started", "level": "l1", "tokens_before": 9000}
    assert mapper().map((), "custom", payload) == [NewEvent("context_compression", payload)]
    pressure = {"type": "context_pressure", "tokens": 10}
    assert mapper().map((), "custom", pressure) == [NewEvent("context_pressure", pressure)]
    assert mapper().map((), "custom", "progress 50%") == [NewEvent("custom", {"data": "progress 50%"})]
