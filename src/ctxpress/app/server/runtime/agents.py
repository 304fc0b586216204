"""The agent registry: each configured agent built once into its canonical compiled graph (S19).

Each agent's graph is compiled once, with the service's checkpointer, and reused by every run,
by state reads and by manual compression (`AgentRegistry.graph(name)`). The definitions come from
the agents file (`ctxpress.app.server.agents_file`) or from Python.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware.types import AgentMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.state import CompiledStateGraph

from ctxpress.app.models import BUILTIN_NOTICE
from ctxpress.app.server.agents_file import CONTEXT_COMPRESSION, AgentConfigError, AgentDefinition
from ctxpress.app.server.runtime.pressure_recording import publish_pressure
from ctxpress.app.server.runtime.storable_state import StorableStateMiddleware
from ctxpress.app.server.runtime.tools import resolve_tools
from ctxpress.app.server.runtime.workdirs import ConversationWorkdirs
from ctxpress.compaction import CompactionCache
from ctxpress.config import CompressionConfig
from ctxpress.middleware import ContextCompressionMiddleware
from ctxpress.overflow import OverflowMappingMiddleware
from ctxpress.tokens import TokenCounter

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AgentRuntime:
    """A configured agent, built: what runs, state reads and manual compression need of it."""

    definition: AgentDefinition
    #: The canonical compiled graph: runs, state reads and manual compression all go through it.
    graph: CompiledStateGraph[Any, Any, Any, Any]
    main_model: BaseChatModel
    #: The model summaries are made with (the main model unless `summary_model` is configured).
    summary_model: BaseChatModel
    #: The tools as given to `create_agent` (their schemas count in the request pressure).
    tools: list[BaseTool | Callable[..., Any]]
    main_usage_provider: str | None
    summary_usage_provider: str | None
    #: The caches of the agent's middleware, shared with manual compression and the status panel so
    #: that they count and compact the same thread warm.
    token_counter: TokenCounter
    compaction_cache: CompactionCache

    @property
    def compression(self) -> CompressionConfig:
        return self.definition.compression

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def builtin_model(self) -> bool:
        return self.definition.model.is_builtin

    @property
    def notice(self) -> str | None:
        notices = [*((BUILTIN_NOTICE,) if self.builtin_model else ()), *self.definition.notices]
        return " ".join(notices) or None


def thread_config(conversation_id: str) -> RunnableConfig:
    """The LangGraph config addressing a conversation's thread (thread id = conversation id)."""
    return {"configurable": {"thread_id": conversation_id}}


class AgentRegistry:
    """Builds every agent's graph once at start (configuration errors surface before serving)."""

    def __init__(
        self,
        definitions: Sequence[AgentDefinition],
        *,
        checkpointer: BaseCheckpointSaver[Any],
        workdirs: ConversationWorkdirs,
        extra_tools: Mapping[str, BaseTool] | None = None,
        unavailable_tools: Mapping[str, str] | None = None,
    ) -> None:
        """`extra_tools`: the service's named tools (`query_kb`, `web_search`); `unavailable_tools`:
        why a known optional tool is missing (named in the error when an agent asks for it)."""
        if not definitions:
            raise AgentConfigError("no agents defined")
        names = [definition.name for definition in definitions]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise AgentConfigError(f"agents defined twice: {', '.join(duplicates)}")
        defaults = [definition.name for definition in definitions if definition.default]
        if len(defaults) > 1:
            raise AgentConfigError(f"more than one default agent: {', '.join(defaults)}")
        self.default_name = defaults[0] if defaults else definitions[0].name
        #: The service's one checkpointer, shared by every agent's graph (pruned per thread).
        self.checkpointer = checkpointer
        self._agents: dict[str, AgentRuntime] = {}
        for definition in definitions:
            try:
                self._agents[definition.name] = _build_runtime(
                    definition, checkpointer, workdirs, extra_tools or {}, unavailable_tools or {}
                )
            except AgentConfigError as exc:
                raise AgentConfigError(f"agent {definition.name!r}: {exc}") from None
            except ValueError as exc:  # unknown or unimportable tools
                raise AgentConfigError(f"agent {definition.name!r}: {exc}") from None
            if definition.model.is_builtin:
                logger.warning("agent %r: %s", definition.name, BUILTIN_NOTICE)

    def get(self, name: str) -> AgentRuntime | None:
        return self._agents.get(name)

    def graph(self, name: str) -> CompiledStateGraph[Any, Any, Any, Any]:
        """The canonical compiled graph of agent `name` (`aget_state` / `aupdate_state` go through it)."""
        runtime = self._agents.get(name)
        if runtime is None:
            raise KeyError(f"no agent named {name!r} is configured")
        return runtime.graph

    def all(self) -> list[AgentRuntime]:
        return list(self._agents.values())


def agent_middleware(
    definition: AgentDefinition,
    *,
    summary_model: BaseChatModel,
    workdirs: ConversationWorkdirs,
    counter: TokenCounter | None = None,
    cache: CompactionCache | None = None,
) -> list[AgentMiddleware[Any, Any]]:
    middleware: list[AgentMiddleware[Any, Any]] = []
    if definition.has_capability(CONTEXT_COMPRESSION):
        # First (outermost), as the middleware asks: a ContextOverflowError from the model must reach it.
        middleware.append(
            ContextCompressionMiddleware(
                definition.compression,
                workdir=workdirs.for_model_request,
                summary_model=summary_model,
                summary_timeout=definition.summary_timeout,
                # Each main-model request's size goes onto the run's stream; the executor records it (S22).
                on_pressure=publish_pressure,
                counter=counter,
                cache=cache,
            )
        )
    middleware.extend(definition.extra_middleware)
    return middleware


def _build_runtime(
    definition: AgentDefinition,
    checkpointer: BaseCheckpointSaver[Any],
    workdirs: ConversationWorkdirs,
    extra_tools: Mapping[str, BaseTool],
    unavailable_tools: Mapping[str, str],
) -> AgentRuntime:
    main_model = definition.model.build()
    summary_spec = definition.summary_model or definition.model
    summary_model = main_model if definition.summary_model is None else summary_spec.build()
    tools = resolve_tools(definition.tools, workdirs, extra_tools, unavailable_tools)
    counter, cache = TokenCounter(), CompactionCache()
    graph = create_agent(
        main_model,
        tools,
        system_prompt=definition.system_prompt,
        middleware=[
            *agent_middleware(
                definition, summary_model=summary_model, workdirs=workdirs, counter=counter, cache=cache
            ),
            # Replies and tool results the checkpointer could not store are repaired in their node,
            # before the chat record sees them (the two would disagree otherwise).
            StorableStateMiddleware(checkpointer.serde),
            # Innermost: real servers word "context exceeded" in many ways (llama.cpp, vLLM, Ollama,
            # DeepSeek, SiliconFlow…); only a ContextOverflowError reaches the forced summary (S6).
            OverflowMappingMiddleware(),
        ],
        checkpointer=checkpointer,
        name=definition.name,
    )
    return AgentRuntime(
        definition=definition,
        graph=graph,
        main_model=main_model,
        summary_model=summary_model,
        tools=tools,
        main_usage_provider=definition.model.provider,
        summary_usage_provider=summary_spec.provider,
        token_counter=counter,
        compaction_cache=cache,
    )
