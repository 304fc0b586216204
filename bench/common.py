"""Shared pieces of the side-by-side benchmarks (overhead, L1 savings, recoverability, memory).

- the real conversations of the shared traces folder, and long threads concatenated from them;
- an instant fake chat model (the main model and the summary model of every middleware);
- ctxpress and its two peers, configured to the closest equivalent settings:
  LangChain v1 ``SummarizationMiddleware`` and DeepAgents' ``SummarizationMiddleware``;
- one replay driver per middleware, model call by model call, applying state updates the way
  LangGraph's reducers would;
- timing, tables, RSS, and writing a marked section of ``docs/benchmarks.md``.

Nothing here is tuned to a goal: every middleware gets the same requests, the same canned summary
and the same threshold in tokens (each counted with its own default counter).
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from deepagents.backends import FilesystemBackend
from deepagents.middleware.summarization import (
    SUMMARIZATION_EVENT_KEY,
    SUMMARIZATION_SESSION_ID_KEY,
)
from deepagents.middleware.summarization import (
    SummarizationMiddleware as DeepAgentsSummarization,
)
from langchain.agents.middleware import SummarizationMiddleware as LangChainSummarization
from langchain.agents.middleware.types import ExtendedModelResponse, ModelRequest, ModelResponse
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    messages_from_dict,
    messages_to_dict,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph.message import add_messages
from langgraph.runtime import Runtime

from ctxpress import CompressionConfig
from ctxpress.app.testing.token_samples import real_thread
from ctxpress.checkpoint_serde import CheckpointSerializer
from ctxpress.compaction import CompactionCache
from ctxpress.compaction.content import content_text
from ctxpress.config import TOKENS_PER_K
from ctxpress.middleware import ContextCompressionMiddleware
from ctxpress.tokens import TokenCounter, count_request_tokens
from ctxpress.tools.replay import ReplayStep, replay_messages
from ctxpress.tools.traces import Conversation, iter_conversations
from ctxpress.tools.traces.model import finalize_conversation
from ctxpress.workdir import LocalWorkdir
from shared_data import require_data_dir

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCS = REPO_ROOT / "docs" / "benchmarks.md"
DOCS_INTRO = (
    "# Benchmarks\n\n"
    "Figures measured on this project's machines with the scripts in `bench/`; each section names "
    "the command that reproduces it. Peers are measured in the same run and quoted as ratios.\n"
)

#: The traces the L1 goal is about (large tool results).
TOOL_HEAVY_SOURCES: tuple[str, ...] = ("swe-agent", "openhands", "tau-bench", "toolbench")
#: Order in which long threads interleave the sources (tool-heavy and Chinese alternate).
THREAD_SOURCES: tuple[str, ...] = ("swe-agent", "glaive", "openhands", "acebench", "tau-bench", "toolbench")
#: Messages kept after a summary: ctxpress' default, given to the peers as ("messages", 10).
KEEP_MESSAGES = 10

#: The canned answer of the instant summary model: the same text for every middleware, so the
#: summaries cost the same in every request that carries one.
SUMMARY_TEXT = (
    "用户的目标：排查并修复仓库中的问题，按要求完成客服流程。已完成：读取了相关文件，运行了测试，"
    "定位到出错的函数并修改了实现；已确认用户身份与订单号。关键标识：文件路径、函数名、订单号和日期"
    "均保存在历史文件中。未完成：补充回归测试，等待用户确认最终方案。\n"
    "Goal: fix the reported bug and finish the customer request. Done: inspected the files named in "
    "the history, ran the tests, changed the failing function. Next: add a regression test and "
    "confirm with the user."
)


# --------------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------------


def traces_dir() -> Path:
    """`$CTXPRESS_SHARED_DATA/traces`, else `<repo>/../shared/data/traces`."""
    return require_data_dir() / "traces"


@cache
def conversations() -> tuple[Conversation, ...]:
    """Every real conversation of the shared traces, in the loaders' deterministic order."""
    return tuple(iter_conversations(traces_dir()))


