"""Manual compression over real HTTP, on SQLite and PostgreSQL (S17–S19, S28, S30).

The agent graph is the real `create_agent` graph of the service; only the models are scripted.
State is always read back through `GET …/state` (the agent's compiled graph), never from tables.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from ctxpress.app.server.agents_file import AgentDefinition, ModelSpec
from ctxpress.app.testing.api import create_conversation, send, wait_for_status
from ctxpress.app.testing.live_server import LiveServer
from ctxpress.config import CompressionConfig
from ctxpress.summary.event import is_summary_message
from ctxpress.summary.history import is_conversation_file
from tests.fakes import ScriptedChatModel

from .conftest import ServerFactory
from .fakes import SUMMARY_TOKEN, new_call_id

SYSTEM_PROMPT = "你是知识库助手。回答要准确、简洁。"
PROC_FDS = Path("/proc/self/fd")
#: Keep 2 messages; the default threshold (100 K) keeps automatic compression out of these tests.
COMPRESSION = CompressionConfig(summary_keep_messages=2)
TURNS = ["第一个问题：季度营收是多少？", "第二个问题：客户名单在哪里？", "第三个问题：合同条款有哪些？"]
HISTORY_DIR = "outputs/conversation_history"


# --- scripted models ------------------------------------------------------------------------------


class Chat:
    """The main model: `ask …` calls ask_user, `files …` list_files; a tool result is quoted; else echo.

    Records every request it receives (and when), so tests see what the model was sent.
    """

    def __init__(self, *, terse: bool = False) -> None:
        #: Answer in one character: fewer streamed deltas, faster runs (the race test runs many).
        self.terse = terse
        self.requests: list[list[BaseMessage]] = []
        self.call_times: list[float] = []
        self._lock = threading.Lock()

    def __call__(self, messages: Sequence[BaseMessage]) -> AIMessage:
        with self._lock:
            self.requests.append(list(messages))
            self.call_times.append(time.monotonic())
        last = messages[-1]
        if isinstance(last, HumanMessage) and last.text.startswith("ask "):
            args = {"question": last.text.removeprefix("ask ")}
            return AIMessage("", tool_calls=[{"name": "ask_user", "args": args, "id": new_call_id("ask")}])
        if isinstance(last, HumanMessage) and last.text.startswith("files"):
            return AIMessage("", tool_calls=[{"name": "list_files", "args": {}, "id": new_call_id("ls")}])
        if isinstance(last, ToolMessage):
            return AIMessage(f"你的回答是：{last.text}")
        if self.terse:
            return AIMessage("好")
        return AIMessage(f"答：{last.text}")


class Summarizer:
    """The summary model: fails on demand, can be held at a gate, records each call's interval."""

    def __init__(self, *, delay: float = 0.0) -> None:
        self.fail = False
        self.delay = delay
        self.gate: threading.Event | None = None
        self.entered = threading.Event()
        #: Called at each call (e.g. to look at the open workdir handles); its results are kept.
        self.probe: Callable[[], Any] | None = None
        self.probes: list[Any] = []
        self.intervals: list[tuple[float, float]] = []
        self._lock = threading.Lock()

    def __call__(self, messages: Sequence[BaseMessage]) -> AIMessage:
        started = time.monotonic()
        self.entered.set()
        if self.probe is not None:
            self.probes.append(self.probe())
        if self.gate is not None:
            assert self.gate.wait(timeout=30), "the test never opened the summary gate"
        if self.delay:
            time.sleep(self.delay)
        with self._lock:
            self.intervals.append((started, time.monotonic()))
            count = len(self.intervals)
        if self.fail:
            raise RuntimeError("summary model unavailable (scripted failure)")
        return AIMessage(f"{SUMMARY_TOKEN} 摘要{count}：用户问了营收、客户名单和合同条款。")


def kb_agent(
    *,
    chat: Chat | None = None,
    summarizer: Summarizer | None = None,
    gate: threading.Event | None = None,
    name: str = "kb",
    default: bool = True,
    capabilities: tuple[Any, ...] = ("context_compression",),
    compression: CompressionConfig = COMPRESSION,
) -> AgentDefinition:
    return AgentDefinition(
        name=name,
        default=default,
        model=ModelSpec(model=ScriptedChatModel(script=chat or Chat(), gate=gate)),
        summary_model=ModelSpec(
            model=ScriptedChatModel(script=summarizer or Summarizer(), model_name="summarizer")
        ),
        system_prompt=SYSTEM_PROMPT,
        tools=("ask_user", "read_file", "list_files"),
        capabilities=capabilities,
        compression=compression,
    )


