"""ContextCompressionMiddleware. PLACEHOLDER signature while the flow is being written."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware.types import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.language_models import BaseChatModel

from ctxpress.config import CompressionConfig
from ctxpress.workdir import Workdir

WorkdirResolver = Callable[[ModelRequest], Workdir]


class ContextCompressionMiddleware(AgentMiddleware):
    def __init__(
        self,
        config: CompressionConfig,
        *,
        workdir: Workdir | WorkdirResolver,
        summary_model: BaseChatModel | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self._workdir = workdir
        self.summary_model = summary_model

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> Any:
        return handler(request)

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> Any:
        return await handler(request)