def split_system(messages: Sequence[BaseMessage]) -> tuple[SystemMessage | None, list[BaseMessage]]:
    if messages and isinstance(messages[0], SystemMessage):
        return messages[0], list(messages[1:])
    return None, list(messages)


@dataclass(frozen=True)
class Thread:
    """A request's worth of history: the system prompt, the messages after it, the tool schemas."""

    name: str
    system: SystemMessage | None
    messages: list[BaseMessage]
    tools: list[dict[str, Any]]
    source: str = "mixed"  # the data set, for threads taken from one

    @property
    def tokens(self) -> int:
        """Estimated tokens of the whole request (ctxpress' estimator, default profile)."""
        return count_request_tokens(self.messages, self.system, self.tools)

    @property
    def chars(self) -> int:
        return sum(len(content_text(m.content)) for m in self.messages)

    @property
    def utf8_bytes(self) -> int:
        return sum(len(message_bytes(m)) for m in self.messages)


def message_bytes(message: BaseMessage) -> bytes:
    """The bytes a message carries: its text and its tool calls' JSON arguments (UTF-8)."""
    text = content_text(message.content)
    for call in getattr(message, "tool_calls", None) or ():
        text += json.dumps(call["args"], ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass")


def conversation_tokens(conversation: Conversation) -> int:
    """Estimated tokens of a conversation's messages after its system prompt (what it adds to a
    concatenated thread, whose system prompt and tools are counted once)."""
    return count_request_tokens(split_system(conversation.messages)[1])


def concatenate(name: str, pieces: Sequence[Conversation], source: str = "mixed") -> Thread:
    """One provider-valid thread from several conversations: the first system prompt at the head,
    later system prompts dropped, ids made unique again by the traces' own finaliser. The tool
    schemas are those of the first conversation that has any (one agent's tool set, as in a real
    request); calls to other tools stay in the history, which providers accept."""
    body: list[BaseMessage] = []
    system: SystemMessage | None = None
    for conversation in pieces:
        head, rest = split_system(conversation.messages)
        if system is None and head is not None:
            system = head
        body.extend(rest)
    while body and isinstance(body[-1], AIMessage) and not body[-1].tool_calls:
        body.pop()  # a request ends before the model's answer
    tools = next((piece.tools for piece in pieces if piece.tools), [])
    valid = finalize_conversation("concatenated", name, body, tools)
    return Thread(name, system, valid.messages, valid.tools, source)


def build_thread(target_tokens: int, sources: Sequence[str] = THREAD_SOURCES) -> Thread:
    """A thread of about `target_tokens` estimated tokens: real conversations of `sources` taken in
    turn (deterministic order), each added only while the total stays within 5% of the target."""
    queues = {source: [c for c in conversations() if c.source == source] for source in sources}
    chosen: list[Conversation] = []
    total = 0
    while any(queues.values()) and total < 0.95 * target_tokens:
        for source in sources:
            queue = queues[source]
            while queue:
                candidate = queue.pop(0)
                size = conversation_tokens(candidate)
                if total + size <= 1.05 * target_tokens:
                    chosen.append(candidate)
                    total += size
                    break
            if total >= 0.95 * target_tokens:
                break
    return concatenate(f"thread-{target_tokens // 1000}k", chosen)


def source_sessions(source: str, target_tokens: int) -> list[Thread]:
    """The conversations of one source concatenated, in order, into long sessions of about
    `target_tokens` each (a user who keeps working in one thread)."""
    sessions: list[Thread] = []
    pieces: list[Conversation] = []
    total = 0
    for conversation in (c for c in conversations() if c.source == source):
        pieces.append(conversation)
        total += conversation_tokens(conversation)
        if total >= target_tokens:
            sessions.append(concatenate(f"{source}-session-{len(sessions)}", pieces, source))
            pieces, total = [], 0
    if pieces:
        sessions.append(concatenate(f"{source}-session-{len(sessions)}", pieces, source))
    return sessions


def reference_thread() -> Thread:
    """The long real thread of `token_samples.real_thread` (401 messages of glaive zh, SWE-agent and
    tau-bench), the reference point of the token-estimate figures, with message ids."""
    system, rest = split_system(real_thread(require_data_dir()))
    # In an agent's state every message has an id (`add_messages` gives one); without ids
    # LangChain's middleware would mint a uuid per message on every call.
    rest = [m if m.id else m.model_copy(update={"id": f"reference:{i}"}) for i, m in enumerate(rest)]
    return Thread("reference-401", system, rest, [])


class Reloader:
    """New message objects with new strings each time, as a checkpoint reload gives."""

    def __init__(self, messages: Sequence[BaseMessage]) -> None:
        self.payload = json.dumps(messages_to_dict(list(messages)), ensure_ascii=False)

    def load(self) -> list[BaseMessage]:
        return messages_from_dict(json.loads(self.payload))


class NextRun:
    """A thread's last two runs as one service process serves them, its checkpoints written and read
    through ctxpress's `CheckpointSerializer` (a new one per setup, so nothing is kept from an
    earlier one).

    The previous run read the checkpoint holding everything before its question's answer
    (`messages[:asked + 1]`, `asked` the second-to-last human message); its model calls saw the
    turn's new messages as the live objects the graph made, and its last checkpoint was written
    with them. The next run reads the checkpoint holding all of that (`messages[:question]`,
    `question` the last human message, stored as LangGraph writes it), and its first model call
    receives that and the new question (a new object, never seen by any count): the thread up to
    its last question, not what the run makes after it."""

    def __init__(self, messages: Sequence[BaseMessage]) -> None:
        humans = [index for index, message in enumerate(messages) if isinstance(message, HumanMessage)]
        question = humans[-1] if humans else len(messages)
        asked = humans[-2] if len(humans) > 1 else 0
        self.messages = list(messages)
        self.previous = JsonPlusSerializer().dumps_typed({"messages": self.messages[: asked + 1]})
        self.turn = self.messages[asked + 1 : question]
        self.checkpoint = JsonPlusSerializer().dumps_typed({"messages": self.messages[:question]})
        self.new = Reloader(self.messages[question : question + 1])

    def previous_run(self) -> tuple[CheckpointSerializer, list[BaseMessage]]:
        """A new serializer after the previous run (its checkpoint read, its last one written), and
        what that run's last model call received."""
        serde = CheckpointSerializer()
        state = [*serde.loads_typed(self.previous)["messages"], *self.turn]
        serde.dumps_typed({"messages": state})
        return serde, state

    def load(self, serde: CheckpointSerializer) -> list[BaseMessage]:
        """What the next run's first model call receives: its checkpoint read by `serde`, then the
        new question."""
        return [*serde.loads_typed(self.checkpoint)["messages"], *self.new.load()]


# --------------------------------------------------------------------------------------------------
# The instant model and the middlewares
# --------------------------------------------------------------------------------------------------


class InstantChatModel(BaseChatModel):
    """Answers every call at once with `SUMMARY_TEXT` (summaries) and counts the calls."""

    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "instant-bench-model"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.calls += 1
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=SUMMARY_TEXT))])


