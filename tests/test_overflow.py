"""ctxpress.overflow: provider wordings -> ContextOverflowError, middleware order, streaming, quirks.

The errors are real `openai` SDK exceptions carrying the JSON bodies that servers return (quoted from
the sources listed in docs/overflow-wordings.md). openai 3.x sits on `httpx2`, so the responses are
`httpx2.Response` objects, exactly as the SDK builds them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Literal

import httpx
import httpx2
import openai
import pytest
from langchain.agents import create_agent
from langchain.agents.middleware._retry import default_retry_on
from langchain.agents.middleware.model_retry import ModelRetryMiddleware
from langchain.agents.middleware.types import AgentMiddleware, ModelCallResult, ModelRequest, ModelResponse
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.exceptions import ContextOverflowError, ModelInvalidRequestError, ModelRateLimitError
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_openai import ChatOpenAI
from langchain_openai.chat_models.base import _handle_openai_bad_request
from langgraph.errors import GraphInterrupt
from pydantic import Field

from ctxpress.overflow import (
    EmptyStreamError,
    EmptyStreamOverflowError,
    OverflowMappingMiddleware,
    aguard_empty_stream,
    as_context_overflow,
    fill_null_tool_call_content,
    guard_empty_stream,
    is_context_overflow,
    is_empty_stream_error,
    raising_context_overflow,
    retry_unless_overflow,
)
from ctxpress.overflow.openai import ChatOpenAINoNullContent

# --- real error bodies -------------------------------------------------------------------------

LLAMA_CPP_OVERFLOW = {
    "error": {
        "code": 400,
        "message": "request (922 tokens) exceeds the available context size (256 tokens), try increasing it",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 922,
        "n_ctx": 256,
    }
}
OVERFLOW_BODIES: dict[str, tuple[int, object]] = {
    "llama.cpp": (400, LLAMA_CPP_OVERFLOW),
    "llama.cpp first release (HTTP 500)": (
        500,
        {
            "error": {
                "code": 500,
                "message": "the request exceeds the available context size. try increasing the context size or enable context shift",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": 1407,
                "n_ctx": 256,
            }
        },
    ),
    "Ollama wrapping llama.cpp": (
        400,
        {"error": json.dumps(LLAMA_CPP_OVERFLOW)},
    ),
    "Ollama older": (500, {"error": "input exceeds context length"}),
    "OpenAI": (
        400,
        {
            "error": {
                "message": "This model's maximum context length is 4097 tokens. However, your messages resulted in 4363 tokens. Please reduce the length of the messages.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        },
    ),
    "llama-cpp-python": (
        400,
        {
            "error": {
                "message": "This model's maximum context length is 256 tokens. However, you requested 922 tokens (922 in the messages, None in the completion). Please reduce the length of the messages or completion.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        },
    ),
    "vLLM": (
        400,
        {
            "object": "error",
            "message": "This model's maximum context length is 16384 tokens. However, you requested 122946 tokens (112946 in the messages, 10000 in the completion). Please reduce the length of the messages or completion.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
    ),
    "vLLM decoder prompt": (
        400,
        {
            "object": "error",
            "message": "The decoder prompt (length 21535) is longer than the maximum model length of 16384. Make sure that `max_model_len` is no smaller than the number of text tokens.",
            "type": "BadRequestError",
            "code": 400,
        },
    ),
    "SGLang": (
        400,
        {
            "object": "error",
            "message": "The input (61709 tokens) is longer than the model's context length (40960 tokens).",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
    ),
    "DeepSeek": (
        400,
        {
            "error": {
                "message": "This model's maximum context length is 65536 tokens. However, you requested 66343 tokens (62247 in the messages, 4096 in the completion). Please reduce the length of the messages or completion.",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_request_error",
            }
        },
    ),
    "SiliconFlow": (
        400,
        {
            "code": 20015,
            "message": "length of prompt_tokens (68957) must be less than max_seq_len (65536).",
            "data": None,
        },
    ),
    "Groq": (
        400,
        {
            "error": {
                "message": "Please reduce the length of the messages or completion.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        },
    ),
    "Cerebras": (
        400,
        {
            "message": "Please reduce the length of the messages or completion. Current length is 42328 while limit is 40000"
        },
    ),
    "Anthropic": (
        400,
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "prompt is too long: 208656 tokens > 200000 maximum",
            },
        },
    ),
    "Anthropic input + max_tokens": (
        400,
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, decrease input length or `max_tokens` and try again",
            },
        },
    ),
    "Gemini": (
        400,
        {
            "error": {
                "code": 400,
                "message": "The input token count (132478) exceeds the maximum number of tokens allowed (131072).",
                "status": "INVALID_ARGUMENT",
            }
        },
    ),
    "TGI": (
        422,
        {
            "error": "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 2048. Given: 1244 `inputs` tokens and 1000 `max_new_tokens`",
            "error_type": "validation",
        },
    ),
    "LM Studio": (400, {"error": "Input length 1581 exceeds context length 1500"}),
}

NOT_OVERFLOW_BODIES: dict[str, tuple[int, object]] = {
    "OpenAI rate limit on tokens per minute": (
        429,
        {
            "error": {
                "message": "Request too large for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Requested 50000. The input or output tokens must be reduced in order to run successfully.",
                "type": "tokens",
                "param": None,
                "code": "rate_limit_exceeded",
            }
        },
    ),
    "rate limit that mentions the context length": (
        429,
        {
            "error": {
                "message": "maximum context length reached for your quota",
                "code": "context_length_exceeded",
            }
        },
    ),
    "max_tokens too large": (
        400,
        {
            "error": {
                "message": "max_tokens is too large: 100000. This model supports at most 16384 completion tokens, whereas you provided 100000.",
                "type": "invalid_request_error",
                "param": "max_tokens",
                "code": "invalid_value",
            }
        },
    ),
    "invalid temperature": (
        400,
        {
            "error": {
                "message": "Invalid value for 'temperature': must be between 0 and 2",
                "type": "invalid_request_error",
                "param": "temperature",
                "code": "invalid_value",
            }
        },
    ),
    "server error": (
        500,
        {"error": {"code": 500, "message": "Internal Server Error", "type": "server_error"}},
    ),
}

_REQUEST = httpx2.Request("POST", "http://127.0.0.1:8080/v1/chat/completions")
_ERROR_TYPES: dict[int, type[openai.APIStatusError]] = {
    400: openai.BadRequestError,
    422: openai.UnprocessableEntityError,
    429: openai.RateLimitError,
    500: openai.InternalServerError,
}


def api_error(status: int, body: object) -> openai.APIStatusError:
    """The exception the openai SDK raises for this HTTP answer (same message and body handling)."""
    response = httpx2.Response(status, json=body, request=_REQUEST)
    error = body.get("error", body) if isinstance(body, dict) else None
    message = f"Error code: {status}"
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        message += f" - {error['message']}"
    data = body.get("error", body) if isinstance(body, dict) else body
    return _ERROR_TYPES[status](message, response=response, body=data)


def llama_cpp_overflow() -> openai.BadRequestError:
    error = api_error(400, LLAMA_CPP_OVERFLOW)
    assert isinstance(error, openai.BadRequestError)
    return error


# --- recognising the wordings --------------------------------------------------------------------


@pytest.mark.parametrize("server", sorted(OVERFLOW_BODIES))
def test_every_documented_wording_is_an_overflow(server: str) -> None:
    status, body = OVERFLOW_BODIES[server]
    assert is_context_overflow(api_error(status, body))


@pytest.mark.parametrize("case", sorted(NOT_OVERFLOW_BODIES))
def test_other_errors_are_not_an_overflow(case: str) -> None:
    status, body = NOT_OVERFLOW_BODIES[case]
    assert not is_context_overflow(api_error(status, body))


def test_langchain_openai_leaves_llama_cpp_unmapped_but_we_recognise_its_wrapper() -> None:
    # What ChatOpenAI does with the raw SDK error: a generic invalid-request error, no overflow.
    with pytest.raises(ModelInvalidRequestError) as caught:
        _handle_openai_bad_request(llama_cpp_overflow())
    assert not isinstance(caught.value, ContextOverflowError)
    assert is_context_overflow(caught.value)


def test_openai_code_reaches_us_unmapped_through_langchain_openai() -> None:
    # langchain-openai matches "context_length_exceeded" in str(error), but openai 3.x puts only the
    # message into str(error); so whatever type it raises, the body must be read.
    status, body = OVERFLOW_BODIES["OpenAI"]
    with pytest.raises(openai.BadRequestError) as caught:
        _handle_openai_bad_request(api_error(status, body))  # type: ignore[arg-type]
    assert is_context_overflow(caught.value)
    assert isinstance(as_context_overflow(caught.value), ContextOverflowError)


def test_httpx_status_error_is_read_from_its_response() -> None:
    request = httpx.Request("POST", "http://127.0.0.1:8080/v1/chat/completions")
    response = httpx.Response(400, json=LLAMA_CPP_OVERFLOW, request=request)
    error = httpx.HTTPStatusError("Client error '400 Bad Request'", request=request, response=response)
    assert is_context_overflow(error)


def test_unread_streamed_httpx_response_does_not_break_the_check() -> None:
    request = httpx.Request("POST", "http://127.0.0.1:8080/v1/chat/completions")
    response = httpx.Response(400, stream=httpx.ByteStream(b"{}"), request=request)
    error = httpx.HTTPStatusError("Client error '400 Bad Request'", request=request, response=response)
    assert not is_context_overflow(error)


def test_plain_exception_message_is_enough() -> None:
    assert is_context_overflow(RuntimeError("prompt is too long: 208656 tokens > 200000 maximum"))
    assert not is_context_overflow(ValueError("boom"))


def test_cause_context_and_groups_are_walked() -> None:
    def wrapped(*, suppress: bool) -> Exception:
        try:
            try:
                raise llama_cpp_overflow()
            except openai.BadRequestError as exc:
                if suppress:
                    raise RuntimeError("model call failed") from None
                raise RuntimeError("model call failed") from exc
        except RuntimeError as outer:
            return outer

    assert is_context_overflow(wrapped(suppress=False))
    assert not is_context_overflow(wrapped(suppress=True))
    assert is_context_overflow(ExceptionGroup("parallel calls", [ValueError("x"), llama_cpp_overflow()]))


def test_control_flow_is_never_an_overflow() -> None:
    interrupt = GraphInterrupt()
    interrupt.__cause__ = llama_cpp_overflow()
    assert not is_context_overflow(interrupt)
    assert not is_context_overflow(KeyboardInterrupt("prompt is too long"))


def test_as_context_overflow_keeps_cause_and_drops_internals() -> None:
    original = llama_cpp_overflow()
    mapped = as_context_overflow(original)
    assert isinstance(mapped, ContextOverflowError)
    assert mapped.__cause__ is original
    text = str(mapped)
    assert "HTTP 400" in text and "922 prompt tokens > 256 context tokens" in text
    for internal in ("exceed_context_size_error", "127.0.0.1", "try increasing", "{"):
        assert internal not in text


def test_as_context_overflow_passes_through_and_rejects() -> None:
    existing = ContextOverflowError("already typed")
    assert as_context_overflow(existing) is existing
    assert as_context_overflow(api_error(*NOT_OVERFLOW_BODIES["invalid temperature"])) is None


def test_retry_unless_overflow_is_the_default_policy_minus_overflows() -> None:
    others: list[Exception] = [
        ValueError("boom"),
        api_error(*NOT_OVERFLOW_BODIES["server error"]),
        ModelRateLimitError("slow down"),
        ModelInvalidRequestError("bad"),
        TimeoutError(),
    ]
    for exc in others:
        assert retry_unless_overflow(exc) == default_retry_on(exc), exc
    # The default retries a raw SDK overflow (it is no LangChain ModelError); we never do.
    assert default_retry_on(llama_cpp_overflow()) is True
    assert retry_unless_overflow(llama_cpp_overflow()) is False
    assert retry_unless_overflow(ContextOverflowError("x")) is False
    assert retry_unless_overflow(ValueError("No generations found in stream.")) is False


# --- a real create_agent stack -------------------------------------------------------------------

Failure = Literal["raise", "empty_stream", "blank_stream"]
SHORT_ANSWER = "short answer"


class ContextLimitedChatModel(BaseChatModel):
    """Answers prompts up to `max_prompt_chars`; longer ones fail like a llama.cpp-backed server.

    `failure="raise"`: raises the llama.cpp-shaped `openai.BadRequestError` (from `_stream` after
    `chunks_before_error` chunks when streamed). `failure="empty_stream"`: llama-cpp-python's quirk,
    a stream that ends without a single chunk. `failure="blank_stream"`: one chunk that says nothing.
    """

    max_prompt_chars: int = 50
    failure: Failure = "raise"
    chunks_before_error: int = 0
    calls: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "context-limited-fake"

    def _too_long(self, messages: list[BaseMessage]) -> bool:
        return sum(len(message.text) for message in messages) > self.max_prompt_chars

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.calls.append("generate")
        if self._too_long(messages):
            raise llama_cpp_overflow()
        message = AIMessage(content=SHORT_ANSWER, response_metadata={"finish_reason": "stop"})
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        self.calls.append("stream")
        too_long = self._too_long(messages)
        if too_long and self.failure == "empty_stream":
            return
        if too_long and self.failure == "blank_stream":  # e.g. a role-only delta, then the end
            yield ChatGenerationChunk(message=AIMessageChunk(content=""))
            return
        pieces = SHORT_ANSWER.split(" ")
        for index, piece in enumerate(pieces):
            if too_long and index == self.chunks_before_error:
                raise llama_cpp_overflow()
            last = index == len(pieces) - 1
            yield ChatGenerationChunk(
                message=AIMessageChunk(content=piece if last else f"{piece} "),
                generation_info={"finish_reason": "stop"} if last else None,
            )


class FallbackRecorder(AgentMiddleware):
    """Stands in for the compression middleware (outermost): records what reached it and, on a
    ContextOverflowError, retries with only the last message, the way a forced summary shrinks the request.
    """

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[type[BaseException]] = []

    def _fallback_request(self, request: ModelRequest, exc: Exception) -> ModelRequest:
        self.seen.append(type(exc))
        if not isinstance(exc, ContextOverflowError):
            raise exc
        return request.override(messages=request.messages[-1:])

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelCallResult:
        try:
            return handler(request)
        except Exception as exc:
            return handler(self._fallback_request(request, exc))

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelCallResult:
        try:
            return await handler(request)
        except Exception as exc:
            return await handler(self._fallback_request(request, exc))


def build_agent(model: BaseChatModel, *, middleware: list[AgentMiddleware]) -> Any:
    """A real create_agent graph (typed Any: its input TypedDict is not worth spelling out here)."""
    return create_agent(model, middleware=middleware)


def fast_retry(**kwargs: Any) -> ModelRetryMiddleware:
    return ModelRetryMiddleware(max_retries=2, initial_delay=0.0, jitter=False, **kwargs)


LONG_HISTORY: dict[str, Any] = {
    "messages": [
        HumanMessage("Tell me a long story about a dragon, a castle, and a very patient knight."),
        AIMessage("Once upon a time there was a dragon who lived in a castle far away."),
        HumanMessage("And then?"),
    ]
}


def final_text(result: dict[str, Any]) -> str:
    return str(result["messages"][-1].text)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_recommended_order_hands_the_overflow_to_the_outer_middleware(use_async: bool) -> None:
    model = ContextLimitedChatModel()
    recorder = FallbackRecorder()
    agent = build_agent(model, middleware=[recorder, fast_retry(), OverflowMappingMiddleware()])

    result = await agent.ainvoke(LONG_HISTORY) if use_async else agent.invoke(LONG_HISTORY)

    assert recorder.seen == [ContextOverflowError]
    assert model.calls == ["generate", "generate"]  # the overflow once (no retry), then the fallback
    assert final_text(result) == SHORT_ANSWER


def test_mapping_outside_the_default_retry_swallows_the_overflow() -> None:
    """The seed-system failure: the retry middleware retries the raw error, then turns it into text."""
    model = ContextLimitedChatModel()
    recorder = FallbackRecorder()
    agent = build_agent(model, middleware=[recorder, OverflowMappingMiddleware(), fast_retry()])

    result = agent.invoke(LONG_HISTORY)

    assert recorder.seen == []  # the compression fallback never learns about the overflow
    assert model.calls == ["generate"] * 3  # one identical, pointless request per retry
    assert final_text(result).startswith("Model call failed after 3 attempts with BadRequestError")


def test_retry_unless_overflow_makes_the_order_irrelevant() -> None:
    model = ContextLimitedChatModel()
    recorder = FallbackRecorder()
    retry = fast_retry(retry_on=retry_unless_overflow)
    agent = build_agent(model, middleware=[recorder, OverflowMappingMiddleware(), retry])

    result = agent.invoke(LONG_HISTORY)

    assert recorder.seen == [ContextOverflowError]
    assert model.calls == ["generate", "generate"]
    assert final_text(result) == SHORT_ANSWER


def test_without_the_mapping_the_outer_middleware_sees_the_raw_provider_error() -> None:
    recorder = FallbackRecorder()
    retry = fast_retry(retry_on=retry_unless_overflow)
    agent = build_agent(ContextLimitedChatModel(), middleware=[recorder, retry])

    with pytest.raises(openai.BadRequestError):
        agent.invoke(LONG_HISTORY)
    assert recorder.seen == [openai.BadRequestError]


def collect_streamed_text(chunks: Iterator[Any] | list[Any]) -> str:
    return "".join(str(message.text) for message, _metadata in chunks if isinstance(message, AIMessageChunk))


@pytest.mark.parametrize("chunks_before_error", [0, 1], ids=["before-first-chunk", "mid-stream"])
def test_overflow_raised_while_streaming_messages_is_mapped(chunks_before_error: int) -> None:
    model = ContextLimitedChatModel(chunks_before_error=chunks_before_error)
    recorder = FallbackRecorder()
    agent = build_agent(model, middleware=[recorder, fast_retry(), OverflowMappingMiddleware()])

    streamed = list(agent.stream(LONG_HISTORY, stream_mode="messages"))

    assert model.calls == ["stream", "stream"]  # the model really was streamed, both times
    assert recorder.seen == [ContextOverflowError]
    assert collect_streamed_text(streamed).endswith(SHORT_ANSWER)


async def test_overflow_raised_while_async_streaming_messages_is_mapped() -> None:
    model = ContextLimitedChatModel(chunks_before_error=1)
    recorder = FallbackRecorder()
    agent = build_agent(model, middleware=[recorder, fast_retry(), OverflowMappingMiddleware()])

    streamed = [item async for item in agent.astream(LONG_HISTORY, stream_mode="messages")]

    assert model.calls == ["stream", "stream"]
    assert recorder.seen == [ContextOverflowError]
    assert collect_streamed_text(streamed).endswith(SHORT_ANSWER)


def test_empty_stream_in_an_agent_is_a_clear_error_by_default() -> None:
    model = ContextLimitedChatModel(failure="empty_stream")
    recorder = FallbackRecorder()
    agent = build_agent(model, middleware=[recorder, fast_retry(), OverflowMappingMiddleware()])

    with pytest.raises(EmptyStreamError) as caught:
        list(agent.stream(LONG_HISTORY, stream_mode="messages"))

    assert not isinstance(caught.value, ContextOverflowError)
    assert recorder.seen == [EmptyStreamError]
    assert model.calls == ["stream"]  # not retried: the same request gives the same empty stream


def test_empty_stream_can_be_declared_an_overflow() -> None:
    model = ContextLimitedChatModel(failure="empty_stream")
    recorder = FallbackRecorder()
    mapping = OverflowMappingMiddleware(empty_stream_as_overflow=True)
    agent = build_agent(model, middleware=[recorder, fast_retry(), mapping])

    streamed = list(agent.stream(LONG_HISTORY, stream_mode="messages"))

    assert recorder.seen == [EmptyStreamOverflowError]
    assert issubclass(EmptyStreamOverflowError, ContextOverflowError)
    assert collect_streamed_text(streamed) == SHORT_ANSWER


# --- direct model use ----------------------------------------------------------------------------


def test_raising_context_overflow_around_a_direct_stream() -> None:
    model = ContextLimitedChatModel(chunks_before_error=1)
    received: list[str] = []
    with pytest.raises(ContextOverflowError) as caught, raising_context_overflow():
        for chunk in model.stream(LONG_HISTORY["messages"]):
            received.append(chunk.text)
    assert received == ["short "]
    assert isinstance(caught.value.__cause__, openai.BadRequestError)


def test_raising_context_overflow_leaves_other_errors_alone() -> None:
    with pytest.raises(ValueError, match="unrelated"), raising_context_overflow():
        raise ValueError("unrelated")


def test_guard_empty_stream_raises_only_when_nothing_was_said() -> None:
    usage_only = AIMessageChunk(
        content="", usage_metadata={"input_tokens": 3, "output_tokens": 0, "total_tokens": 3}
    )
    with pytest.raises(EmptyStreamError):
        list(guard_empty_stream([]))
    with pytest.raises(EmptyStreamError):
        list(guard_empty_stream([usage_only]))
    with pytest.raises(EmptyStreamOverflowError):
        list(guard_empty_stream([], empty_stream_as_overflow=True))

    finished = AIMessageChunk(content="", response_metadata={"finish_reason": "stop"})
    tool_call = AIMessageChunk(
        content="", tool_call_chunks=[{"name": "f", "args": "{}", "id": "1", "index": 0}]
    )
    text = AIMessageChunk(content="hi")
    for chunks in ([finished], [tool_call], [usage_only, text]):
        assert list(guard_empty_stream(chunks)) == chunks


async def test_aguard_empty_stream() -> None:
    async def chunks(*items: AIMessageChunk) -> AsyncIterator[AIMessageChunk]:
        for item in items:
            yield item

    assert [chunk.text async for chunk in aguard_empty_stream(chunks(AIMessageChunk(content="hi")))] == ["hi"]
    with pytest.raises(EmptyStreamError):
        _ = [chunk async for chunk in aguard_empty_stream(chunks())]


def test_guard_empty_stream_on_a_model_stream_that_says_nothing() -> None:
    model = ContextLimitedChatModel(failure="blank_stream")
    assert "".join(chunk.text for chunk in guard_empty_stream(model.stream("hi"))) == SHORT_ANSWER
    with pytest.raises(EmptyStreamError):
        list(guard_empty_stream(model.stream(LONG_HISTORY["messages"])))


def test_a_model_stream_without_any_chunk_becomes_empty_stream_error() -> None:
    model = ContextLimitedChatModel(failure="empty_stream")
    with pytest.raises(ValueError, match="No generation chunks"):  # what langchain-core raises
        list(model.stream(LONG_HISTORY["messages"]))
    with pytest.raises(EmptyStreamError), raising_context_overflow():
        list(model.stream(LONG_HISTORY["messages"]))
    with pytest.raises(EmptyStreamOverflowError), raising_context_overflow(empty_stream_as_overflow=True):
        list(model.stream(LONG_HISTORY["messages"]))


def test_is_empty_stream_error_knows_langchain_core_wording() -> None:
    assert is_empty_stream_error(ValueError("No generations found in stream."))
    assert is_empty_stream_error(ValueError("No generation chunks were returned"))
    assert is_empty_stream_error(EmptyStreamError("x"))
    assert not is_empty_stream_error(ValueError("No generations"))


# --- null content next to tool calls -------------------------------------------------------------

TOOL_CALL_HISTORY: list[BaseMessage] = [
    HumanMessage("What is the weather?"),
    AIMessage(content="", tool_calls=[{"name": "weather", "args": {"city": "Paris"}, "id": "call_1"}]),
    ToolMessage("sunny", tool_call_id="call_1"),
]


def test_fill_null_tool_call_content_only_touches_assistant_tool_calls() -> None:
    payload: dict[str, Any] = {
        "model": "m",
        "messages": [
            {"role": "user", "content": None},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1"}]},
            {"role": "assistant", "content": "kept", "tool_calls": [{"id": "call_2"}]},
        ],
    }
    fixed = fill_null_tool_call_content(payload)
    assert [message["content"] for message in fixed["messages"]] == [None, "", "kept"]
    assert payload["messages"][1]["content"] is None  # input untouched


def test_chat_openai_sends_null_and_the_subclass_sends_an_empty_string() -> None:
    settings: dict[str, Any] = {
        "model": "stories260K",
        "api_key": "none",
        "base_url": "http://127.0.0.1:9/v1",
    }
    plain = ChatOpenAI(**settings)._get_request_payload(TOOL_CALL_HISTORY)
    fixed = ChatOpenAINoNullContent(**settings)._get_request_payload(TOOL_CALL_HISTORY)
    assert plain["messages"][1]["content"] is None  # why a message-level middleware cannot help
    assert fixed["messages"][1]["content"] == ""
    assert fixed["messages"][1]["tool_calls"] == plain["messages"][1]["tool_calls"]
