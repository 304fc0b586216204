"""The fuzzed flow (issue 44): whole generated conversations through real `create_agent` graphs.

Shared by `tests/middleware/test_fuzzed_flow.py` (a few hundred examples under CI) and
`bench/fuzz.py` (long campaigns). It lives here, beside the other helpers that tests and benches
both import, because `bench/` imports nothing from `tests/`.

What is real and what is fake:

- real: `langchain.agents.create_agent`, its `ToolNode`, a LangGraph checkpointer (`InMemorySaver`
  or `SqliteSaver` / `AsyncSqliteSaver`, with LangGraph's serializer or ctxpress's), a `LocalWorkdir`
  in a temporary folder, and `ContextCompressionMiddleware` itself (subclassed only to record what
  its handler was asked and which events it wrote);
- fake: the chat models. `FuzzChatModel` replies from the generated script and raises
  `ContextOverflowError` when the request it receives is larger than its random `context_window`
  (counted with its own counter, default profile, as a real model counts with its own tokenizer);
  the summary model answers generated texts or fails.

`run_case(case, root, asynchronous)` runs one `FlowCase` (sync `invoke` or async `ainvoke`) and
returns a `RunRecord`; `check_case(case, root)` runs it both ways and returns the `CaseReport`:
the invariant violations found (`Violation`) and the paths the calls reached. The invariants are
listed on `check_case`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import re
import sqlite3
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AsyncExitStack, ExitStack
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain.agents.middleware.types import ExtendedModelResponse, ModelRequest, ModelResponse
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.exceptions import ContextOverflowError
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool, InjectedToolCallId, StructuredTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import ConfigDict, Field, PrivateAttr

from ctxpress.checkpoint_serde import CheckpointSerializer
from ctxpress.compaction.argument_offload import argument_text
from ctxpress.compaction.arguments import FILE_WRITING_TOOLS
from ctxpress.compaction.content import content_text, with_text
from ctxpress.compaction.markers import (
    is_omitted_argument,
    offload_header,
    offloaded_argument_path,
    parse_offload_reference,
)
from ctxpress.config import TOKENS_PER_K, CompressionConfig
from ctxpress.middleware import ContextCompressionMiddleware
from ctxpress.overflow_trim import trim_budget
from ctxpress.summary.conflict import SummarizerConflictError
from ctxpress.summary.event import EVENT_KEY, SUMMARY_SOURCE, make_summary_message
from ctxpress.summary.history import HISTORY_DIR, read_history
from ctxpress.summary.summarizer import summary_output_budget
from ctxpress.tokens import PROFILE_NAMES, TokenCounter, estimate_tokens
from ctxpress.workdir import LocalWorkdir, WorkdirError, decode_text

THREAD_ID = "fuzz"
#: The documented errors a run may end with (S6, S3).
DOCUMENTED_ERRORS: tuple[type[BaseException], ...] = (ContextOverflowError, SummarizerConflictError)
#: The follow-up turn after a turn that ended with a documented error.
RECOVERY_TEXT = "继续"
RECOVERY_ANSWER = "好的，继续。"
#: Slack of a trimmed tool result over the trim budget: the offload header and the view's slack.
TRIMMED_SLACK_TOKENS = 200
#: Room a recovery turn needs beside the system prompt, its question and the summary text.
RECOVERY_SLACK_TOKENS = 1_500
#: What a failed summary's deterministic digest may take (`render.deterministic_digest`).
FAILED_SUMMARY_TOKENS = 2_000
#: The smallest summary message there can be (an empty summary naming the conversation file).
LEAST_SUMMARY = make_summary_message(
    "", None, 1, (), f"{HISTORY_DIR}/{THREAD_ID}-00000000-conversation.jsonl"
)
TOOL_NAMES = ("search", "query_kb", "write_file", "run_python", "查询知识库")
CallIdStyle = Literal["unique", "reused_per_turn", "duplicated_in_message"]
Path_ = Literal["below", "l1", "l2", "forced", "tail_trim", "error"]
#: Deepest first: an example is classified by the deepest path any of its calls reached.
PATH_ORDER: tuple[Path_, ...] = ("error", "tail_trim", "forced", "l2", "l1", "below")
PATH_LABELS: dict[Path_, str] = {
    "below": "below the threshold only",
    "l1": "L1 only",
    "l2": "L2",
    "forced": "forced summary (overflow)",
    "tail_trim": "tail trim (overflow)",
    "error": "documented error",
}

# --------------------------------------------------------------------------------------------------
# What one generated conversation is
# --------------------------------------------------------------------------------------------------

Content = str | list[str | dict[Any, Any]]


@dataclass(frozen=True)
class ToolCallSpec:
    name: str
    call_id: str
    args: dict[str, Any]  # always holds "key", which names the result in `RoundSpec`
    result: Content
    status: Literal["success", "error"] = "success"


@dataclass(frozen=True)
class RoundSpec:
    """One model step that calls tools (in parallel when more than one)."""

    text: str
    calls: tuple[ToolCallSpec, ...]


@dataclass(frozen=True)
class TurnSpec:
    user: Content
    rounds: tuple[RoundSpec, ...]
    answer: str


@dataclass(frozen=True)
class FlowCase:
    """One conversation and everything around it; its `repr` is the reproducing example."""

    threshold_tokens: int
    keep: int
    profile: str
    tool_limit: int
    context_window: int | None
    system_prompt: str | None
    summary_replies: tuple[str | None, ...]  # None: the summary model fails
    checkpointer: Literal["memory", "sqlite"]
    serde: Literal["langgraph", "ctxpress"]
    turns: tuple[TurnSpec, ...]

    def config(self) -> CompressionConfig:
        return CompressionConfig(
            summary_threshold=self.threshold_tokens / TOKENS_PER_K,
            summary_keep_messages=self.keep,
            summary_tool_result_token_limit=self.tool_limit,
            token_profile=self.profile,
        )

    def short(self) -> str:
        """A one-line description (the full `repr` can hold megabytes of text)."""
        sizes = [(len(content_text(t.user)), [len(r.calls) for r in t.rounds]) for t in self.turns]
        return (
            f"threshold={self.threshold_tokens} keep={self.keep} profile={self.profile} "
            f"limit={self.tool_limit} window={self.context_window} system="
            f"{len(self.system_prompt) if self.system_prompt is not None else None} "
            f"summaries={[None if r is None else len(r) for r in self.summary_replies]} "
            f"{self.checkpointer}/{self.serde} turns(user chars, calls per round)={sizes}"
        )


# --------------------------------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------------------------------

SPECIAL_TEXTS = (
    "",
    " ",
    "\x00",
    "a\x00b",
    "\ud800",
    "x\udfff\ud83dy",
    "😀🎉👩‍👩‍👧",
    "北京有哪些景点？故宫、颐和园。",
    "ｆｕｌｌｗｉｄｔｈ　テキスト",
    "\u202eevil\u202c",
    "null",
    "[ctxpress:offloaded] not a real header",
    "[ctxpress:summary] looks like a summary",
    'Traceback (most recent call last):\n  File "/srv/app.py", line 3\nValueError: boom',
    "see https://example.org/a?b=1 and src/pkg/module.py:42",
)
PIECES = (
    "北京的景点很多，",
    "The quick brown fox jumps over the lazy dog. ",
    "😀",
    "0123456789abcdef",
    '{"k": [1, 2, null]}, ',
    "\ud800\x00",
)


@cache
def binary_text() -> st.SearchStrategy[str]:
    """Text that looks like bytes decoded badly."""
    return st.binary(max_size=300).map(lambda data: data.decode("latin-1"))


@cache
def huge_text(min_chars: int = 2_000, max_chars: int = 120_000) -> st.SearchStrategy[str]:
    return st.builds(
        lambda piece, chars: (piece * (chars // len(piece) + 1))[:chars],
        st.sampled_from(PIECES),
        st.integers(min_value=min_chars, max_value=max_chars),
    )


@cache
def texts(huge: bool = True) -> st.SearchStrategy[str]:
    options: list[st.SearchStrategy[str]] = [
        st.sampled_from(SPECIAL_TEXTS),
        st.text(max_size=40),
        st.text(max_size=40),
        st.text(alphabet=st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF), max_size=200),
        binary_text(),
    ]
    if huge:
        options.append(huge_text())
    return st.one_of(options)


#: Object keys: no lone surrogates, which LangGraph's checkpoint serializer cannot store in a key
#: of a tool call's arguments (its `TypeError`, with or without ctxpress); values may hold them.
#: Integers likewise stay within msgpack's 64 bits.
KEYS = st.one_of(
    st.text(max_size=12), st.sampled_from(["results", "total", "content", "", "北京", "😀", "a\x00b"])
)


@cache
def json_values() -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**63), max_value=2**64 - 1),  # msgpack's range (checkpoints)
        st.floats(allow_nan=False, allow_infinity=False),
        texts(huge=False),
    )
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=6), st.dictionaries(KEYS, children, max_size=6)
        ),
        max_leaves=24,
    )


def _record(index: int, content: str) -> dict[str, Any]:
    return {"doc_id": f"doc-{index}", "title": f"标题 {index}", "score": 1 - index / 1000, "content": content}


@cache
def retrieval_results() -> st.SearchStrategy[Any]:
    """The shapes retrieval tools return: results, empty lists, nulls, `total` alone, nested records."""
    records = st.builds(
        lambda count, content, nested: [
            {**_record(i, content), **({"meta": {"tags": [content[:10]], "n": i}} if nested else {})}
            for i in range(count)
        ],
        st.integers(min_value=0, max_value=300),
        texts(huge=False),
        st.booleans(),
    )
    return st.one_of(
        st.fixed_dictionaries({"results": records}),
        st.fixed_dictionaries({"results": st.just([])}),
        st.fixed_dictionaries({"results": st.none()}),
        st.fixed_dictionaries({"total": st.integers(min_value=0, max_value=10**6)}),
        st.fixed_dictionaries({"total": st.integers(min_value=0, max_value=2**63), "results": st.just([])}),
        st.fixed_dictionaries({"total": st.integers(min_value=0, max_value=2**63), "results": records}),
        st.fixed_dictionaries({"data": st.fixed_dictionaries({"items": records})}),
        st.lists(st.fixed_dictionaries({"content": texts()}), max_size=5),
    )


@cache
def media_blocks() -> st.SearchStrategy[dict[str, Any]]:
    data = st.integers(min_value=0, max_value=20_000).map(lambda n: "iVBORw0KGgo" + "A" * n)
    return st.one_of(
        st.builds(lambda d: {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{d}"}}, data),
        st.builds(lambda d: {"type": "image", "base64": d, "mime_type": "image/png"}, data),
        st.just({"type": "image", "url": "https://example.org/cat.jpg"}),
        st.builds(
            lambda d: {"type": "file", "base64": d, "mime_type": "application/pdf", "filename": "报告.pdf"},
            data,
        ),
    )


@cache
def contents(text: st.SearchStrategy[str]) -> st.SearchStrategy[Content]:
    """Plain text, or text blocks with images and files."""
    blocks = st.builds(
        lambda body, media: [{"type": "text", "text": body}, *media],
        text,
        st.lists(media_blocks(), min_size=1, max_size=2),
    )
    return st.one_of(text, text, text, blocks)


@cache
def tool_results() -> st.SearchStrategy[Content]:
    dumped = st.builds(
        lambda value, ascii_only: json.dumps(value, ensure_ascii=ascii_only),
        st.one_of(retrieval_results(), json_values()),
        st.booleans(),
    )
    return contents(st.one_of(dumped, dumped, texts()))


def tool_args(draw: st.DrawFn, name: str, key: str) -> dict[str, Any]:
    if name in FILE_WRITING_TOOLS:
        return {"key": key, "file_path": "notes/说明.md", "content": draw(texts())}
    args: dict[str, Any] = {"key": key, "query": draw(texts(huge=False))}
    if draw(st.booleans()):
        args["payload"] = draw(st.one_of(json_values(), huge_text(), retrieval_results()))
    return args


def call_id(style: CallIdStyle, turn: int, round_index: int, index: int) -> str:
    if style == "unique":
        return f"call-{turn}-{round_index}-{index}"
    if style == "reused_per_turn":
        return f"call_{index}"  # llama.cpp and some proxies number the calls of every message from 0
    return "call_0"


@st.composite
def turns(draw: st.DrawFn, turn: int, style: CallIdStyle) -> TurnSpec:
    rounds: list[RoundSpec] = []
    for round_index in range(draw(st.integers(min_value=0, max_value=3))):
        calls = []
        for index in range(draw(st.integers(min_value=1, max_value=4))):
            name = draw(st.sampled_from(TOOL_NAMES))
            key = f"r-{turn}-{round_index}-{index}"
            calls.append(
                ToolCallSpec(
                    name=name,
                    call_id=call_id(style, turn, round_index, index),
                    args=tool_args(draw, name, key),
                    result=draw(tool_results()),
                    status=draw(st.sampled_from(["success", "success", "success", "error"])),
                )
            )
        rounds.append(RoundSpec(draw(st.one_of(st.just(""), texts(huge=False))), tuple(calls)))
    return TurnSpec(user=draw(contents(texts())), rounds=tuple(rounds), answer=draw(texts()))


WINDOWS: st.SearchStrategy[int | None] = st.one_of(
    st.none(),
    st.integers(min_value=20, max_value=600),
    st.integers(min_value=600, max_value=8_000),
    st.integers(min_value=8_000, max_value=200_000),
)


@st.composite
def flow_cases(
    draw: st.DrawFn, max_turns: int = 5, windows: st.SearchStrategy[int | None] = WINDOWS
) -> FlowCase:
    """A whole conversation with its configuration, window, summary model and checkpointer."""
    style: CallIdStyle = draw(
        st.sampled_from(["unique", "unique", "reused_per_turn", "duplicated_in_message"])
    )
    count = draw(st.integers(min_value=1, max_value=max_turns))
    return FlowCase(
        threshold_tokens=draw(
            st.one_of(
                st.integers(min_value=1, max_value=64),
                st.integers(min_value=64, max_value=4_096),
                st.integers(min_value=4_096, max_value=65_536),
                st.integers(min_value=65_536, max_value=1_000_000),
            )
        ),
        keep=draw(st.integers(min_value=1, max_value=50)),
        profile=draw(st.sampled_from(PROFILE_NAMES)),
        tool_limit=draw(st.sampled_from([1, 40, 300, 300, 4_000])),
        context_window=draw(windows),
        system_prompt=draw(st.one_of(st.none(), texts())),
        summary_replies=tuple(draw(st.lists(st.one_of(st.none(), texts()), min_size=1, max_size=3))),
        checkpointer=draw(st.sampled_from(["memory", "sqlite"])),
        serde=draw(st.sampled_from(["langgraph", "ctxpress"])),
        turns=tuple(draw(turns(index, style)) for index in range(count)),
    )


# --------------------------------------------------------------------------------------------------
# The fake models and the tools
# --------------------------------------------------------------------------------------------------


class FuzzChatModel(BaseChatModel):
    """Replies from `steps` in order (a step is consumed only when answered) and overflows above
    `context_window` tokens of its own count."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    steps: list[AIMessage] = Field(default_factory=list)
    context_window: int | None = None
    _counter: TokenCounter = PrivateAttr(default_factory=TokenCounter)

    @property
    def _llm_type(self) -> str:
        return "fuzz"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        return self

    def size(self, messages: Sequence[BaseMessage]) -> int:
        return self._counter.count_request(messages)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.context_window is not None and (size := self.size(messages)) > self.context_window:
            raise ContextOverflowError(f"request of {size} tokens exceeds the context window")
        reply = self.steps.pop(0) if self.steps else AIMessage(content="done", id="ai-extra")
        return ChatResult(generations=[ChatGeneration(message=reply)])