CANNED_RESPONSE = ModelResponse(result=[AIMessage(content="ok")])


def canned_handler(_request: ModelRequest) -> ModelResponse:
    return CANNED_RESPONSE


def model_request(
    model: BaseChatModel,
    messages: list[BaseMessage],
    system: SystemMessage | None,
    tools: list[dict[str, Any]],
    state: dict[str, Any] | None = None,
) -> ModelRequest:
    return ModelRequest(
        model=model,
        messages=messages,  # type: ignore[arg-type]
        system_message=system,
        tools=tools,  # type: ignore[arg-type]
        state=state if state is not None else {"messages": messages},  # type: ignore[arg-type]
        runtime=Runtime(),
    )


def make_ours(
    threshold_tokens: int,
    workdir: LocalWorkdir,
    model: BaseChatModel,
    cache_: CompactionCache | None = None,
    counter: TokenCounter | None = None,
) -> ContextCompressionMiddleware:
    config = CompressionConfig(
        summary_threshold=threshold_tokens / TOKENS_PER_K, summary_keep_messages=KEEP_MESSAGES
    )
    return ContextCompressionMiddleware(
        config, workdir=workdir, summary_model=model, cache=cache_, counter=counter
    )


def make_langchain(threshold_tokens: int, model: BaseChatModel) -> LangChainSummarization:
    """LangChain v1: trigger at the same token count, keep 10 messages, its default counter."""
    return LangChainSummarization(
        model, trigger=("tokens", threshold_tokens), keep=("messages", KEEP_MESSAGES)
    )


