"""Agents files (TOML) and the registry of canonical compiled graphs."""

from __future__ import annotations

import tomllib
from importlib.resources import files
from pathlib import Path

import pytest
from langchain.agents.middleware import ModelCallLimitMiddleware
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from ctxpress.app.models import BuiltinChatModel
from ctxpress.app.server.agents_file import (
    AgentConfigError,
    AgentDefinition,
    ModelSpec,
    default_agent,
    load_agents_file,
    parse_agents,
)
from ctxpress.app.server.runtime.agents import AgentRegistry, agent_middleware
from ctxpress.app.server.runtime.workdirs import ConversationWorkdirs
from ctxpress.middleware import DEFAULT_SUMMARY_TIMEOUT_S, ContextCompressionMiddleware

AGENTS_TOML = """
[agents.kb]
default = true
description = "知识库助手"
system_prompt = "你是知识库助手。"
tools = ["ask_user", "read_file"]
capabilities = ["context_compression"]
summary_timeout = 45

[agents.kb.model]
model = "openai:Qwen/Qwen3-8B"
base_url = "http://127.0.0.1:9/v1"
usage_provider = "SiliconFlow-CN"
kwargs = { temperature = 0 }

[agents.kb.compression]
summary_threshold = 64
summary_keep_messages = 6

[agents.plain]
model = "builtin"
capabilities = []
"""


def test_an_agents_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "agents.toml"
    path.write_text(AGENTS_TOML, encoding="utf-8")
    kb, plain = load_agents_file(path)
    assert kb.name == "kb" and kb.default and kb.model.label == "openai:Qwen/Qwen3-8B"
    assert kb.model.provider == "siliconflow-cn" and kb.compression.threshold_tokens == 64 * 1024
    assert kb.compression.summary_keep_messages == 6 and kb.tools == ("ask_user", "read_file")
    assert plain.model.is_builtin and plain.model.provider == "ctxpress" and plain.capabilities == ()
    assert kb.summary_timeout == 45.0 and plain.summary_timeout == DEFAULT_SUMMARY_TIMEOUT_S


@tool
def _stand_in_query_kb(query: str) -> str:
    """Search the knowledge base."""
    return query


def test_the_shipped_example_is_valid(tmp_path: Path) -> None:
    example = files("ctxpress.app.server").joinpath("agents.example.toml")
    definitions = parse_agents(tomllib.loads(example.read_text(encoding="utf-8")))
    registry = AgentRegistry(
        definitions,
        checkpointer=InMemorySaver(),
        workdirs=ConversationWorkdirs(tmp_path),
        extra_tools={"query_kb": _stand_in_query_kb},  # the service's tool, as `ctxpress serve` adds it
    )
    assert "query_kb" in definitions[1].tools and definitions[1].compression.summary_threshold == 4
    assert registry.default_name == "kb" and [agent.name for agent in registry.all()] == ["kb", "offline"]
    assert definitions[0].summary_timeout == 120.0, "the example documents the per-agent summary timeout"


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("[agents.kb]\nmodle = 'x'\n", "agents.kb: modle"),
        ("[agents.kb]\ncapabilities = ['teleport']\n", "capabilities"),
        ("[agents.kb.compression]\nsummary_prompt = 'no placeholder'\n", "{messages}"),
        ("[agents.KB]\n", "agent names"),
        ("[agent.kb]\n", "unknown top-level keys"),
        ("title = 'x'\n", "unknown top-level keys"),
        ("[agents]\n", "at least one agent"),
        ("[agents.kb]\nsummary_timeout = 0\n", "summary_timeout: Input should be greater than 0"),
        ("[agents.kb]\nsummary_timeout = -5\n", "summary_timeout: Input should be greater than 0"),
        ("[agents.kb]\nsummary_timeout = inf\n", "summary_timeout"),
        ("[agents.kb]\nsummary_timeout = 'soon'\n", "summary_timeout"),
    ],
)
def test_mistakes_are_reported_at_load(document: str, message: str) -> None:
    with pytest.raises(AgentConfigError, match=message.replace("{", r"\{").replace("}", r"\}")):
        parse_agents(tomllib.loads(document))


def test_the_registry_builds_each_graph_once(tmp_path: Path) -> None:
    definitions = parse_agents(tomllib.loads(AGENTS_TOML))
    registry = AgentRegistry(
        definitions, checkpointer=InMemorySaver(), workdirs=ConversationWorkdirs(tmp_path)
    )
    assert registry.default_name == "kb"
    assert registry.graph("kb") is registry.graph("kb") is registry.get("kb").graph  # type: ignore[union-attr]
    kb, plain = registry.get("kb"), registry.get("plain")
    assert kb is not None and plain is not None
    assert kb.main_usage_provider == "siliconflow-cn" and kb.summary_usage_provider == "siliconflow-cn"
    assert plain.builtin_model and plain.notice and not kb.builtin_model
    with pytest.raises(KeyError):
        registry.graph("missing")


def test_registry_errors_name_the_agent(tmp_path: Path) -> None:
    workdirs = ConversationWorkdirs(tmp_path)
    with pytest.raises(AgentConfigError, match="agent 'kb': unknown tool 'nope'"):
        AgentRegistry(
            [AgentDefinition(name="kb", tools=("nope",))], checkpointer=InMemorySaver(), workdirs=workdirs
        )
    with pytest.raises(AgentConfigError, match="defined twice"):
        AgentRegistry([default_agent(), default_agent()], checkpointer=InMemorySaver(), workdirs=workdirs)
    missing_key = AgentDefinition(
        name="kb", model=ModelSpec(model="openai:gpt-4o-mini", api_key_env="CTXPRESS_TEST_UNSET_KEY")
    )
    with pytest.raises(AgentConfigError, match="CTXPRESS_TEST_UNSET_KEY"):
        AgentRegistry([missing_key], checkpointer=InMemorySaver(), workdirs=workdirs)


def test_compression_middleware_comes_first_with_the_capability(tmp_path: Path) -> None:
    workdirs = ConversationWorkdirs(tmp_path)
    summary = BuiltinChatModel()
    extra = ModelCallLimitMiddleware(run_limit=5)
    agent = default_agent().model_copy(update={"extra_middleware": (extra,)})
    first, second = agent_middleware(agent, summary_model=summary, workdirs=workdirs)
    assert isinstance(first, ContextCompressionMiddleware) and second is extra
    assert first.config == agent.compression and first.summary_model is summary
    assert first.summary_timeout == agent.summary_timeout == DEFAULT_SUMMARY_TIMEOUT_S
    without = agent.model_copy(update={"capabilities": ()})
    assert agent_middleware(without, summary_model=summary, workdirs=workdirs) == [extra]


def test_the_agents_summary_timeout_reaches_its_compression_middleware(tmp_path: Path) -> None:
    """The per-agent setting (agents file or Python), not a service-wide constant, bounds the summary call."""
    kb = parse_agents(tomllib.loads(AGENTS_TOML))[0]
    workdirs = ConversationWorkdirs(tmp_path)
    [middleware] = agent_middleware(kb, summary_model=BuiltinChatModel(), workdirs=workdirs)
    assert isinstance(middleware, ContextCompressionMiddleware) and middleware.summary_timeout == 45.0
    unbounded = AgentDefinition(name="python", summary_timeout=None)
    [middleware] = agent_middleware(unbounded, summary_model=BuiltinChatModel(), workdirs=workdirs)
    assert isinstance(middleware, ContextCompressionMiddleware) and middleware.summary_timeout is None
