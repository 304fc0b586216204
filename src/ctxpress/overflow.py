"""Recognise context-overflow errors of OpenAI-compatible servers as `ContextOverflowError` (spec S6).

Spec S6 makes a `ContextOverflowError` from the main model the signal for a forced summary. LangChain
only raises that type for the wordings its integrations know: `langchain-openai` looks for
`context_length_exceeded` in `str(error)` and for a few phrases in the message, and turns every other
HTTP 400 into a generic `ModelInvalidRequestError`. Since openai 3.x, `str(error)` holds only the
message, so even that code slips through (observed against llama-cpp-python's server). Self-hosted and
third-party servers word the condition differently again, so without this module the compression
fallback would rarely see an overflow. Here the status code and the parsed body are read as well.

Wordings recognised (case-insensitive; a match on the `code`/`type` field or on the message is enough)::

    server / provider        HTTP  code or type                  message wording                                 source
    ----------------------   ----  ----------------------------  ----------------------------------------------  ------------------------------------------
    llama.cpp llama-server   400   exceed_context_size_error     "request (922 tokens) exceeds the available     measured here (tests/realserver);
                             (500 in its first release)          context size (256 tokens), try increasing it"   ggml-org/llama.cpp PR 15780
    Ollama (new runner)      400   exceed_context_size_error,    same text as llama.cpp, sometimes as a JSON     ollama/ollama issue 16800
                                   wrapped in {"error": "<json>"} string inside "error"
    Ollama (older)           500   -                             "input exceeds context length"                  ollama/ollama log lines, issue 7661 thread
    OpenAI, Azure OpenAI     400   context_length_exceeded       "This model's maximum context length is N        OpenAI API; langchain-openai's own mapping
                                                                 tokens. However, your messages resulted in M"
    OpenAI (newer models)    400   -                             "Input tokens exceed the configured limit",     langchain-openai `_handle_openai_*`
                                                                 "... exceeds the context window ..."
    llama-cpp-python server  400   context_length_exceeded       "This model's maximum context length is N ..."  measured here (tests/realserver)
    vLLM                     400   BadRequestError (type)        "This model's maximum context length is N        vllm-project/vllm issues 20409, 19464
                                                                 tokens. However, you requested M tokens ...";
                                                                 "The decoder prompt (length N) is longer than   xorbitsai/inference issue 3785 (vLLM engine)
                                                                 the maximum model length of M"
    SGLang                   400   BadRequestError (type)        "The input (N tokens) is longer than the        QwenLM/Qwen3 issue 1321
                                                                 model's context length (M tokens)."
    DeepSeek                 400   invalid_request_error (!)     "This model's maximum context length is N        FoundationAgents/OpenManus issue 79;
                                                                 tokens. However, you requested M tokens ..."    evalstate/fast-agent issue 621
    SiliconFlow              400   20015                         "length of prompt_tokens (N) must be less than  chatboxai/chatbox issue 2060
                                                                 max_seq_len (M)."
    Groq                     400   context_length_exceeded       "Please reduce the length of the messages or    letta-ai/letta issue 1963
                                                                 completion."
    Cerebras                 400   -                             "Please reduce the length of the messages or    cline/cline issue 5140
                                                                 completion. Current length is N while limit
                                                                 is M"
    Anthropic (also via an   400   invalid_request_error         "prompt is too long: N tokens > M maximum";     anthropics/claude-code issues 59696, 12186;
    OpenAI-style gateway)                                        "input length and `max_tokens` exceed context   issue 5346
                                                                 limit"
    Google Gemini            400   INVALID_ARGUMENT              "The input token count (N) exceeds the maximum  google-gemini/gemini-cli issues 4231, 4118
                                                                 number of tokens allowed (M)."
    Hugging Face TGI         422   validation                    "`inputs` tokens + `max_new_tokens` must be     huggingface/text-generation-inference
                                                                 <= N"                                           issue 628
    LM Studio                400   -                             "Input length N exceeds context length M";      lmstudio-ai/model-catalog issue 38;
                                                                 "Context size has been exceeded"                lmstudio-bug-tracker issue 2339
    LiteLLM proxy            400   -                             "ContextWindowExceededError"                    langchain-openai's own mapping; Devon issue 88
    Mistral                  400   -                             "... too large for model with N maximum         Mistral API (from knowledge, not re-checked)
                                                                 context length"
    Moonshot (Kimi)          400   -                             "exceeded model token limit"                    Moonshot API (from knowledge, not re-checked)
    AWS Bedrock (gateways)   400   ValidationException           "Input is too long for requested model"         Bedrock API (from knowledge, not re-checked)

What is deliberately *not* an overflow: HTTP 401/403/404/408/409/429 whatever the text says (OpenAI's
429 "Request too large ... tokens per min" is a rate limit; compressing would not help), and an
exception that merely *has* an overflow in its `__context__` after `raise ... from None`.

Quirks of llama-cpp-python's server, handled by separately named pieces below:

- An overflowing *streaming* request gets HTTP 200 and an empty body (then the connection is
  dropped). langchain-core refuses a stream without chunks with a bare `ValueError`;
  `raising_context_overflow()` / `OverflowMappingMiddleware` turn that into `EmptyStreamError`, and
  `guard_empty_stream` / `aguard_empty_stream` also catch chunks that say nothing. It is *not* a
  `ContextOverflowError` by default, because an empty 200 stream is also what a crashed worker or a
  buffering proxy produces, and forcing a summary would then drop history for nothing; deployments
  known to sit on that server opt in with `empty_stream_as_overflow=True` (raises
  `EmptyStreamOverflowError`, which is both).
- An assistant message with `content: null` plus `tool_calls` is rejected with HTTP 500: see
  `fill_null_tool_call_content` and `ChatOpenAINoNullContent`.

Where `OverflowMappingMiddleware` goes: in `create_agent(middleware=[A, B, C])` A is the outermost
wrapper. Put the mapping innermost (last), so every outer middleware, above all the compression
middleware and `ModelRetryMiddleware`, sees the same `ContextOverflowError`::

    create_agent(
        model,
        middleware=[
            ContextCompressionMiddleware(...),                      # outermost: handles the overflow
            ModelRetryMiddleware(retry_on=retry_unless_overflow),   # never retries an overflow
            OverflowMappingMiddleware(),                             # innermost: maps provider errors
        ],
    )

How `ModelRetryMiddleware` decides: `retry_on` is a tuple of exception types or a predicate; the
default retries a LangChain `ModelError` only if its `is_retryable` is true (`ContextOverflowError` and
`ModelInvalidRequestError` are not) and retries *every other exception*, e.g. a raw
`openai.BadRequestError` from a client LangChain did not wrap. When the retries run out, its default
`on_failure="continue"` returns an `AIMessage` saying the call failed: the overflow is swallowed and
the compression fallback never runs (tests/test_overflow.py shows it). ChatOpenAI's own wrapping
(`ModelInvalidRequestError`) escapes the retry but is still no `ContextOverflowError`, hence the
mapping. `retry_unless_overflow` is the default policy minus overflows and empty streams, so with it
the order of the two no longer matters.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from langchain.agents.middleware.types import AgentMiddleware, ModelCallResult, ModelRequest, ModelResponse
from langchain_core.exceptions import ContextOverflowError, ModelError
from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import BaseMessageChunk
from langchain_core.outputs import ChatGenerationChunk
from langchain_openai import ChatOpenAI
from langgraph.errors import GraphBubbleUp

__all__ = [
    "ChatOpenAINoNullContent",
    "EmptyStreamError",
    "EmptyStreamOverflowError",
    "OverflowMappingMiddleware",
    "aguard_empty_stream",
    "as_context_overflow",
    "fill_null_tool_call_content",
    "guard_empty_stream",
    "is_context_overflow",
    "is_empty_stream_error",
    "raising_context_overflow",
    "retry_unless_overflow",
]

# Exact values of an error's `code` or `type` field that mean "the prompt does not fit".
_OVERFLOW_CODES = frozenset(
    {
        "context_length_exceeded",  # OpenAI, Azure, Groq, llama-cpp-python
        "exceed_context_size_error",  # llama.cpp llama-server, newer Ollama
        "20015",  # SiliconFlow (its message is matched too; the code alone is specific enough)
    }
)

_OVERFLOW_PHRASES = re.compile(
    "|".join(
        [
            r"exceeds? the available context size",  # llama.cpp, Ollama
            r"maximum context length",  # OpenAI, vLLM, DeepSeek, llama-cpp-python, Mistral
            r"context[ _]length[ _]exceeded",
            r"exceeds? (?:the )?context length",  # LM Studio, older Ollama
            r"is longer than the (?:model's context length|maximum model length)",  # SGLang, vLLM
            r"must be less than max_seq_len",  # SiliconFlow
            r"prompt is too long",  # Anthropic
            r"exceed context limit",  # Anthropic (input + max_tokens)
            r"input token count .{0,40}exceeds the maximum number of tokens",  # Gemini
            r"`?inputs`? tokens \+ `?max_new_tokens`? must be",  # TGI
            r"exceeds the context window",  # OpenAI (newer models)
            r"input tokens exceed the configured limit",  # OpenAI (newer models)
            r"contextwindowexceedederror",  # LiteLLM
            r"context size has been exceeded",  # LM Studio
            r"please reduce the length of the messages",  # Groq, Cerebras, OpenAI
            r"exceeded model token limit",  # Moonshot
            r"input is too long for requested model",  # Bedrock
        ]
    ),
    re.IGNORECASE,
)

# These statuses have their own meaning (auth, missing model, rate limit, ...): never an overflow,
# even when the text mentions tokens ("Request too large ... tokens per min" is a 429).
_NEVER_OVERFLOW_STATUSES = frozenset({401, 403, 404, 408, 409, 429})

# Generous bounds: real chains are 2-4 long; the limits only stop pathological cycles.
_MAX_CHAIN_LENGTH = 16
_MAX_JSON_NESTING = 3


@dataclass
class _ErrorFacts:
    """What one exception says about itself, read without trusting any particular client library."""

    status_code: int | None = None
    codes: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    prompt_tokens: int | None = None
    context_tokens: int | None = None

    def add_body(self, body: object, depth: int = 0) -> None:
        """Read an error body: a JSON object, a JSON string, or plain text."""
        if depth > _MAX_JSON_NESTING or body is None:
            return
        if isinstance(body, bytes):
            body = body.decode("utf-8", errors="replace")
        if isinstance(body, str):
            parsed = _parse_json(body)
            if parsed is None:
                self.texts.append(body)
            else:
                self.add_body(parsed, depth + 1)
            return
        if not isinstance(body, Mapping):
            return
        # OpenAI shape {"error": {...}}; Ollama's native API {"error": "text or JSON text"}.
        inner = body.get("error")
        if isinstance(inner, Mapping | str):
            self.add_body(inner, depth + 1)
        for key in ("code", "type", "status"):
            value = body.get(key)
            if isinstance(value, str | int) and not isinstance(value, bool):
                self.codes.append(str(value))
        message = body.get("message")
        if isinstance(message, str):
            self.add_body(message, depth + 1)
        # llama.cpp reports both numbers; they make the mapped message useful.
        self.prompt_tokens = self.prompt_tokens or _as_int(body.get("n_prompt_tokens"))
        self.context_tokens = self.context_tokens or _as_int(body.get("n_ctx"))

    def says_overflow(self) -> bool:
        if self.status_code in _NEVER_OVERFLOW_STATUSES:
            return False
        if any(code.lower() in _OVERFLOW_CODES for code in self.codes):
            return True
        return any(_OVERFLOW_PHRASES.search(text) for text in self.texts)


def _parse_json(text: str) -> object | None:
    stripped = text.strip()
    if not stripped.startswith(("{", "[")):
        return None
    try:
        parsed: object = json.loads(stripped)
    except ValueError:
        return None
    return parsed


def _as_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _status_code_of(exc: BaseException) -> int | None:
    # openai.APIStatusError has `status_code`; httpx/httpx2/requests errors carry a `response`.
    for candidate in (exc, getattr(exc, "response", None)):
        status = getattr(candidate, "status_code", None)
        if isinstance(status, int) and not isinstance(status, bool):
            return status
    return None


def _read_facts(exc: BaseException) -> _ErrorFacts:
    facts = _ErrorFacts(status_code=_status_code_of(exc))
    body = getattr(exc, "body", None)  # openai.APIError: already-parsed JSON (or raw text)
    if body is None:
        response = getattr(exc, "response", None)
        if response is not None:
            try:  # httpx raises ResponseNotRead for an unread streamed response
                body = response.text
            except Exception:
                body = None
    facts.add_body(body)
    for attribute in ("code", "type"):  # openai.APIError copies these out of the body
        value = getattr(exc, attribute, None)
        if isinstance(value, str):
            facts.codes.append(value)
    message = getattr(exc, "message", None)
    if isinstance(message, str):
        facts.add_body(message)
    facts.texts.append(str(exc))
    return facts


def _exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception, its causes and contexts (unless suppressed), and group members; each once."""
    pending: list[BaseException] = [exc]
    seen: set[int] = set()
    while pending and len(seen) < _MAX_CHAIN_LENGTH:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        if current.__cause__ is not None:
            pending.append(current.__cause__)
        if current.__context__ is not None and not current.__suppress_context__:
            pending.append(current.__context__)