# --- API helpers ----------------------------------------------------------------------------------


def talk(client: httpx.Client, conversation_id: str, texts: Sequence[str]) -> list[str]:
    """One run per text, each awaited to success; returns the run ids."""
    run_ids = []
    for text in texts:
        run_id = send(client, conversation_id, text)["run"]["id"]
        assert wait_for_status(client, run_id, {"succeeded", "failed"})["status"] == "succeeded"
        run_ids.append(run_id)
    return run_ids


def compress(client: httpx.Client, conversation_id: str) -> httpx.Response:
    return client.post(f"/api/conversations/{conversation_id}/compress")


def agent_state(client: httpx.Client, conversation_id: str) -> dict[str, Any]:
    response = client.get(f"/api/conversations/{conversation_id}/state")
    assert response.status_code == 200, response.text
    state: dict[str, Any] = response.json()
    return state


def context(client: httpx.Client, conversation_id: str) -> dict[str, Any]:
    response = client.get(f"/api/conversations/{conversation_id}/context")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def run_count(client: httpx.Client, conversation_id: str) -> int:
    return len(client.get(f"/api/conversations/{conversation_id}/runs").json()["items"])


def record_count(client: httpx.Client, conversation_id: str) -> int:
    return len(client.get(f"/api/conversations/{conversation_id}/messages").json()["items"])


def history_files(client: httpx.Client, conversation_id: str) -> list[str]:
    """The per-summary history files (not the conversation file every summary rewrites)."""
    return [path for path in _history_dir(client, conversation_id) if not is_conversation_file(path)]


def conversation_files(client: httpx.Client, conversation_id: str) -> list[str]:
    return [path for path in _history_dir(client, conversation_id) if is_conversation_file(path)]


def _history_dir(client: httpx.Client, conversation_id: str) -> list[str]:
    response = client.get(f"/api/conversations/{conversation_id}/files", params={"prefix": HISTORY_DIR})
    assert response.status_code == 200, response.text
    return [item["path"] for item in response.json()["files"]]


def workdir_of(server: LiveServer, conversation_id: str) -> Path:
    return server.services.workdirs.root / conversation_id


def open_files_under(root: Path) -> list[str]:
    """What this process (the live server runs in it) holds open in `root` or below, read from its
    file descriptors: a workdir handle left open by a request shows up here."""
    if not PROC_FDS.is_dir():
        pytest.skip("needs /proc/self/fd")
    prefix = str(root.resolve())
    held = []
    for entry in PROC_FDS.iterdir():
        with contextlib.suppress(OSError):  # a descriptor closed meanwhile
            target = os.readlink(entry)
            if target == prefix or target.startswith(prefix + os.sep):
                held.append(target)
    return held


def assert_busy(response: httpx.Response, reason: str) -> dict[str, Any]:
    assert response.status_code == 409, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == "thread_busy" and error["reason"] == reason
    return error


def assert_failed(response: httpx.Response, status: int, part: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == "compression_failed" and error["part"] == part
    return error


def message_texts(state: dict[str, Any]) -> list[str]:
    return [str(message["data"]["content"]) for message in state["values"]["messages"]]


# --- S17: only agents with the capability -------------------------------------------------------------


def test_s17_compress_needs_the_capability(start_server: ServerFactory) -> None:
    plain = kb_agent(name="plain", default=False, capabilities=())
    server = start_server(agents=[kb_agent(), plain])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice, "plain")
    talk(alice, conversation_id, TURNS)
    before = agent_state(alice, conversation_id)

    response = compress(alice, conversation_id)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "compression_not_supported"
    assert agent_state(alice, conversation_id) == before
    panel = context(alice, conversation_id)
    assert panel["context_compression"] is False and panel["suggest_compress"] is False
    assert panel["last_request"] is None, "no compression middleware, so nothing is recorded"
    # Another user's conversation does not exist for this one.
    bob = server.client(server.create_user("bob"))
    assert compress(bob, conversation_id).status_code == 404


# --- S18: busy threads answer 409 thread_busy ---------------------------------------------------------


