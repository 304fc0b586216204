"""Values that used to reach a 500 or split the chat record from the checkpoint (issue 19, items 1-3).

- `before` without offset, a date alone, or an instant outside years 1-9999 once in UTC: 422 naming
  the problem, never SQL (the per-type sweep over every parameter is `test_http_fuzz.py`).
- `/static/…%00` (no login needed) and NUL in a path id: 404, not the OS's or PostgreSQL's error.
- A tool argument like `offset: 10**30`, nesting deeper than msgpack holds, a tool artifact the
  checkpointer cannot encode: the run goes on, the model gets a clear tool error for the argument,
  and afterwards the chat record and the checkpoint hold the same messages, in the same order.
- A resume value the checkpoint or PostgreSQL could not hold (`10**30`, NaN, 40 levels deep): 422,
  and the run still waits for a proper answer.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Any

import httpx
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from ctxpress.app.server.agents_file import AgentDefinition, ModelSpec
from ctxpress.app.server.runtime.tools import MAX_TOOL_INT
from ctxpress.app.testing.api import read_events, wait_for_status
from tests.fakes import ScriptedChatModel
from tests.server.fakes import ask_script, new_call_id

from .support import Recorder, state_values, turn


class Opaque:
    """A tool artifact no checkpoint encoding knows."""

    def __repr__(self) -> str:
        return "Opaque()"


@tool(response_format="content_and_artifact")
def make_artifact(name: str) -> tuple[str, Any]:
    """Return a short text and a rich artifact."""
    return f"made {name}", {"huge": 10**30, "object": Opaque(), "name": name}


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"x": value}
    return value


CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "huge offset": ("read_file", {"path": "notes.md", "offset": 10**30}),
    "huge negative": ("read_file", {"path": "notes.md", "offset": -(2**70)}),
    "deep arguments": ("make_artifact", {"name": "deep", "extra": _nested(300)}),
    "artifact": ("make_artifact", {"name": "plain"}),
}


def hostile_script(messages: Sequence[BaseMessage]) -> AIMessage:
    last = messages[-1]
    if isinstance(last, HumanMessage) and last.text in CALLS:
        name, args = CALLS[last.text]
        return AIMessage("", tool_calls=[{"name": name, "args": args, "id": new_call_id("h")}])
    if isinstance(last, ToolMessage):
        return AIMessage(f"工具答复：{last.text[:60]}")
    return AIMessage("好的。")


def _hostile_agent() -> tuple[AgentDefinition, Recorder]:
    recorder = Recorder(hostile_script)
    agent = AgentDefinition(
        name="hostile",
        default=True,
        model=ModelSpec(model=ScriptedChatModel(script=recorder, model_name="main")),
        tools=("read_file", "write_file", make_artifact),
        capabilities=(),
    )
    return agent, recorder


def _comparable(message: dict[str, Any]) -> tuple[Any, ...]:
    data = message.get("data", message)
    calls = [(c["name"], json.dumps(c["args"], sort_keys=True)) for c in data.get("tool_calls") or []]
    return (data.get("id"), data.get("type"), json.dumps(data.get("content")), calls)


def assert_record_matches_checkpoint(client: httpx.Client, conversation_id: str) -> list[dict[str, Any]]:
    """The chat record and the checkpoint hold the same messages (ids, kinds, text, tool calls)."""
    record = client.get(f"/api/conversations/{conversation_id}/messages", params={"limit": 500}).json()
    state = state_values(client, conversation_id)["messages"]
    assert [_comparable(m["message"]) for m in record["items"]] == [_comparable(m) for m in state]
    kinds = [m["type"] for m in state]
    assert not any(a == b == "human" for a, b in itertools.pairwise(kinds)), kinds
    return list(state)


# --- 1, 2: query instants, NUL in paths --------------------------------------------------------------


def test_before_needs_an_offset_and_a_representable_instant(start_server: Any) -> None:
    server = start_server()
    client = server.client(server.create_user("alice"))
    client.post("/api/conversations", json={})
    for value, says in (
        ("2026-01-01T00:00:00", "UTC offset"),
        ("2026-01-01", "UTC offset"),
        ("0001-01-01T00:00:00+14:00", "years 1-9999"),
        ("9999-12-31T23:59:59-14:00", "years 1-9999"),
    ):
        response = client.get("/api/conversations", params={"before": value})
        assert response.status_code == 422, (value, response.text)
        detail = response.json()["error"]["details"][0]
        assert detail["loc"] == ["query", "before"] and says in detail["message"], (value, detail)
    page = client.get("/api/conversations", params={"before": "2999-01-01T00:00:00Z"})
    assert page.status_code == 200 and len(page.json()["items"]) == 1


def test_nul_in_static_paths_and_ids_answers_404(start_server: Any) -> None:
    server = start_server()
    anonymous = httpx.Client(base_url=server.base_url)
    for path in ("/static/x%00", "/static/%00/app.js", "/static/js/app.js%00.css"):
        response = anonymous.get(path)
        assert response.status_code == 404, (path, response.text)
        assert response.json()["error"]["code"] == "not_found"
    client = server.client(server.create_user("alice"))
    for path in (
        "/api/conversations/%00",
        "/api/runs/%00",
        "/api/conversations/a%00b/files",
        "/api/runs/%00/events",
    ):
        response = client.get(path)
        assert response.status_code == 404, (path, response.text)
    assert anonymous.get("/static/icon.svg").status_code == 200


# --- 3: tool arguments, artifacts, resume values ---------------------------------------------------------


def test_unstorable_tool_arguments_and_results_keep_record_and_checkpoint_together(
    start_server: Any,
) -> None:
    agent, recorder = _hostile_agent()
    server = start_server(agents=[agent])
    client = server.client(server.create_user("alice"))
    conversation_id = client.post("/api/conversations", json={}).json()["id"]
    for text in (*CALLS, "最后一句"):
        assert turn(client, conversation_id, text).status == "succeeded", text
    state = assert_record_matches_checkpoint(client, conversation_id)

    # The model was told what was wrong with its argument (a tool message, not a failed run).
    answers = {
        m.id: m.text
        for request in recorder.requests
        for m in request
        if isinstance(m, ToolMessage) and m.name == "read_file"
    }
    assert sorted(answers.values()) == sorted(
        f"error: offset must be between 0 and {MAX_TOOL_INT}, not {value}" for value in (10**30, -(2**70))
    )
    # Stored: the integers as their text, the deep arguments as JSON text below msgpack's limit,
    # the opaque artifact as its repr.
    calls = [c for m in state if m["type"] == "ai" for c in m["data"].get("tool_calls") or []]
    assert calls[0]["args"]["offset"] == str(10**30)
    assert calls[1]["args"]["offset"] == str(-(2**70))
    assert json.loads(_deepest_text(calls[2]["args"]["extra"])) is not None
    artifacts = [m["data"]["artifact"] for m in state if m["type"] == "tool" and m["data"].get("artifact")]
    assert {"huge": str(10**30), "object": "Opaque()", "name": "plain"} in artifacts


def _deepest_text(value: Any) -> str:
    while isinstance(value, dict):
        value = value["x"]
    assert isinstance(value, str)
    return value


def test_resume_values_the_checkpoint_cannot_hold_answer_422(start_server: Any) -> None:
    agent = AgentDefinition(
        name="asker",
        default=True,
        model=ModelSpec(model=ScriptedChatModel(script=ask_script)),
        tools=("ask_user",),
        capabilities=(),
    )
    server = start_server(agents=[agent])
    client = server.client(server.create_user("alice"))
    conversation_id = client.post("/api/conversations", json={}).json()["id"]
    run = client.post(
        f"/api/conversations/{conversation_id}/runs", json={"input": "ask 你喜欢哪种颜色？"}
    ).json()
    run_id = run["run"]["id"]
    wait_for_status(client, run_id, {"waiting_input"})
    deep: Any = "蓝色"
    for _ in range(40):
        deep = [deep]
    for raw in (
        '{"value": {"n": 1000000000000000000000000000000}}',
        '{"value": -9223372036854775809}',
        '{"value": NaN}',
        '{"value": {"x": Infinity}}',
        json.dumps({"value": deep}),
    ):
        response = client.post(
            f"/api/runs/{run_id}/resume", content=raw, headers={"content-type": "application/json"}
        )
        assert response.status_code == 422, (raw[:60], response.text)
        assert response.json()["error"]["details"][0]["loc"] == ["body", "value"]
    assert client.get(f"/api/runs/{run_id}").json()["status"] == "waiting_input"
    accepted = client.post(f"/api/runs/{run_id}/resume", json={"value": {"answer": "蓝色", "n": 2**63 - 1}})
    assert accepted.status_code == 202, accepted.text
    events = read_events(client, run_id)
    assert events[-1].type == "run_finished" and events[-1].data["status"] == "succeeded"
