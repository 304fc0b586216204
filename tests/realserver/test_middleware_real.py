"""`ContextCompressionMiddleware` in a real `create_agent` graph over the stock `ChatOpenAI` client,
against real llama.cpp servers (no scripted model anywhere).

The stack is the recommended one for OpenAI-compatible servers::

    [ContextCompressionMiddleware(...), ModelRetryMiddleware(retry_on=retry_unless_overflow),
     OverflowMappingMiddleware()]

What is checked, and how:
- every HTTP exchange of the main and the summary model is recorded by an httpx event hook on that
  model's own client (request body, status, error body), and llama-server's log counts the requests
  it served: together they prove which requests were really sent, and what they contained;
- `stream_mode="messages"` output is compared with the final AIMessages of the main model;
- events, the checkpoint's `_summarization_event` and the workdir files are the flow's own oracles.

The tiny stories260K model writes nonsense and never calls tools, so the turns are given as input
messages: a question, the assistant's `query_kb` call, the tool result (real English banking-policy
documents from the shared knowledge base) and a follow-up. Sizes that matter (real tokens of this
512-token vocabulary, measured): an L1 offload header with its sha256 is ~220 tokens and the summary
message's header ~140, so a compacted request only fits a server with a larger context than 256; the
L1 → L2 flow therefore runs on `wide_llama_server` (-c 2048), while the overflow tests send the main
model to `llama_server` / `llama_cpp_python_server` (-c 256) with the summaries on the wide server.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx2
import openai
import pytest
from langchain.agents import create_agent
from langchain.agents.middleware.model_retry import ModelRetryMiddleware
from langchain.agents.middleware.types import AgentMiddleware, ModelCallResult, ModelRequest, ModelResponse
from langchain_core.exceptions import ContextOverflowError
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, ToolMessage
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

from ctxpress import CompressionConfig, ContextCompressionMiddleware, LocalWorkdir, count_request_tokens
from ctxpress.compaction.markers import OFFLOAD_MARKER, parse_offload_reference
from ctxpress.overflow import (
    EmptyStreamError,
    OverflowMappingMiddleware,
    retry_unless_overflow,
)
from ctxpress.overflow.openai import ChatOpenAINoNullContent
from ctxpress.summary.event import SUMMARY_MARKER
from ctxpress.summary.history import read_history
from ctxpress.workdir import read_text
from tests.conftest import require_shared_data
from tests.realserver.clients import MAX_TOKENS, OVERFLOWING_PROMPT
from tests.realserver.conftest import RealServer, context_rejections, log_count_reaches, started_tasks

# --- recording what really goes over HTTP --------------------------------------------------------


@dataclass
class Exchange:
    body: dict[str, Any]
    status: int | None = None
    error: dict[str, Any] | None = None  # the parsed error body of a 4xx/5xx answer

    @property
    def streamed(self) -> bool:
        return bool(self.body.get("stream"))

    def contents(self) -> list[Any]:
        return [message.get("content") for message in self.body["messages"]]


@dataclass
class HttpRecorder:
    """Event hooks on one model's httpx clients: every chat request, its status and error body."""

    exchanges: list[Exchange] = field(default_factory=list)

    def _on_request(self, request: httpx2.Request) -> None:
        self.exchanges.append(Exchange(json.loads(request.content)))

    def _on_response(self, response: httpx2.Response) -> None:
        self.exchanges[-1].status = response.status_code
        if response.status_code >= 400:
            response.read()
            self.exchanges[-1].error = response.json()

    async def _aon_request(self, request: httpx2.Request) -> None:
        self._on_request(request)

    async def _aon_response(self, response: httpx2.Response) -> None:
        self.exchanges[-1].status = response.status_code
        if response.status_code >= 400:
            await response.aread()
            self.exchanges[-1].error = response.json()

    def clients(self) -> dict[str, Any]:
        return {
            "http_client": httpx2.Client(
                trust_env=False, event_hooks={"request": [self._on_request], "response": [self._on_response]}
            ),
            "http_async_client": httpx2.AsyncClient(
                trust_env=False,
                event_hooks={"request": [self._aon_request], "response": [self._aon_response]},
            ),
        }

    @property
    def statuses(self) -> list[int | None]:
        return [exchange.status for exchange in self.exchanges]


