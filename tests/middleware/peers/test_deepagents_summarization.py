"""Ports of DeepAgents' summarization tests (langchain-ai/deepagents, libs/deepagents/tests/unit_tests/
middleware/: test_summarization_middleware.py, test_compact_tool.py, test_summarization_factory.py).

DeepAgents' `SummarizationMiddleware` offloads the evicted messages to a backend file, truncates
old `write_file` / `edit_file` arguments, summarises on `ContextOverflowError`, and its
`compact_conversation` tool compacts on request. Each test restates one scenario against ctxpress
(`ContextCompressionMiddleware`, or `DeepAgentsCompressionMiddleware` where the DeepAgents state
matters) through a real `create_agent` graph; "Intended difference" marks where the spec decides
otherwise (the README lists them).
"""

from __future__ import annotations

import base64
import json
import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from deepagents.backends import FilesystemBackend
from deepagents.middleware.summarization import SummarizationMiddleware
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.checkpoint.memory import InMemorySaver

from ctxpress import (
    CompressionConfig,
    DeepAgentsCompressionMiddleware,
    FailedPart,
    LocalWorkdir,
    ManualCompressionError,
    TokenCounter,
    compress_now,
    count_request_tokens,
)
from ctxpress.compaction.markers import ARGUMENT_MARKER, ARGUMENT_OFFLOAD_MARKER
from ctxpress.manual import TOO_FEW_MESSAGES
from ctxpress.summary.event import SUMMARY_MARKER, is_summary_message
from ctxpress.summary.history import HISTORY_DIR, read_history
from ctxpress.workdir import WorkdirWriteError
from tests.fakes import ScriptedChatModel, tool_call
from tests.middleware.conftest import assert_provider_valid
from tests.middleware.peers.conftest import (
    SYSTEM_PROMPT,
    THREAD_ID,
    PeerAgent,
    answers,
    config_for,
    lookup,
    make_agent,
    question,
    summaries,
    thread,
    view_messages,
)


def _until_summaries(
    agent: PeerAgent, count: int = 1, turns: int = 12, start: int = 0
) -> list[dict[str, Any]]:
    """Turns until `count` summaries were made; the distinct events, in order."""
    seen: list[dict[str, Any]] = []
    for index in range(start, start + turns):
        agent.turn(question(index))
        event = agent.event()
        if event is not None and (not seen or seen[-1]["cutoff_index"] != event["cutoff_index"]):
            seen.append(event)
        if len(seen) >= count:
            return seen
    raise AssertionError(f"the premise: {count} summaries within {turns} turns, got {len(seen)}")


def _plain(tmp_path: Path, threshold: int = 300, keep: int = 2, **options: Any) -> PeerAgent:
    return make_agent(tmp_path, config_for(threshold, keep=keep), script=answers(40), tools=[], **options)


# --- offloading the summarised history -----------------------------------------------------------


def test_summary_writes_the_summarised_messages_as_json_lines(tmp_path: Path) -> None:
    """Ports `TestOffloadingBasic::test_offload_writes_to_backend`, `test_typical_tool_heavy_conversation`
    and `TestMarkdownFormatting::test_markdown_format_includes_message_content` (one write to
    `/conversation_history/session_<hex>.md` with "## Summarized at" sections). Intended difference:
    ctxpress writes `outputs/conversation_history/<thread>-<from>-<to>-<hash>.jsonl`, one JSON
    object per message after a header line (S14)."""
    script: list[Any] = [tool_call("lookup", {"key": "python tutorials"}, "tc1"), *answers(20)]
    agent = make_agent(tmp_path, config_for(300, keep=2), script=script, tools=[lookup])
    (event,) = _until_summaries(agent)
    path = event["file_path"]
    cutoff = event["cutoff_index"]
    assert path.startswith(f"{HISTORY_DIR}/{THREAD_ID}-000000-{cutoff:06d}-") and path.endswith(".jsonl")
    lines = (agent.workdir.root / path).read_text("utf-8").splitlines()
    assert len(lines) == 1 + cutoff and all(isinstance(json.loads(line), dict) for line in lines)
    header, saved = read_history(agent.workdir, path)
    assert header["range"] == [0, cutoff]
    state = agent.messages()
    assert [(m.type, m.text) for m in saved] == [(m.type, m.text) for m in state[:cutoff]]
    assert saved[0].text == question(0) and "fact about python tutorials" in saved[2].text


