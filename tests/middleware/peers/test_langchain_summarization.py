"""Ports of LangChain v1's `SummarizationMiddleware` unit tests (langchain-ai/langchain,
libs/langchain_v1/tests/unit_tests/agents/middleware/implementations/test_summarization.py).

Each test restates one peer scenario against ctxpress through a real `create_agent` graph. Where
the spec makes ctxpress behave differently, the test asserts ctxpress's behaviour and its
docstring says "Intended difference" (the README lists them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.messages.ai import UsageMetadata
from pydantic import ValidationError

from ctxpress import CompressionConfig, count_request_tokens
from ctxpress.summary.event import SUMMARY_MARKER, SUMMARY_SOURCE, is_summary_message
from ctxpress.summary.history import read_history
from ctxpress.summary.summarizer import summary_request_budget
from tests.fakes import ScriptedChatModel, tool_call
from tests.middleware.conftest import assert_provider_valid
from tests.middleware.peers.conftest import (
    answers,
    config_for,
    lookup,
    make_agent,
    question,
    thread,
    view_messages,
)


def _summarised_agent(tmp_path: Path, keep: int = 2, **options: Any) -> Any:
    """Plain question/answer turns until one summary was made (threshold 300 tokens)."""
    agent = make_agent(tmp_path, config_for(300, keep=keep), script=answers(20), tools=[], **options)
    for index in range(6):
        agent.turn(question(index))
        if agent.event() is not None:
            return agent
    raise AssertionError("the premise: a summary was made within six turns")


def test_below_threshold_the_request_is_sent_unchanged(tmp_path: Path) -> None:
    """Ports `test_summarization_middleware_no_summarization_cases` (a token count below the
    trigger leaves the state alone). S4: below the threshold the main model gets the messages as
    they are, no event is emitted, no summary model call, no file."""
    agent = make_agent(tmp_path, config_for(10_000), script=answers(3), tools=[])
    events = [e for i in range(3) for e in agent.turn(question(i))]
    assert events == []
    state_messages = agent.messages()
    sent = view_messages(agent.last_request())
    assert [m.id for m in sent] == [m.id for m in state_messages[:-1]]
    assert agent.summary_model.requests == []
    assert agent.workdir.list_files() == []
    assert agent.event() is None


@pytest.mark.parametrize("offset", [0, 1], ids=["at-threshold", "one-below"])
def test_the_threshold_is_reached_at_equality(tmp_path: Path, offset: int) -> None:
    """Ports `test_summarization_middleware_profile_inference_triggers_summary` (800 tokens
    against a trigger of 0.80 × 1000 summarises, against 0.81 × 1000 does not). S4/S5: compression
    starts when the request is *at or above* the one threshold. Intended difference: the threshold
    is one K value (`summary_threshold`), not a fraction of a model profile (S4, configuration)."""
    probe = make_agent(tmp_path / "probe", config_for(100_000), script=answers(4), tools=[])
    for index in range(3):
        probe.turn(question(index))
    size = probe.pressures[-1].total
    agent = make_agent(tmp_path / "run", config_for(size + offset, keep=2), script=answers(4), tools=[])
    events = [e for i in range(3) for e in agent.turn(question(i))]
    if offset == 0:
        assert [e["status"] for e in events][:1] == ["started"]
        assert agent.summary_model.requests, "a request at the threshold is summarised"
    else:
        assert events == [] and agent.summary_model.requests == []


def test_summary_message_is_a_marked_human_message(tmp_path: Path) -> None:
    """Ports `test_summarization_middleware_helper_methods` (the summary is a HumanMessage with
    `lc_source="summarization"` and "Here is a summary of the conversation to date:").
    Intended difference: ctxpress's summary is a HumanMessage starting with its own marker
    `[ctxpress:summary]`, with `lc_source="ctxpress_summary"`, naming the conversation file (S3, S15)."""
    agent = _summarised_agent(tmp_path)
    event = agent.event()
    assert event is not None
    summary = event["summary_message"]
    assert isinstance(summary, HumanMessage)
    assert summary.text.startswith(SUMMARY_MARKER)
    assert summary.additional_kwargs["lc_source"] == SUMMARY_SOURCE
    assert "summary 0" in summary.text
    sent = view_messages(agent.last_request())
    assert sent[0].id == summary.id and is_summary_message(sent[0])


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_a_failing_summary_model_puts_its_error_in_the_summary(tmp_path: Path, use_async: bool) -> None:
    """Ports `test_summarization_middleware_summary_creation` (error handling: "Error generating
    summary: Model error") and `test_summarization_middleware_async_error_handling`. S27: the error
    text goes into the summary view and the main-model call goes on."""
    agent = make_agent(
        tmp_path,
        config_for(300, keep=2),
        script=answers(20),
        tools=[],
        summary_script=[ValueError("Model error")] * 5,
    )
    for index in range(6):
        if use_async:
            await agent.aturn(question(index))
        else:
            agent.turn(question(index))
        if agent.event() is not None:
            break
    event = agent.event()
    assert event is not None
    assert "Model error" in event["summary_message"].text
    assert isinstance(agent.messages()[-1], AIMessage)  # the main call went on
    assert event["file_path"] and agent.workdir.exists(event["file_path"])


def test_full_workflow_keeps_every_message_and_records_the_event(tmp_path: Path, checkpointer: Any) -> None:
    """Ports `test_summarization_middleware_full_workflow` (the update is RemoveMessage(ALL) +
    summary + two kept messages). Intended difference: nothing is deleted (S1, S16); the state keeps
    every message and `_summarization_event` holds the cutoff, the summary and the history file
    (S3, S15); the request is [system, summary, *kept]."""
    agent = _summarised_agent(tmp_path, keep=2, checkpointer=checkpointer)
    messages = agent.messages()
    assert [m.type for m in messages] == ["human", "ai"] * (len(messages) // 2)
    assert not any(is_summary_message(m) for m in messages)
    event = agent.event()
    assert event is not None
    cutoff = event["cutoff_index"]
    sent = view_messages(agent.last_request())
    # The kept part is the state's messages from the cutoff: the last two at request time.
    assert [m.id for m in sent[1:]] == [m.id for m in messages[cutoff:-1]]
    assert len(sent[1:]) == 2
    header, saved = read_history(agent.workdir, event["file_path"])
    assert header["range"] == [0, cutoff]
    assert [m.id for m in saved] == [m.id for m in messages[:cutoff]]


async def test_full_workflow_async(tmp_path: Path) -> None:
    """Ports `test_summarization_middleware_full_workflow_async` (async path: two kept messages
    after the summary). S1, S15 through `astream`."""
    agent = make_agent(tmp_path, config_for(300, keep=2), script=answers(20), tools=[])
    for index in range(6):
        await agent.aturn(question(index))
        if agent.event() is not None:
            break
    event = agent.event()
    assert event is not None
    sent = view_messages(agent.last_request())
    assert is_summary_message(sent[0]) and len(sent) == 3
    assert sent[-1].text == agent.messages()[-2].text  # the question of this turn is kept


def test_message_count_alone_never_triggers(tmp_path: Path) -> None:
    """Ports `test_summarization_middleware_keep_messages` (trigger=("messages", 5)),
    `test_summarization_middleware_multiple_triggers`, `test_and_trigger_conditions`,
    `test_or_trigger_conditions_with_and_clauses`, `test_mixed_and_or_conditions` and
    `test_fraction_in_and_trigger`. Intended difference: ctxpress has one token threshold and no
    message-count, fraction or AND/OR triggers (S4); thirty short turns below it are sent whole."""
    agent = make_agent(tmp_path, config_for(4_000, keep=2), script=answers(30, words=1), tools=[])
    events = [e for i in range(30) for e in agent.turn(f"q{i}")]
    assert events == [] and agent.summary_model.requests == []
    assert len(view_messages(agent.last_request())) == 59


def test_kept_part_never_separates_parallel_tool_calls_from_their_results(tmp_path: Path) -> None:
    """Ports `test_summarization_middleware_many_parallel_tool_calls_safety`,
    `test_summarization_cutoff_moves_backward_to_include_ai_message`,
    `test_summarization_middleware_find_safe_cutoff_preserves_ai_tool_pair`,
    `test_summarization_middleware_token_retention_preserves_ai_tool_pairs` and
    `test_summarization_middleware_find_safe_cutoff_point`: a keep edge that lands inside a tool
    batch moves back to the AI message that made the calls. S14 (the cutoff never splits a tool
    call from its result)."""
    calls = AIMessage(
        content="",
        tool_calls=[
            {"name": "lookup", "args": {"key": f"k{i}"}, "id": f"call-{i}", "type": "tool_call"}
            for i in range(6)
        ],
    )
    script: list[Any] = [*answers(3), calls, AIMessage(content="all six facts found"), *answers(3)]
    agent = make_agent(tmp_path, config_for(280, keep=4), script=script, tools=[lookup])
    for index in range(6):
        agent.turn(question(index, words=12))
        if agent.event() is not None:
            break
    event = agent.event()
    assert event is not None, "the premise: a summary was made"
    for request in agent.model.requests:
        assert_provider_valid(view_messages(request))
    messages = agent.messages()
    batch_start = next(i for i, m in enumerate(messages) if isinstance(m, AIMessage) and m.tool_calls)
    # Keeping 4 of the 14 messages at request time puts the edge among the six results: the kept
    # part starts with the AI message that made the calls, and keeps all six results.
    assert event["cutoff_index"] == batch_start
    kept = messages[event["cutoff_index"] :]
    assert isinstance(kept[0], AIMessage) and len(kept[0].tool_calls) == 6
    assert [m.tool_call_id for m in kept[1:7] if isinstance(m, ToolMessage)] == [
        f"call-{i}" for i in range(6)
    ]


def test_a_single_message_over_the_threshold_is_not_summarised(tmp_path: Path) -> None:
    """Ports `test_summarization_middleware_skips_when_no_safe_cutoff` (and its async twin): with
    nothing older than the current request there is nothing to summarise. S14: no summary model
    call, no history file; the main model gets the message (its L1 view, S5)."""
    agent = make_agent(tmp_path, config_for(200, keep=1), script=answers(1), tools=[])
    text = "Current request: " + "please consider this long paragraph " * 60
    agent.turn(text)
    assert agent.summary_model.requests == []
    assert agent.history_files() == []
    assert agent.event() is None
    assert view_messages(agent.last_request())[0].text == text


class _HeavyUsageModel(ScriptedChatModel):
    """Reports a provider usage far above any threshold on every reply."""

    def _final_metadata(self) -> dict[str, Any]:
        usage: UsageMetadata = {"input_tokens": 200_000, "output_tokens": 2_501, "total_tokens": 202_501}
        return {"usage_metadata": usage, "response_metadata": {"model_provider": "fake"}}


def test_reported_usage_never_triggers_a_summary(tmp_path: Path) -> None:
    """Ports `test_usage_metadata_trigger`, `test_reported_tokens_trigger_for_bedrock_converse`,
    `test_reported_tokens_satisfy_tokens_within_and_clause` and `test_reported_tokens_trigger_for_fraction`
    (a provider-reported `usage_metadata` over the trigger summarises). Intended difference: the
    pressure decision uses the approximate count only; `usage_metadata` is recorded, never a
    trigger (S12, S26)."""
    model = _HeavyUsageModel(script=answers(4))
    agent = make_agent(tmp_path, config_for(10_000, keep=2), model=model, tools=[])
    events = [e for i in range(4) for e in agent.turn(question(i))]
    last = agent.messages()[-1]
    assert isinstance(last, AIMessage) and last.usage_metadata is not None
    assert last.usage_metadata["total_tokens"] == 202_501
    assert events == [] and agent.summary_model.requests == []


def test_summary_prompt_is_a_transcript_without_message_metadata(tmp_path: Path) -> None:
    """Ports `test_create_summary_uses_get_buffer_string_format` (messages are formatted as a
    buffer string, not `str(messages)` with their metadata). S14: the summary model reads one
    `[n] role:` entry per message, with tool calls and tool names, no metadata fields."""
    script: list[Any] = [tool_call("lookup", {"key": "weather NYC"}, "call_123"), *answers(12)]
    agent = make_agent(tmp_path, config_for(300, keep=2), script=script, tools=[lookup])
    for index in range(6):
        agent.turn(question(index))
        if agent.summary_model.requests:
            break
    prompt = agent.summary_model.requests[0][0].text
    assert "[1] user: question 0" in prompt
    assert "lookup" in prompt and "fact about weather NYC" in prompt
    for noise in ("additional_kwargs", "response_metadata", "usage_metadata", "tool_call_id="):
        assert noise not in prompt


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_image_urls_reach_the_summary_prompt(tmp_path: Path, use_async: bool) -> None:
    """Ports `test_create_summary_preserves_image_urls` (the image URL is in the summary prompt,
    so the agent can fetch it later). S14; README "The summary request": an image appears as one
    line naming its URL."""
    image_url = "https://example.com/shared-image.png"
    agent = make_agent(tmp_path, config_for(300, keep=2), script=answers(20), tools=[])
    first: list[Any] = [
        {"type": "text", "text": "What is in this image?"},
        {"type": "image_url", "image_url": {"url": image_url}},
    ]
    turns: list[Any] = [first, *(question(i) for i in range(1, 7))]
    for text in turns:
        if use_async:
            await agent.aturn(text)
        else:
            agent.turn(text)
        if agent.summary_model.requests:
            break
    prompt = agent.summary_model.requests[0][0].text
    assert image_url in prompt and "What is in this image?" in prompt


def test_a_custom_summary_prompt_is_what_the_summary_model_reads(tmp_path: Path) -> None:
    """Ports `test_summarization_middleware_initialization` (summary_prompt="Custom prompt:
    {messages}"). Configuration table: `summary_prompt` with `{messages}` replaced by the older
    messages."""
    config = config_for(300, keep=2, summary_prompt="Custom prompt: {messages}")
    agent = make_agent(tmp_path, config, script=answers(20), tools=[])
    for index in range(6):
        agent.turn(question(index))
        if agent.summary_model.requests:
            break
    prompt = agent.summary_model.requests[0][0].text
    assert prompt.startswith("Custom prompt: ") and "question 0" in prompt


@pytest.mark.parametrize(
    "fields",
    [
        {"summary_threshold": 0},
        {"summary_threshold": -5},
        {"summary_threshold": True},
        {"summary_keep_messages": 0},
        {"summary_keep_messages": "ten"},
        {"summary_tool_result_token_limit": -1},
        {"summary_prompt": "Summarise the conversation."},
    ],
    ids=[
        "zero-threshold",
        "negative-threshold",
        "bool-threshold",
        "zero-keep",
        "text-keep",
        "negative-limit",
        "no-placeholder",
    ],
)
def test_invalid_settings_are_refused(fields: dict[str, Any]) -> None:
    """Ports `test_summarization_middleware_validation_edge_cases`, `test_trigger_validation_errors`
    and `test_empty_and_condition` (non-positive thresholds and malformed triggers are refused at
    construction). Configuration table, S23: every setting is validated when the config is built."""
    with pytest.raises(ValidationError):
        CompressionConfig(**fields)


class _TagRecorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.calls: list[tuple[list[str], list[BaseMessage]]] = []

    def on_chat_model_start(self, serialized: Any, messages: list[list[BaseMessage]], **kwargs: Any) -> None:
        self.calls.append((list(kwargs.get("tags") or []), messages[0]))


def test_the_summary_call_is_tagged_so_it_never_streams(tmp_path: Path) -> None:
    """Ports `test_create_summary_passes_lc_source_metadata` (the summary call carries
    `lc_source="summarization"` metadata so it can be told apart). Intended difference: ctxpress
    marks the summary call with LangGraph's `TAG_NOSTREAM` (S21); main-model calls are untagged."""
    agent = make_agent(tmp_path, config_for(300, keep=2), script=answers(20), tools=[])
    recorder = _TagRecorder()
    for index in range(6):
        payload = {"messages": [HumanMessage(content=question(index))]}
        agent.graph.invoke(payload, {**thread(), "callbacks": [recorder]})
        if agent.summary_model.requests:
            break
    tagged = [messages for tags, messages in recorder.calls if "nostream" in tags]
    assert len(tagged) == len(agent.summary_model.requests) == 1
    assert tagged[0][0].text == agent.summary_model.requests[0][0].text
    assert len(recorder.calls) == len(agent.model.requests) + 1


def test_long_history_is_trimmed_for_the_summary_but_saved_whole(tmp_path: Path) -> None:
    """Ports `test_summarization_middleware_trim_limit_none_keeps_all_messages` and
    `test_summarization_middleware_trim_messages_error_fallback` (what the summary model reads is
    bounded by `trim_tokens_to_summarize`). S14 and README "The summary request": the summary
    request stays within its budget (75 % of the threshold) while the history file keeps every
    summarised message."""
    config = config_for(1_500, keep=2)
    agent = make_agent(tmp_path, config, script=answers(40, words=120), tools=[])
    for index in range(12):
        agent.turn(question(index, words=120))
        if agent.event() is not None:
            break
    event = agent.event()
    assert event is not None
    request = agent.summary_model.requests[0]
    assert count_request_tokens(request) <= summary_request_budget(config)
    _header, saved = read_history(agent.workdir, event["file_path"])
    original = agent.messages()[: event["cutoff_index"]]
    assert [m.text for m in saved] == [m.text for m in original]