def _overflow_facts(exc: BaseException) -> _ErrorFacts | None:
    if not isinstance(exc, Exception) or isinstance(exc, GraphBubbleUp):
        return None  # interrupts, cancellation and graph control flow are never model errors
    for link in _exception_chain(exc):
        if isinstance(link, ContextOverflowError):
            return _ErrorFacts()
        facts = _read_facts(link)
        if facts.says_overflow():
            return facts
    return None


def is_context_overflow(exc: BaseException) -> bool:
    """Whether `exc` (or anything in its cause/context chain) says the prompt exceeds the context window."""
    return _overflow_facts(exc) is not None


def as_context_overflow(exc: BaseException) -> ContextOverflowError | None:
    """`exc` as a `ContextOverflowError` (original kept as `__cause__`), or None if it is no overflow.

    An existing `ContextOverflowError` is returned unchanged. The new error's message is short and
    free of provider internals (no URL, request id or raw body); token counts are kept when the
    server reported them.
    """
    if isinstance(exc, ContextOverflowError):
        return exc
    facts = _overflow_facts(exc)
    if facts is None:
        return None
    details = []
    if facts.status_code is not None:
        details.append(f"HTTP {facts.status_code}")
    if facts.prompt_tokens is not None and facts.context_tokens is not None:
        details.append(f"{facts.prompt_tokens} prompt tokens > {facts.context_tokens} context tokens")
    suffix = f" ({'; '.join(details)})" if details else ""
    mapped = ContextOverflowError(f"The model request exceeds the model's context window{suffix}.")
    mapped.__cause__ = exc
    return mapped