def test_s18_compress_busy_running_409(start_server: ServerFactory) -> None:
    gate = threading.Event()
    server = start_server(agents=[kb_agent(gate=gate)])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    run = send(alice, conversation_id, TURNS[0])["run"]
    wait_for_status(alice, run["id"], {"running"})

    error = assert_busy(compress(alice, conversation_id), "running")
    assert error["details"]["active_run_id"] == run["id"]
    assert run_count(alice, conversation_id) == 1, "compression creates no run"
    gate.set()
    assert wait_for_status(alice, run["id"], {"succeeded"})["status"] == "succeeded"
    # Idle again: accepted (nothing to compress yet after one turn).
    response = compress(alice, conversation_id)
    assert response.status_code == 200 and response.json()["compressed"] is False


def test_s18_compress_busy_waiting_input_409(start_server: ServerFactory) -> None:
    server = start_server(agents=[kb_agent()])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    talk(alice, conversation_id, TURNS)
    run = send(alice, conversation_id, "ask 要查哪个季度？")["run"]
    wait_for_status(alice, run["id"], {"waiting_input"})
    before = agent_state(alice, conversation_id)

    error = assert_busy(compress(alice, conversation_id), "waiting_input")
    assert error["details"]["active_run_id"] == run["id"]
    assert agent_state(alice, conversation_id) == before
    answered = alice.post(f"/api/runs/{run['id']}/resume", json={"value": "第三季度"})
    assert answered.status_code == 202, answered.text
    assert wait_for_status(alice, run["id"], {"succeeded"})["status"] == "succeeded"
    assert compress(alice, conversation_id).json()["compressed"] is True


def test_s18_compress_busy_queued_409(start_server: ServerFactory) -> None:
    gate = threading.Event()
    server = start_server(agents=[kb_agent(gate=gate)], max_concurrent_runs=1)
    alice = server.client(server.create_user("alice"))
    occupying, waiting = create_conversation(alice), create_conversation(alice)
    first = send(alice, occupying, "占住唯一的执行槽")
    queued = send(alice, waiting, TURNS[0])
    assert first["started"] is True and queued["queued_because"] == "workers_busy"

    # The conversation has no active run, only a queued request: still busy (S18).
    error = assert_busy(compress(alice, waiting), "queued")
    assert error["details"] == {"active_run_id": None, "queued_runs": 1}
    assert_busy(compress(alice, occupying), "running")
    gate.set()
    for run in (first["run"], queued["run"]):
        assert wait_for_status(alice, run["id"], {"succeeded"})["status"] == "succeeded"
    assert compress(alice, waiting).status_code == 200


# --- S19: success, read back through the graph; history file present ------------------------------------


def test_s19_compress_success_state_read_back_through_graph(start_server: ServerFactory) -> None:
    chat = Chat()
    server = start_server(agents=[kb_agent(chat=chat)])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    talk(alice, conversation_id, TURNS)
    before = agent_state(alice, conversation_id)
    assert "_summarization_event" not in before["values"] and len(before["values"]["messages"]) == 6

    response = compress(alice, conversation_id)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["compressed"] is True and result["reason"] is None
    assert result["cutoff_index"] == 4, "6 messages, 2 kept"
    assert result["file_path"].startswith(f"{HISTORY_DIR}/{conversation_id}-000000-000004-")
    assert SUMMARY_TOKEN in result["summary"] and result["summary_count"] == 1
    assert isinstance(result["tokens_before"], int) and isinstance(result["tokens_after"], int)

    after = agent_state(alice, conversation_id)
    event = after["values"]["_summarization_event"]
    assert event["cutoff_index"] == 4 and event["file_path"] == result["file_path"]
    assert event["summary_message"]["data"]["content"] == result["summary"]
    assert event["first_kept_id"] == after["values"]["messages"][4]["data"]["id"]
    assert after["checkpoint_id"] == result["checkpoint_id"] != before["checkpoint_id"]
    assert after["next"] == [] and after["interrupts"] == []
    # S16: the state keeps every message; only the event says what the model sees.
    assert message_texts(after) == message_texts(before)

    # The history file is in the workdir and holds the summarised messages (S14).
    assert history_files(alice, conversation_id) == [result["file_path"]]
    lines = alice.get(f"/api/conversations/{conversation_id}/files/{result['file_path']}").text.splitlines()
    header, *records = (json.loads(line) for line in lines)
    assert header["range"] == [0, 4] and header["thread_id"] == conversation_id
    assert [record["data"]["content"] for record in records] == message_texts(before)[:4]
    # So is the conversation file the summary names: every message before the cutoff, whole.
    (conversation_file,) = conversation_files(alice, conversation_id)
    assert conversation_file in result["summary"]
    lines = alice.get(f"/api/conversations/{conversation_id}/files/{conversation_file}").text.splitlines()
    header, *records = (json.loads(line) for line in lines)
    assert header["range"] == [0, 4] and header["history_files"] == [result["file_path"]]
    assert [record["data"]["content"] for record in records] == message_texts(before)[:4]

    # A maintenance request: no run, no queued request, the chat record untouched (S1, S17).
    assert run_count(alice, conversation_id) == len(TURNS)
    assert record_count(alice, conversation_id) == 6
    assert open_files_under(workdir_of(server, conversation_id)) == []
    # S26: the manual summary call is on the bill, on the summary line.
    usage = alice.get(f"/api/conversations/{conversation_id}/usage").json()
    assert any(line["category"] == "summary" and line["calls"] >= 1 for line in usage["lines"]), usage

    # Nothing new to compress: 200, compressed false, the state untouched.
    again = compress(alice, conversation_id)
    assert again.status_code == 200 and again.json()["compressed"] is False
    assert "summary_keep_messages" in again.json()["reason"]
    assert agent_state(alice, conversation_id)["checkpoint_id"] == after["checkpoint_id"]

    # The next run's model call starts from [system, summary, kept messages, new message] (S15).
    talk(alice, conversation_id, ["第四个问题：风险评估呢？"])
    sent = chat.requests[-1]
    assert is_summary_message(sent[1]) and SUMMARY_TOKEN in sent[1].text
    assert [m.text for m in sent[2:]] == [*message_texts(before)[4:], "第四个问题：风险评估呢？"]