def make_deepagents(threshold_tokens: int, model: BaseChatModel, root: Path) -> DeepAgentsSummarization:
    """DeepAgents: the same trigger and keep, its default counter, history offloaded to a
    `FilesystemBackend` (virtual mode, rooted in `root`), and its nearest equivalent of our S7 --
    `write_file` / `edit_file` arguments over 2,000 characters truncated from the same threshold."""
    return DeepAgentsSummarization(
        model,
        backend=FilesystemBackend(root_dir=root, virtual_mode=True),
        trigger=("tokens", threshold_tokens),
        keep=("messages", KEEP_MESSAGES),
        truncate_args_settings={
            "trigger": ("tokens", threshold_tokens),
            "keep": ("messages", KEEP_MESSAGES),
            "max_length": 2000,
        },
    )


# --------------------------------------------------------------------------------------------------
# Replays: one model call per recorded AI message
# --------------------------------------------------------------------------------------------------

PEERS: tuple[str, ...] = ("ctxpress", "langchain", "deepagents")


@dataclass
class Call:
    """One model call of a replay."""

    position: int
    sent: list[BaseMessage]  # what the main model received (without the system prompt)
    level: str | None  # "l1" / "l2" for ctxpress; "summary" for a peer that summarised
    over_threshold: bool  # the middleware's own measure reached its threshold


@dataclass
class Replay:
    """Calls, final state messages and the summaries a middleware made over one thread."""

    middleware: str
    model: InstantChatModel  # the summary model: its `calls` are the summary calls made
    calls: list[Call] = field(default_factory=list)
    state_messages: list[BaseMessage] = field(default_factory=list)
    summaries: list[dict[str, Any]] = field(default_factory=list)  # the events / updates, in order


def replay_ours(
    thread: Thread, threshold: int, root: Path, model: InstantChatModel, summary_timeout: float | None = None
) -> Replay:
    # No fsync: replays measure what is sent and stored, not durability (DeepAgents does not fsync).
    middleware = make_ours(threshold, LocalWorkdir(root, durable=False), model, CompactionCache())
    if summary_timeout is not None:  # a slow real summary model: wait as long as the peers do
        middleware.summary_timeout = summary_timeout
    replay = Replay("ctxpress", model)

    def record(step: ReplayStep) -> None:
        assert step.view is not None
        replay.calls.append(Call(step.position, step.view, step.level, step.tokens_before >= threshold))
        step.view = None

    messages = [thread.system, *thread.messages] if thread.system else thread.messages
    result = replay_messages(
        messages, middleware, model=model, tools=thread.tools, keep_views=True, on_step=record
    )
    replay.state_messages = result.messages
    replay.summaries = list(result.events)
    return replay


class FirstCount:
    """Wraps a peer's token counter and keeps the first count of each model call -- the one its
    trigger decision uses -- so a replay learns that decision without counting again."""

    def __init__(self, counter: Callable[..., int]) -> None:
        self.counter = counter
        self.first: int | None = None

    def __call__(self, messages: Iterable[Any], **kwargs: Any) -> int:
        tokens = self.counter(messages, **kwargs)
        if self.first is None:
            self.first = tokens
        return tokens

    def over(self, threshold: int) -> bool:
        return self.first is not None and self.first >= threshold


