"""Property tests over random and real conversations: any interleaving of automatic compression (each
model call, with the main model sometimes overflowing) and manual compression (between turns).

After every step:
(a) every request the main model received is provider-valid: no orphaned tool result, no
    unanswered tool call (the bug of summarisers that cut inside a tool batch);
(b) the summary's history files (followed back through `previous_history_file`) + the kept raw
    messages (trimmed results restored from their files) reconstruct the full conversation, message
    for message: ids, content, tool calls and tool-call ids;
(c) the cumulative cutoff only moves forward, strictly with each new summary.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings, target
from hypothesis import strategies as st
from langchain.agents.middleware.types import ExtendedModelResponse, ModelRequest, ModelResponse
from langchain_core.exceptions import ContextOverflowError
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.runtime import Runtime

from ctxpress import CompressionConfig, ContextCompressionMiddleware, LocalWorkdir
from ctxpress.compaction import CompactionCache
from ctxpress.compaction.content import content_text, with_text
from ctxpress.compaction.markers import parse_offload_reference
from ctxpress.manual import ManualCompressionError, compress_now
from ctxpress.middleware import EVENT_KEY
from ctxpress.summary.event import effective_messages, is_summary_message
from ctxpress.summary.history import read_history
from ctxpress.summary.recovery import recover_messages
from ctxpress.tokens import count_request_tokens
from tests.conftest import require_shared_data
from tests.fakes import ScriptedChatModel

from .support import assert_provider_valid

SYSTEM = SystemMessage("你是一个知识库助手。")
TOOLS = ("query_kb", "web_search", "fetch_report", "../evil", "查询")
PHRASES = (
    "故宫博物院位于北京市中心，开放时间为8:30-17:00，周一闭馆。",
    "The quarterly revenue grew 12% year over year, driven by the enterprise segment. ",
    "合同第3条约定：乙方应于2024年7月15日前交付全部成果。",
    "Step 4: run `pytest -q` and check that 128 tests pass, then open a pull request. ",
)


class SummaryModel(ScriptedChatModel):
    """Summarises deterministically; fails on request (S27 / S28 paths)."""

    fail_next: bool = False

    def _next(self, messages: list[BaseMessage]) -> AIMessage:
        self.requests.append(list(messages))
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("summary model unavailable")
        return AIMessage("摘要：" + content_text(messages[-1].content)[-120:])


@dataclass
class Simulation:
    """A conversation driven through the middleware like an agent would, with a manual button."""

    config: CompressionConfig
    workdir: LocalWorkdir
    window: int | None
    summary_model: SummaryModel = field(default_factory=SummaryModel)
    state: dict[str, Any] = field(default_factory=lambda: {"messages": []})
    full: list[BaseMessage] = field(default_factory=list)
    requests: list[list[BaseMessage]] = field(default_factory=list)
    cutoffs: list[tuple[int, int]] = field(default_factory=list)  # (cutoff, summary_count)
    overflowed: bool = False
    overflows_raised: int = 0
    manual_done: int = 0
    automatic_summaries: int = 0
    #: Model calls that overflowed and still got an answer (the forced path of S6 worked).
    overflows_recovered: int = 0

    def __post_init__(self) -> None:
        self.middleware = ContextCompressionMiddleware(
            self.config, workdir=self.workdir, summary_model=self.summary_model, cache=CompactionCache()
        )

    def add(self, message: BaseMessage) -> None:
        self.state["messages"] = [*self.state["messages"], message]
        self.full.append(message)

    async def model_call(self, answer: AIMessage) -> bool:
        """One main-model call answered with `answer`; False when the request could not fit (S6)."""

        async def handler(request: ModelRequest) -> ModelResponse:
            messages = list(request.messages)
            self.requests.append(messages)
            if self.window is not None and count_request_tokens(messages, SYSTEM) > self.window:
                self.overflows_raised += 1
                raise ContextOverflowError("too long for the window")
            return ModelResponse(result=[answer])

        request = ModelRequest(
            model=self.summary_model,
            messages=list(self.state["messages"]),
            system_message=SYSTEM,
            tool_choice=None,
            tools=[],
            response_format=None,
            state=dict(self.state),  # type: ignore[arg-type]
            runtime=Runtime(stream_writer=lambda _payload: None),
        )
        overflows_before = self.overflows_raised
        try:
            response = await self.middleware.awrap_model_call(request, handler)
        except ContextOverflowError:
            self.overflowed = True
            return False
        self.overflows_recovered += self.overflows_raised > overflows_before
        if isinstance(response, ExtendedModelResponse) and response.command is not None:
            update = dict(response.command.update or {})
            self.automatic_summaries += EVENT_KEY in update
            self._apply(update)
        self.add(answer)
        self.check()
        return True

    async def manual(self) -> None:
        try:
            result = await compress_now(
                self.state["messages"],
                self.state.get(EVENT_KEY),
                config=self.config,
                workdir=self.workdir,
                summary_model=self.summary_model,
                system_message=SYSTEM,
                thread_id="prop",
            )
        except ManualCompressionError as failure:
            assert failure.part == "summary"  # only the summary model is made to fail here
            return
        if result.compressed:
            self._apply({EVENT_KEY: result.event})
            self.manual_done += 1
            view = effective_messages(self.state["messages"], self.state[EVENT_KEY]).messages
            assert_provider_valid(view)
        self.check()

    def _apply(self, update: dict[str, Any]) -> None:
        if EVENT_KEY in update:
            self.state[EVENT_KEY] = update[EVENT_KEY]
        replacements = {m.id: m for m in update.get("messages", [])}
        if replacements:  # add_messages: the same id replaces
            self.state["messages"] = [replacements.get(m.id, m) for m in self.state["messages"]]

    # --- the invariants ------------------------------------------------------------------------------

    def check(self) -> None:
        for request in self.requests:  # (a)
            assert_provider_valid(request)
        current = self.state.get(EVENT_KEY)
        if current is not None:  # (c)
            position = (current["cutoff_index"], current.get("summary_count", 0))
            if self.cutoffs:
                last_cutoff, last_count = self.cutoffs[-1]
                assert position[0] >= last_cutoff, "the cutoff moved back"
                if position[1] != last_count:
                    assert position[0] > last_cutoff and position[1] > last_count
            self.cutoffs.append(position)
        assert_same_conversation(self.reconstruct(), self.full)  # (b)

    def reconstruct(self) -> list[BaseMessage]:
        """History files (oldest first) + the kept raw messages, every offloaded result restored."""
        event_ = self.state.get(EVENT_KEY)
        messages = self.state["messages"]
        if event_ is None:
            return [self._restored(m) for m in messages]
        chain: list[str] = []
        path = event_["file_path"]
        while path:
            chain.append(path)
            header, _ = read_history(self.workdir, path)
            path = header.get("previous_history_file")
        earlier: list[BaseMessage] = []
        expected_start = 0
        for path in reversed(chain):
            header, _ = read_history(self.workdir, path)
            start, end = header["range"]
            assert start == expected_start, f"{path} does not continue the previous history file"
            raw = [m for m in recover_messages(self.workdir, path) if not is_summary_message(m)]
            assert len(raw) == end - start
            earlier.extend(raw)
            expected_start = end
        assert expected_start == event_["cutoff_index"], "the history files stop short of the cutoff"
        return earlier + [self._restored(m) for m in messages[event_["cutoff_index"] :]]

    def _restored(self, message: BaseMessage) -> BaseMessage:
        reference = parse_offload_reference(content_text(message.content))
        if reference is None or not isinstance(message, ToolMessage):
            return message
        data = self.workdir.read_bytes(reference.path)
        assert hashlib.sha256(data).hexdigest() == reference.sha256
        return message.model_copy(
            update={"content": with_text(message.content, data.decode("utf-8", "surrogatepass"))}
        )


def assert_same_conversation(rebuilt: Sequence[BaseMessage], full: Sequence[BaseMessage]) -> None:
    assert [m.id for m in rebuilt] == [m.id for m in full], "messages lost, added or reordered"
    for got, want in zip(rebuilt, full, strict=True):
        assert type(got) is type(want)
        assert got.content == want.content, f"{want.id}: content not reconstructed"
        if isinstance(want, AIMessage):
            assert isinstance(got, AIMessage)
            assert [(c["id"], c["name"], c["args"]) for c in got.tool_calls] == [
                (c["id"], c["name"], c["args"]) for c in want.tool_calls
            ]
        if isinstance(want, ToolMessage):
            assert isinstance(got, ToolMessage) and got.tool_call_id == want.tool_call_id


def is_idle(messages: Sequence[BaseMessage]) -> bool:
    """No tool call is waiting for its result (the thread could take a manual compression)."""
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    return all(call["id"] in answered for m in messages if isinstance(m, AIMessage) for call in m.tool_calls)


# --- strategies ---------------------------------------------------------------------------------------


@st.composite
def texts(draw: st.DrawFn, large: bool) -> str:
    count = draw(st.integers(20, 160) if large else st.integers(1, 4))
    phrase = draw(st.sampled_from(PHRASES))
    if draw(st.booleans()) and large:
        rows = [
            {"doc_id": f"d{i}", "title": phrase[:12], "score": i / 10, "content": phrase * 3}
            for i in range(count // 4 + 1)
        ]
        return json.dumps({"results": rows}, ensure_ascii=False)
    return "\n".join(f"{i}. {phrase}" for i in range(count))


@st.composite
def turns(draw: st.DrawFn) -> list[list[BaseMessage]]:
    """Turns of [human, (AI with calls, results)*, final AI]; each list item is one step."""
    result: list[list[BaseMessage]] = []
    serial = 0
    for turn_index in range(draw(st.integers(3, 10))):
        steps: list[list[BaseMessage]] = [
            [HumanMessage(f"第{turn_index}个问题：" + draw(texts(False)), id=f"h{turn_index}")]
        ]
        for _round in range(draw(st.integers(0, 3))):
            calls = []
            results: list[BaseMessage] = []
            for _ in range(draw(st.integers(1, 3))):
                serial += 1
                name = draw(st.sampled_from(TOOLS))
                calls.append(
                    {"name": name, "args": {"query": f"q{serial}"}, "id": f"c{serial}", "type": "tool_call"}
                )
                content = draw(texts(draw(st.booleans())))
                results.append(ToolMessage(content, tool_call_id=f"c{serial}", name=name, id=f"t{serial}"))
            steps.append([AIMessage("", tool_calls=calls, id=f"a{serial}"), *results])
        steps.append([AIMessage(f"第{turn_index}轮回答：" + draw(texts(False)), id=f"f{turn_index}")])
        result.extend(steps)
    return result


def config_strategy() -> st.SearchStrategy[CompressionConfig]:
    return st.builds(
        CompressionConfig,
        summary_threshold=st.sampled_from([0.5, 1, 2]),
        summary_keep_messages=st.integers(1, 6),
        summary_tool_result_token_limit=st.sampled_from([20, 100, 300]),
    )


async def drive(
    sim: Simulation, steps: list[list[BaseMessage]], manual_at: set[int], fail_at: set[int]
) -> None:
    """Feed steps: an AI message is a model call; the others are appended; manual compression
    runs at the chosen idle points."""
    for index, step in enumerate(steps):
        sim.summary_model.fail_next = index in fail_at
        head, rest = step[0], step[1:]
        if isinstance(head, AIMessage):
            if not sim.state["messages"]:
                sim.add(head)
            elif not await sim.model_call(head):
                return  # the run failed: the conversation stops here, as a failed run would
        else:
            sim.add(head)
        for message in rest:
            sim.add(message)
        if index in manual_at and is_idle(sim.state["messages"]):
            await sim.manual()


def windows(config: CompressionConfig) -> st.SearchStrategy[int | None]:
    """The main model's window: none, ample, or below the threshold (so that a request which L1
    brought under the threshold can still overflow: the forced path of S6)."""
    threshold = config.threshold_tokens
    return st.one_of(
        st.none(),
        st.integers(threshold // 2, threshold * 9 // 10),
        st.integers(1500, 20_000),
    )


@dataclass
class Reached:
    """How many examples of a run took each path; asserted after the run, so that a generator that
    stopped reaching a path fails instead of passing vacuously."""

    examples: int = 0
    automatic_summary: int = 0
    manual_compression: int = 0
    overflow: int = 0

    def record(self, sim: Simulation) -> None:
        self.examples += 1
        self.automatic_summary += sim.automatic_summaries > 0
        self.manual_compression += sim.manual_done > 0
        self.overflow += sim.overflows_recovered > 0
        # Steer the generation towards examples that take the rarer paths.
        target(float(sim.overflows_recovered), label="overflows recovered")
        target(float(sim.manual_done), label="manual compressions")
        event(f"summaries: {min(len({c for c in sim.cutoffs}), 3)}+, manual: {min(sim.manual_done, 2)}+")
        event(f"overflows: {min(sim.overflows_raised, 2)}+, stopped the run: {sim.overflowed}")

    def assert_every_path(self) -> None:
        assert self.automatic_summary and self.manual_compression and self.overflow, self


def test_random_conversations_valid_reconstructable_forward() -> None:
    reached = Reached()

    @settings(
        max_examples=60,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(steps=turns(), config=config_strategy(), data=st.data())
    def example(steps: list[list[BaseMessage]], config: CompressionConfig, data: st.DataObject) -> None:
        window = data.draw(windows(config), label="window")
        manual_at = set(data.draw(st.lists(st.integers(0, len(steps) - 1), max_size=4), label="manual_at"))
        fail_at = set(
            data.draw(st.lists(st.integers(0, len(steps) - 1), max_size=2), label="summary_fails_at")
        )
        with tempfile.TemporaryDirectory(prefix="ctxpress-prop-") as root:
            sim = Simulation(config, LocalWorkdir(root, durable=False), window)
            asyncio.run(drive(sim, steps, manual_at, fail_at))
            sim.check()
        reached.record(sim)

    example()
    reached.assert_every_path()


# --- real conversations -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_conversations() -> list[list[BaseMessage]]:
    from ctxpress.tools.traces import iter_conversations

    loaded = [c.messages for c in iter_conversations(require_shared_data("traces"))]
    usable = [messages for messages in loaded if sum(isinstance(m, AIMessage) for m in messages) >= 6]
    assert len(usable) > 50
    return usable


def steps_of(messages: Sequence[BaseMessage]) -> list[list[BaseMessage]]:
    """A recorded conversation cut into steps: each AI message starts one, with what follows it."""
    steps: list[list[BaseMessage]] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            continue
        if isinstance(message, AIMessage) or not steps:
            steps.append([message])
        else:
            steps[-1].append(message)
    return steps


@pytest.mark.shared_data
@pytest.mark.heavy
def test_real_conversations_valid_reconstructable_forward(
    real_conversations: list[list[BaseMessage]],
) -> None:
    reached = Reached()

    @settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(data=st.data(), config=config_strategy())
    def example(data: st.DataObject, config: CompressionConfig) -> None:
        messages = real_conversations[
            data.draw(st.integers(0, len(real_conversations) - 1), label="conversation")
        ]
        steps = steps_of(messages)
        manual_at = set(data.draw(st.lists(st.integers(0, len(steps) - 1), max_size=4), label="manual_at"))
        window = data.draw(windows(config), label="window")
        with tempfile.TemporaryDirectory(prefix="ctxpress-prop-") as root:
            sim = Simulation(config, LocalWorkdir(root, durable=False), window)
            asyncio.run(drive(sim, steps, manual_at, set()))
            sim.check()
        reached.record(sim)

    example()
    reached.assert_every_path()
