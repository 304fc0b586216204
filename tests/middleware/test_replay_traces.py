"""Every real conversation in the shared traces, replayed through the middleware with a small threshold.

Oracles: every request the model receives is provider-valid (each tool result follows its call,
every call is answered), and every summarised message is recoverable from the workdir, byte for
byte, from the history file plus the `large_tool_results` files it references.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from ctxpress import CompressionConfig, ContextCompressionMiddleware, LocalWorkdir
from ctxpress.compaction.content import content_text
from ctxpress.summary.event import is_summary_message
from ctxpress.summary.recovery import recover_messages
from ctxpress.tools.replay import replay_messages
from ctxpress.tools.traces import iter_conversations
from tests.fakes import ScriptedChatModel
from tests.middleware.conftest import assert_provider_valid


class EchoSummaryModel(ScriptedChatModel):
    """Summarises by quoting the first line of its input: deterministic, and never empty."""

    def _next(self, messages: list[BaseMessage]) -> AIMessage:
        self.requests.append(list(messages))
        return AIMessage(content="摘要：" + content_text(messages[-1].content)[:200])


def _assert_recoverable(workdir: LocalWorkdir, originals: dict[str, BaseMessage], path: str) -> int:
    checked = 0
    for message in recover_messages(workdir, path):
        if is_summary_message(message):
            continue
        original = originals[message.id or ""]
        assert message.content == original.content, f"{path}: {message.id} not recovered byte for byte"
        if isinstance(original, AIMessage):
            assert isinstance(message, AIMessage) and message.tool_calls == original.tool_calls
        if isinstance(original, ToolMessage):
            assert isinstance(message, ToolMessage) and message.tool_call_id == original.tool_call_id
        checked += 1
    return checked


def test_replay_every_trace_is_provider_valid_and_recoverable(traces_dir: Path) -> None:
    config = CompressionConfig(
        summary_threshold=2, summary_keep_messages=6, summary_tool_result_token_limit=300
    )
    levels: Counter[str | None] = Counter()
    conversations = 0
    recovered = 0
    for conversation in iter_conversations(traces_dir):
        conversations += 1
        with tempfile.TemporaryDirectory() as root:
            workdir = LocalWorkdir(root, durable=False)  # atomic, without fsync: a replay
            middleware = ContextCompressionMiddleware(
                config, workdir=workdir, summary_model=EchoSummaryModel()
            )
            result = replay_messages(
                conversation.messages,
                middleware,
                model=EchoSummaryModel(),
                tools=conversation.tools,
                keep_views=True,
            )
            for step in result.steps:
                assert step.view is not None
                view = step.view[1:] if step.view and is_summary_message(step.view[0]) else step.view
                assert_provider_valid(view)
                levels[step.level] += 1
            originals = {m.id: m for m in conversation.messages if m.id}
            for event in result.events:
                assert event["file_path"], f"{conversation.name}: history not saved"
                recovered += _assert_recoverable(workdir, originals, event["file_path"])
    assert conversations > 1000
    # The premise: the small threshold really exercised both levels on real data.
    assert levels["l1"] > 0 and levels["l2"] > 0 and recovered > 1000