def replay_langchain(thread: Thread, threshold: int, model: InstantChatModel) -> Replay:
    """`before_model` before every call; its `RemoveMessage(REMOVE_ALL)` update rewrites the state."""
    middleware = make_langchain(threshold, model)
    counter = middleware.token_counter = FirstCount(middleware.token_counter)
    replay = Replay("langchain", model)
    messages: list[BaseMessage] = []
    runtime: Runtime[Any] = Runtime()
    for position, message in enumerate(thread.messages):
        if isinstance(message, AIMessage) and messages:
            counter.first = None
            update = middleware.before_model({"messages": messages}, runtime)  # type: ignore[typeddict-item]
            over = counter.over(threshold)
            level = None
            if update is not None:
                before = messages
                messages = add_messages(messages, update["messages"])  # type: ignore[arg-type, assignment]
                kept = {m.id for m in messages}
                replay.summaries.append({"removed": [m for m in before if m.id not in kept]})
                level = "summary"
            replay.calls.append(Call(position, list(messages), level, over))
        messages = [*messages, message]
    replay.state_messages = messages
    return replay


def replay_deepagents(thread: Thread, threshold: int, root: Path, model: InstantChatModel) -> Replay:
    """`wrap_model_call` on every call; its event / session id / replacements go into the state."""
    middleware = make_deepagents(threshold, model, root)
    helper = middleware._lc_helper
    counter = helper.token_counter = FirstCount(helper.token_counter)
    replay = Replay("deepagents", model)
    state: dict[str, Any] = {"messages": []}
    for position, message in enumerate(thread.messages):
        if isinstance(message, AIMessage) and state["messages"]:
            sent: list[list[BaseMessage]] = []

            def handler(request: ModelRequest, sent: list[list[BaseMessage]] = sent) -> ModelResponse:
                sent.append(list(request.messages))
                return CANNED_RESPONSE

            request = model_request(model, list(state["messages"]), thread.system, thread.tools, dict(state))
            counter.first = None
            response = middleware.wrap_model_call(request, handler)
            over = counter.over(threshold)
            level = None
            if isinstance(response, ExtendedModelResponse) and response.command is not None:
                update = dict(response.command.update or {})
                if SUMMARIZATION_EVENT_KEY in update:
                    state[SUMMARIZATION_EVENT_KEY] = update[SUMMARIZATION_EVENT_KEY]
                    state[SUMMARIZATION_SESSION_ID_KEY] = update.get(SUMMARIZATION_SESSION_ID_KEY)
                    replay.summaries.append(update[SUMMARIZATION_EVENT_KEY])
                    level = "summary"
                if update.get("messages"):
                    state["messages"] = add_messages(state["messages"], update["messages"])
            replay.calls.append(Call(position, sent[-1], level, over))
        state["messages"] = [*state["messages"], message]
    replay.state_messages = state["messages"]
    return replay


def replay_all(
    thread: Thread,
    threshold: int,
    root: Path,
    make_model: Callable[[], Any] = InstantChatModel,
    summary_timeout: float | None = None,
) -> dict[str, Replay]:
    """The three middlewares over the same thread, each with its own summary model (`make_model()`:
    an instant model unless told otherwise) and workdir; `summary_timeout` replaces ctxpress' own."""
    return {
        "ctxpress": replay_ours(thread, threshold, root / "ctxpress", make_model(), summary_timeout),
        "langchain": replay_langchain(thread, threshold, make_model()),
        "deepagents": replay_deepagents(thread, threshold, root / "deepagents", make_model()),
    }


def reaches_threshold(thread: Thread, threshold: int) -> bool:
    """Whether any of the three middlewares, each by its own measure, sees the thread's last (and
    largest: requests only grow) request at or above `threshold`. When none does, every request
    passes through all three unchanged, so replaying the thread would show nothing."""
    model = InstantChatModel()
    if (
        thread.tokens >= threshold
        or make_langchain(threshold, model).token_counter(thread.messages) >= threshold
    ):
        return True
    peer = make_deepagents(threshold, model, Path("/nonexistent"))
    return peer._count_tokens(thread.messages, thread.system, thread.tools) >= threshold  # type: ignore[arg-type]