def recorded_model(
    server: RealServer, recorder: HttpRecorder, model_type: type[ChatOpenAI] = ChatOpenAI, **overrides: Any
) -> ChatOpenAI:
    settings: dict[str, Any] = {
        "base_url": server.base_url,
        "api_key": "none",
        "model": server.model,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "timeout": 30,
        "max_retries": 0,
        "stream_usage": True,
        **recorder.clients(),
    }
    return model_type(**(settings | overrides))


def python_server_model(
    server: RealServer, recorder: HttpRecorder, model_type: type[ChatOpenAI] = ChatOpenAINoNullContent
) -> ChatOpenAI:
    # llama-cpp-python ignores `max_completion_tokens` (what ChatOpenAI sends for max_tokens) and drops
    # the connection after an empty overflow stream: see test_llama_cpp_python_server.py.
    return recorded_model(
        server,
        recorder,
        model_type,
        extra_body={"max_tokens": MAX_TOKENS},
        default_headers={"Connection": "close"},
    )


class ErrorSpy(AgentMiddleware):
    """Sits just outside the mapping and records what the model call raised (then re-raises it)."""

    def __init__(self) -> None:
        super().__init__()
        self.errors: list[Exception] = []

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelCallResult:
        try:
            return handler(request)
        except Exception as exc:
            self.errors.append(exc)
            raise

    async def awrap_model_call(self, request: ModelRequest, handler: Any) -> ModelCallResult:
        try:
            return cast("ModelResponse", await handler(request))
        except Exception as exc:
            self.errors.append(exc)
            raise


# --- the agent and its turns ---------------------------------------------------------------------


def compression_agent(
    main: ChatOpenAI,
    summary: ChatOpenAI,
    config: CompressionConfig,
    workdir: LocalWorkdir,
    *,
    mapping: OverflowMappingMiddleware | None = None,
    spy: ErrorSpy | None = None,
) -> Any:
    retry = ModelRetryMiddleware(
        max_retries=1, initial_delay=0.0, jitter=False, retry_on=retry_unless_overflow
    )
    middleware: list[AgentMiddleware[Any, Any, Any]] = [
        ContextCompressionMiddleware(config, workdir=workdir, summary_model=summary),
        retry,
        *([spy] if spy else []),
        mapping or OverflowMappingMiddleware(),
    ]
    return create_agent(main, [], middleware=middleware, checkpointer=InMemorySaver())


@dataclass
class Turn:
    events: list[dict[str, Any]]
    chunks: list[tuple[AIMessageChunk, dict[str, Any]]]

    @property
    def streamed_text(self) -> str:
        return "".join(chunk.text for chunk, _metadata in self.chunks)