def test_s18_run_submitted_during_compression_is_refused_at_once(start_server: ServerFactory) -> None:
    """S18 + issue 16: while a manual compression holds the conversation, a new message is answered
    at once -- 409 `thread_busy`, reason `compressing`, `Retry-After` -- instead of waiting for the
    lock (which held a pooled connection per waiter); the status says so; afterwards it is accepted
    and its first model call sees the new summary."""
    chat, summarizer = Chat(), Summarizer()
    server = start_server(agents=[kb_agent(chat=chat, summarizer=summarizer)])
    token = server.create_user("alice")
    alice = server.client(token)
    conversation_id = create_conversation(alice)
    talk(alice, conversation_id, TURNS)
    calls_before = len(chat.requests)
    records_before = len(alice.get(f"/api/conversations/{conversation_id}/messages").json()["items"])

    summarizer.gate = threading.Event()  # hold the compression inside the lock, at the summary call
    finished: dict[str, tuple[float, httpx.Response]] = {}

    def call(name: str, method: str, path: str, body: Any = None) -> None:
        with server.client(token) as client:
            response = client.request(method, path, json=body)
        finished[name] = (time.monotonic(), response)

    compressing = threading.Thread(
        target=call, args=("compress", "POST", f"/api/conversations/{conversation_id}/compress")
    )
    compressing.start()
    try:
        assert summarizer.entered.wait(10), "the compression never reached the summary model"
        status = alice.get(f"/api/conversations/{conversation_id}/status").json()
        assert (status["busy"], status["reason"], status["active_run_id"]) == (True, "compressing", None)
        began = time.monotonic()
        refused = alice.post(
            f"/api/conversations/{conversation_id}/runs", json={"input": "压缩期间提交的问题"}
        )
        assert time.monotonic() - began < 2, "intake waited for the lock the compression holds"
        assert refused.status_code == 409, refused.text
        error = refused.json()["error"]
        assert (error["code"], error["reason"]) == ("thread_busy", "compressing")
        assert int(refused.headers["Retry-After"]) == error["details"]["retry_after"] > 0
        again = alice.post(f"/api/conversations/{conversation_id}/compress")
        assert again.status_code == 409 and again.json()["error"]["reason"] == "compressing"
        assert len(chat.requests) == calls_before, "no model call may start meanwhile"
    finally:
        summarizer.gate.set()
        compressing.join(10)
    compressed = finished["compress"][1]
    assert compressed.status_code == 200 and compressed.json()["compressed"] is True
    records = alice.get(f"/api/conversations/{conversation_id}/messages").json()["items"]
    assert len(records) == records_before, "a refused message is not in the chat record"
    assert alice.get(f"/api/conversations/{conversation_id}/status").json()["busy"] is False

    accepted = alice.post(f"/api/conversations/{conversation_id}/runs", json={"input": "压缩期间提交的问题"})
    assert accepted.status_code == 202 and accepted.json()["started"] is True, accepted.text
    run_id = accepted.json()["run"]["id"]
    assert wait_for_status(alice, run_id, {"succeeded"})["status"] == "succeeded"
    # The run's first model call already sees the new summary.
    first_call = chat.requests[calls_before]
    assert is_summary_message(first_call[1]) and first_call[1].text == compressed.json()["summary"]
    assert first_call[-1].text == "压缩期间提交的问题"