def conversation_thread(conversation: Conversation) -> Thread:
    system, rest = split_system(conversation.messages)
    return Thread(conversation.name, system, rest, conversation.tools, conversation.source)


#: Long sessions: one source's conversations concatenated, about this many estimated tokens each.
SESSION_TOKENS = 150_000
SESSIONS_PER_SOURCE = 3
#: Thresholds of the replays, in K (x 1024 tokens), as `summary_threshold` takes them.
THRESHOLDS_K: tuple[int, ...] = (8, 32, 100)


def replay_sets(quick: bool) -> dict[str, list[Thread]]:
    """`conversations`: every real conversation as it was recorded; `sessions`: each source's
    conversations concatenated into long threads of about `SESSION_TOKENS`, the first
    `SESSIONS_PER_SOURCE` of each source (with `quick`, the first one)."""
    sessions: list[Thread] = []
    for source in sorted({c.source for c in conversations()}):
        found = source_sessions(source, SESSION_TOKENS)
        sessions.extend(found[: 1 if quick else SESSIONS_PER_SOURCE])
    return {"conversations": [conversation_thread(c) for c in conversations()], "sessions": sessions}


# --------------------------------------------------------------------------------------------------
# Timing, memory, tables, docs
# --------------------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


@dataclass(frozen=True)
class Timing:
    p50_ms: float
    p95_ms: float
    runs: int

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Timing:
        return cls(percentile(seconds, 0.5) * 1e3, percentile(seconds, 0.95) * 1e3, len(seconds))


def time_interleaved(
    cases: dict[str, Callable[[], Callable[[], object]]], runs: int, warmup: int = 1
) -> dict[str, Timing]:
    """Time several contenders round-robin (A B C A B C ...), so drift hits them alike.

    Each case is a *setup* returning the callable to time: the setup (fresh objects, a fresh
    workdir) runs untimed before every run. The garbage collector stays on (its pauses are part of
    what a middleware costs), but call `settle()` first so the loaded data is not rescanned.
    """
    seconds: dict[str, list[float]] = {name: [] for name in cases}
    for index in range(warmup + runs):
        for name, setup in cases.items():
            call = setup()
            start = time.perf_counter()
            call()
            elapsed = time.perf_counter() - start
            if index >= warmup:
                seconds[name].append(elapsed)
    return {name: Timing.of(values) for name, values in seconds.items()}


def settle() -> None:
    """Collect once, then move everything alive (the loaded traces, the threads) out of the
    collector's sight, so its pauses during timing come from what the middlewares allocate."""
    gc.collect()
    gc.freeze()


def rss_mb() -> float:
    """Resident set size of this process, from /proc/self/status (MB)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("VmRSS not found in /proc/self/status")


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines.extend("| " + " | ".join(str(cell) for cell in row) + " |" for row in rows)
    return lines


def ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}×" if theirs else "–"


def share(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "–"


def update_docs(marker: str, lines: Sequence[str]) -> None:
    """Replace the section between `<!-- marker:start -->` and `<!-- marker:end -->` (append it
    when missing; create the file with a short intro when there is none)."""
    start, end = f"<!-- {marker}:start -->", f"<!-- {marker}:end -->"
    block = "\n".join([start, *lines, end])
    text = DOCS.read_text(encoding="utf-8") if DOCS.exists() else DOCS_INTRO
    if start in text and end in text:
        head, rest = text.split(start, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    DOCS.parent.mkdir(parents=True, exist_ok=True)
    DOCS.write_text(text, encoding="utf-8")


def bench_parser(doc: str | None, quick_help: str) -> argparse.ArgumentParser:
    """The options every peer benchmark takes: `--quick` (short run, docs untouched) and `--no-docs`."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--no-docs", action="store_true", help="do not update docs/benchmarks.md")
    return parser
