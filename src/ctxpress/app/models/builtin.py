"""The built-in deterministic chat model: what an agent answers with when no LLM is configured.

It is honest about what it is: every text reply starts with `BUILTIN_LABEL`, and the service says
so in its logs, in `GET /api/agents` and in each run's `run_started` event. It understands no
language; it follows rules:

- in an agent loop, the `OfflineAgentPolicy` (`agent_policy.py`) decides from the user's message
  which bound tool to call (`query_kb`, `read_file`, `ls`, `grep`, `write_file`, `edit_file`,
  `ask_user`) and answers extractively from tool results, in the user's language;
- called as the summary model (the compression middleware tags that call `ctxpress:summary`), it
  writes an extractive summary of the transcript (`summary_writer.py`).

Like a real model it streams, binds tools, reports `usage_metadata` (from ctxpress's estimator)
and has a context window (`context_window`, default 128K tokens): a request above it raises
`ContextOverflowError`, so the overflow path of the compression flow (S6) can be seen offline.
The policy is replaceable: `BuiltinChatModel(policy=…)` with any `ReplyPolicy`.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.exceptions import ContextOverflowError
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.base import LangSmithParams
from langchain_core.language_models.chat_models import generate_from_stream
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field, PrivateAttr, model_validator

from ctxpress.app.models.agent_policy import OfflineAgentPolicy
from ctxpress.app.models.reply import (
    BUILTIN_LABEL,
    BUILTIN_MODEL_NAME,
    BUILTIN_PROVIDER,
    BuiltinReply,
    ReplyPolicy,
)
from ctxpress.app.models.summary_writer import looks_like_summary_prompt, write_summary
from ctxpress.tokens import TokenCounter, estimate_tokens

#: What a call's run manager tells the model (sync or async alike): its tags and metadata.
CallTags = CallbackManagerForLLMRun | AsyncCallbackManagerForLLMRun

DEFAULT_CONTEXT_WINDOW = 131_072
STREAM_CHUNK_CHARS = 8
#: The tag the compression middleware puts on its summary call (`summary_call_config`).
SUMMARY_CALL_TAG = "ctxpress:summary"
SUMMARY_CALL_METADATA = ("ctxpress_call", "summary")


class BuiltinChatModel(BaseChatModel):
    """Deterministic, offline `BaseChatModel` with tool calling, streaming and `usage_metadata`."""

    # A misspelt setting (`context_windw`) is an error, not silently ignored.
    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    policy: ReplyPolicy = Field(default_factory=OfflineAgentPolicy)
    model_name: str = BUILTIN_MODEL_NAME
    context_window: int = Field(default=DEFAULT_CONTEXT_WINDOW, gt=0, description="Input tokens accepted.")
    token_profile: str = "default"
    # Counts each request's input; its own caches keep that cheap across the calls of a conversation.
    _token_counter: TokenCounter = PrivateAttr(default_factory=TokenCounter)
    #: Where async calls compute their replies: one thread, so concurrent runs never have more than
    #: one CPU-bound thread of this model contending with the event loop for the GIL.
    _cpu_thread: ThreadPoolExecutor = PrivateAttr(
        default_factory=lambda: ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctxpress-builtin-model")
    )

    @model_validator(mode="after")
    def _describe_profile(self) -> BuiltinChatModel:
        # What LangChain's model profiles say of real models; `ctxpress doctor` reads the window here.
        if self.profile is None:
            self.profile = {"max_input_tokens": self.context_window, "tool_calling": True}
        return self

    @property
    def _llm_type(self) -> str:
        return BUILTIN_MODEL_NAME

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {
            "model_name": self.model_name,
            "policy": type(self.policy).__name__,
            "context_window": self.context_window,
        }

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        return LangSmithParams(
            ls_provider=BUILTIN_PROVIDER, ls_model_name=self.model_name, ls_model_type="chat"
        )

    def bind_tools(
        self, tools: Sequence[Any], *, tool_choice: str | None = None, **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(tool) for tool in tools], **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        # One code path: a non-streaming call is the concatenated stream (sync and async alike).
        return generate_from_stream(self._stream(messages, stop, run_manager, **kwargs))

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        yield from self._chunks(messages, run_manager, kwargs)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return generate_from_stream(iter(await self._chunks_in_thread(messages, run_manager, kwargs)))

    async def _chunks_in_thread(
        self, messages: list[BaseMessage], run_manager: CallTags | None, kwargs: dict[str, Any]
    ) -> list[ChatGenerationChunk]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._cpu_thread, functools.partial(self._chunks, messages, run_manager, kwargs)
        )

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        # The reply is CPU work: computed in one hop to this model's own thread, then streamed from
        # the event loop. (LangChain's default would hop to the shared pool for every chunk, and
        # many runs' CPU-bound threads would keep the event loop -- every HTTP request and stream
        # of the process -- waiting for the GIL.)
        for chunk in await self._chunks_in_thread(messages, run_manager, kwargs):
            yield chunk

    def _chunks(
        self, messages: list[BaseMessage], run_manager: CallTags | None, kwargs: dict[str, Any]
    ) -> list[ChatGenerationChunk]:
        """The whole reply as the chunks a stream yields: text, tool calls, then usage."""
        tools: list[dict[str, Any]] = list(kwargs.get("tools") or [])
        input_tokens = self._token_counter.count_request(messages, None, tools, self.token_profile)
        if input_tokens > self.context_window:
            # The wording of OpenAI-compatible servers, so logs read the same as with a real model.
            raise ContextOverflowError(
                f"This model's maximum context length is {self.context_window} tokens. However, your "
                f"messages resulted in {input_tokens} tokens."
            )
        reply = self._reply(messages, tools, run_manager)
        chunks = [
            ChatGenerationChunk(
                message=AIMessageChunk(content=reply.text[start : start + STREAM_CHUNK_CHARS])
            )
            for start in range(0, len(reply.text), STREAM_CHUNK_CHARS)
        ]
        if reply.tool_calls:
            calls = [
                tool_call_chunk(
                    name=call["name"],
                    args=json.dumps(call["args"], ensure_ascii=False),
                    id=call["id"],
                    index=i,
                )
                for i, call in enumerate(reply.tool_calls)
            ]
            chunks.append(ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=calls)))
        output_tokens = estimate_tokens(reply.text, self.token_profile) + sum(
            estimate_tokens(json.dumps(call["args"], ensure_ascii=False), self.token_profile)
            for call in reply.tool_calls
        )
        chunks.append(
            ChatGenerationChunk(
                message=AIMessageChunk(
                    content="",
                    usage_metadata={
                        "input_tokens": input_tokens,
                        "output_tokens": output_tokens,
                        "total_tokens": input_tokens + output_tokens,
                    },
                    response_metadata={"model_name": self.model_name, "model_provider": BUILTIN_PROVIDER},
                    chunk_position="last",
                )
            )
        )
        return chunks

    def _reply(
        self,
        messages: list[BaseMessage],
        tools: list[dict[str, Any]],
        run_manager: CallTags | None,
    ) -> BuiltinReply:
        if is_summary_call(messages, run_manager):
            return BuiltinReply(write_summary(messages[-1].text, BUILTIN_LABEL))
        tool_names = [spec["function"]["name"] for spec in tools if "function" in spec]
        return self.policy.reply(messages, tool_names)


def is_summary_call(messages: Sequence[BaseMessage], run_manager: CallTags | None) -> bool:
    """The compression middleware's summary request: tagged so, or (untraced) shaped so."""
    if run_manager is not None:
        key, value = SUMMARY_CALL_METADATA
        return SUMMARY_CALL_TAG in (run_manager.tags or []) or (run_manager.metadata or {}).get(key) == value
    return (
        len(messages) == 1
        and isinstance(messages[0], HumanMessage)
        and looks_like_summary_prompt(messages[0].text)
    )


def replay_summary_model(threshold_tokens: int) -> BuiltinChatModel:
    """The built-in model for replays: a window that its bounded summary request always fits."""
    return BuiltinChatModel(context_window=max(DEFAULT_CONTEXT_WINDOW, threshold_tokens * 2))