# --- S28: both halves must succeed; a failure publishes nothing ----------------------------------------


def test_s28_summary_model_failure_leaves_state_unchanged(start_server: ServerFactory) -> None:
    summarizer = Summarizer()
    server = start_server(agents=[kb_agent(summarizer=summarizer)])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    talk(alice, conversation_id, TURNS)
    first = compress(alice, conversation_id).json()  # an earlier summary exists and must survive
    talk(alice, conversation_id, ["第四个问题", "第五个问题"])
    before = agent_state(alice, conversation_id)

    summarizer.fail = True
    error = assert_failed(compress(alice, conversation_id), 502, "summary")
    assert "summary model failed" in error["message"]
    after = agent_state(alice, conversation_id)
    assert after == before, "no new _summarization_event, no other change"
    assert after["values"]["_summarization_event"]["file_path"] == first["file_path"]
    assert run_count(alice, conversation_id) == len(TURNS) + 2

    summarizer.fail = False  # recoverable: the next attempt summarises the same range
    retried = compress(alice, conversation_id).json()
    assert retried["compressed"] is True and retried["summary_count"] == 2
    assert retried["cutoff_index"] == 8


def test_s28_history_write_failure_leaves_state_unchanged(start_server: ServerFactory) -> None:
    server = start_server(agents=[kb_agent()])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    talk(alice, conversation_id, TURNS)
    before = agent_state(alice, conversation_id)
    # A file where the history folder belongs: the history write fails (even for root).
    blocker = workdir_of(server, conversation_id) / HISTORY_DIR
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not a folder", encoding="utf-8")

    error = assert_failed(compress(alice, conversation_id), 500, "history")
    assert "history file" in error["message"]
    assert str(server.services.workdirs.root) not in error["message"], "no host path is exposed"
    assert agent_state(alice, conversation_id) == before
    assert "_summarization_event" not in before["values"]

    blocker.unlink()
    assert compress(alice, conversation_id).json()["compressed"] is True


# --- S30: the workdir ("sandbox") handle is released on success and on failure ------------------------


def test_s30_sandbox_released_after_success_and_failures(start_server: ServerFactory) -> None:
    summarizer = Summarizer()
    server = start_server(agents=[kb_agent(summarizer=summarizer)])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    workdirs = server.services.workdirs
    summarizer.probe = lambda: workdirs.open_handles(conversation_id)
    talk(alice, conversation_id, TURNS)

    blocker = workdir_of(server, conversation_id) / HISTORY_DIR
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("x", encoding="utf-8")
    root = workdir_of(server, conversation_id)
    assert_failed(compress(alice, conversation_id), 500, "history")
    assert open_files_under(root) == []
    blocker.unlink()

    summarizer.fail = True
    assert_failed(compress(alice, conversation_id), 502, "summary")
    assert open_files_under(root) == []
    summarizer.fail = False

    assert compress(alice, conversation_id).json()["compressed"] is True
    assert open_files_under(root) == []
    # While each compression ran, exactly one handle was open: the one it acquired.
    assert summarizer.probes == [1, 1, 1]


def test_s19_s22_compress_reports_the_estimate_the_context_panel_shows(start_server: ServerFactory) -> None:
    # A long file listing stays raw in the kept part (the summary read it offloaded): the reported
    # figure is the next request's estimate (system prompt + tool schemas + summary + kept
    # messages), the one GET /context shows — not the compressed view the summary step read.
    server = start_server(agents=[kb_agent()])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    notes = workdir_of(server, conversation_id) / "notes"
    notes.mkdir(parents=True)
    for index in range(120):
        (notes / f"quarterly-report-{index:03d}.md").write_text("营收", encoding="utf-8")
    talk(alice, conversation_id, [*TURNS, "files"])
    before = context(alice, conversation_id)
    response = compress(alice, conversation_id)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["compressed"] is True
    after = context(alice, conversation_id)
    assert result["tokens_before"] == before["estimated_tokens"]
    assert result["tokens_after"] == after["estimated_tokens"]
    assert after["breakdown"]["system"] > 0 and after["breakdown"]["tools"] > 0