class FuzzSummaryModel(BaseChatModel):
    """Answers the summary requests with `replies` in turn; a None reply fails."""

    replies: tuple[str | None, ...] = ("摘要",)
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "fuzz-summary"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        reply = self.replies[self.calls % len(self.replies)]
        self.calls += 1
        if reply is None:
            raise RuntimeError("the summary model is unavailable")
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=reply))])


def make_tools(results: dict[str, ToolCallSpec]) -> list[BaseTool]:
    """One tool per name; each answers with the generated result its `key` argument names."""

    def answer(
        key: str,
        tool_call_id: Annotated[str, InjectedToolCallId],
        query: str = "",
        payload: Any = None,
        file_path: str = "",
        content: str = "",
    ) -> ToolMessage:
        spec = results[key]
        return ToolMessage(
            content=spec.result, tool_call_id=tool_call_id, id=f"t-{key}", status=spec.status, name=spec.name
        )

    return [
        StructuredTool.from_function(answer, name=name, description=f"The {name} tool (generated results).")
        for name in TOOL_NAMES
    ]


def ai_message(text: str, calls: Sequence[ToolCallSpec], message_id: str) -> AIMessage:
    return AIMessage(
        content=text,
        id=message_id,
        tool_calls=[{"name": c.name, "args": c.args, "id": c.call_id, "type": "tool_call"} for c in calls],
    )


