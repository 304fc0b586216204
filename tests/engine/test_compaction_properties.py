"""Property: L1 never changes message count, order, ids or tool-call pairing (S2), on every real trace.

Hypothesis picks a conversation from the shared traces, a tool-result limit and a threshold, and
injects extra large tool results and long `write_file` / `edit_file` arguments made of real text.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from ctxpress.compaction import CompactionCache, compact_view
from ctxpress.compaction.markers import OFFLOAD_MARKER
from ctxpress.config import CompressionConfig
from ctxpress.workdir import LocalWorkdir
from tests.engine.compaction_support import (
    ai_call,
    chinese_text,
    english_text,
    kb_results_json,
    snapshot,
    text_of,
    trace_conversations,
)

pytestmark = pytest.mark.shared_data

INJECTED_TOOLS = ("query_kb", "web_search", "execute_bash", "read_file", "查询知识库", "../evil")


@pytest.fixture(scope="module")
def conversations() -> list[Any]:
    return list(trace_conversations())


@pytest.fixture(scope="module")
def shared_root() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="ctxpress-props-") as folder:
        yield Path(folder)


@pytest.fixture(scope="module")
def real_texts() -> dict[str, str]:
    return {"en": english_text(), "zh": chinese_text(), "kb": kb_results_json(50)[0]}


def pairing(messages: list[BaseMessage]) -> list[tuple[int, str, str]]:
    """Every (index of the calling AI message, tool_call_id, index of the result) in the history."""
    callers: dict[str, int] = {}
    pairs = []
    for index, message in enumerate(messages):
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                callers[call["id"] or ""] = index
        elif isinstance(message, ToolMessage):
            pairs.append((callers.get(message.tool_call_id, -1), message.tool_call_id, str(index)))
    return pairs


def provider_ids(message: BaseMessage) -> list[Any]:
    raw = message.additional_kwargs.get("tool_calls")
    return [call.get("id") for call in raw] if isinstance(raw, list) else []


def injection(draw: st.DrawFn, texts: dict[str, str], serial: int) -> list[BaseMessage]:
    kind = draw(st.sampled_from(["result", "write_file", "edit_file"]))
    source = draw(st.sampled_from(sorted(texts)))
    text = texts[source]
    size = draw(st.integers(min_value=2_001, max_value=min(len(text), 80_000)))
    start = draw(st.integers(min_value=0, max_value=len(text) - size))
    piece = text[start : start + size] if source != "kb" else text
    call_id = f"inj-{serial}"
    if kind == "result":
        tool = draw(st.sampled_from(INJECTED_TOOLS))
        return [
            ai_call(call_id, tool, {"query": piece[:40]}),
            ToolMessage(content=piece, tool_call_id=call_id, name=tool, id=f"inj-tool-{serial}"),
        ]
    args = (
        {"file_path": f"notes/{serial}.md", "content": piece}
        if kind == "write_file"
        else {"file_path": f"notes/{serial}.md", "old_string": piece[:2_500], "new_string": piece}
    )
    return [
        ai_call(call_id, kind, args),
        ToolMessage(content="ok", tool_call_id=call_id, name=kind, id=f"inj-tool-{serial}"),
    ]


@st.composite
def histories(draw: st.DrawFn, conversations: list[Any], texts: dict[str, str]) -> list[BaseMessage]:
    conversation = conversations[draw(st.integers(min_value=0, max_value=len(conversations) - 1))]
    messages = list(conversation.messages)
    # Safe insertion points: never between an AI message and its tool results.
    slots = [
        i for i in range(len(messages) + 1) if i == len(messages) or not isinstance(messages[i], ToolMessage)
    ]
    count = draw(st.integers(min_value=0, max_value=3))
    for serial in range(count):
        slot = draw(st.sampled_from(slots))
        block = injection(draw, texts, serial)
        messages[slot:slot] = block
        slots = [s if s < slot else s + len(block) for s in slots] + [slot]
    return messages


@settings(
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
@given(data=st.data())
def test_s2_compact_view_keeps_count_order_ids_and_pairing(
    conversations: list[Any], shared_root: Path, real_texts: dict[str, str], data: st.DataObject
) -> None:
    messages = data.draw(histories(conversations, real_texts), label="history")
    limit = data.draw(
        st.one_of(st.integers(1, 60), st.integers(60, 600), st.integers(600, 4_000)), label="limit"
    )
    threshold = data.draw(st.floats(min_value=0.5, max_value=512, allow_nan=False), label="threshold_k")
    profile = data.draw(st.sampled_from(["default", "cl100k", "o200k", "qwen", "deepseek"]), label="profile")
    config = CompressionConfig(
        summary_threshold=threshold, summary_tool_result_token_limit=limit, token_profile=profile
    )
    workdir = LocalWorkdir(shared_root / "workdir")
    before = snapshot(messages)

    result = compact_view(messages, config, workdir, cache=CompactionCache())
    view = result.messages
    event(
        f"offloaded: {min(len(result.offloaded), 3)}+, arguments cut: {min(len(result.truncated_arguments), 2)}+"
    )

    # The input is untouched.
    assert snapshot(messages) == before
    # Count, order, types and ids.
    assert len(view) == len(messages)
    assert [(type(m), m.id) for m in view] == [(type(m), m.id) for m in messages]
    # Tool-call pairing: the same calls (ids and names, both formats) answered by the same results.
    assert pairing(view) == pairing(messages)
    for new, old in zip(view, messages, strict=True):
        if isinstance(old, AIMessage):
            assert [(c["id"], c["name"]) for c in new.tool_calls] == [
                (c["id"], c["name"]) for c in old.tool_calls
            ]
            assert provider_ids(new) == provider_ids(old)
            assert new.content == old.content
        elif isinstance(old, ToolMessage):
            assert (new.tool_call_id, new.name, new.status, new.artifact) == (
                old.tool_call_id,
                old.name,
                old.status,
                old.artifact,
            )
        else:
            assert new is old
    # Every offloaded result is on disk, intact, and the view never shows the host path.
    for record in result.offloaded:
        stored = workdir.read_bytes(record.path)
        assert hashlib.sha256(stored).hexdigest() == record.sha256
        assert record.path in text_of(next(m for m in view if m.id == record.message_id))
    assert result.failures == []
    for message in view:
        visible = text_of(message) + json.dumps(message.additional_kwargs, default=str, ensure_ascii=False)
        if OFFLOAD_MARKER in text_of(message) and not text_of(message).startswith(OFFLOAD_MARKER):
            continue  # a trace message quoting the marker is not ours
        assert str(shared_root) not in visible

    # Idempotent: the view fed back in is recognised as compacted and returned as is.
    again = compact_view(view, config, workdir, cache=CompactionCache())
    assert all(a is b for a, b in zip(again.messages, view, strict=True))
    assert again.offloaded == [] and again.truncated_arguments == []


def test_s2_every_real_conversation_keeps_count_order_ids_and_pairing(
    conversations: list[Any], shared_root: Path
) -> None:
    """Not sampled: every conversation of every shared trace, at the default and a small limit."""
    workdir = LocalWorkdir(shared_root / "sweep")
    offloaded = 0
    for limit in (300, 60):
        config = CompressionConfig(summary_tool_result_token_limit=limit)
        cache = CompactionCache()
        for conversation in conversations:
            messages = conversation.messages
            result = compact_view(messages, config, workdir, cache=cache)
            assert [(type(m), m.id) for m in result.messages] == [(type(m), m.id) for m in messages], (
                conversation.name
            )
            assert pairing(result.messages) == pairing(messages), conversation.name
            assert result.failures == [], conversation.name
            offloaded += len(result.offloaded)
    assert offloaded > 100