class EmptyStreamError(ModelError):
    """A streamed model response ended with no content, no tool calls and no finish reason.

    Not retryable: the one known cause (llama-cpp-python's server answering an overflowing streamed
    request with an empty HTTP 200 stream) gives the same empty stream on every retry.
    """

    is_retryable = False


class EmptyStreamOverflowError(EmptyStreamError, ContextOverflowError):
    """An empty stream treated as a context overflow (opt-in, see `empty_stream_as_overflow`)."""


_EMPTY_STREAM_MESSAGE = (
    "The model's stream ended with no content, no tool calls and no finish reason. "
    "llama-cpp-python's server answers an overflowing streamed request this way."
)

# How langchain-core itself reports a stream that produced no chunk at all: `model.stream()` /
# `astream()` raise the first, `invoke()` with streaming on (an agent streamed with
# stream_mode="messages") the second or third. The chunks never reach a guard in those cases.
_LANGCHAIN_EMPTY_STREAM_MESSAGES = (
    "No generation chunks were returned",
    "No generations found in stream.",
    "v2 stream finished without producing a message",
)


def is_empty_stream_error(exc: BaseException) -> bool:
    """Whether `exc` reports a stream that ended without producing anything."""
    if isinstance(exc, EmptyStreamError):
        return True
    return isinstance(exc, ValueError | RuntimeError) and str(exc) in _LANGCHAIN_EMPTY_STREAM_MESSAGES


