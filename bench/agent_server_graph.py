"""The default agent's graph for LangGraph's Agent Server: the peer of `bench/service_load.py` (issue 17).

`langgraph dev` imports this file (its `langgraph.json` names `graph` below) in the benchmark's own
virtualenv for the Agent Server (`bench/agent_server.py`). The graph is the one `ctxpress serve`
builds for its default agent (`runtime/agents._build_runtime`): the built-in offline model, the same
prompt and tools (`query_kb` over a knowledge base of the built-in documents, the workdir file tools),
the same middleware -- ctxpress's compression middleware (unless `CTXPRESS_AGENT_SERVER_COMPRESSION=0`),
the storable-state check and the overflow mapping -- and no checkpointer: the Agent Server supplies
its own (in memory).

What the service would give it and the Agent Server cannot:

- a data directory: `CTXPRESS_AGENT_SERVER_DATA` (the knowledge base's SQLite file and the threads'
  workdirs, `<data>/workdirs/<thread id as 32 hex digits>/`, as the service lays them out);
- the storable-state check asks LangGraph's default serializer (the service asks its checkpointer's);
- the pressure figures the middleware publishes go onto the run's `custom` stream, which the
  benchmark does not ask for (the service records them).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph.state import CompiledStateGraph

from ctxpress.app.kb.tools import retrieval_tools
from ctxpress.app.server.agents_file import CONTEXT_COMPRESSION, default_agent
from ctxpress.app.server.knowledge import open_knowledge_base
from ctxpress.app.server.runtime.agents import agent_middleware
from ctxpress.app.server.runtime.storable_state import StorableStateMiddleware
from ctxpress.app.server.runtime.tools import resolve_tools
from ctxpress.app.server.runtime.workdirs import ConversationWorkdirs, WorkdirQuota
from ctxpress.app.server.settings import Settings
from ctxpress.compaction import CompactionCache
from ctxpress.overflow import OverflowMappingMiddleware
from ctxpress.tokens import TokenCounter
from ctxpress.workdir import LocalWorkdir

DATA_ENV = "CTXPRESS_AGENT_SERVER_DATA"
COMPRESSION_ENV = "CTXPRESS_AGENT_SERVER_COMPRESSION"


class ThreadWorkdirs(ConversationWorkdirs):
    """The service's workdirs for Agent Server threads, whose ids are UUIDs in their dashed form (the
    service's conversation ids are the same UUIDs as 32 hex digits)."""

    def for_conversation(self, conversation_id: str) -> LocalWorkdir:
        return super().for_conversation(uuid.UUID(conversation_id).hex)


def build_graph(data_dir: Path, *, compression: bool = True) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The default agent as `ctxpress serve` builds it, without a checkpointer."""
    settings = Settings(data_dir=data_dir)
    definition = default_agent()
    if not compression:
        capabilities = tuple(c for c in definition.capabilities if c != CONTEXT_COMPRESSION)
        definition = definition.model_copy(update={"capabilities": capabilities})
    workdirs = ThreadWorkdirs(
        settings.workdirs_dir,
        quota=WorkdirQuota(
            max_file_bytes=settings.workdir_max_file_bytes, max_workdir_bytes=settings.workdir_max_bytes
        ),
    )
    retrieval = retrieval_tools(open_knowledge_base(settings))
    model = definition.model.build()
    tools = resolve_tools(definition.tools, workdirs, retrieval.available, retrieval.unavailable)
    middleware = agent_middleware(
        definition, summary_model=model, workdirs=workdirs, counter=TokenCounter(), cache=CompactionCache()
    )
    return create_agent(
        model,
        tools,
        system_prompt=definition.system_prompt,
        middleware=[*middleware, StorableStateMiddleware(JsonPlusSerializer()), OverflowMappingMiddleware()],
        name=definition.name,
    )


# The Agent Server takes a compiled graph from a module attribute (a function would be taken for a
# factory and called again for every run). Only there: the benchmark imports this module for its names.
if DATA_ENV in os.environ:
    graph = build_graph(Path(os.environ[DATA_ENV]), compression=os.environ.get(COMPRESSION_ENV) != "0")
