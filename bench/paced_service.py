"""The chat service with a model that streams with real timing, for `bench/streaming_load.py`:

    python bench/paced_service.py PORT

Settings from the `CTXPRESS_*` environment, like `ctxpress serve`; one agent without tools whose
model streams `CTXPRESS_BENCH_TOKENS` tokens at `CTXPRESS_BENCH_TOKENS_PER_S` (asyncio sleeps: an
async provider waiting on its socket). Each token is `<milliseconds since the epoch>;` at the moment
it is produced, so the load generator measures each token's delivery lag from the text it receives.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable

from ctxpress.app.server.agents_file import AgentDefinition, ModelSpec
from ctxpress.app.server.app import create_app
from ctxpress.app.server.http_serving import serve_http
from ctxpress.app.server.settings import Settings

TOKENS_ENV = "CTXPRESS_BENCH_TOKENS"
RATE_ENV = "CTXPRESS_BENCH_TOKENS_PER_S"


def token_now() -> str:
    return f"{time.time() * 1000:.0f};"


class PacedTokenModel(BaseChatModel):
    tokens: int = 100
    tokens_per_s: float = 50.0

    @property
    def _llm_type(self) -> str:
        return "paced"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(
            generations=[ChatGeneration(message=AIMessage("".join(token_now() for _ in range(3))))]
        )

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        interval = 1 / self.tokens_per_s
        started = time.monotonic()
        for index in range(self.tokens):
            # On schedule (sleep to the token's due time, not a fixed pause after the last one).
            await asyncio.sleep(max(0.0, started + (index + 1) * interval - time.monotonic()))
            yield ChatGenerationChunk(message=AIMessageChunk(content=token_now()))
        usage = {"input_tokens": 50, "output_tokens": self.tokens, "total_tokens": 50 + self.tokens}
        yield ChatGenerationChunk(
            message=AIMessageChunk(content="", usage_metadata=usage, chunk_position="last")
        )


def paced_agent() -> AgentDefinition:
    model = PacedTokenModel(
        tokens=int(os.environ.get(TOKENS_ENV, "100")), tokens_per_s=float(os.environ.get(RATE_ENV, "50"))
    )
    return AgentDefinition(
        name="paced", default=True, model=ModelSpec(model=model), tools=(), capabilities=()
    )


def main(argv: list[str]) -> None:
    settings = Settings()
    serve_http(
        create_app(settings, agents=[paced_agent()]),
        settings,
        host="127.0.0.1",
        port=int(argv[1]),
        log_level="warning",
    )


if __name__ == "__main__":
    main(sys.argv)