def originals_of(case: FlowCase) -> dict[str, BaseMessage]:
    """Every message the conversation can put in the state, by its id, as first written."""
    messages: dict[str, BaseMessage] = {}
    for index, turn in enumerate(case.turns):
        messages[f"h-{index}"] = HumanMessage(content=turn.user, id=f"h-{index}")
        messages[f"h-{index}-again"] = HumanMessage(content=RECOVERY_TEXT, id=f"h-{index}-again")
        messages[f"ai-{index}-again"] = AIMessage(content=RECOVERY_ANSWER, id=f"ai-{index}-again")
        for round_index, round_ in enumerate(turn.rounds):
            ai_id = f"ai-{index}-{round_index}"
            messages[ai_id] = ai_message(round_.text, round_.calls, ai_id)
            for spec in round_.calls:
                key = spec.args["key"]
                messages[f"t-{key}"] = ToolMessage(
                    content=spec.result, tool_call_id=spec.call_id, id=f"t-{key}", status=spec.status
                )
        messages[f"ai-{index}-answer"] = AIMessage(content=turn.answer, id=f"ai-{index}-answer")
    return messages


# --------------------------------------------------------------------------------------------------
# Recording what the middleware did
# --------------------------------------------------------------------------------------------------


@dataclass
class Attempt:
    """One request the middleware handed to the model, as sent, and how the model took it."""

    messages: list[BaseMessage]
    system: SystemMessage | None
    tools: list[Any]
    outcome: Literal["ok", "overflow", "error"] = "ok"