def _empty_stream_error(*, as_overflow: bool) -> EmptyStreamError:
    error_type = EmptyStreamOverflowError if as_overflow else EmptyStreamError
    return error_type(_EMPTY_STREAM_MESSAGE)


StreamChunk = TypeVar("StreamChunk", BaseMessageChunk, ChatGenerationChunk)


def _chunk_says_something(chunk: BaseMessageChunk | ChatGenerationChunk) -> bool:
    """Content, a tool call, or a finish reason. Usage alone does not count."""
    message = chunk.message if isinstance(chunk, ChatGenerationChunk) else chunk
    if message.content:
        return True
    if getattr(message, "tool_call_chunks", None) or getattr(message, "tool_calls", None):
        return True
    metadata: dict[str, Any] = {**message.response_metadata}
    if isinstance(chunk, ChatGenerationChunk):
        metadata.update(chunk.generation_info or {})
    return bool(metadata.get("finish_reason") or metadata.get("stop_reason"))


def guard_empty_stream(
    chunks: Iterable[StreamChunk], *, empty_stream_as_overflow: bool = False
) -> Iterator[StreamChunk]:
    """Pass `chunks` through; raise `EmptyStreamError` if none had content, a tool call or a finish reason.

    Use around `model.stream(...)` (or a model's raw chunk iterator). A stream with no chunk at all
    is already refused by langchain-core with a `ValueError`; `raising_context_overflow()` turns that
    one into `EmptyStreamError`. This guard catches the rest: chunks that arrive but say nothing
    (a role-only delta, a usage-only chunk). With `empty_stream_as_overflow=True` the error is an
    `EmptyStreamOverflowError`, i.e. also a `ContextOverflowError`.
    """
    said_something = False
    for chunk in chunks:
        said_something = said_something or _chunk_says_something(chunk)
        yield chunk
    if not said_something:
        raise _empty_stream_error(as_overflow=empty_stream_as_overflow)