def test_history_keeps_image_urls(tmp_path: Path) -> None:
    """Ports `TestOffloadingBasic::test_offload_preserves_image_urls` (image URLs of evicted
    messages survive the offload). S14: the history file keeps the message's content blocks."""
    url = "https://example.com/diagram.png"
    agent = _plain(tmp_path)
    agent.turn(
        [{"type": "text", "text": "Here is the diagram"}, {"type": "image_url", "image_url": {"url": url}}]
    )
    (event,) = _until_summaries(agent, start=1)
    _header, saved = read_history(agent.workdir, event["file_path"])
    assert any(url in json.dumps(m.content) for m in saved)


def test_inline_media_data_never_reaches_the_summary_prompt(tmp_path: Path) -> None:
    """Ports `TestOffloadingBasic::test_offload_rewrites_base64_images` and
    `test_upload_runs_once_before_offload_and_summary` ("raw base64 never reaches the summary model
    prompt"). README "The summary request": an image is one line naming it, never its data.
    Intended difference: the history file keeps the block whole (lossless, S14) instead of
    decoding it into a separate media file."""
    data = base64.b64encode(b"\x89PNG" + bytes(range(256)) * 8).decode()
    block = {"type": "image", "source_type": "base64", "data": data, "mime_type": "image/png"}
    agent = _plain(tmp_path)
    agent.turn([{"type": "text", "text": "Look at this chart"}, block])
    (event,) = _until_summaries(agent, start=1)
    prompt = agent.summary_model.requests[0][0].text
    assert data not in prompt and data[:40] not in prompt
    assert "Look at this chart" in prompt
    _header, saved = read_history(agent.workdir, event["file_path"])
    assert any(data in json.dumps(m.content) for m in saved)


def test_each_summary_writes_its_own_file_and_rewrites_the_conversation_file(tmp_path: Path) -> None:
    """Ports `TestOffloadingBasic::test_offload_appends_to_existing_content` (the second summary
    appends a section to the same file). Intended difference: each summary writes its own history
    file, never changed afterwards, and the thread's one conversation file is rewritten with every
    message before the latest cutoff (S14; README "What a summary names")."""
    agent = _plain(tmp_path)
    first, second = _until_summaries(agent, count=2)
    first_bytes = (agent.workdir.root / first["file_path"]).read_bytes()
    assert agent.history_files() == sorted([first["file_path"], second["file_path"]])
    assert (agent.workdir.root / first["file_path"]).read_bytes() == first_bytes
    (conversation,) = agent.conversation_files()
    header, saved = read_history(agent.workdir, conversation)
    assert header["range"] == [0, second["cutoff_index"]]
    assert [m.id for m in saved] == [m.id for m in agent.messages()[: second["cutoff_index"]]]


def test_second_summary_reads_the_first_summary_but_the_conversation_file_has_only_messages(
    tmp_path: Path,
) -> None:
    """Ports `test_second_summarization_after_first` and `test_filters_previous_summary_messages`
    (the previous summary message is filtered out of the offload). Intended difference: the second
    history file is what the second summary read, the previous summary first (S15: the request
    starts from [summary, *messages after the cutoff]); the conversation file, which an agent
    reads to recover anything, holds only the thread's own messages (S14)."""
    agent = _plain(tmp_path)
    first, second = _until_summaries(agent, count=2)
    _header, saved = read_history(agent.workdir, second["file_path"])
    assert is_summary_message(saved[0]) and saved[0].id == first["summary_message"].id
    raw = saved[1:]
    assert [m.id for m in raw] == [
        m.id for m in agent.messages()[first["cutoff_index"] : second["cutoff_index"]]
    ]
    (conversation,) = agent.conversation_files()
    _header, everything = read_history(agent.workdir, conversation)
    assert not any(is_summary_message(m) for m in everything)


def test_summary_message_names_where_the_full_text_is(tmp_path: Path) -> None:
    """Ports `TestSummaryMessageFormat::test_summary_includes_file_path`,
    `test_summary_includes_file_path_after_second_summarization` and `test_summary_has_lc_source_marker`.
    S14/S15: after each summary the summary message (first in the request) names its history file
    (the event's) and the conversation file, and contains the summary text. Intended difference: the
    marker is `[ctxpress:summary]` (no `<summary>` tags, no `lc_source="summarization"`)."""
    agent = _plain(tmp_path)
    for event in _until_summaries(agent, count=2):
        text = event["summary_message"].text
        assert text.startswith(SUMMARY_MARKER)
        (conversation,) = agent.conversation_files()
        assert f"every earlier message is in full at {conversation}." in text
        assert f"in the workdir at {event['file_path']};" in text  # issue 44 item 5: both files
        assert agent.workdir.exists(event["file_path"])
    sent = view_messages(agent.last_request())
    assert sent[0].text == agent.event()["summary_message"].text  # type: ignore[index]
    assert "summary 1" in sent[0].text


