"""`CompressionConfig`: the four settings of the spec's configuration table, validated at load time.

Every error a user can make here (a prompt without `{messages}`, a zero threshold, a string where a
number belongs) is reported when the config is loaded, never at the first compression.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ctxpress.tokens import PROFILE_NAMES
from ctxpress.tokens.exact import check_exact_profile, is_exact_profile

MESSAGES_PLACEHOLDER = "{messages}"

#: Tokens per "K" of `summary_threshold` (the spec converts K at assembly with 1024).
TOKENS_PER_K = 1024

DEFAULT_SUMMARY_PROMPT = """你是一个对话压缩助手。下面是一段智能体与用户之间较早的对话记录（包括工具调用与工具结果）。
请把它压缩成一份简洁、准确的中文摘要，供智能体继续完成任务时使用。摘要必须保留：
1. 用户的目标、要求和约束条件；
2. 已经做出的决定和得出的结论；
3. 关键的标识符、文件路径、数字、日期和名称（原样保留，不要改写）；
4. 已调用过的工具及其重要结果，以及尚未完成的事项。
不要编造记录中没有的内容；不要输出与任务无关的寒暄。

对话记录：
{messages}

请直接输出摘要："""


ENV_PREFIX = "CTXPRESS_"


class CompressionConfig(BaseModel):
    """Settings of automatic and manual context compression (spec: configuration table, S23).

    Loadable from keyword arguments, a mapping, a JSON or TOML document / section, and from
    environment variables with the `CTXPRESS_` prefix (`CTXPRESS_SUMMARY_THRESHOLD=64`).
    """

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        validate_default=True,
    )

    summary_threshold: float = Field(
        default=100,
        ge=1 / TOKENS_PER_K,  # at least one token: a threshold of 0 would mean "always compress"
        le=1_000_000,
        description="The one pressure threshold, in K (1 K = 1024 approximate tokens).",
    )
    summary_keep_messages: int = Field(
        default=10, ge=1, le=100_000, description="Recent messages preferably kept after a summary."
    )
    summary_prompt: str = Field(
        default=DEFAULT_SUMMARY_PROMPT,
        description="Summary prompt; must contain {messages}. Other braces are literal text.",
    )
    summary_tool_result_token_limit: int = Field(
        default=300,
        ge=0,
        le=10_000_000,
        description="Approximate token size above which a tool result is offloaded; also the preview cap.",
    )
    token_profile: str = Field(
        default="default",
        description=(
            "Tokenizer family whose coefficients the estimate uses (default, cl100k, o200k, qwen, "
            "deepseek), or a real tokenizer counting exactly: tiktoken:<encoding>, tokenizer.json:<path>."
        ),
    )

    @field_validator(
        "summary_threshold", "summary_keep_messages", "summary_tool_result_token_limit", mode="before"
    )
    @classmethod
    def _not_a_boolean(cls, value: Any) -> Any:
        # JSON/TOML `true` would otherwise be read as 1 by pydantic's lax mode.
        if isinstance(value, bool):
            raise ValueError("must be a number, not a boolean")
        return value

    @field_validator("summary_prompt")
    @classmethod
    def _prompt_has_messages_placeholder(cls, prompt: str) -> str:
        if MESSAGES_PLACEHOLDER not in prompt:
            raise ValueError(
                "summary_prompt must contain the placeholder {messages}, where the conversation "
                "to summarise is inserted (any other braces are kept as literal text)"
            )
        return prompt

    @field_validator("token_profile")
    @classmethod
    def _known_profile(cls, profile: str) -> str:
        if is_exact_profile(profile):
            check_exact_profile(profile)  # the package and the file are here, offline
            return profile
        if profile not in PROFILE_NAMES:
            raise ValueError(
                f"unknown token_profile {profile!r}; choose one of {', '.join(PROFILE_NAMES)}, "
                "or name a real tokenizer: tiktoken:<encoding>, tokenizer.json:<path>"
            )
        return profile

    @property
    def threshold_tokens(self) -> int:
        """The threshold in approximate tokens (`summary_threshold * 1024`)."""
        return int(self.summary_threshold * TOKENS_PER_K)

    def render_summary_prompt(self, messages_text: str) -> str:
        """Substitute only `{messages}`; braces anywhere else (JSON examples, `{foo}`) stay literal."""
        return self.summary_prompt.replace(MESSAGES_PLACEHOLDER, messages_text)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> CompressionConfig:
        """Build from a plain mapping (a TOML/JSON section), ignoring the environment."""
        return cls.model_validate(dict(data))

    @classmethod
    def from_json(cls, text: str) -> CompressionConfig:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("a compression config in JSON must be an object")
        return cls.from_mapping(data)

    @classmethod
    def from_toml(cls, source: str | Path, section: str | None = None) -> CompressionConfig:
        """Load from TOML text or a `.toml` file; `section` is a dotted table path (`agents.kb.compression`)."""
        text = source.read_text(encoding="utf-8") if isinstance(source, Path) else source
        data: Any = tomllib.loads(text)
        for key in section.split(".") if section else []:
            if not isinstance(data, dict) or key not in data:
                raise ValueError(f"TOML has no table [{section}]")
            data = data[key]
        if not isinstance(data, dict):
            raise ValueError(f"[{section}] must be a table")
        return cls.from_mapping(data)

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, base: Mapping[str, Any] | None = None
    ) -> CompressionConfig:
        """`base` values (or defaults) overridden by `CTXPRESS_<FIELD>` environment variables."""
        env = os.environ if environ is None else environ
        data = dict(base or {})
        for name in cls.model_fields:
            value = env.get(ENV_PREFIX + name.upper())
            if value is not None:
                data[name] = value
        return cls.from_mapping(data)
