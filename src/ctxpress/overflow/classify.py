"""Whether an exception says the prompt exceeds the model's context window (spec S6).

LangChain raises `ContextOverflowError` only for the wordings its integrations know; self-hosted and
third-party servers word the condition differently, and since openai 3.x `str(error)` holds only the
message. So the status code and the parsed body of every exception in the chain are read too.
Recognised wordings and their sources: docs/overflow-wordings.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from langchain_core.exceptions import ContextOverflowError
from langgraph.errors import GraphBubbleUp

__all__ = ["as_context_overflow", "is_context_overflow"]

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