class _FailingHistoryWorkdir(LocalWorkdir):
    def write_bytes(self, path: str, data: bytes) -> str:
        if path.startswith(f"{HISTORY_DIR}/"):
            raise WorkdirWriteError(f"could not write {path}: Storage unavailable")
        return super().write_bytes(path, data)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_a_failed_history_write_still_summarises_without_a_path(
    tmp_path: Path, use_async: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Ports `TestSummaryMessageFormat::test_summarization_aborts_on_backend_failure`,
    `TestBackendFailureHandling::test_summarization_aborts_on_write_failure` / `_on_write_exception`,
    `TestWriteEditException::*` and `TestAsyncBehavior::test_async_aborts_on_failure` (a warning,
    the summary still made, `file_path` None). S27: the error is logged, the event has no path, the
    summary says so, and the main call goes on."""
    agent = _plain(tmp_path, workdir=_FailingHistoryWorkdir(tmp_path / "wd"))
    with caplog.at_level(logging.WARNING):
        for index in range(8):
            if use_async:
                await agent.aturn(question(index))
            else:
                agent.turn(question(index))
            if agent.event() is not None:
                break
    event = agent.event()
    assert event is not None and event["file_path"] is None
    assert "could not be saved" in event["summary_message"].text
    assert "Storage unavailable" in caplog.text
    assert isinstance(agent.messages()[-1], AIMessage)
    assert agent.history_files() == []


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_below_threshold_nothing_is_written(tmp_path: Path, use_async: bool) -> None:
    """Ports `TestNoSummarizationTriggered::test_no_offload_when_below_threshold` and
    `TestCutoffIndexEdgeCases::test_async_no_summarization_when_not_triggered`. S4."""
    agent = _plain(tmp_path, threshold=50_000)
    for index in range(5):
        events = await agent.aturn(question(index)) if use_async else agent.turn(question(index))
        assert events == []
    assert agent.workdir.list_files() == [] and agent.event() is None


def test_system_prompt_and_tool_schemas_count_towards_the_threshold(tmp_path: Path) -> None:
    """Ports `test_system_message_counts_for_trigger_only`, `test_async_tools_passed_to_token_counter_for_summarization`
    and `test_async_system_message_counts_for_truncate_trigger` (the system message and tools count
    for the trigger, and the system message is not sent among the messages). S3, S22: the request
    measured is system + tools + messages; the system prompt stays the request's first message."""
    bare = make_agent(tmp_path / "bare", config_for(100_000), script=answers(3), tools=[], system_prompt=None)
    for index in range(2):
        bare.turn(question(index))
    size = bare.pressures[-1].total
    long_prompt = "You follow the house style guide closely. " * 40
    agent = make_agent(
        tmp_path / "full",
        config_for(size + 20, keep=2),
        script=answers(3),
        tools=[lookup],
        system_prompt=long_prompt,
    )
    events = [e for i in range(2) for e in agent.turn(question(i))]
    assert events and events[0]["status"] == "started"
    assert events[0]["tokens_before"] > size + 20
    pressure = agent.pressures[-1]
    assert pressure.system > 0 and pressure.tools > 0
    for request in agent.model.requests:
        assert isinstance(request[0], SystemMessage) and request[0].text == long_prompt
        assert not any(isinstance(m, SystemMessage) for m in request[1:])


def test_each_thread_names_its_own_history_files(tmp_path: Path) -> None:
    """Ports `TestSessionIdResolution::test_generates_and_persists_session_id`,
    `test_reuses_persisted_session_id` and `test_independent_invocations_do_not_share_history_file`.
    S14, S29: files are named after the thread; two threads never share (or read) one file."""
    agent = _plain(tmp_path)
    for thread_id in ("thread-a", "thread-b"):
        for index in range(8):
            agent.turn(question(index), thread_id=thread_id)
            if agent.event(thread_id) is not None:
                break
    events = {t: agent.event(t) for t in ("thread-a", "thread-b")}
    assert all(e is not None for e in events.values())
    for thread_id, event in events.items():
        assert event["file_path"].startswith(f"{HISTORY_DIR}/{thread_id}-")  # type: ignore[index]
        header, _saved = read_history(agent.workdir, event["file_path"])  # type: ignore[index]
        assert header["thread_id"] == thread_id
    names = agent.conversation_files()
    assert len(names) == 2 and {n.split("/")[-1].split("-")[1] for n in names} == {"a", "b"}


def test_over_the_threshold_the_summary_reaches_into_the_keep_window(tmp_path: Path) -> None:
    """Ports `TestCutoffIndexEdgeCases::test_no_summarization_when_cutoff_index_zero` (and its async
    twin): keep covers every message, so DeepAgents does not summarise. Intended difference: when
    the kept messages alone are at or over the threshold, ctxpress keeps fewer ("preferably", S14)
    and the request gets back under it."""
    config = config_for(300, keep=10)
    agent = make_agent(tmp_path, config, script=answers(3, words=300), tools=[])
    agent.turn(question(0, words=40))
    agent.turn(question(1, words=40))
    event = agent.event()
    assert event is not None and event["cutoff_index"] >= 1
    assert count_request_tokens(agent.last_request()) < config.threshold_tokens


# --- argument truncation ------------------------------------------------------------------------


def _write_turns(content: str, tool: str = "write_file") -> list[Any]:
    args: dict[str, Any] = {"file_path": "/notes.txt", "content": content}
    if tool == "edit_file":
        args = {"file_path": "/notes.txt", "old_string": content, "new_string": content.upper()}
    return [tool_call(tool, args, "w1"), AIMessage(content="saved the notes"), *answers(10)]


@pytest.mark.parametrize("tool", ["write_file", "edit_file"])
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_long_file_writing_arguments_are_cut_in_the_view_only(
    tmp_path: Path, tool: str, use_async: bool
) -> None:
    """Ports `test_truncate_old_write_file_tool_call`, `test_truncate_old_edit_file_tool_call`,
    `test_truncate_without_summarization` and `test_truncate_async_works`. S7, S5, S2: over the
    threshold each argument over 2,000 characters becomes a one-line hint in the view; the L1 view
    fits, so no summary; the state keeps the argument whole."""
    content = "x" * 3_000
    agent = make_agent(
        tmp_path, config_for(1_200, keep=2), script=_write_turns(content, tool), tools=None or []
    )
    agent = make_agent(tmp_path, config_for(1_200, keep=2), script=_write_turns(content, tool))
    for index in range(2):
        await agent.aturn(question(index)) if use_async else agent.turn(question(index))
    sent = view_messages(agent.last_request())
    call = next(m for m in sent if isinstance(m, AIMessage) and m.tool_calls).tool_calls[0]
    assert call["name"] == tool
    cut = [
        value
        for value in call["args"].values()
        if isinstance(value, str) and value.startswith(ARGUMENT_MARKER)
    ]
    assert len(cut) == (1 if tool == "write_file" else 2)
    assert call["args"]["file_path"] == "/notes.txt"
    stored = next(m for m in agent.messages() if isinstance(m, AIMessage) and m.tool_calls)
    assert content in stored.tool_calls[0]["args"].values()
    assert agent.summary_model.requests == [] and agent.event() is None


def test_short_arguments_are_never_cut(tmp_path: Path) -> None:
    """Ports `test_truncate_preserves_small_arguments`. S7: the limit is 2,000 characters per
    argument; a large search result pushes the request over the threshold, L1 runs and leaves the
    1,900-character `write_file` argument whole."""
    content = "y" * 1_900
    script = [
        tool_call("write_file", {"file_path": "/notes.txt", "content": content}, "w1"),
        AIMessage(content="saved the notes"),
        tool_call("search", {"query": "python"}, "s1"),
        *answers(5),
    ]
    agent = make_agent(tmp_path, config_for(2_000, keep=2), script=script)
    events = agent.turn(question(0)) + agent.turn(question(1))
    assert [(e["status"], e["level"]) for e in events] == [("started", "l1"), ("completed", "l1")]
    call = next(m for m in view_messages(agent.last_request()) if isinstance(m, AIMessage) and m.tool_calls)
    assert call.tool_calls[0]["args"]["content"] == content


def test_long_arguments_of_other_tools_are_saved_to_files(tmp_path: Path) -> None:
    """Ports `test_truncate_ignores_other_tool_calls` and `test_truncate_mixed_tool_calls` (only
    `write_file` / `edit_file` are touched). Intended difference: an argument of any other tool
    over 2,000 characters and over `summary_tool_result_token_limit` is saved under
    `outputs/large_tool_arguments/` and the view keeps a header naming the file (README "Long
    tool-call arguments"); short arguments stay as they are (S7)."""
    body = "lorem ipsum dolor sit amet " * 200
    script = [tool_call("publish", {"title": "Weekly report", "body": body}, "p1"), *answers(10)]
    agent = make_agent(tmp_path, config_for(1_200, keep=2), script=script)
    agent.turn(question(0))
    agent.turn(question(1))
    call = next(m for m in view_messages(agent.last_request()) if isinstance(m, AIMessage) and m.tool_calls)
    args = call.tool_calls[0]["args"]
    assert args["title"] == "Weekly report"
    assert args["body"].startswith(ARGUMENT_OFFLOAD_MARKER)
    (saved,) = agent.workdir.list_files("outputs/large_tool_arguments")
    assert saved.path in args["body"]
    assert (agent.workdir.root / saved.path).read_text("utf-8") == body


def test_recent_tool_calls_are_cut_too(tmp_path: Path) -> None:
    """Ports `test_truncate_respects_recent_messages` (calls inside the keep window stay whole).
    Intended difference: S7 has no recency window; over the threshold every past call's long
    `write_file` argument is cut in the view, the latest one included (the state keeps it whole)."""
    content = "z" * 3_000
    agent = make_agent(tmp_path, config_for(1_200, keep=10), script=_write_turns(content))
    agent.turn(question(0))
    sent = view_messages(agent.last_request())
    assert isinstance(sent[-2], AIMessage) and sent[-2].tool_calls  # the newest exchange ...
    assert sent[-2].tool_calls[0]["args"]["content"].startswith(ARGUMENT_MARKER)  # ... is cut


def test_below_the_threshold_arguments_are_not_cut(tmp_path: Path) -> None:
    """Ports `test_no_truncation_when_trigger_is_none`. S4: below the threshold nothing changes."""
    content = "x" * 3_000
    agent = make_agent(tmp_path, config_for(50_000), script=_write_turns(content))
    agent.turn(question(0))
    agent.turn(question(1))
    call = next(m for m in view_messages(agent.last_request()) if isinstance(m, AIMessage) and m.tool_calls)
    assert call.tool_calls[0]["args"]["content"] == content


def test_arguments_are_cut_before_the_summary(tmp_path: Path) -> None:
    """Ports `test_truncate_before_summarization` (truncation and summarisation in one call).
    S5: one call runs L1 first and then, still over the threshold, the summary (one history file)."""
    content = "q" * 3_000
    agent = make_agent(tmp_path, config_for(300, keep=2), script=_write_turns(content))
    events: list[dict[str, Any]] = []
    for index in range(6):
        events += agent.turn(question(index))
        if agent.event() is not None:
            break
    assert agent.event() is not None
    assert len(agent.history_files()) == 1
    stored = next(m for m in agent.messages() if isinstance(m, AIMessage) and m.tool_calls)
    assert stored.tool_calls[0]["args"]["content"] == content  # the state keeps it whole (S2)
    started = [e for e in events if e["status"] == "started"]
    assert started[-1]["level"] == "l1"  # every compression starts with L1
    assert events[-1] == {**events[-1], "status": "completed", "level": "l2"}


# --- cumulative cutoffs, overflow -----------------------------------------------------------------


def test_chained_summaries_have_cumulative_full_state_cutoffs(tmp_path: Path, checkpointer: Any) -> None:
    """Ports `test_chained_summarization_cutoff_index` (state cutoff = old cutoff + effective
    cutoff - 1 over three summaries; each offload holds exactly the newly evicted messages). S15."""
    agent = _plain(tmp_path, checkpointer=checkpointer)
    events = _until_summaries(agent, count=3, turns=20)
    messages = agent.messages()
    previous = 0
    for event in events:
        assert event["cutoff_index"] > previous
        assert messages[event["cutoff_index"]].id == event["first_kept_id"]
        header, saved = read_history(agent.workdir, event["file_path"])
        assert header["range"] == [previous, event["cutoff_index"]]
        raw = [m for m in saved if not is_summary_message(m)]
        assert [m.id for m in raw] == [m.id for m in messages[previous : event["cutoff_index"]]]
        previous = event["cutoff_index"]
    sent = view_messages(agent.last_request())
    assert [m.id for m in sent[1:]] == [m.id for m in messages[previous:-1]]


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_context_overflow_forces_a_summary(tmp_path: Path, use_async: bool) -> None:
    """Ports `test_context_overflow_triggers_summarization` and its async twin (the first call
    overflows, the middleware summarises, the second call succeeds; one offload). S6."""
    agent = _plain(tmp_path, threshold=100_000)
    for index in range(3):
        agent.turn(question(index))
    calls_before = len(agent.model.requests)
    agent.model.context_window = 200
    events = await agent.aturn(question(3)) if use_async else agent.turn(question(3))
    assert len(agent.model.requests) - calls_before == 2  # the overflow, then the retry
    assert count_request_tokens(agent.last_request()) <= 200
    assert [(e["status"], e.get("reason")) for e in events] == [
        ("started", "context_overflow"),
        ("completed", "context_overflow"),
    ]
    assert agent.event() is not None and len(agent.history_files()) == 1
    assert isinstance(agent.messages()[-1], AIMessage)


def test_context_overflow_keeps_fewer_messages_when_that_fits(tmp_path: Path) -> None:
    """Ports `test_context_overflow_triggers_summarization` with a model window (170 tokens) far
    below the threshold (400): after the overflow, the summary must keep few enough recent
    messages for the retry to fit the window. S6 (an overflow is a forced-summary signal), S14
    (recent messages are kept "preferably")."""
    agent = _plain(tmp_path, threshold=400, keep=4)
    for index in range(3):
        agent.turn(question(index))
    agent.model.context_window = 170
    agent.turn(question(3))
    assert count_request_tokens(agent.last_request()) <= 170
    assert isinstance(agent.messages()[-1], AIMessage)


class _RendezvousWorkdir(LocalWorkdir):
    """The first history write waits for the summary call to start, and the summary call for it."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.writing = threading.Event()
        self.summarising = threading.Event()
        self.overlapped: set[str] = set()

    def write_bytes(self, path: str, data: bytes) -> str:
        if path.startswith(f"{HISTORY_DIR}/") and not self.writing.is_set():
            self.writing.set()
            if self.summarising.wait(timeout=2):
                self.overlapped.add("write saw the summary call")
        return super().write_bytes(path, data)

    def summary(self, _messages: list[BaseMessage]) -> AIMessage:
        self.summarising.set()
        if self.writing.wait(timeout=2):
            self.overlapped.add("summary call saw the write")
        return AIMessage(content="summary")


async def test_async_history_write_and_summary_run_concurrently(tmp_path: Path) -> None:
    """Ports `test_async_offload_and_summary_run_concurrently`. S14 on the async path: the history
    write and the summary call are under way at the same time (checked by a rendezvous, not by
    timing)."""
    workdir = _RendezvousWorkdir(tmp_path / "wd")
    agent = _plain(tmp_path, workdir=workdir)
    agent.summary_model.script = [workdir.summary] * 5
    for index in range(8):
        await agent.aturn(question(index))
        if agent.event() is not None:
            break
    assert workdir.overlapped == {"write saw the summary call", "summary call saw the write"}


class _CountingCounter(TokenCounter):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def count_request(self, *args: Any, **kwargs: Any) -> int:
        self.calls += 1
        return super().count_request(*args, **kwargs)


def test_one_count_per_model_call_and_one_recount_after_l1(tmp_path: Path) -> None:
    """Ports `TestTokenCountingEfficiency::test_token_counter_called_once_per_model_call` (+ async)
    and `test_token_counter_recounts_when_truncation_modifies_messages` (+ async). S4, S5: a call
    below the threshold is measured once; a call over it is measured again after L1."""
    counter = _CountingCounter()
    script = [tool_call("search", {"query": "python"}, "s1"), *answers(4)]
    agent = make_agent(tmp_path, config_for(1_000, keep=2), script=script, counter=counter)
    agent.turn("hi")  # two model calls: the first below, the second with the large result over
    assert [e for e in agent.turn("short follow-up")]  # premise: over the threshold again
    counts: list[int] = []
    agent2 = make_agent(
        tmp_path / "below", config_for(50_000), script=answers(3), tools=[], counter=_CountingCounter()
    )
    for index in range(3):
        before = agent2.middleware.token_counter.calls  # type: ignore[attr-defined]
        agent2.turn(question(index))
        counts.append(agent2.middleware.token_counter.calls - before)  # type: ignore[attr-defined]
    assert counts == [1, 1, 1]
    before = counter.calls
    agent.turn("one more")
    assert counter.calls - before == 2  # measured, L1 view built, measured again; below: sent


def test_defaults_are_the_spec_table(tmp_path: Path) -> None:
    """Ports `test_summarization_factory.py::test_factory_uses_fallback_defaults_without_profile`
    and `test_factory_uses_profile_based_defaults` (defaults derived from the model profile).
    Intended difference: ctxpress's defaults are the spec's fixed table, whatever the model: 100 K
    (× 1024 tokens), keep 10, tool results over 300 tokens (configuration table, S4)."""
    config = CompressionConfig()
    assert config.summary_threshold == 100 and config.threshold_tokens == 102_400
    assert config.summary_keep_messages == 10
    assert config.summary_tool_result_token_limit == 300
    assert "{messages}" in config.summary_prompt


# --- compact_conversation → manual compression ----------------------------------------------------


async def test_manual_compression_with_too_few_messages_does_nothing(tmp_path: Path) -> None:
    """Ports `test_compact_tool.py::TestNotEnoughMessages::test_not_enough_messages_sync` / `_async`.
    S17, S28: nothing to compress is a result with a reason, not a new event."""
    agent = _plain(tmp_path, threshold=50_000, keep=10)
    agent.turn(question(0))
    result = await compress_now(
        agent.messages(),
        agent.event(),
        config=agent.middleware.config,
        workdir=agent.workdir,
        summary_model=agent.summary_model,
    )
    assert not result.compressed and result.reason_code == TOO_FEW_MESSAGES and result.event is None
    assert agent.summary_model.requests == []


async def test_manual_compression_applies_and_chains_with_automatic_summaries(tmp_path: Path) -> None:
    """Ports `TestCompactSuccess::test_compact_success_no_prior_event`, `test_compact_success_with_prior_event`,
    `test_compact_success_async` and `test_summary_message_has_file_path`. S17, S15: the manual
    summary's event, written through the graph, is what the next request starts from; a second
    one continues from the first's cutoff. Intended difference: a button (`compress_now`), not a
    tool the model calls (S17)."""
    agent = _plain(tmp_path, threshold=50_000, keep=2)
    cutoffs: list[int] = []
    for round_ in range(2):
        for index in range(4):
            agent.turn(question(10 * round_ + index))
        result = await compress_now(
            agent.messages(),
            agent.event(),
            config=agent.middleware.config,
            workdir=agent.workdir,
            summary_model=agent.summary_model,
            system_message=SystemMessage(SYSTEM_PROMPT),
            thread_id=THREAD_ID,
        )
        assert result.compressed and result.event is not None
        assert result.event["file_path"] and agent.workdir.exists(result.event["file_path"])
        agent.graph.update_state(thread(), {"_summarization_event": result.event})
        cutoffs.append(result.event["cutoff_index"])
    assert cutoffs[0] < cutoffs[1] == len(agent.messages()) - 2
    agent.turn("and now?")
    sent = view_messages(agent.last_request())
    assert result.event is not None
    assert is_summary_message(sent[0]) and sent[0].text == result.event["summary_message"].text
    assert [m.id for m in sent[1:]] == [m.id for m in agent.messages()[cutoffs[1] : -1]]


async def test_manual_compression_fails_when_the_history_cannot_be_written(tmp_path: Path) -> None:
    """Ports `TestOffloadFailure::test_offload_failure_still_succeeds` and
    `TestCompactErrorHandling::test_offload_failure_returns_error_tool_message`. Intended difference:
    manual compression needs both the history file and the summary; it raises naming the history
    and publishes no event (S28)."""
    agent = _plain(tmp_path, threshold=50_000, keep=2, workdir=_FailingHistoryWorkdir(tmp_path / "wd"))
    for index in range(4):
        agent.turn(question(index))
    with pytest.raises(ManualCompressionError) as failed:
        await compress_now(
            agent.messages(),
            None,
            config=agent.middleware.config,
            workdir=agent.workdir,
            summary_model=agent.summary_model,
        )
    assert failed.value.part is FailedPart.HISTORY
    assert agent.event() is None


@pytest.mark.parametrize(
    "error", [RuntimeError("summary model down"), TimeoutError("slow")], ids=["error", "timeout"]
)
async def test_manual_compression_fails_when_the_summary_model_fails(
    tmp_path: Path, error: Exception
) -> None:
    """Ports `TestCompactErrorHandling::test_sync_summary_failure_returns_error_tool_message` and
    `test_async_summary_failure_returns_error_tool_message`. S28: the failure names the summary."""
    agent = _plain(tmp_path, threshold=50_000, keep=2, summary_script=[error] * 3)
    for index in range(4):
        agent.turn(question(index))
    with pytest.raises(ManualCompressionError) as failed:
        await compress_now(
            agent.messages(),
            None,
            config=agent.middleware.config,
            workdir=agent.workdir,
            summary_model=agent.summary_model,
        )
    assert failed.value.part is FailedPart.SUMMARY


async def test_manual_compression_works_at_any_pressure(tmp_path: Path) -> None:
    """Ports `TestIsEligibleForCompaction::test_under_50pct_tokens_trigger_returns_nothing` (and the
    fraction / async variants: under half the trigger the tool does nothing). Intended difference:
    the button compresses whenever there are more than `summary_keep_messages` messages since the
    last summary; pressure only drives the 85 % hint (S17, S22)."""
    agent = _plain(tmp_path, threshold=100_000, keep=2)
    for index in range(3):
        agent.turn(question(index))
    result = await compress_now(
        agent.messages(),
        None,
        config=agent.middleware.config,
        workdir=agent.workdir,
        summary_model=agent.summary_model,
    )
    assert result.tokens_before < 0.5 * agent.middleware.config.threshold_tokens
    assert result.compressed and result.tokens_after < result.tokens_before


@pytest.mark.parametrize(
    "event",
    [
        {"cutoff_index": "three", "summary_message": HumanMessage(f"{SUMMARY_MARKER} x"), "file_path": None},
        {"summary_message": HumanMessage(f"{SUMMARY_MARKER} x")},
        {"cutoff_index": 999, "summary_message": HumanMessage(f"{SUMMARY_MARKER} old"), "file_path": None},
    ],
    ids=["non-int-cutoff", "missing-cutoff", "cutoff-past-the-end"],
)
def test_a_malformed_event_falls_back_to_the_full_messages(tmp_path: Path, event: dict[str, Any]) -> None:
    """Ports `TestMalformedEvent::test_malformed_event_falls_back_to_raw_messages`,
    `test_cutoff_exceeds_message_count` and `TestComputeStateCutoff::test_malformed_event_*`.
    S15: an event that cannot be applied is ignored; the request carries every message."""
    agent = _plain(tmp_path, threshold=50_000)
    agent.turn(question(0))
    agent.graph.update_state(thread(), {"_summarization_event": event})
    agent.turn(question(1))
    sent = view_messages(agent.last_request())
    assert not any(is_summary_message(m) for m in sent)
    assert [m.id for m in sent] == [m.id for m in agent.messages()[:-1]]


# --- a thread summarised by DeepAgents, continued by ctxpress -------------------------------------


def test_a_thread_summarised_by_deepagents_continues_with_the_drop_in(tmp_path: Path) -> None:
    """Ports `test_chained_summarization_cutoff_index` across the switch: a thread whose
    `_summarization_event` DeepAgents' `SummarizationMiddleware` wrote is continued by
    `DeepAgentsCompressionMiddleware` (the drop-in replacement). S3, S15: the event in the state
    is adopted (its summary and cutoff give the next request), not refused."""
    checkpointer = InMemorySaver()
    model = ScriptedChatModel(script=answers(20))
    deepagents = SummarizationMiddleware(
        ScriptedChatModel(script=summaries(5, "deepagents summary")),
        backend=FilesystemBackend(root_dir=tmp_path / "da", virtual_mode=True),
        trigger=("messages", 6),
        keep=("messages", 2),
    )
    before = create_agent(
        model, [], system_prompt=SYSTEM_PROMPT, middleware=[deepagents], checkpointer=checkpointer
    )
    for index in range(4):
        before.invoke({"messages": [HumanMessage(question(index))]}, thread())
    foreign = before.get_state(thread()).values["_summarization_event"]
    assert foreign is not None and not is_summary_message(foreign["summary_message"])
    drop_in = DeepAgentsCompressionMiddleware(
        config_for(50_000, keep=2), workdir=LocalWorkdir(tmp_path / "wd"), summary_model=ScriptedChatModel()
    )
    after = create_agent(
        model, [], system_prompt=SYSTEM_PROMPT, middleware=[drop_in], checkpointer=checkpointer
    )
    after.invoke({"messages": [HumanMessage("next question")]}, thread())
    sent = view_messages(model.requests[-1])
    assert sent[0].text == foreign["summary_message"].text
    state = after.get_state(thread()).values
    assert [m.id for m in sent[1:]] == [m.id for m in state["messages"][foreign["cutoff_index"] : -1]]
    assert_provider_valid(sent)