def thread(name: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": name}}


def _collect(turn: Turn, mode: str, data: Any) -> None:
    if mode == "custom" and data.get("type") == "context_compression":
        turn.events.append(data)
    elif mode == "messages":
        chunk, metadata = data
        if isinstance(chunk, AIMessageChunk):
            turn.chunks.append((chunk, metadata))


def run_turn(agent: Any, messages: list[BaseMessage], name: str, *, stream_messages: bool) -> Turn:
    """One turn; `stream_messages` streams the model (stream_mode="messages"), else it is invoked."""
    turn = Turn([], [])
    modes = ["custom", "messages"] if stream_messages else ["custom"]
    for mode, data in agent.stream({"messages": messages}, thread(name), stream_mode=modes):
        _collect(turn, mode, data)
    return turn


async def arun_turn(agent: Any, messages: list[BaseMessage], name: str, *, stream_messages: bool) -> Turn:
    turn = Turn([], [])
    modes = ["custom", "messages"] if stream_messages else ["custom"]
    async for mode, data in agent.astream({"messages": messages}, thread(name), stream_mode=modes):
        _collect(turn, mode, data)
    return turn


def statuses(turn: Turn) -> list[tuple[str, str, str | None]]:
    return [(event["status"], event["level"], event.get("reason")) for event in turn.events]


def banking_result(*names: str) -> str:
    """A `query_kb` result made of real documents (English banking policies, tau2-bench)."""
    documents = require_shared_data("kb", "tau2-banking", "documents")
    results = []
    for rank, name in enumerate(names):
        document = json.loads((documents / f"{name}.json").read_text(encoding="utf-8"))
        results.append(
            {
                "doc_id": document["id"],
                "title": document["title"],
                "source": "tau2-banking",
                "score": round(0.9 - rank / 10, 2),
                "content": document["content"],
            }
        )
    return json.dumps({"results": results}, ensure_ascii=False)


def kb_round(call_id: str, question: str, query: str, result: str, follow_up: str) -> list[BaseMessage]:
    call = {"name": "query_kb", "args": {"query": query}, "id": call_id, "type": "tool_call"}
    return [
        HumanMessage(question),
        AIMessage(content="", tool_calls=[call]),
        ToolMessage(result, tool_call_id=call_id, name="query_kb"),
        HumanMessage(follow_up),
    ]


def final_answer(agent: Any, name: str) -> AIMessage:
    answer = agent.get_state(thread(name)).values["messages"][-1]
    assert isinstance(answer, AIMessage) and answer.text.strip(), answer
    return answer


@pytest.fixture
def workdir(tmp_path: Path) -> LocalWorkdir:
    return LocalWorkdir(tmp_path / "workdir")


# --- L1, then L2, against a small threshold ------------------------------------------------------

L1_L2_CONFIG = CompressionConfig(
    summary_threshold=0.3,  # 307 approximate tokens
    summary_tool_result_token_limit=40,
    summary_keep_messages=2,
)
FIRST_RESULT = ("doc_checking_accounts_blue_account_012", "doc_business_checking_accounts_cobalt_blue_010")
SECOND_RESULT = ("doc_bank_accounts_bank_accounts_(general)_026",)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_l1_then_l2_with_a_real_summary_call_that_never_streams(
    wide_llama_server: RealServer, workdir: LocalWorkdir, use_async: bool
) -> None:
    main_http, summary_http = HttpRecorder(), HttpRecorder()
    agent = compression_agent(
        recorded_model(wide_llama_server, main_http),
        recorded_model(wide_llama_server, summary_http),
        L1_L2_CONFIG,
        workdir,
    )
    threshold = L1_L2_CONFIG.threshold_tokens
    tasks_before = started_tasks(wide_llama_server)

    async def turn(messages: list[BaseMessage]) -> Turn:
        if use_async:
            return await arun_turn(agent, messages, "l1-l2", stream_messages=True)
        return run_turn(agent, messages, "l1-l2", stream_messages=True)

    # Turn 1: the tool result puts the request over the threshold; L1 alone brings it below (S5).
    first_result = banking_result(*FIRST_RESULT)
    first = await turn(
        kb_round(
            "call_1", "Which checking accounts do we offer?", "checking", first_result, "Once upon a time"
        )
    )
    assert statuses(first) == [("started", "l1", None), ("completed", "l1", None)]
    assert first.events[1]["tokens_after"] < threshold <= first.events[0]["tokens_before"]
    assert summary_http.exchanges == []
    # What went over HTTP is the L1 view: the offload header instead of the documents.
    [sent] = main_http.exchanges
    assert sent.status == 200 and sent.streamed
    tool_content = sent.contents()[2]
    assert isinstance(tool_content, str) and tool_content.startswith(OFFLOAD_MARKER)
    assert len(tool_content) < len(first_result) // 4
    reference = parse_offload_reference(tool_content)
    assert reference is not None and read_text(workdir, reference.path) == first_result
    first_answer = final_answer(agent, "l1-l2")
    assert first.streamed_text == first_answer.text  # the main model's tokens streamed, all of them

    # Turn 2: two compacted results are still over the threshold: L2 summarises the first round.
    second = await turn(
        kb_round(
            "call_2",
            "And the general account rules?",
            "general rules",
            banking_result(*SECOND_RESULT),
            "Once upon a time",
        )
    )
    assert statuses(second) == [("started", "l1", None), ("completed", "l2", None)]
    completed = second.events[1]
    assert completed["tokens_after"] < threshold <= completed["tokens_before"]

    # The summary request was really sent, to the real server, and answered.
    [summary_call] = summary_http.exchanges
    assert summary_call.status == 200
    assert summary_call.streamed  # messages mode streams it too; its tokens are dropped (TAG_NOSTREAM)
    [summary_prompt] = summary_call.contents()
    assert "[1] user: Which checking accounts do we offer?" in summary_prompt
    assert "→ called query_kb" in summary_prompt and OFFLOAD_MARKER in summary_prompt
    assert len(main_http.exchanges) + 1 == 3
    assert log_count_reaches(started_tasks, wide_llama_server, tasks_before + 3) == tasks_before + 3

    # The checkpoint's summary event holds the summary model's real answer, and the main request
    # after it started with that summary (S15).
    state = agent.get_state(thread("l1-l2")).values
    event = state["_summarization_event"]
    assert event["cutoff_index"] == completed["cutoff_index"] > 0
    summary_message = event["summary_message"]
    summary_text = summary_message.text.split("\n\n", 1)[1]
    assert summary_text.strip()
    after_summary = main_http.exchanges[-1]
    assert after_summary.status == 200
    assert after_summary.contents()[0] == summary_message.text
    assert summary_message.text.startswith(SUMMARY_MARKER)
    header, history = read_history(workdir, event["file_path"])
    assert history[0].text == "Which checking accounts do we offer?"
    assert header["range"] == [0, event["cutoff_index"]] and len(history) == event["cutoff_index"]

    # stream_mode="messages": exactly the main model's tokens, none of the summary model's.
    second_answer = final_answer(agent, "l1-l2")
    assert second.streamed_text == second_answer.text
    assert {chunk.id for chunk, _metadata in second.chunks} == {second_answer.id}
    assert all("ctxpress:summary" not in metadata.get("tags", []) for _chunk, metadata in second.chunks)
    assert summary_text not in second.streamed_text
    # Real usage from the real server, on the final message of each turn.
    for answer in (first_answer, second_answer):
        usage = answer.usage_metadata
        assert usage is not None and usage["input_tokens"] > 0 and 0 < usage["output_tokens"] <= MAX_TOKENS


# --- S6: a real HTTP 400 overflow forces the summary ----------------------------------------------

FORCED_CONFIG = CompressionConfig(
    summary_threshold=1,  # 1,024 approximate tokens: nothing here reaches it, only the server objects
    summary_tool_result_token_limit=20,
    summary_keep_messages=1,
)


def overflowing_kb_history() -> list[BaseMessage]:
    """Well below the threshold by the estimate, but ~1,000 real tokens: over the server's 256."""
    return [
        *kb_round(
            "call_1",
            "Find the blue account policy.",
            "blue account",
            banking_result("doc_checking_accounts_blue_account_012"),
            "Thanks.",
        )[:3],
        AIMessage("Here it is."),
        HumanMessage("Once upon a time"),
    ]


@pytest.mark.parametrize("stream_messages", [False, True], ids=["invoke", "stream"])
def test_llama_server_overflow_forces_a_summary_and_the_call_succeeds(
    llama_server: RealServer,
    wide_llama_server: RealServer,
    workdir: LocalWorkdir,
    stream_messages: bool,
) -> None:
    history = overflowing_kb_history()
    assert count_request_tokens(history) < FORCED_CONFIG.threshold_tokens  # no proactive compression
    main_http, summary_http, spy = HttpRecorder(), HttpRecorder(), ErrorSpy()
    agent = compression_agent(
        recorded_model(llama_server, main_http),
        recorded_model(wide_llama_server, summary_http),
        FORCED_CONFIG,
        workdir,
        spy=spy,
    )

    rejected_before = context_rejections(llama_server)

    turn = run_turn(agent, history, "forced", stream_messages=stream_messages)

    # The real answer: HTTP 400 exceed_context_size_error, mapped to ContextOverflowError.
    # The server's own log agrees: one request rejected for its size.
    assert log_count_reaches(context_rejections, llama_server, rejected_before + 1) == rejected_before + 1
    overflow, retried = main_http.exchanges
    assert overflow.status == 400 and overflow.streamed == stream_messages
    assert overflow.error is not None and overflow.error["error"]["type"] == "exceed_context_size_error"
    assert overflow.error["error"]["n_prompt_tokens"] > overflow.error["error"]["n_ctx"] == 256
    [mapped] = spy.errors
    assert isinstance(mapped, ContextOverflowError)
    assert isinstance(mapped.__cause__, openai.BadRequestError) and mapped.__cause__.status_code == 400
    # The forced summary (S6): L1 offloaded the tool result, the summary model was really called.
    assert statuses(turn) == [("started", "l2", "context_overflow"), ("completed", "l2", "context_overflow")]
    assert turn.events[1]["offloaded"] == 1
    assert summary_http.statuses == [200]
    assert retried.status == 200 and retried.contents()[0].startswith(SUMMARY_MARKER)
    answer = final_answer(agent, "forced")
    assert answer.usage_metadata is not None
    assert answer.usage_metadata["input_tokens"] < llama_server.context_size
    if stream_messages:
        assert turn.streamed_text == answer.text
    else:
        assert turn.chunks == []


@pytest.mark.parametrize("stream_messages", [False, True], ids=["invoke", "stream"])
def test_llama_server_overflow_with_nothing_to_cut_fails_clearly(
    llama_server: RealServer,
    wide_llama_server: RealServer,
    workdir: LocalWorkdir,
    stream_messages: bool,
) -> None:
    main_http, summary_http = HttpRecorder(), HttpRecorder()
    agent = compression_agent(
        recorded_model(llama_server, main_http),
        recorded_model(wide_llama_server, summary_http),
        FORCED_CONFIG,
        workdir,
    )
    events: list[dict[str, Any]] = []

    with pytest.raises(
        ContextOverflowError, match="does not fit the model's context: the current input alone"
    ):
        for mode, data in agent.stream(
            {"messages": [HumanMessage(OVERFLOWING_PROMPT)]},
            thread("nothing-to-cut"),
            stream_mode=["custom", "messages"] if stream_messages else ["custom"],
        ):
            if mode == "custom":
                events.append(data)

    assert [(event["status"], event.get("reason")) for event in events] == [
        ("started", "context_overflow"),
        ("failed", "context_overflow"),
    ]
    assert "ContextOverflowError" in events[1]["error"]
    # The overflowing request was sent once and never resent; there was nothing to summarise.
    assert main_http.statuses == [400]
    assert summary_http.exchanges == []


# --- llama-cpp-python's server: other wording, and its two quirks ---------------------------------


def python_server_history() -> list[BaseMessage]:
    # Its default chat template leaves tool results out, so the bulk is in a user message here.
    return [
        HumanMessage(OVERFLOWING_PROMPT),
        AIMessage("The girl played in the park all day."),
        HumanMessage("Once upon a time"),
    ]


def test_python_server_overflow_forces_a_summary(
    llama_cpp_python_server: RealServer, wide_llama_server: RealServer, workdir: LocalWorkdir
) -> None:
    main_http, summary_http, spy = HttpRecorder(), HttpRecorder(), ErrorSpy()
    agent = compression_agent(
        python_server_model(llama_cpp_python_server, main_http),
        recorded_model(wide_llama_server, summary_http),
        FORCED_CONFIG,
        workdir,
        spy=spy,
    )

    turn = run_turn(agent, python_server_history(), "python-forced", stream_messages=False)

    overflow, retried = main_http.exchanges
    assert overflow.status == 400 and overflow.error is not None
    assert overflow.error["error"]["code"] == "context_length_exceeded"
    assert [type(error) for error in spy.errors] == [ContextOverflowError]
    assert statuses(turn) == [("started", "l2", "context_overflow"), ("completed", "l2", "context_overflow")]
    assert summary_http.statuses == [200]
    assert retried.status == 200
    final_answer(agent, "python-forced")


def test_python_server_empty_overflow_stream_is_a_clear_error_by_default(
    llama_cpp_python_server: RealServer, wide_llama_server: RealServer, workdir: LocalWorkdir
) -> None:
    main_http, summary_http = HttpRecorder(), HttpRecorder()
    agent = compression_agent(
        python_server_model(llama_cpp_python_server, main_http),
        recorded_model(wide_llama_server, summary_http),
        FORCED_CONFIG,
        workdir,
    )

    with pytest.raises(EmptyStreamError, match="stream ended with no content") as caught:
        run_turn(agent, python_server_history(), "python-empty", stream_messages=True)

    assert not isinstance(caught.value, ContextOverflowError)  # ambiguous, so no summary is forced
    assert main_http.statuses == [200]  # the quirk: HTTP 200, then an empty stream
    assert main_http.exchanges[0].streamed
    assert summary_http.exchanges == []
    assert list(workdir.list_files()) == []


def test_python_server_empty_overflow_stream_forces_a_summary_when_declared_an_overflow(
    llama_cpp_python_server: RealServer, wide_llama_server: RealServer, workdir: LocalWorkdir
) -> None:
    main_http, summary_http = HttpRecorder(), HttpRecorder()
    agent = compression_agent(
        python_server_model(llama_cpp_python_server, main_http),
        recorded_model(wide_llama_server, summary_http),
        FORCED_CONFIG,
        workdir,
        mapping=OverflowMappingMiddleware(empty_stream_as_overflow=True),
    )

    turn = run_turn(agent, python_server_history(), "python-empty-overflow", stream_messages=True)

    assert main_http.statuses == [200, 200]  # the empty stream, then the smaller request
    assert statuses(turn) == [("started", "l2", "context_overflow"), ("completed", "l2", "context_overflow")]
    assert summary_http.statuses == [200]
    answer = final_answer(agent, "python-empty-overflow")
    assert turn.streamed_text == answer.text


def null_content_history() -> list[BaseMessage]:
    """A tool round whose assistant turn has no text: ChatOpenAI sends it as `content: null`."""
    return kb_round(
        "call_1",
        "Find the blue account policy.",
        "blue account",
        banking_result("doc_checking_accounts_blue_account_012"),
        "Once upon a time",
    )


def test_python_server_rejects_null_content_and_the_variant_works_through_compression(
    llama_cpp_python_server: RealServer, wide_llama_server: RealServer, workdir: LocalWorkdir
) -> None:
    config = CompressionConfig(summary_threshold=0.3, summary_tool_result_token_limit=40)
    # Stock ChatOpenAI: the real HTTP 500, raised as it is (no retry middleware here: the default
    # retry policy would retry a 500 and then turn it into a "Model call failed" message).
    stock_http = HttpRecorder()
    stock: Any = create_agent(
        python_server_model(llama_cpp_python_server, stock_http, ChatOpenAI),
        [],
        middleware=cast(
            "list[AgentMiddleware[Any, Any, Any]]",
            [
                ContextCompressionMiddleware(
                    config, workdir=workdir, summary_model=recorded_model(wide_llama_server, HttpRecorder())
                ),
                OverflowMappingMiddleware(),
            ],
        ),
    )
    with pytest.raises(openai.InternalServerError) as caught:
        stock.invoke({"messages": null_content_history()})
    assert caught.value.status_code == 500 and "Input should be a valid string" in caught.value.message
    [rejected] = stock_http.exchanges
    assert rejected.status == 500 and rejected.contents()[1] is None

    # ChatOpenAINoNullContent, in the full stack, with L1 compacting the tool result on the way.
    variant_http, summary_http = HttpRecorder(), HttpRecorder()
    agent = compression_agent(
        python_server_model(llama_cpp_python_server, variant_http),
        recorded_model(wide_llama_server, summary_http),
        config,
        workdir,
    )
    turn = run_turn(agent, null_content_history(), "null-content", stream_messages=False)

    assert statuses(turn) == [("started", "l1", None), ("completed", "l1", None)]
    [accepted] = variant_http.exchanges
    assert accepted.status == 200
    assert accepted.contents()[1] == "" and accepted.body["messages"][1]["tool_calls"]
    assert str(accepted.contents()[2]).startswith(OFFLOAD_MARKER)
    final_answer(agent, "null-content")