@dataclass
class CallRecord:
    """One model call of the agent, as the middleware saw and handled it."""

    incoming: list[BaseMessage]
    attempts: list[Attempt] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    raised: BaseException | None = None


@dataclass
class TurnRecord:
    human_id: str
    error: BaseException | None = None
    recovery_of: int | None = None  # the turn index whose documented error this turn follows
    traceback: str = ""


@dataclass
class RunRecord:
    asynchronous: bool
    turns: list[TurnRecord] = field(default_factory=list)
    calls: list[CallRecord] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    workdir: LocalWorkdir | None = None
    model: FuzzChatModel | None = None


class RecordingCompression(ContextCompressionMiddleware):
    """The middleware under test, unchanged, with its handler and stream writer recorded."""

    def __init__(self, *args: Any, record: RunRecord, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.record = record

    def _start(self, request: ModelRequest) -> tuple[CallRecord, ModelRequest]:
        call = CallRecord(incoming=list(request.messages))
        self.record.calls.append(call)
        runtime = request.runtime
        writer = getattr(runtime, "stream_writer", None)

        def write(payload: Any) -> None:
            if isinstance(payload, dict):
                call.events.append(dict(payload))
            if callable(writer):
                writer(payload)

        if runtime is not None and dataclasses.is_dataclass(runtime):
            request = dataclasses.replace(request, runtime=dataclasses.replace(runtime, stream_writer=write))
        return call, request

    @staticmethod
    def _attempt(call: CallRecord, request: ModelRequest) -> Attempt:
        attempt = Attempt(list(request.messages), request.system_message, list(request.tools))
        call.attempts.append(attempt)
        return attempt

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse | ExtendedModelResponse:
        call, request = self._start(request)

        def recorded(inner: ModelRequest) -> ModelResponse:
            attempt = self._attempt(call, inner)
            try:
                return handler(inner)
            except ContextOverflowError:
                attempt.outcome = "overflow"
                raise
            except Exception:
                attempt.outcome = "error"
                raise

        try:
            return super().wrap_model_call(request, recorded)
        except BaseException as exc:
            call.raised = exc
            raise

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse | ExtendedModelResponse:
        call, request = self._start(request)

        async def recorded(inner: ModelRequest) -> ModelResponse:
            attempt = self._attempt(call, inner)
            try:
                return await handler(inner)
            except ContextOverflowError:
                attempt.outcome = "overflow"
                raise
            except Exception:
                attempt.outcome = "error"
                raise

        try:
            return await super().awrap_model_call(request, recorded)
        except BaseException as exc:
            call.raised = exc
            raise


# --------------------------------------------------------------------------------------------------
# Running a case
# --------------------------------------------------------------------------------------------------


def _steps(turn: TurnSpec, index: int) -> list[AIMessage]:
    steps = [ai_message(r.text, r.calls, f"ai-{index}-{n}") for n, r in enumerate(turn.rounds)]
    return [*steps, AIMessage(content=turn.answer, id=f"ai-{index}-answer")]


def _plan(case: FlowCase) -> Iterator[tuple[int, HumanMessage, list[AIMessage]]]:
    for index, turn in enumerate(case.turns):
        yield index, HumanMessage(content=turn.user, id=f"h-{index}"), _steps(turn, index)


def _recovery(index: int) -> tuple[HumanMessage, list[AIMessage]]:
    return (
        HumanMessage(content=RECOVERY_TEXT, id=f"h-{index}-again"),
        [AIMessage(content=RECOVERY_ANSWER, id=f"ai-{index}-again")],
    )


def _serde(case: FlowCase) -> Any:
    return CheckpointSerializer() if case.serde == "ctxpress" else None


def _build(
    case: FlowCase, root: Path, record: RunRecord, checkpointer: BaseCheckpointSaver
) -> tuple[Any, FuzzChatModel]:
    results = {c.args["key"]: c for t in case.turns for r in t.rounds for c in r.calls}
    model = FuzzChatModel(context_window=case.context_window)
    workdir = LocalWorkdir(root / "workdir", durable=False)
    record.workdir = workdir
    record.model = model
    middleware = RecordingCompression(
        case.config(),
        workdir=workdir,
        summary_model=FuzzSummaryModel(replies=case.summary_replies),
        record=record,
    )
    agent = create_agent(
        model,
        make_tools(results),
        system_prompt=case.system_prompt,
        middleware=[middleware],
        checkpointer=checkpointer,
    )
    return agent, model


def _turns(case: FlowCase) -> Iterator[tuple[TurnRecord, HumanMessage, list[AIMessage]]]:
    """The turns to run; a documented error adds one recovery turn (the caller marks it)."""
    for _index, human, steps in _plan(case):
        yield TurnRecord(str(human.id)), human, steps


def _failed(turn: TurnRecord, exc: BaseException) -> None:
    turn.error = exc
    turn.traceback = "".join(traceback.format_exception(exc))


def run_sync(case: FlowCase, root: Path) -> RunRecord:
    record = RunRecord(asynchronous=False)
    config = {"configurable": {"thread_id": THREAD_ID}, "recursion_limit": 100}
    with ExitStack() as stack:
        if case.checkpointer == "sqlite":
            from langgraph.checkpoint.sqlite import SqliteSaver

            connection = sqlite3.connect(root / "checkpoints.sqlite", check_same_thread=False)
            stack.callback(connection.close)
            saver: BaseCheckpointSaver = SqliteSaver(connection, serde=_serde(case))
        else:
            saver = InMemorySaver(serde=_serde(case))
        agent, model = _build(case, root, record, saver)
        for index, (turn, human, steps) in enumerate(_turns(case)):
            for human_message, script, recovery_of in _with_recovery(index, turn, human, steps, record):
                model.steps = list(script)
                current = turn if recovery_of is None else record.turns[-1]
                try:
                    agent.invoke({"messages": [human_message]}, config)
                except Exception as exc:
                    _failed(current, exc)
        record.state = dict(agent.get_state(config).values)
    return record


async def run_async(case: FlowCase, root: Path) -> RunRecord:
    record = RunRecord(asynchronous=True)
    config = {"configurable": {"thread_id": THREAD_ID}, "recursion_limit": 100}
    async with AsyncExitStack() as stack:
        if case.checkpointer == "sqlite":
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            saver: BaseCheckpointSaver = await stack.enter_async_context(
                AsyncSqliteSaver.from_conn_string(str(root / "checkpoints.sqlite"))
            )
            if case.serde == "ctxpress":
                saver.serde = CheckpointSerializer()
        else:
            saver = InMemorySaver(serde=_serde(case))
        agent, model = _build(case, root, record, saver)
        for index, (turn, human, steps) in enumerate(_turns(case)):
            for human_message, script, recovery_of in _with_recovery(index, turn, human, steps, record):
                model.steps = list(script)
                current = turn if recovery_of is None else record.turns[-1]
                try:
                    await agent.ainvoke({"messages": [human_message]}, config)
                except Exception as exc:
                    _failed(current, exc)
        record.state = dict((await agent.aget_state(config)).values)
    return record


def _with_recovery(
    index: int, turn: TurnRecord, human: HumanMessage, steps: list[AIMessage], record: RunRecord
) -> Iterator[tuple[HumanMessage, list[AIMessage], int | None]]:
    """The turn, then (after a documented error) one recovery turn."""
    record.turns.append(turn)
    yield human, steps, None
    if isinstance(turn.error, DOCUMENTED_ERRORS):
        again, script = _recovery(index)
        record.turns.append(TurnRecord(str(again.id), recovery_of=len(record.turns) - 1))
        yield again, script, len(record.turns) - 2


def run_case(case: FlowCase, root: Path, asynchronous: bool) -> RunRecord:
    """Run `case` in a fresh folder `root` (checkpoints, workdir): `invoke` or `ainvoke`."""
    root.mkdir(parents=True, exist_ok=True)
    if asynchronous:
        return asyncio.run(run_async(case, root))
    return run_sync(case, root)


# --------------------------------------------------------------------------------------------------
# The invariants
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Violation:
    invariant: str
    detail: str
    traceback: str = ""

    def signature(self) -> str:
        """What tells two violations apart: the invariant and the detail without its numbers,
        file names and message ids."""
        detail = re.sub(r"outputs/\S+", "<file>", self.detail)
        detail = re.sub(r"\b(?:h|ai|t-r)-[\w-]+", "<message>", detail)
        detail = re.sub(r"\ba?sync\b", "<mode>", detail)
        return f"{self.invariant}: {re.sub(r'[0-9]+', 'N', detail)[:160]}"


@dataclass
class CaseReport:
    violations: list[Violation] = field(default_factory=list)
    #: Path of every model call (`Path_`), in order, of the sync run.
    call_paths: list[Path_] = field(default_factory=list)

    @property
    def deepest(self) -> Path_:
        for path in PATH_ORDER:
            if path in self.call_paths:
                return path
        return "below"


def _is_summary(message: BaseMessage) -> bool:
    return message.additional_kwargs.get("lc_source") == SUMMARY_SOURCE and str(message.id or "").startswith(
        "ctxpress-summary-"
    )


def _tail(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    return list(messages[1:]) if messages and _is_summary(messages[0]) else list(messages)


def is_minimal(messages: Sequence[BaseMessage]) -> bool:
    """No safe cut inside the kept part: keeping fewer messages would split a tool call from its
    results (a cut before a tool result is the only unsafe cut in a request the graph built)."""
    tail = _tail(messages)
    return all(isinstance(message, ToolMessage) for message in tail[1:])


def minimal_tail(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    tail = _tail(messages)
    start = max((i for i, m in enumerate(tail) if not isinstance(m, ToolMessage)), default=0)
    return tail[start:]


#: The least text a tool result can be trimmed to: an offload header without a preview.
LEAST_TOOL_TEXT = offload_header("tool", "outputs/large_tool_results/tool-0.txt", "0" * 64, 0, 0)


def _least_form(message: BaseMessage, budget: int) -> BaseMessage:
    """`message` as small as overflow trimming makes it: a tool result over `budget` tokens becomes
    a bare offload header and a preview of about `budget` tokens (`overflow_trim.trim_budget`)."""
    if not isinstance(message, ToolMessage):
        return message
    text = content_text(message.content)
    if estimate_tokens(text) <= budget + estimate_tokens(LEAST_TOOL_TEXT):
        return message
    chars = max(1, budget)
    while chars < len(text) and estimate_tokens(text[:chars]) < budget:
        chars *= 2
    return message.model_copy(update={"content": with_text(message.content, LEAST_TOOL_TEXT + text[:chars])})


def pairing_problems(messages: Sequence[BaseMessage]) -> list[str]:
    """Every tool result follows the AI message that called it; every call is answered before the
    next non-tool message (multisets: a provider may repeat an id)."""
    problems: list[str] = []
    open_calls: Counter[str] = Counter()
    for index, message in enumerate(messages):
        if isinstance(message, ToolMessage):
            if open_calls[message.tool_call_id] <= 0:
                problems.append(f"orphaned tool result {message.tool_call_id!r} at {index}")
            else:
                open_calls[message.tool_call_id] -= 1
            continue
        if +open_calls:
            problems.append(f"unanswered calls {sorted(+open_calls)} before message {index}")
        open_calls = Counter(
            str(call["id"]) for call in (message.tool_calls if isinstance(message, AIMessage) else [])
        )
    if +open_calls:
        problems.append(f"unanswered calls {sorted(+open_calls)} at the end")
    return problems


def _stored(text: str) -> str:
    """`text` as LangGraph's own serializer stores it (lone surrogates become '?')."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _same_text(found: str, original: str) -> bool:
    return found == original or found == _stored(original)


class _Checker:
    def __init__(self, case: FlowCase, report: CaseReport) -> None:
        self.case = case
        self.config = case.config()
        self.report = report
        self.counter = TokenCounter()
        self.originals = originals_of(case)

    def fail(self, invariant: str, detail: str, tb: str = "") -> None:
        self.report.violations.append(Violation(invariant, detail, tb))

    def size(self, attempt: Attempt) -> int:
        return self.counter.count_request(
            attempt.messages, attempt.system, attempt.tools, self.config.token_profile
        )

    # -- I2: the request's size ---------------------------------------------------------------------

    def check_sizes(self, call: CallRecord, number: int) -> None:
        threshold = self.config.threshold_tokens
        if not call.attempts:
            return
        first = call.attempts[0]
        size = self.size(first)
        if size >= threshold and not self._over_allowed(first):
            self.fail(
                "size",
                f"call {number}: a request of {size} tokens >= threshold {threshold} although fewer "
                f"messages could be kept ({len(first.messages)} messages, {len(_tail(first.messages))} kept)",
            )
        overflowed: int | None = None
        for attempt in call.attempts:
            size = self.size(attempt)
            if overflowed is not None and size >= overflowed:
                self.fail(
                    "size", f"call {number}: a retry of {size} tokens after an overflow of {overflowed}"
                )
            if attempt.outcome == "overflow":
                overflowed = size

    def _over_allowed(self, attempt: Attempt) -> bool:
        """Over the threshold only because of what the middleware must send: the kept messages alone
        fit and the summary message (bounded by the summariser) tips it over; or nothing more can
        be summarised (the kept part is the current message or the current tool batch)."""
        if is_minimal(attempt.messages):
            return True
        if attempt.messages and _is_summary(attempt.messages[0]):
            kept = dataclasses.replace(attempt, messages=attempt.messages[1:])
            return self.size(kept) < self.config.threshold_tokens
        return False

    # -- I1: exceptions -----------------------------------------------------------------------------

    def check_raised(self, call: CallRecord, number: int) -> None:
        exc = call.raised
        if exc is None:
            return
        if isinstance(exc, SummarizerConflictError):
            return
        if not isinstance(exc, ContextOverflowError):
            return  # reported with its turn (I1)
        last = call.attempts[-1] if call.attempts else None
        if last is None or last.outcome != "overflow":
            self.fail("overflow", f"call {number}: ContextOverflowError without an overflowing request")
            return
        if self._nothing_smaller(last):
            return
        self.fail(
            "overflow",
            f"call {number}: ContextOverflowError although a smaller request could be sent: the last "
            f"of {len(call.attempts)} attempts kept {len(_tail(last.messages))} messages "
            f"(minimal: {is_minimal(last.messages)}, tool results trimmed: {self._trimmed(last)})",
        )

    def _trimmed(self, attempt: Attempt) -> bool:
        budget = trim_budget(self.config) + TRIMMED_SLACK_TOKENS
        return all(
            estimate_tokens(content_text(m.content), self.config.token_profile) <= budget
            for m in attempt.messages
            if isinstance(m, ToolMessage)
        )

    def _nothing_smaller(self, attempt: Attempt) -> bool:
        """The request was as small as the middleware may make it, or its least possible form
        overflows as well: the system prompt, the request's summary message (or, when anything is
        cut and it has none, one with an empty summary) and the minimal kept part, each tool result in it
        as overflow trimming leaves it (an offload header and a preview of `trim_budget`)."""
        if is_minimal(attempt.messages) and self._trimmed(attempt):
            return True
        window = self.case.context_window
        floor = [_least_form(m, trim_budget(self.config)) for m in minimal_tail(attempt.messages)]
        system = [attempt.system] if attempt.system is not None else []
        cut = len(_tail(attempt.messages)) > len(minimal_tail(attempt.messages))
        if attempt.messages and _is_summary(attempt.messages[0]):
            summary = [attempt.messages[0]]  # its text is what the summariser gave (or its digest)
        else:
            summary = [LEAST_SUMMARY] if cut else []
        return window is not None and FuzzChatModel().size([*system, *summary, *floor]) > window

    # -- I3: pairs ----------------------------------------------------------------------------------

    def check_pairs(self, call: CallRecord, number: int) -> None:
        for index, attempt in enumerate(call.attempts):
            if problems := pairing_problems(attempt.messages):
                self.fail("pairs", f"call {number} attempt {index}: {problems[0]}")

    # -- I4: recoverability -------------------------------------------------------------------------

    def check_shown(self, messages: Sequence[BaseMessage], workdir: LocalWorkdir, where: str) -> None:
        """A message the middleware changed has its full text in the workdir (or, for an argument of
        `write_file`/`edit_file`, in the file that call wrote: S7)."""
        for message in messages:
            original = self.originals.get(str(message.id))
            if original is None:
                continue
            if isinstance(message, ToolMessage):
                self._check_text(
                    content_text(message.content), content_text(original.content), workdir, where
                )
            elif isinstance(message, AIMessage) and isinstance(original, AIMessage):
                self._check_arguments(message, original, workdir, where)
            elif not _same_text(content_text(message.content), content_text(original.content)):
                self.fail("recoverable", f"{where}: {message.id} was changed")

    def _check_text(self, shown: str, original: str, workdir: LocalWorkdir, where: str) -> None:
        if _same_text(shown, original):
            return
        reference = parse_offload_reference(shown)
        if reference is None:
            self.fail("recoverable", f"{where}: a tool result was changed without an offload reference")
            return
        self._check_file(reference.path, original, workdir, where, reference.sha256)

    def _check_file(
        self, path: str, original: str, workdir: LocalWorkdir, where: str, sha256: str | None = None
    ) -> None:
        try:
            data = workdir.read_bytes(path)
        except WorkdirError as exc:
            self.fail("recoverable", f"{where}: {path} cannot be read: {type(exc).__name__}")
            return
        if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
            self.fail("recoverable", f"{where}: {path} does not match its sha256")
        elif not _same_text(decode_text(data), original):
            self.fail("recoverable", f"{where}: {path} does not hold the original text")

    def _check_arguments(
        self, message: AIMessage, original: AIMessage, workdir: LocalWorkdir, where: str
    ) -> None:
        if not _same_text(content_text(message.content), content_text(original.content)):
            self.fail("recoverable", f"{where}: the text of {message.id} was changed")
        if len(message.tool_calls) != len(original.tool_calls):
            self.fail("recoverable", f"{where}: {message.id} lost tool calls")
            return
        for shown, first in zip(message.tool_calls, original.tool_calls, strict=True):
            if (shown["name"], shown["id"], sorted(shown["args"])) != (
                first["name"],
                first["id"],
                sorted(first["args"]),
            ):
                self.fail("recoverable", f"{where}: a tool call of {message.id} changed its name, id or keys")
                continue
            for key, value in shown["args"].items():
                before = first["args"][key]
                if _same_args(value, before):
                    continue
                text = value if isinstance(value, str) else ""
                if shown["name"] in FILE_WRITING_TOOLS and is_omitted_argument(text):
                    continue  # S7: the call wrote it; the state keeps the argument whole
                path = offloaded_argument_path(text)
                if path is None:
                    self.fail(
                        "recoverable", f"{where}: argument {key!r} of {shown['name']} changed without a file"
                    )
                else:
                    self._check_file(path, argument_text(before), workdir, where)

    def check_summarised(self, state: dict[str, Any], workdir: LocalWorkdir) -> None:
        """Every message before the latest cutoff is whole in the conversation file or the history
        files, offloaded results restored from the files their views name (sha256 checked)."""
        event = state.get(EVENT_KEY)
        if not isinstance(event, dict):
            return
        messages: list[BaseMessage] = list(state.get("messages", []))
        cutoff = int(event["cutoff_index"])
        found: dict[str, list[BaseMessage]] = {}
        for stored in workdir.list_files(HISTORY_DIR):
            try:
                _header, lines = read_history(workdir, stored.path)
            except Exception as exc:
                self.fail("recoverable", f"{stored.path} cannot be read back: {type(exc).__name__}: {exc}")
                continue
            for line in lines:
                found.setdefault(str(line.id), []).append(line)
        for message in messages[:cutoff]:
            original = self.originals.get(str(message.id))
            if original is None:
                continue
            copies = found.get(str(message.id), [])
            if not any(self._restores(copy, original, workdir) for copy in copies):
                self.fail(
                    "recoverable",
                    f"summarised message {message.id} is not recoverable from the workdir "
                    f"({len(copies)} stored copies)",
                )

    def _restores(self, copy: BaseMessage, original: BaseMessage, workdir: LocalWorkdir) -> bool:
        text = content_text(copy.content)
        reference = parse_offload_reference(text) if isinstance(copy, ToolMessage) else None
        if reference is not None:
            try:
                data = workdir.read_bytes(reference.path)
            except WorkdirError:
                return False
            if hashlib.sha256(data).hexdigest() != reference.sha256:
                return False
            text = decode_text(data)
        if not _same_text(text, content_text(original.content)):
            return False
        if isinstance(original, AIMessage):
            calls = copy.tool_calls if isinstance(copy, AIMessage) else []
            return len(calls) == len(original.tool_calls) and all(
                _same_args(a["args"], b["args"]) for a, b in zip(calls, original.tool_calls, strict=True)
            )
        return True

    # -- I7: events ---------------------------------------------------------------------------------

    def check_events(self, call: CallRecord, number: int) -> None:
        statuses = [e.get("status") for e in call.events if e.get("type") == "context_compression"]
        if statuses not in ([], ["started", "completed"], ["started", "failed"]):
            self.fail("events", f"call {number}: compression events {statuses}")
        if isinstance(call.raised, ContextOverflowError) and statuses and statuses[-1] != "failed":
            self.fail("events", f"call {number}: a documented error without a failed event")


def _same_args(found: Any, original: Any) -> bool:
    if found == original:
        return True
    return json.dumps(found, default=str) == json.dumps(original, default=str) or _stored(
        json.dumps(found, ensure_ascii=False, default=str)
    ) == _stored(json.dumps(original, ensure_ascii=False, default=str))


def call_path(call: CallRecord) -> Path_:
    if isinstance(call.raised, DOCUMENTED_ERRORS):
        return "error"
    done = [e for e in call.events if e.get("status") == "completed"]
    if not done:
        return "below" if not call.events else "error"
    event = done[-1]
    if event.get("reason") == "context_overflow":
        return "tail_trim" if event.get("trimmed_tool_results") else "forced"
    return "l2" if event.get("level") == "l2" else "l1"


# -- I5: sync == async --------------------------------------------------------------------------------

_DATED = re.compile(r'"(created_at|updated_at)": "[^"]*"')


def _message_key(message: BaseMessage) -> Any:
    calls = [(c["name"], c["id"], c["args"]) for c in getattr(message, "tool_calls", None) or []]
    return (
        type(message).__name__,
        message.id,
        message.content,
        calls,
        getattr(message, "tool_call_id", None),
        getattr(message, "status", None),
    )


def _fingerprint(record: RunRecord) -> Any:
    turns = [(t.human_id, type(t.error).__name__ if t.error else None) for t in record.turns]
    calls = [
        (
            [_message_key(m) for m in c.incoming],
            [([_message_key(m) for m in a.messages], a.outcome) for a in c.attempts],
            c.events,
            type(c.raised).__name__ if c.raised else None,
        )
        for c in record.calls
    ]
    event = record.state.get(EVENT_KEY)
    summary = (
        (event["cutoff_index"], event["file_path"], _message_key(event["summary_message"]))
        if isinstance(event, dict)
        else None
    )
    state = [_message_key(m) for m in record.state.get("messages", [])]
    files: dict[str, str] = {}
    if record.workdir is not None:
        for stored in record.workdir.list_files():
            data = decode_text(record.workdir.read_bytes(stored.path))
            files[stored.path] = _DATED.sub("", data)
    return {"turns": turns, "calls": calls, "summary": summary, "state": state, "files": files}


def _first_difference(a: Any, b: Any, where: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if a.get(key) != b.get(key):
                return _first_difference(a.get(key), b.get(key), f"{where}/{key}")
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            return f"{where}: {len(a)} items (sync) against {len(b)} (async)"
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return _first_difference(x, y, f"{where}[{index}]")
    return f"{where}: {str(a)[:120]!r} (sync) against {str(b)[:120]!r} (async)"


# -- the whole check ---------------------------------------------------------------------------------


def _recovery_expected(case: FlowCase, system: SystemMessage | None) -> bool:
    """A turn after a documented error must succeed when its least request fits the window: the
    system prompt, the short question and a summary message holding the longest summary the
    summary model gives (capped by `summary_output_budget`; a failed summary's digest counted as
    `FAILED_SUMMARY_TOKENS`), with `RECOVERY_SLACK_TOKENS` for the marker line and what it carries."""
    if case.context_window is None:
        return True
    model = FuzzChatModel()
    least = model.size([*([system] if system else []), HumanMessage(RECOVERY_TEXT)])
    cap = summary_output_budget(case.config())
    longest = max(
        min(cap, model.size([HumanMessage(reply)])) if reply is not None else FAILED_SUMMARY_TOKENS
        for reply in case.summary_replies
    )
    return least + longest + RECOVERY_SLACK_TOKENS <= case.context_window


def check_record(case: FlowCase, record: RunRecord, report: CaseReport) -> None:
    """I1–I4, I6, I7 on one run."""
    checker = _Checker(case, report)
    mode = "async" if record.asynchronous else "sync"
    workdir = record.workdir
    assert workdir is not None
    system = SystemMessage(case.system_prompt) if case.system_prompt is not None else None
    for turn in record.turns:
        if turn.error is not None and not isinstance(turn.error, DOCUMENTED_ERRORS):
            checker.fail(
                "exception",
                f"{mode} turn {turn.human_id}: {type(turn.error).__name__}: {str(turn.error)[:200]}",
                turn.traceback,
            )
        if turn.recovery_of is not None and turn.error is not None and _recovery_expected(case, system):
            checker.fail(
                "recovery",
                f"{mode}: the turn after a documented error failed too: {type(turn.error).__name__}",
                turn.traceback,
            )
    for number, call in enumerate(record.calls):
        checker.check_sizes(call, number)
        checker.check_raised(call, number)
        checker.check_pairs(call, number)
        checker.check_events(call, number)
        for index, attempt in enumerate(call.attempts):
            checker.check_shown(attempt.messages, workdir, f"{mode} call {number} attempt {index}")
    checker.check_shown(list(record.state.get("messages", [])), workdir, f"{mode} final state")
    checker.check_summarised(record.state, workdir)


def check_case(case: FlowCase, root: Path) -> CaseReport:
    """Run `case` with `invoke` and with `ainvoke` (fresh checkpointer and workdir each) and check:

    I1 no unexpected exception: a turn ends normally or with a documented error,
       `ContextOverflowError` or `SummarizerConflictError`;
    I2 size: every first request of a model call is below the threshold, unless the middleware
       could not send less -- the kept part is minimal (the current message, or the current
       tool-call batch, which cannot be split), or the kept messages alone fit and the summary
       message tips the request over (`keep_that_fits` measures the kept part without it, and the
       summary's length is bounded by `summary_output_budget`); every request after an overflow is
       strictly smaller than the one that overflowed; `ContextOverflowError` only after the model
       overflowed on a request that was minimal with its tool results trimmed, or whose least
       possible form (the system prompt and the kept part's non-tool messages) already overflows;
    I3 pairs: in every request, each tool result follows the AI message calling it and each call is
       answered before the next message;
    I4 recoverable: a tool result or argument changed in a request or in the state names a workdir
       file holding the original text (its sha256 checked); every message before the final cutoff
       is whole in the history or conversation files, offloaded results restored from theirs;
    I5 sync == async: the same requests, outcomes, events, final state and workdir files;
    I6 recovery: after a documented error, the next turn (a short question) succeeds when the
       system prompt, a bounded summary and that question fit the model's window;
    I7 events: a call's compression events are none, started → completed, or started → failed.
    """
    report = CaseReport()
    sync = run_case(case, root / "sync", asynchronous=False)
    check_record(case, sync, report)
    report.call_paths = [call_path(call) for call in sync.calls]
    asynchronous = run_case(case, root / "async", asynchronous=True)
    check_record(case, asynchronous, report)
    left, right = _fingerprint(sync), _fingerprint(asynchronous)
    if left != right:
        report.violations.append(Violation("sync==async", _first_difference(left, right)))
    return report


class FlowInvariantError(AssertionError):
    """The first violation of a case, with all of them listed."""


def assert_case(case: FlowCase, root: Path) -> CaseReport:
    report = check_case(case, root)
    if report.violations:
        first = report.violations[0]
        lines = [f"{v.invariant}: {v.detail}" for v in report.violations[:8]]
        raise FlowInvariantError("\n".join([*lines, "", case.short(), first.traceback]))
    return report


__all__ = [
    "DOCUMENTED_ERRORS",
    "PATH_LABELS",
    "PATH_ORDER",
    "CaseReport",
    "FlowCase",
    "FlowInvariantError",
    "RunRecord",
    "Violation",
    "assert_case",
    "check_case",
    "flow_cases",
    "run_case",
]
