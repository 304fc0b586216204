"""`CompressionConfig`: the configuration table of the spec (S23), validated at load time."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from pydantic import ValidationError

from ctxpress import ContextCompressionMiddleware, LocalWorkdir
from ctxpress.config import DEFAULT_SUMMARY_PROMPT, CompressionConfig
from ctxpress.tokens import count_request_tokens
from tests.fakes import ScriptedChatModel

FIELDS = ("summary_threshold", "summary_keep_messages", "summary_prompt", "summary_tool_result_token_limit")


def error_fields(exc: ValidationError) -> set[str]:
    return {str(part) for error in exc.errors() for part in error["loc"]}


# --- defaults and the K -> tokens conversion -------------------------------------------------


def test_s23_defaults_match_the_configuration_table() -> None:
    config = CompressionConfig()
    assert config.summary_threshold == 100
    assert config.summary_keep_messages == 10
    assert config.summary_tool_result_token_limit == 300
    assert config.summary_prompt == DEFAULT_SUMMARY_PROMPT
    # The built-in template is Chinese and has the one placeholder.
    assert "{messages}" in config.summary_prompt
    assert any("\u4e00" <= ch <= "\u9fff" for ch in config.summary_prompt)


@pytest.mark.parametrize("k", [1, 8, 64, 100, 128, 1.5, 0.5, 1000])
def test_s23_threshold_tokens_is_summary_threshold_times_1024(k: float) -> None:
    config = CompressionConfig(summary_threshold=k)
    assert config.threshold_tokens == int(k * 1024)
    assert isinstance(config.threshold_tokens, int)


def _compression_events(config: CompressionConfig, text: str, root: Path) -> list[dict[str, Any]]:
    """The compression events of one turn whose user message is `text` (a real agent graph)."""
    middleware = ContextCompressionMiddleware(
        config, workdir=LocalWorkdir(root), summary_model=ScriptedChatModel()
    )
    agent = create_agent(ScriptedChatModel(), [], middleware=[middleware])
    return [
        payload
        for payload in agent.stream({"messages": [HumanMessage(text)]}, stream_mode="custom")
        if payload.get("type") == "context_compression"
    ]


def test_s23_lower_threshold_enters_compression_earlier(tmp_path: Path) -> None:
    """A request between 32 K and the default 100 K tokens: compressed at 32, not at the default."""
    text = "The quarterly revenue grew 12% year over year. " * 5000
    size = count_request_tokens([HumanMessage(text)])
    assert 32 * 1024 < size < 100 * 1024, size  # the premise
    assert _compression_events(CompressionConfig(), text, tmp_path / "default") == []
    lower = _compression_events(CompressionConfig(summary_threshold=32), text, tmp_path / "lower")
    assert [(e["status"], e["threshold"]) for e in lower[:1]] == [("started", 32 * 1024)]


def test_config_is_immutable() -> None:
    config = CompressionConfig()
    with pytest.raises(ValidationError):
        config.summary_threshold = 5  # type: ignore[misc]


# --- the summary prompt ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "prompt",
    [
        "Summarise the conversation.",
        "Summarise: {message}",
        "Summarise: { messages }",
        "Summarise: {MESSAGES}",
        "Summarise: messages",
        "",
    ],
)
def test_s23_prompt_without_messages_placeholder_is_rejected_at_load(prompt: str) -> None:
    with pytest.raises(ValidationError) as caught:
        CompressionConfig(summary_prompt=prompt)
    assert "summary_prompt" in error_fields(caught.value)
    assert "{messages}" in str(caught.value)


def test_s23_prompt_without_placeholder_rejected_from_every_source(tmp_path: Path) -> None:
    bad = "请总结以下内容。"
    with pytest.raises(ValidationError, match=r"\{messages\}"):
        CompressionConfig.from_mapping({"summary_prompt": bad})
    with pytest.raises(ValidationError, match=r"\{messages\}"):
        CompressionConfig.from_json(json.dumps({"summary_prompt": bad}, ensure_ascii=False))
    with pytest.raises(ValidationError, match=r"\{messages\}"):
        CompressionConfig.from_toml(f'summary_prompt = "{bad}"\n')
    with pytest.raises(ValidationError, match=r"\{messages\}"):
        CompressionConfig.from_env(environ={"CTXPRESS_SUMMARY_PROMPT": bad})


def test_s23_other_braces_are_literal_and_only_messages_is_substituted() -> None:
    prompt = (
        '输出 JSON，例如 {"summary": "...", "todo": [1, 2]}；占位符 {foo} 和 {0} 以及 {{x}} 原样保留。\n'
        "对话：{messages}\n结束 {messages_count} {}"
    )
    config = CompressionConfig(summary_prompt=prompt)
    conversation = "用户：帮我订酒店 {room: 2}\n助手：好的 {messages} {foo}"
    rendered = config.render_summary_prompt(conversation)
    before, _, after = prompt.partition("{messages}")
    assert rendered == before + conversation + after
    # Literal braces survive; the inserted text is not substituted again.
    assert '{"summary": "...", "todo": [1, 2]}' in rendered
    assert "{foo} 和 {0} 以及 {{x}}" in rendered
    assert "{messages_count} {}" in rendered
    assert rendered.count(conversation) == 1


def test_s23_default_prompt_renders_conversation() -> None:
    rendered = CompressionConfig().render_summary_prompt("USER: hi")
    assert "USER: hi" in rendered
    assert "{messages}" not in rendered


def test_s23_every_messages_placeholder_is_substituted() -> None:
    config = CompressionConfig(summary_prompt="A {messages} B {messages} C")
    assert config.render_summary_prompt("x") == "A x B x C"


# --- bad types and ranges --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("summary_threshold", 0),
        ("summary_threshold", -1),
        ("summary_threshold", -0.5),
        ("summary_threshold", 10**12),
        ("summary_threshold", math.inf),
        ("summary_threshold", math.nan),
        ("summary_threshold", "abc"),
        ("summary_threshold", "100K"),
        ("summary_threshold", None),
        ("summary_threshold", [100]),
        ("summary_keep_messages", 0),
        ("summary_keep_messages", -3),
        ("summary_keep_messages", 10**9),
        ("summary_keep_messages", 2.5),
        ("summary_keep_messages", "ten"),
        ("summary_tool_result_token_limit", -1),
        ("summary_tool_result_token_limit", 10**12),
        ("summary_tool_result_token_limit", 1.5),
        ("summary_tool_result_token_limit", "many"),
        ("summary_prompt", None),
        ("summary_prompt", 42),
        ("token_profile", "gpt-5-secret"),
    ],
)
def test_s23_bad_types_and_ranges_are_rejected_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(ValidationError) as caught:
        CompressionConfig.from_mapping({field: value})
    assert field in error_fields(caught.value)
    assert field in str(caught.value)


def test_s23_zero_tool_result_limit_is_allowed_and_means_always_offload() -> None:
    # The contract says >= 0: 0 offloads every result and keeps only the file reference.
    assert CompressionConfig(summary_tool_result_token_limit=0).summary_tool_result_token_limit == 0
    with pytest.raises(ValidationError):
        CompressionConfig(summary_tool_result_token_limit=-1)


def test_s23_valid_threshold_never_converts_to_zero_tokens() -> None:
    try:
        config = CompressionConfig(summary_threshold=1e-9)
    except ValidationError:
        return
    assert config.threshold_tokens >= 1


@pytest.mark.parametrize("field", ["summary_threshold", "summary_keep_messages"])
def test_s23_boolean_is_not_a_number(field: str) -> None:
    with pytest.raises(ValidationError):
        CompressionConfig.from_json(json.dumps({field: True}))


def test_s23_unknown_key_is_rejected_not_ignored() -> None:
    # A typo must not silently fall back to the default threshold.
    with pytest.raises(ValidationError) as caught:
        CompressionConfig.from_mapping({"summary_treshold": 64})
    assert "summary_treshold" in str(caught.value)


def test_s23_large_but_sane_values_are_accepted() -> None:
    config = CompressionConfig(
        summary_threshold=2048, summary_keep_messages=500, summary_tool_result_token_limit=100_000
    )
    assert config.threshold_tokens == 2048 * 1024


# --- loading from a mapping, JSON, TOML text, a TOML file section, the environment --------------


def test_s23_from_mapping() -> None:
    config = CompressionConfig.from_mapping(
        {"summary_threshold": 64, "summary_keep_messages": 6, "summary_tool_result_token_limit": 500}
    )
    assert (config.summary_threshold, config.summary_keep_messages) == (64, 6)
    assert config.summary_tool_result_token_limit == 500
    assert config.threshold_tokens == 64 * 1024


def test_s23_from_json() -> None:
    text = json.dumps(
        {"summary_threshold": 48.5, "summary_prompt": '总结 {messages}，格式 {"a": 1}'}, ensure_ascii=False
    )
    config = CompressionConfig.from_json(text)
    assert config.summary_threshold == 48.5
    assert config.render_summary_prompt("X") == '总结 X，格式 {"a": 1}'
    assert config.summary_keep_messages == 10  # unspecified keys keep their defaults


@pytest.mark.parametrize("text", ["[1, 2]", '"summary_threshold"', "42", "null"])
def test_s23_from_json_requires_an_object(text: str) -> None:
    with pytest.raises(ValueError, match="object"):
        CompressionConfig.from_json(text)


def test_s23_from_json_malformed_raises_value_error() -> None:
    with pytest.raises(ValueError):
        CompressionConfig.from_json('{"summary_threshold": ')


def test_s23_from_toml_text() -> None:
    config = CompressionConfig.from_toml(
        'summary_threshold = 80\nsummary_keep_messages = 4\nsummary_prompt = """\n'
        '总结：{messages}\n示例 {"k": "v"}\n"""\n'
    )
    assert config.summary_threshold == 80
    assert config.summary_keep_messages == 4
    assert config.render_summary_prompt("对话") == '总结：对话\n示例 {"k": "v"}\n'


