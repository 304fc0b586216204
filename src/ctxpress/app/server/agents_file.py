"""The agents file: agent definitions (TOML or Python), their validation and the default agent.

An agents file (`ctxpress serve --agents agents.toml`; a documented example: `agents.example.toml`):

    [agents.kb]
    default = true
    description = "知识库助手"
    model = "openai:Qwen/Qwen3-8B"            # any init_chat_model string; or a table, below
    system_prompt = "你是知识库助手……"
    tools = ["ask_user", "list_files", "read_file", "mypackage.tools:query_kb"]
    capabilities = ["context_compression"]
    summary_timeout = 120                      # seconds the summary model may take (S27)

    [agents.kb.model]                          # the long form of `model`
    model = "openai:Qwen/Qwen3-8B"
    base_url = "http://127.0.0.1:8080/v1"      # vLLM, llama.cpp, Ollama, DeepSeek, SiliconFlow …
    api_key_env = "SILICONFLOW_API_KEY"        # the key is read from this variable, never from the file
    usage_provider = "siliconflow-cn"          # the provider name usage is recorded under
    kwargs = { temperature = 0 }

    [agents.kb.summary_model]                  # optional; default: the main model
    model = "openai:Qwen/Qwen3-8B"

    [agents.kb.compression]                    # CompressionConfig
    summary_threshold = 64

Every key is checked when the file is read (`AgentConfigError`); the runtime registry
(`ctxpress.app.server.runtime.agents`) builds each definition into a compiled graph.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from langchain.agents.middleware.types import AgentMiddleware
from langchain.chat_models import init_chat_model
from langchain_core.language_models import BaseChatModel
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ctxpress.app.kb.web_search import web_search_status
from ctxpress.app.models import BUILTIN_MODEL_NAME, BUILTIN_PROVIDER, BuiltinChatModel
from ctxpress.app.server.runtime.tools import ToolSpec
from ctxpress.config import CompressionConfig
from ctxpress.middleware import DEFAULT_SUMMARY_TIMEOUT_S

CONTEXT_COMPRESSION: Final = "context_compression"
Capability = Literal["context_compression"]
BUILTIN_MODEL_SPEC: Final = "builtin"
DEFAULT_AGENT_NAME: Final = "default"
DEFAULT_SYSTEM_PROMPT: Final = (
    "你是一个知识库助手。回答要准确、简洁；不确定时请用 ask_user 工具向用户提问。"
    "需要查看或保存资料时使用工作目录中的文件工具。"
)
DEFAULT_TOOLS: Final = ("ask_user", "list_files", "read_file", "write_file")
#: The default agent: the knowledge base, the workdir tools, and the user (`web_search` when configured).
DEFAULT_AGENT_TOOLS: Final = ("query_kb", "ask_user", "ls", "read_file", "grep", "write_file", "edit_file")
DEFAULT_AGENT_PROMPT: Final = (
    "你是 ctxpress 的知识库助手。先用 query_kb 检索知识库，依据检索结果回答，并注明文档标识和来源；"
    "结果被保存到工作目录时，用 read_file 或 grep 读取需要的部分。用 write_file / edit_file 记录笔记。"
    "问题不清楚时用 ask_user 向用户提问。用用户的语言回答。"
)
#: Environment variable: the built-in model's context window in tokens (default agent only).
BUILTIN_CONTEXT_WINDOW_ENV: Final = "CTXPRESS_BUILTIN_CONTEXT_WINDOW"
_AGENT_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


class AgentConfigError(ValueError):
    """The agents file or an agent definition is invalid (reported at start, never at the first run)."""


class ModelSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    model: str | BaseChatModel = Field(description="init_chat_model string, 'builtin', or a model object.")
    base_url: str | None = None
    api_key_env: str | None = Field(default=None, description="Environment variable holding the API key.")
    usage_provider: str | None = Field(default=None, description="Provider name for usage records.")
    kwargs: dict[str, Any] = Field(default_factory=dict)

    @property
    def is_builtin(self) -> bool:
        return isinstance(self.model, BuiltinChatModel) or self.model == BUILTIN_MODEL_SPEC

    @property
    def label(self) -> str:
        if self.is_builtin:
            return BUILTIN_MODEL_NAME
        if isinstance(self.model, str):
            return self.model
        return (
            getattr(self.model, "model_name", None)
            or getattr(self.model, "model", None)
            or type(self.model).__name__
        )

    @property
    def provider(self) -> str | None:
        """The provider usage is recorded under; None: whatever the model reports (`ls_provider`)."""
        if self.usage_provider:
            return self.usage_provider.lower()
        if self.is_builtin:
            return BUILTIN_PROVIDER
        if isinstance(self.model, str) and ":" in self.model:
            return self.model.split(":", 1)[0].lower()
        return None

    def build(self) -> BaseChatModel:
        if isinstance(self.model, BaseChatModel):
            return self.model
        if self.is_builtin:
            try:
                return BuiltinChatModel(**self.kwargs)  # e.g. kwargs = { context_window = 32768 }
            except ValueError as exc:
                raise AgentConfigError(f"the built-in model's kwargs are invalid: {exc}") from None
        kwargs = dict(self.kwargs)
        if self.base_url:
            kwargs["base_url"] = self.base_url
        if self.api_key_env:
            api_key = os.environ.get(self.api_key_env)
            if not api_key:
                raise AgentConfigError(f"environment variable {self.api_key_env} (api_key_env) is not set")
            kwargs["api_key"] = api_key
        elif self.base_url:
            # Local OpenAI-compatible servers (llama.cpp, vLLM, Ollama) accept any key, but the client needs one.
            kwargs.setdefault("api_key", "not-needed")
        try:
            return init_chat_model(self.model, **kwargs)
        except Exception as exc:
            raise AgentConfigError(f"model {self.model!r} cannot be created: {exc}") from None


def _model_spec_from(value: Any) -> Any:
    if isinstance(value, str | BaseChatModel):
        return {"model": value}
    return value


class AgentDefinition(BaseModel):
    """One agent. Python code may pass model, tool and middleware objects; the TOML file names them."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    name: str
    description: str = ""
    default: bool = False
    model: ModelSpec = Field(default_factory=lambda: ModelSpec(model=BUILTIN_MODEL_SPEC))
    summary_model: ModelSpec | None = Field(default=None, description="Default: the main model.")
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    tools: tuple[ToolSpec, ...] = DEFAULT_TOOLS
    capabilities: tuple[Capability, ...] = (CONTEXT_COMPRESSION,)
    compression: CompressionConfig = Field(default_factory=CompressionConfig)
    #: Seconds a summary call may take before it is abandoned with the S27 error text; None: no limit
    #: (Python only: TOML has no null).
    summary_timeout: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = DEFAULT_SUMMARY_TIMEOUT_S
    #: Shown with the agent in the agent list (e.g. an optional tool that is not configured).
    notices: tuple[str, ...] = ()
    #: Python only: more middleware, placed after (inside) the compression middleware.
    extra_middleware: tuple[AgentMiddleware[Any, Any], ...] = ()

    @field_validator("name")
    @classmethod
    def _valid_name(cls, name: str) -> str:
        if not _AGENT_NAME.fullmatch(name):
            raise ValueError("agent names use a-z, 0-9, '-' and '_' (at most 64 characters)")
        return name

    @field_validator("model", "summary_model", mode="before")
    @classmethod
    def _model_shorthand(cls, value: Any) -> Any:
        return _model_spec_from(value)

    @field_validator("compression", mode="before")
    @classmethod
    def _compression_from_mapping(cls, value: Any) -> Any:
        return CompressionConfig.from_mapping(value) if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _unique_capabilities(self) -> AgentDefinition:
        if len(set(self.capabilities)) != len(self.capabilities):
            raise ValueError("capabilities are listed twice")
        return self

    def has_capability(self, capability: str) -> bool:
        return capability in self.capabilities