async def aguard_empty_stream(
    chunks: AsyncIterable[StreamChunk], *, empty_stream_as_overflow: bool = False
) -> AsyncIterator[StreamChunk]:
    """Async `guard_empty_stream`, for `model.astream(...)`."""
    said_something = False
    async for chunk in chunks:
        said_something = said_something or _chunk_says_something(chunk)
        yield chunk
    if not said_something:
        raise _empty_stream_error(as_overflow=empty_stream_as_overflow)


def _mapped_model_error(exc: Exception, *, empty_stream_as_overflow: bool) -> ModelError | None:
    if is_empty_stream_error(exc):
        if isinstance(exc, EmptyStreamError) and (
            isinstance(exc, ContextOverflowError) or not empty_stream_as_overflow
        ):
            return None  # already the error we would raise
        return _empty_stream_error(as_overflow=empty_stream_as_overflow)
    return as_context_overflow(exc)


@contextmanager
def raising_context_overflow(*, empty_stream_as_overflow: bool = False) -> Iterator[None]:
    """Re-raise overflow errors raised inside the block as `ContextOverflowError`.

    Works around `model.invoke`, and around iterating `model.stream` / `model.astream` (errors
    surface during iteration). Empty-stream failures become `EmptyStreamError` (or, with
    `empty_stream_as_overflow=True`, `EmptyStreamOverflowError`). Anything else passes unchanged.
    """
    try:
        yield
    except (GraphBubbleUp, ContextOverflowError):
        raise
    except Exception as exc:
        mapped = _mapped_model_error(exc, empty_stream_as_overflow=empty_stream_as_overflow)
        if mapped is None:
            raise
        raise mapped from exc


def retry_unless_overflow(exc: Exception) -> bool:
    """`retry_on` for `ModelRetryMiddleware`: LangChain's default policy, but never a context overflow.

    Retrying an identical overflowing request cannot succeed; worse, once the retries run out the
    retry middleware's default `on_failure="continue"` turns the error into an `AIMessage`, so the
    compression middleware never gets its `ContextOverflowError`.
    """
    if is_context_overflow(exc) or is_empty_stream_error(exc):
        return False
    if isinstance(exc, ModelError):
        return exc.is_retryable
    return True


class OverflowMappingMiddleware(AgentMiddleware):
    """Re-raise the model's context-overflow errors, whatever the server's wording, as `ContextOverflowError`.

    Place it *last* in `create_agent(middleware=[...])`, i.e. innermost and closest to the model, so
    that the compression middleware and `ModelRetryMiddleware` (use `retry_on=retry_unless_overflow`)
    both see the mapped error. Also covers streamed model calls: with `stream_mode="messages"` the
    error surfaces while the model's stream is consumed, which still happens inside the handler.
    """

    def __init__(self, *, empty_stream_as_overflow: bool = False) -> None:
        super().__init__()
        self.empty_stream_as_overflow = empty_stream_as_overflow

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelCallResult:
        with raising_context_overflow(empty_stream_as_overflow=self.empty_stream_as_overflow):
            return handler(request)

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelCallResult:
        with raising_context_overflow(empty_stream_as_overflow=self.empty_stream_as_overflow):
            return await handler(request)


def fill_null_tool_call_content(payload: dict[str, Any]) -> dict[str, Any]:
    """Chat-completions payload with `content: ""` instead of `null` on assistant messages with tool calls.

    llama-cpp-python's server rejects the `null` form (which OpenAI itself sends and accepts) with
    HTTP 500. Returns a new payload; the input is not changed.
    """
    messages = payload.get("messages")
    if not isinstance(messages, list):
        return payload
    fixed = [
        {**message, "content": ""}
        if isinstance(message, dict)
        and message.get("role") == "assistant"
        and message.get("content") is None
        and (message.get("tool_calls") or message.get("function_call"))
        else message
        for message in messages
    ]
    return {**payload, "messages": fixed}


class ChatOpenAINoNullContent(ChatOpenAI):
    """`ChatOpenAI` that never sends `content: null` next to tool calls (see `fill_null_tool_call_content`).

    Why a model subclass and not a middleware: a middleware can only change LangChain messages, and
    `ChatOpenAI` itself serialises an empty `content` with tool calls as `null`.
    """

    def _get_request_payload(
        self, input_: LanguageModelInput, *, stop: list[str] | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        return fill_null_tool_call_content(super()._get_request_payload(input_, stop=stop, **kwargs))