TOML_FILE = """
[server]
port = 8080

[agents.kb]
model = "qwen"

[agents.kb.compression]
summary_threshold = 32
summary_keep_messages = 12
summary_tool_result_token_limit = 800
summary_prompt = "请压缩以下对话：{messages}"

[agents.other.compression]
summary_threshold = 999
"""


def test_s23_from_toml_file_section(tmp_path: Path) -> None:
    path = tmp_path / "ctxpress.toml"
    path.write_text(TOML_FILE, encoding="utf-8")
    config = CompressionConfig.from_toml(path, section="agents.kb.compression")
    assert config.summary_threshold == 32
    assert config.summary_keep_messages == 12
    assert config.summary_tool_result_token_limit == 800
    assert config.render_summary_prompt("A") == "请压缩以下对话：A"
    assert config.threshold_tokens == 32 * 1024


@pytest.mark.parametrize("section", ["agents.missing.compression", "agents.kb.nope", "nope"])
def test_s23_from_toml_missing_section_names_the_section(tmp_path: Path, section: str) -> None:
    path = tmp_path / "ctxpress.toml"
    path.write_text(TOML_FILE, encoding="utf-8")
    with pytest.raises(ValueError, match=section.replace(".", r"\.")):
        CompressionConfig.from_toml(path, section=section)