def default_agent() -> AgentDefinition:
    """The agent used when no agents file is given: the built-in offline model over the knowledge base
    (`query_kb`) and the workdir tools, compression settings from the environment."""
    web_search = web_search_status()
    context_window = os.environ.get(BUILTIN_CONTEXT_WINDOW_ENV, "").strip()
    try:
        model_kwargs = {"context_window": int(context_window)} if context_window else {}
    except ValueError:
        raise AgentConfigError(f"{BUILTIN_CONTEXT_WINDOW_ENV} must be a number of tokens") from None
    return AgentDefinition(
        name=DEFAULT_AGENT_NAME,
        description="默认知识库助手（内置离线模型）· default knowledge-base assistant (built-in offline model)",
        default=True,
        model=ModelSpec(model=BUILTIN_MODEL_SPEC, kwargs=model_kwargs),
        system_prompt=DEFAULT_AGENT_PROMPT,
        tools=(*DEFAULT_AGENT_TOOLS, *(("web_search",) if web_search.configured else ())),
        compression=CompressionConfig.from_env(),
        notices=(web_search.note,) if web_search.note else (),
    )


#: `ctxpress serve --demo`: a threshold small enough that a few questions show compression.
DEMO_COMPRESSION = CompressionConfig(
    summary_threshold=4, summary_keep_messages=4, summary_tool_result_token_limit=300
)


def demo_agent() -> AgentDefinition:
    """The default agent with a 4 K threshold: two knowledge-base searches show L1 (a result written
    to the workdir), a few more questions an automatic summary (`ctxpress serve --demo`)."""
    agent = default_agent()
    return agent.model_copy(
        update={
            "description": (
                "演示：4K 阈值，几条消息就能看到压缩 · demo: a 4K threshold shows compression within a few messages"
            ),
            "compression": DEMO_COMPRESSION,
        }
    )


def load_agents_file(path: Path) -> list[AgentDefinition]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AgentConfigError(f"{path.name}: cannot be read: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise AgentConfigError(f"{path.name}: not valid TOML: {exc}") from None
    return parse_agents(data, source=path.name)


def parse_agents(data: dict[str, Any], *, source: str = "agents") -> list[AgentDefinition]:
    unknown = set(data) - {"agents"}
    if unknown:
        raise AgentConfigError(
            f"{source}: unknown top-level keys {sorted(unknown)}; agents go in [agents.NAME]"
        )
    tables = data.get("agents")
    if not isinstance(tables, dict) or not tables:
        raise AgentConfigError(f"{source}: define at least one agent as a table [agents.NAME]")
    definitions = []
    for name, table in tables.items():
        if not isinstance(table, dict):
            raise AgentConfigError(f"{source}: agents.{name} must be a table")
        if "extra_middleware" in table:
            raise AgentConfigError(f"{source}: agents.{name}: extra_middleware can only be given from Python")
        try:
            definitions.append(AgentDefinition.model_validate({**table, "name": name}))
        except ValidationError as exc:
            raise AgentConfigError(f"{source}: agents.{name}: {_describe_validation_error(exc)}") from None
    return definitions


def _describe_validation_error(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or 'value'}: {error['msg']}" for error in exc.errors()
    )