def test_s23_from_toml_section_that_is_not_a_table(tmp_path: Path) -> None:
    path = tmp_path / "ctxpress.toml"
    path.write_text(TOML_FILE, encoding="utf-8")
    with pytest.raises(ValueError, match="table"):
        CompressionConfig.from_toml(path, section="agents.kb.model")


def test_s23_from_toml_section_with_bad_value_is_a_validation_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(
        '[agents.kb.compression]\nsummary_threshold = -5\nsummary_prompt = "x"\n', encoding="utf-8"
    )
    with pytest.raises(ValidationError) as caught:
        CompressionConfig.from_toml(path, section="agents.kb.compression")
    assert {"summary_threshold", "summary_prompt"} <= error_fields(caught.value)


def test_s23_from_toml_malformed_text() -> None:
    with pytest.raises(tomllib.TOMLDecodeError):
        CompressionConfig.from_toml("summary_threshold = = 3")


def test_s23_from_env_with_prefix() -> None:
    config = CompressionConfig.from_env(
        environ={
            "CTXPRESS_SUMMARY_THRESHOLD": "64",
            "CTXPRESS_SUMMARY_KEEP_MESSAGES": "7",
            "CTXPRESS_SUMMARY_TOOL_RESULT_TOKEN_LIMIT": "450",
            "CTXPRESS_SUMMARY_PROMPT": "总结 {messages} 输出 {json}",
            "SUMMARY_THRESHOLD": "1",  # no prefix: ignored
            "CTXPRESS_SHARED_DATA": "/somewhere",  # other CTXPRESS_ settings are not config fields
        }
    )
    assert config.summary_threshold == 64
    assert config.summary_keep_messages == 7
    assert config.summary_tool_result_token_limit == 450
    assert config.threshold_tokens == 64 * 1024
    assert config.render_summary_prompt("m") == "总结 m 输出 {json}"


def test_s23_from_env_empty_gives_defaults_and_base_is_overridden() -> None:
    assert CompressionConfig.from_env(environ={}) == CompressionConfig()
    config = CompressionConfig.from_env(
        environ={"CTXPRESS_SUMMARY_THRESHOLD": "16"},
        base={"summary_threshold": 200, "summary_keep_messages": 3},
    )
    assert config.summary_threshold == 16
    assert config.summary_keep_messages == 3


def test_s23_from_env_does_not_read_os_environ_when_environ_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXPRESS_SUMMARY_THRESHOLD", "7")
    assert CompressionConfig.from_env(environ={}).summary_threshold == 100
    assert CompressionConfig.from_env().summary_threshold == 7


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CTXPRESS_SUMMARY_THRESHOLD", "abc"),
        ("CTXPRESS_SUMMARY_THRESHOLD", "0"),
        ("CTXPRESS_SUMMARY_THRESHOLD", "-10"),
        ("CTXPRESS_SUMMARY_KEEP_MESSAGES", "1.5"),
        ("CTXPRESS_SUMMARY_TOOL_RESULT_TOKEN_LIMIT", "-1"),
        ("CTXPRESS_SUMMARY_TOOL_RESULT_TOKEN_LIMIT", ""),
    ],
)
def test_s23_from_env_bad_values_are_rejected(name: str, value: str) -> None:
    field = name.removeprefix("CTXPRESS_").lower()
    with pytest.raises(ValidationError) as caught:
        CompressionConfig.from_env(environ={name: value})
    assert field in error_fields(caught.value)


def test_s23_every_field_has_a_working_env_name() -> None:
    for field in FIELDS:
        name = "CTXPRESS_" + field.upper()
        value = "x {messages}" if field == "summary_prompt" else "3"
        config = CompressionConfig.from_env(environ={name: value})
        assert str(getattr(config, field)) in (value, "3.0")
