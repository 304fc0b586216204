"""The chat service under load, and manual compression on a 1,000-message thread (issue 9, item 5).

    .venv/bin/python bench/service_load.py            # full run, updates docs/benchmarks.md
    .venv/bin/python bench/service_load.py --quick    # fewer conversations, a shorter thread; docs untouched

Load: a real `ctxpress serve` process (uvicorn over HTTP on a free 127.0.0.1 port, the service's
default settings, the default agent: the built-in offline model over the knowledge base), once on
SQLite (a temporary data directory) and once on a fresh PostgreSQL database (created for the run,
dropped afterwards). Each conversation is an `httpx.AsyncClient` of its own; all conversations send
their turns at once, each turn waiting for its run: `POST …/runs/stream` (the message, answered
with its run's SSE stream) until `run_finished` (a broken stream reconnects at `GET
/api/runs/{id}/events` with `Last-Event-ID` and counts as an error). Per turn:
POST → first SSE event, → first `message_delta` (first token), → `run_finished`. Overall: turns
and SSE events per second; errors (non-2xx, broken streams, runs not ending `succeeded`, turns cut by
the time limit); lost messages, read back through `GET …/messages` at the end: each user message
sent must be stored once and each of its runs must have stored one final answer (missing or
duplicated = lost), and every stored assistant/tool message of a run must have been announced on
its stream (and nothing announced that is not stored).

Peer: the same load against the same service with an agent without the compression middleware --
an agents file (`--agents`) that repeats the default agent (built-in model, prompt, tools) with
`capabilities = []`, so `agent_middleware` adds no `ContextCompressionMiddleware`. Ratios are
ctxpress ÷ no middleware, measured in the same run.

Manual compression: a 1,000-message thread made by turns of the offline model (knowledge-base
questions, notes, listings, greps, reading saved results back) through the service's own compiled
graph and checkpointer, in this process before the service starts (`seed_thread`: the agent,
middleware, tools and state of real runs, automatic compression acting on the way, without the
HTTP/SSE/chat-record work that would make 250 turns take minutes). Then `bench/timed_service.py`
(the same app and default agent, its summary model wrapped in a stopwatch) serves it, and
repeatedly: one real run over HTTP (new messages after the previous cutoff), `POST …/compress`.
The figure is its HTTP round trip minus the summary model's own time, measured inside the service;
the service also times each step of the call (the "where the time goes" table).

LangGraph's Agent Server (issue 17; `--only peer` alone, updating its own section): the same load
against `langgraph dev` (its in-memory runtime, in `.venv-agent-server/`, made by `bench/agent_server.py`)
serving the default agent's graph (`bench/agent_server_graph.py`), at its documented default of 10
runs at once and at ctxpress's number, against `ctxpress serve` on SQLite, in two rounds of alternating
order. Ratios are ctxpress ÷ Agent Server, every round's turns pooled.

`--profile` runs the services under cProfile (event-loop thread; slower, docs untouched) and prints
where their time goes: per package during each load, the top functions of the compress calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import pstats
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig

from agent_server import (
    GRAPH_NAME,
    AgentServer,
    ensure_venv,
    project_versions,
    running_agent_server,
    tree_cpu_s,
    versions,
)
from common import REPO_ROOT, bench_parser, percentile, ratio, table, update_docs
from ctxpress.app.server.agents_file import default_agent
from ctxpress.app.server.repositories.checkpoint_rows import ThreadStorage
from ctxpress.app.server.runtime.agents import thread_config
from ctxpress.app.server.runtime.checkpoint_pruning import prune_thread, thread_storage
from ctxpress.app.server.runtime.container import open_services
from ctxpress.app.server.settings import Settings
from ctxpress.app.testing.api import SseLines, read_events, send
from ctxpress.app.testing.postgres import PostgresUnavailableError, scratch_postgres_database
from ctxpress.app.testing.processes import SERVE_COMMAND, ServiceProcess, create_user
from profiled import by_package
from timed_service import CHECKPOINT_READ, CHECKPOINT_WRITE, SUMMARY_MODEL, timed_agent

MARKER = "service_load"
COMMAND = ".venv/bin/python bench/service_load.py"
BENCH_DIR = Path(__file__).resolve().parent
BACKENDS: tuple[str, ...] = ("sqlite", "postgresql")
CTXPRESS, PEER, AGENT_SERVER = "ctxpress", "no middleware", "LangGraph Agent Server"
TIMED_COMMAND: tuple[str, ...] = (sys.executable, str(BENCH_DIR / "timed_service.py"), "{port}")
GOAL_LOST = 0
GOAL_COMPRESS_P50_MS = 50.0


@dataclass(frozen=True)
class Sizes:
    conversations: int
    turns: int
    thread_messages: int
    compressions: int


FULL = Sizes(conversations=50, turns=2, thread_messages=1000, compressions=20)
QUICK = Sizes(conversations=20, turns=2, thread_messages=200, compressions=5)

#: Every bounded wait. A load phase stops after LOAD_BUDGET_S (unfinished turns count as errors).
REQUEST_TIMEOUT_S = 60.0
LOAD_BUDGET_S = 240.0
BUILD_BUDGET_S = 300.0
STREAM_ATTEMPTS = 3
MAX_PAGES = 20
PAGE_LIMIT = 500

#: What the load's users ask: knowledge-base questions (Chinese and English), a note, a listing.
LOAD_TEXTS: tuple[str, ...] = (
    "什么是 L1 压缩？",
    "How does manual compression work?",
    "summary_threshold 应该怎么设置？",
    "What happens when the model's context overflows?",
    "历史文件保存在哪里？",
    "记下：下周复查压缩阈值。",
    "How are large tool results offloaded?",
    "中文的 token 是怎么估算的？",
    "列出文件",
    "What does the status panel show?",
    "手动压缩什么时候会返回 409？",
    "Which servers are supported for the overflow mapping?",
)
#: The long thread: the same mix, plus greps and reading a saved (offloaded) result back.
THREAD_TEXTS: tuple[str, ...] = (
    *LOAD_TEXTS,
    "在文件中查找“阈值”",
    "读取完整结果",
    "note: check the keep setting after the next release",
)


# --------------------------------------------------------------------------------------------------
# Service processes and databases
# --------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def service_settings(backend: str, root: Path) -> Iterator[Settings]:
    """Settings of a fresh service: SQLite in `root/data`, or a new PostgreSQL database (dropped on
    exit) with its workdirs in `root/data`."""
    root.mkdir(parents=True)
    if backend == "sqlite":
        yield Settings(data_dir=root / "data")
        return
    with scratch_postgres_database("ctxpress_bench_") as url:
        yield Settings(data_dir=root / "data", database_url=url)


@contextlib.contextmanager
def running_service(
    settings: Settings, root: Path, command: Sequence[str], extra_env: dict[str, str] | None = None
) -> Iterator[ServiceProcess]:
    """The started service process on 127.0.0.1 (stopped on exit, whatever happened)."""
    process = ServiceProcess(
        settings, root, root / "service.log", extra_env=extra_env or {}, command=tuple(command), cwd=REPO_ROOT
    )
    try:
        process.start()
        yield process
    finally:
        process.stop()


def peer_agents_file(path: Path) -> Path:
    """The default agent again (built-in model, prompt, tools), without the compression capability."""
    agent = default_agent()
    tools = [tool for tool in agent.tools if isinstance(tool, str)]
    lines = [
        "[agents.default]",
        "default = true",
        f"description = {json.dumps('default agent without the compression middleware')}",
        'model = "builtin"',
        f"system_prompt = {json.dumps(agent.system_prompt, ensure_ascii=False)}",
        f"tools = {json.dumps(tools)}",
        "capabilities = []",
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------------
# Load
# --------------------------------------------------------------------------------------------------


@dataclass
class Turn:
    conversation: int
    text: str
    run_id: str | None = None
    #: Seconds after the POST was sent.
    first_event: float | None = None
    run_started: float | None = None
    first_token: float | None = None
    finished: float | None = None
    status: str | None = None
    queued: bool = False
    events: int = 0
    #: Bytes of the SSE stream(s) read for the turn (lines without their line ends).
    received: int = 0
    announced: set[int] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)

    @property
    def executing(self) -> float | None:
        """`run_started` → `run_finished`: the run itself, without its wait in the queue."""
        if self.run_started is None or self.finished is None:
            return None
        return self.finished - self.run_started


@dataclass
class LoadResult:
    backend: str
    agent: str
    planned: int
    turns: list[Turn]
    elapsed_s: float
    #: CPU seconds of the service process and of this load generator during the load.
    service_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    lost: int = 0
    stream_mismatch: int = 0
    problems: list[str] = field(default_factory=list)
    #: PostgreSQL only: committed + rolled-back transactions of the database during the load.
    sql_transactions: int | None = None

    @property
    def errors(self) -> int:
        return sum(len(turn.errors) for turn in self.turns) + (self.planned - len(self.turns))

    @property
    def finished(self) -> list[Turn]:
        return [turn for turn in self.turns if turn.finished is not None]

    def p(self, attribute: str, q: float) -> float:
        values = [getattr(turn, attribute) for turn in self.turns if getattr(turn, attribute) is not None]
        return percentile(values, q) * 1e3

    @property
    def turns_per_s(self) -> float:
        return len(self.finished) / self.elapsed_s

    @property
    def events_per_s(self) -> float:
        return sum(turn.events for turn in self.turns) / self.elapsed_s


RECORD_EVENTS = frozenset({"message", "tool_call", "tool_result", "run_finished"})


def _on_event(turn: Turn, event_type: str, data: str, elapsed: float) -> None:
    turn.events += 1
    if turn.first_event is None:
        turn.first_event = elapsed
        turn.queued = event_type == "run_queued"
    if event_type == "run_started" and turn.run_started is None:
        turn.run_started = elapsed
    if event_type == "message_delta" and turn.first_token is None:
        turn.first_token = elapsed
    if event_type in RECORD_EVENTS:
        payload = json.loads(data)
        if "record_id" in payload:
            turn.announced.add(int(payload["record_id"]))
        if event_type == "run_finished":
            turn.status = str(payload["status"])
            turn.finished = elapsed


async def _read_stream(
    response: httpx.Response, turn: Turn, started: float, last_id: str | None
) -> str | None:
    """Read an open SSE response into `turn`; returns the last event id read."""
    lines = SseLines()
    async for line in response.aiter_lines():
        turn.received += len(line.encode())
        if (fields := lines.feed(line)) is not None:
            last_id = fields["id"]
            _on_event(turn, fields["event"], fields.get("data", "{}"), time.perf_counter() - started)
    return last_id


def _check_end(turn: Turn) -> None:
    if turn.status is None:
        turn.errors.append("stream ended without run_finished")
    elif turn.status != "succeeded":
        turn.errors.append(f"run {turn.status}")


async def follow_run(
    client: httpx.AsyncClient, turn: Turn, started: float, last_id: str | None = None
) -> None:
    """Read the run's SSE stream until the server ends it; reconnect with Last-Event-ID if it breaks."""
    for _attempt in range(STREAM_ATTEMPTS):
        headers = {"Last-Event-ID": last_id} if last_id is not None else {}
        try:
            async with client.stream("GET", f"/api/runs/{turn.run_id}/events", headers=headers) as response:
                if response.status_code != 200:
                    turn.errors.append(f"events: HTTP {response.status_code}")
                    return
                last_id = await _read_stream(response, turn, started, last_id)
        except httpx.HTTPError as exc:
            turn.errors.append(f"stream broken ({type(exc).__name__})")
            continue
        _check_end(turn)
        return
    turn.errors.append("stream broken too often")


async def send_and_follow(client: httpx.AsyncClient, conversation_id: str, turn: Turn) -> None:
    """One turn as a client of the service does it in one request: `POST …/runs/stream` (the message,
    answered with its run's event stream); a broken stream goes on at `GET /api/runs/{id}/events`."""
    started = time.perf_counter()
    last_id: str | None = None
    try:
        async with client.stream(
            "POST", f"/api/conversations/{conversation_id}/runs/stream", json={"input": turn.text}
        ) as response:
            if response.status_code != 200:
                turn.errors.append(f"POST runs/stream: HTTP {response.status_code}")
                return
            turn.run_id = response.headers["location"].rsplit("/", 1)[-1]
            last_id = await _read_stream(response, turn, started, last_id)
    except httpx.HTTPError as exc:
        if turn.run_id is None:
            turn.errors.append(f"POST runs/stream: {type(exc).__name__}")
            return
        turn.errors.append(f"stream broken ({type(exc).__name__})")
        await follow_run(client, turn, started, last_id)
        return
    _check_end(turn)


async def drive_conversation(
    client: httpx.AsyncClient, conversation_id: str, turns: list[Turn], start: asyncio.Event
) -> None:
    await start.wait()
    for turn in turns:
        await send_and_follow(client, conversation_id, turn)


async def stored_messages(client: httpx.AsyncClient, conversation_id: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    after = 0
    for _page in range(MAX_PAGES):
        response = await client.get(
            f"/api/conversations/{conversation_id}/messages", params={"after": after, "limit": PAGE_LIMIT}
        )
        response.raise_for_status()
        page = response.json()
        items.extend(page["items"])
        if page["next_after"] is None:
            break
        after = int(page["next_after"])
    return items


def check_record(turns: Sequence[Turn], items: Sequence[dict[str, Any]]) -> tuple[int, int, list[str]]:
    """Lost messages (user messages and final answers missing or duplicated, unexpected user
    messages) and stream mismatches (stored but never announced, or announced but not stored)."""
    lost, mismatch, problems = 0, 0, []
    users = Counter(item["content"] for item in items if item["role"] == "user")
    for turn in turns:
        if turn.run_id is None:
            continue
        stored = users.pop(turn.text, 0)
        if stored != 1:
            lost += abs(stored - 1)
            problems.append(f"user message {turn.text!r} stored {stored} times")
        of_run = [item for item in items if item["run_id"] == turn.run_id and item["role"] != "user"]
        answers = [
            item
            for item in of_run
            if item["role"] == "assistant" and not item["message"]["data"].get("tool_calls")
        ]
        if len(answers) != 1:
            lost += abs(len(answers) - 1)
            problems.append(f"run {turn.run_id}: {len(answers)} final answers stored")
        if turn.status is not None:  # the stream was read to its end
            ids = {int(item["id"]) for item in of_run}
            mismatch += len(ids ^ turn.announced)
    for text, count in users.items():
        lost += count
        problems.append(f"user message {text!r} stored {count} times but never sent")
    return lost, mismatch, problems


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (`/proc/PID/stat`)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_s() -> float:
    """CPU seconds every core of the machine has spent busy so far (`/proc/stat`: all but idle and
    I/O wait): the service, its database, Redis and the load generator together."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def transaction_count(database_url: str | None) -> int | None:
    """PostgreSQL's count of the database's transactions so far (`pg_stat_database`); None on SQLite.

    The statistics are flushed by each backend when it goes idle (at most a second late): wait first."""
    if not database_url:
        return None
    time.sleep(1.5)
    with psycopg.connect(database_url, autocommit=True) as connection:
        row = connection.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else None


async def drive_load(
    service: ServiceProcess, token: str, sizes: Sizes, backend: str, agent: str
) -> LoadResult:
    headers = {"Authorization": f"Bearer {token}"}
    timeout = httpx.Timeout(REQUEST_TIMEOUT_S)
    base_url = service.base_url
    assert service.process is not None
    pid = service.process.pid
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(
                httpx.AsyncClient(base_url=base_url, headers=headers, timeout=timeout)
            )
            for _ in range(sizes.conversations + 1)
        ]
        # Warm-up, not measured: the process's first runs (lazy imports, first knowledge-base query).
        warm = (await clients[-1].post("/api/conversations", json={})).json()["id"]
        for text in LOAD_TEXTS[:2]:
            await drive_conversation(clients[-1], warm, [Turn(-1, text)], _set_event())

        conversation_ids = []
        for client in clients[:-1]:
            response = await client.post("/api/conversations", json={})
            response.raise_for_status()
            conversation_ids.append(str(response.json()["id"]))
        plan = [
            [Turn(index, LOAD_TEXTS[(index * sizes.turns + t) % len(LOAD_TEXTS)]) for t in range(sizes.turns)]
            for index in range(sizes.conversations)
        ]
        start = asyncio.Event()
        tasks = [
            asyncio.create_task(drive_conversation(client, conversation_id, turns, start))
            for client, conversation_id, turns in zip(clients[:-1], conversation_ids, plan, strict=True)
        ]
        transactions = transaction_count(service.settings.database_url)
        cpu = process_cpu_s(pid), time.process_time()
        started = time.perf_counter()
        start.set()
        with contextlib.suppress(TimeoutError):  # the unfinished turns are reported below
            await asyncio.wait_for(asyncio.gather(*tasks), LOAD_BUDGET_S)
        elapsed = time.perf_counter() - started
        result = LoadResult(backend, agent, sizes.conversations * sizes.turns, [], elapsed)
        if transactions is not None:
            # The statistics read itself is one transaction of this database, too.
            result.sql_transactions = (
                (transaction_count(service.settings.database_url) or 0) - transactions - 1
            )
        result.service_cpu_s = process_cpu_s(pid) - cpu[0]
        result.client_cpu_s = time.process_time() - cpu[1]
        for turns in plan:
            for turn in turns:
                if turn.run_id is not None and turn.finished is None and not turn.errors:
                    turn.errors.append(f"not finished within {LOAD_BUDGET_S:g} s")
                result.turns.append(turn)
        for client, conversation_id, turns in zip(clients[:-1], conversation_ids, plan, strict=True):
            lost, mismatch, problems = check_record(turns, await stored_messages(client, conversation_id))
            result.lost += lost
            result.stream_mismatch += mismatch
            result.problems.extend(problems)
    return result


def _set_event() -> asyncio.Event:
    event = asyncio.Event()
    event.set()
    return event


def load_phase(backend: str, agent: str, sizes: Sizes, scratch: Path, profile: bool) -> LoadResult:
    root = scratch / f"load-{backend}-{agent.replace(' ', '-')}"
    stats_file = root / "serve.prof"
    with service_settings(backend, root) as settings:
        command = list(SERVE_COMMAND)
        if (
            profile
        ):  # the same command under cProfile: `python bench/profiled.py OUT ctxpress.app.cli serve …`
            command[1:2] = [str(BENCH_DIR / "profiled.py"), str(stats_file)]
        if agent == PEER:
            command += ["--agents", str(peer_agents_file(root / "agents.toml"))]
        token = create_user(settings, "bench")
        # The load's conversations all belong to one user: lift the per-user share of the slots (a
        # fairness limit between users, default 4) to the process's slots.
        fairness_off = {"CTXPRESS_MAX_RUNS_PER_USER": str(Settings().max_concurrent_runs)}
        with running_service(settings, root, command, fairness_off) as service:
            result = asyncio.run(drive_load(service, token, sizes, backend, agent))
    print(
        f"  {backend:<10} {agent:<13} {len(result.finished)}/{result.planned} turns in {result.elapsed_s:.1f} s, "
        f"{result.errors} errors, {result.lost} lost",
        flush=True,
    )
    for problem in result.problems[:5]:
        print(f"    {problem}")
    if profile and stats_file.exists():
        print_profile_shares(stats_file)
    return result


#: cProfile's own time, grouped (first match wins); `select.epoll` is the event loop waiting.
PROFILE_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("idle (the event loop waiting)", ("select.epoll",)),
    ("SQLAlchemy", ("sqlalchemy",)),
    (
        "database drivers and thread hand-offs (aiosqlite, psycopg, greenlet)",
        ("aiosqlite", "psycopg", "greenlet", "SimpleQueue", "_thread.lock"),
    ),
    ("sockets", ("_socket.socket",)),
    ("LangGraph, LangChain, msgpack", ("langgraph", "langchain", "ormsgpack")),
    ("ctxpress service (routes, services, repositories)", ("ctxpress/app/server",)),
    ("ctxpress engine, offline model, knowledge base", ("ctxpress/",)),
    (
        "HTTP stack (uvicorn, h11, Starlette, FastAPI, sse-starlette, anyio, pydantic)",
        ("uvicorn", "h11", "starlette", "fastapi", "sse_starlette", "anyio", "pydantic"),
    ),
)


def print_profile_shares(stats_file: Path) -> None:
    total, shares = by_package(stats_file)
    grouped: dict[str, float] = {}
    for name, seconds in shares.items():
        group = next(
            (g for g, keys in PROFILE_GROUPS if any(key in name for key in keys)), "Python (asyncio, json, …)"
        )
        grouped[group] = grouped.get(group, 0.0) + seconds
    busy = total - grouped.pop(PROFILE_GROUPS[0][0], 0.0)
    print(
        f"    service process under cProfile: {total:.0f} s profiled, {busy:.0f} s busy; own time of the busy part:"
    )
    for group, seconds in sorted(grouped.items(), key=lambda item: -item[1]):
        print(f"      {100 * seconds / busy:5.1f}%  {group}")


# --------------------------------------------------------------------------------------------------
# The peer server: LangGraph's Agent Server (`langgraph dev`, in-memory runtime), same load
# --------------------------------------------------------------------------------------------------

#: Runs the Agent Server executes at once (`--n-jobs-per-worker`): the documented default of its
#: `N_JOBS_PER_WORKER` (`langgraph dev` itself would use 1 unless told); the goals are against it.
AGENT_SERVER_JOBS = 10
#: Its v1 message stream (issue 17): `messages/metadata`, then per chunk `messages/partial` carrying
#: the message so far. `messages-tuple` (`--agent-server-stream-mode`) sends each chunk once.
AGENT_SERVER_STREAM_MODE = "messages"
#: Rounds of the peer comparison; the order of the servers alternates between rounds (drift).
PEER_ROUNDS = 2
AGENT_SERVER_BACKEND = "in memory"


def _message_text(message: Any) -> str:
    """The text of a streamed or stored message dict (string content, or text blocks)."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(block.get("text", "")) for block in content if isinstance(block, dict))
    return ""


def _is_ai(message: Any) -> bool:
    return isinstance(message, dict) and str(message.get("type", "")).lower() in {"ai", "aimessagechunk"}


def _on_agent_server_event(turn: Turn, event_type: str, data: str, elapsed: float) -> None:
    turn.events += 1
    if turn.first_event is None:
        turn.first_event = elapsed
    if event_type == "metadata" and turn.run_id is None:
        turn.run_id = str(json.loads(data).get("run_id"))
    elif event_type == "error":
        turn.errors.append(f"run error: {data[:200]}")
    elif event_type.startswith("messages") and turn.first_token is None and event_type != "messages/metadata":
        payload = json.loads(data)
        # v1 modes: a list of messages; `messages-tuple`: [chunk, metadata].
        messages = payload if event_type != "messages" else payload[:1]
        if any(_is_ai(m) and _message_text(m) for m in messages):
            turn.first_token = elapsed


async def follow_agent_server_run(
    client: httpx.AsyncClient, thread_id: str, turn: Turn, stream_mode: str
) -> None:
    """One turn: `POST /threads/{id}/runs/stream`, read to the stream's end (the run's end)."""
    body = {
        "assistant_id": GRAPH_NAME,
        "input": {"messages": [{"role": "human", "content": turn.text}]},
        "stream_mode": [stream_mode],
    }
    started = time.perf_counter()
    try:
        async with client.stream("POST", f"/threads/{thread_id}/runs/stream", json=body) as response:
            if response.status_code != 200:
                turn.errors.append(f"runs/stream: HTTP {response.status_code}")
                return
            lines = SseLines()
            async for line in response.aiter_lines():
                turn.received += len(line.encode())
                if (fields := lines.feed(line)) is not None:
                    elapsed = time.perf_counter() - started
                    _on_agent_server_event(turn, fields["event"], fields.get("data", "null"), elapsed)
    except httpx.HTTPError as exc:
        turn.errors.append(f"stream broken ({type(exc).__name__})")
        return
    turn.finished = time.perf_counter() - started
    turn.status = "ended"


async def drive_agent_server_conversation(
    client: httpx.AsyncClient, thread_id: str, turns: list[Turn], start: asyncio.Event, stream_mode: str
) -> None:
    await start.wait()
    for turn in turns:
        await follow_agent_server_run(client, thread_id, turn, stream_mode)


async def check_agent_server_thread(
    client: httpx.AsyncClient, thread_id: str, turns: Sequence[Turn]
) -> tuple[int, list[str]]:
    """Lost messages of a thread, read back from its state (each question once, one final answer
    after each) and runs that did not end `success` (its run list), as errors."""
    problems: list[str] = []
    response = await client.get(f"/threads/{thread_id}/state")
    response.raise_for_status()
    messages = response.json()["values"]["messages"]
    segments: list[tuple[str, list[dict[str, Any]]]] = []
    for message in messages:
        if message.get("type") == "human":
            segments.append((_message_text(message), []))
        elif segments:
            segments[-1][1].append(message)
    lost = 0
    asked = Counter(text for text, _ in segments)
    for turn in turns:
        stored = asked.pop(turn.text, 0)
        if stored != 1:
            lost += abs(stored - 1)
            problems.append(f"thread {thread_id}: question {turn.text!r} stored {stored} times")
    for text, count in asked.items():
        lost += count
        problems.append(f"thread {thread_id}: question {text!r} stored but never sent")
    for text, after in segments:
        answers = [m for m in after if _is_ai(m) and not m.get("tool_calls")]
        if len(answers) != 1:
            lost += abs(len(answers) - 1)
            problems.append(f"thread {thread_id}: {len(answers)} final answers after {text!r}")
    runs = (await client.get(f"/threads/{thread_id}/runs")).json()
    statuses = {str(run["run_id"]): str(run["status"]) for run in runs}
    for turn in turns:
        if turn.run_id is not None and statuses.get(turn.run_id) != "success":
            turn.errors.append(f"run {turn.run_id}: {statuses.get(turn.run_id, 'not listed')}")
    return lost, problems


async def drive_agent_server_load(server: AgentServer, sizes: Sizes, stream_mode: str) -> LoadResult:
    """The load of `drive_load` against the Agent Server: threads for conversations, its run stream."""
    timeout = httpx.Timeout(REQUEST_TIMEOUT_S)
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(httpx.AsyncClient(base_url=server.base_url, timeout=timeout))
            for _ in range(sizes.conversations + 1)
        ]

        async def new_thread(client: httpx.AsyncClient) -> str:
            response = await client.post("/threads", json={})
            response.raise_for_status()
            return str(response.json()["thread_id"])

        # Warm-up, not measured (lazy imports, the knowledge base's first query), as for ctxpress.
        warm = await new_thread(clients[-1])
        for text in LOAD_TEXTS[:2]:
            await drive_agent_server_conversation(
                clients[-1], warm, [Turn(-1, text)], _set_event(), stream_mode
            )
        thread_ids = [await new_thread(client) for client in clients[:-1]]
        plan = [
            [Turn(index, LOAD_TEXTS[(index * sizes.turns + t) % len(LOAD_TEXTS)]) for t in range(sizes.turns)]
            for index in range(sizes.conversations)
        ]
        start = asyncio.Event()
        tasks = [
            asyncio.create_task(drive_agent_server_conversation(client, thread_id, turns, start, stream_mode))
            for client, thread_id, turns in zip(clients[:-1], thread_ids, plan, strict=True)
        ]
        cpu = tree_cpu_s(server.pid), time.process_time()
        started = time.perf_counter()
        start.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*tasks), LOAD_BUDGET_S)
        elapsed = time.perf_counter() - started
        result = LoadResult(
            AGENT_SERVER_BACKEND, AGENT_SERVER, sizes.conversations * sizes.turns, [], elapsed
        )
        result.service_cpu_s = tree_cpu_s(server.pid) - cpu[0]
        result.client_cpu_s = time.process_time() - cpu[1]
        for turns in plan:
            for turn in turns:
                if turn.finished is None and not turn.errors:
                    turn.errors.append(f"not finished within {LOAD_BUDGET_S:g} s")
                result.turns.append(turn)
        for client, thread_id, turns in zip(clients[:-1], thread_ids, plan, strict=True):
            lost, problems = await check_agent_server_thread(client, thread_id, turns)
            result.lost += lost
            result.problems.extend(problems)
    return result


def agent_server_phase(sizes: Sizes, root: Path, jobs: int, stream_mode: str) -> LoadResult:
    """The load against `langgraph dev` serving the default agent's graph."""
    with running_agent_server(root, jobs) as server:
        result = asyncio.run(drive_agent_server_load(server, sizes, stream_mode))
    print(
        f"  {AGENT_SERVER_BACKEND:<10} {AGENT_SERVER} ({jobs} runs at once) {len(result.finished)}/{result.planned} "
        f"turns in {result.elapsed_s:.1f} s, {result.errors} errors, {result.lost} lost",
        flush=True,
    )
    for problem in result.problems[:5]:
        print(f"    {problem}")
    return result


@dataclass(frozen=True)
class PeerPhase:
    """One load of the peer comparison: which server, how many runs it executes at once, the round."""

    server: str
    slots: int
    round: int
    result: LoadResult
    #: The machine's 1-minute load average right after the load.
    load_average: float


@dataclass
class PeerComparison:
    """ctxpress on SQLite and the Agent Server, the same load, in alternating rounds."""

    stream_mode: str
    phases: list[PeerPhase] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    #: `os.getloadavg()` before the first phase and after the last.
    load_before: tuple[float, float, float] = (0.0, 0.0, 0.0)
    load_after: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def pooled(self, server: str, slots: int) -> LoadResult | None:
        """Every round's turns of one server set-up as one load (times summed)."""
        results = [p.result for p in self.phases if p.server == server and p.slots == slots]
        if not results:
            return None
        merged = LoadResult(results[0].backend, results[0].agent, 0, [], 0.0)
        for result in results:
            merged.planned += result.planned
            merged.turns.extend(result.turns)
            merged.elapsed_s += result.elapsed_s
            merged.service_cpu_s += result.service_cpu_s
            merged.client_cpu_s += result.client_cpu_s
            merged.lost += result.lost
            merged.problems.extend(result.problems)
        return merged

    def set_ups(self, server: str) -> list[int]:
        return sorted({p.slots for p in self.phases if p.server == server})


def peer_comparison(
    sizes: Sizes, scratch: Path, jobs: Sequence[int], rounds: int, stream_mode: str
) -> PeerComparison:
    """ctxpress (`ctxpress serve` on SQLite, its defaults) and the Agent Server with each of `jobs`,
    `rounds` times, the order reversed every other round."""
    ensure_venv()
    comparison = PeerComparison(stream_mode, load_before=os.getloadavg())
    slots = Settings().max_concurrent_runs
    set_ups: list[tuple[str, int]] = [(CTXPRESS, slots), *((AGENT_SERVER, n) for n in jobs)]
    for index in range(rounds):
        print(f"peer comparison, round {index + 1}:", flush=True)
        for server, n in set_ups if index % 2 == 0 else list(reversed(set_ups)):
            root = scratch / f"peer-{index}-{server.replace(' ', '-')}-{n}"
            if server == CTXPRESS:
                result = load_phase("sqlite", CTXPRESS, sizes, root, profile=False)
            else:
                result = agent_server_phase(sizes, root, n, stream_mode)
            comparison.phases.append(PeerPhase(server, n, index + 1, result, os.getloadavg()[0]))
    comparison.load_after = os.getloadavg()
    comparison.versions = versions()
    return comparison


# --------------------------------------------------------------------------------------------------
# Manual compression on a long thread
# --------------------------------------------------------------------------------------------------


@dataclass
class Compression:
    round_trip_s: float
    summary_model_s: float
    service_s: float
    steps: dict[str, float]
    counts: dict[str, int]
    summarised: int  # messages newly summarised by this call

    @property
    def net_s(self) -> float:
        return self.round_trip_s - self.summary_model_s


@dataclass(frozen=True)
class StoragePoint:
    """What one conversation's checkpoints hold at a length (issue 16)."""

    messages: int
    storage: ThreadStorage
    #: The SQLite checkpoint file with its log (None on PostgreSQL).
    file_bytes: int | None


@dataclass
class Unpruned:
    """The same kind of thread never pruned (what the service stored before issue 16), then pruned."""

    messages: int = 0
    before: ThreadStorage | None = None
    after: ThreadStorage | None = None
    file_before: int | None = None
    file_after: int | None = None


@dataclass
class CompressionResult:
    backend: str
    thread_messages: int = 0
    thread_tokens: int = 0
    build_turns: int = 0
    build_s: float = 0.0
    automatic_summaries: int = 0
    calls: list[Compression] = field(default_factory=list)
    context_s: list[float] = field(default_factory=list)
    #: The compressed thread's storage at 1/4, 1/2 and all of its length (pruned after each turn).
    storage: list[StoragePoint] = field(default_factory=list)
    unpruned: Unpruned = field(default_factory=Unpruned)
    errors: list[str] = field(default_factory=list)

    def p(self, values: Sequence[float], q: float) -> float:
        return percentile(values, q) * 1e3


def _turn(client: httpx.Client, conversation_id: str, text: str) -> str | None:
    """One run to its end; the error when it did not succeed."""
    accepted = send(client, conversation_id, text)
    events = read_events(client, accepted["run"]["id"], timeout=REQUEST_TIMEOUT_S)
    finished = [event for event in events if event.type == "run_finished"]
    if not finished or finished[-1].data["status"] != "succeeded":
        return f"run {accepted['run']['id']}: {finished[-1].data if finished else 'no run_finished'}"
    return None


def _context(client: httpx.Client, conversation_id: str) -> dict[str, Any]:
    response = client.get(f"/api/conversations/{conversation_id}/context")
    response.raise_for_status()
    context: dict[str, Any] = response.json()
    return context


async def seed_thread(
    settings: Settings, token: str, target: int, result: CompressionResult, *, prune: bool = True
) -> str:
    """A conversation whose thread holds `target` messages, made by turns of the offline model through
    the service's own compiled graph and checkpointer (in this process, the service not running):
    the agent, middleware, tools and state of real runs, without the HTTP, SSE and chat-record work.

    `prune`: after each turn, keep the latest checkpoint, as the service does after each run; its
    storage is recorded at a quarter, half and all of `target` (`result.storage`). Without it the
    thread keeps every checkpoint (as before issue 16); it is measured at the end, then pruned and
    measured again (`result.unpruned`)."""
    milestones = {target // 4, target // 2, target}
    async with open_services(settings, [timed_agent()]) as services:
        user = await services.auth.authenticate(token)
        assert user is not None
        conversation = await services.conversations.create(user, agent_name=None, title="long thread")
        runtime = services.agents.get(conversation.agent_name)
        assert runtime is not None
        config: RunnableConfig = {
            **thread_config(conversation.id),
            "recursion_limit": settings.run_recursion_limit,
        }
        deadline = time.monotonic() + BUILD_BUDGET_S
        messages = 0
        while messages < target:
            if time.monotonic() > deadline:
                result.errors.append(
                    f"thread build stopped at {messages} messages after {BUILD_BUDGET_S:g} s"
                )
                break
            text = THREAD_TEXTS[result.build_turns % len(THREAD_TEXTS)]
            state = await runtime.graph.ainvoke(
                {"messages": [HumanMessage(text, id=str(uuid.uuid4()))]}, config
            )
            messages = len(state["messages"])
            result.build_turns += 1
            if prune:
                await prune_thread(services.checkpointer, conversation.id)
                if (reached := next((m for m in sorted(milestones) if messages >= m), None)) is not None:
                    milestones.discard(reached)
                    storage = await thread_storage(services.checkpointer, conversation.id)
                    result.storage.append(StoragePoint(messages, storage, sqlite_file_bytes(settings)))
        if not prune:
            unpruned = result.unpruned
            unpruned.messages = messages
            unpruned.before = await thread_storage(services.checkpointer, conversation.id)
            unpruned.file_before = sqlite_file_bytes(settings)
            await prune_thread(services.checkpointer, conversation.id)
            unpruned.after = await thread_storage(services.checkpointer, conversation.id)
            unpruned.file_after = sqlite_file_bytes(settings)
        return str(conversation.id)


def sqlite_file_bytes(settings: Settings) -> int | None:
    """The SQLite checkpoint file with its log; None on PostgreSQL."""
    target = settings.database()
    if target.backend != "sqlite":
        return None
    path = Path(target.checkpoint_target)
    return sum(file.stat().st_size for file in path.parent.glob(path.name + "*"))


def compression_phase(backend: str, sizes: Sizes, scratch: Path, profile: bool) -> CompressionResult:
    root = scratch / f"compress-{backend}"
    result = CompressionResult(backend)
    with service_settings(backend, root) as settings:
        token = create_user(settings, "bench")
        never_pruned = CompressionResult(backend)
        asyncio.run(seed_thread(settings, token, sizes.thread_messages, never_pruned, prune=False))
        result.unpruned = never_pruned.unpruned
        started = time.perf_counter()
        conversation_id = asyncio.run(seed_thread(settings, token, sizes.thread_messages, result))
        result.build_s = time.perf_counter() - started
        timings = root / "timings.jsonl"
        timings.touch()
        env = {"CTXPRESS_BENCH_TIMINGS": str(timings)}
        if profile:
            env["CTXPRESS_BENCH_PROFILE"] = str(root / "compress.prof")
        with running_service(settings, root, TIMED_COMMAND, env) as service, service.client(token) as client:
            client.timeout = httpx.Timeout(REQUEST_TIMEOUT_S)
            context = _context(client, conversation_id)
            result.thread_messages = int(context["message_count"])
            result.thread_tokens = int(context["estimated_tokens"])
            result.automatic_summaries = int((context.get("summary") or {}).get("summary_count") or 0)
            cutoff = int((context.get("summary") or {}).get("cutoff_index") or 0)
            print(
                f"  {backend:<10} thread: {result.thread_messages} messages after {result.build_turns} turns "
                f"({result.build_s:.0f} s), {result.automatic_summaries} automatic summaries",
                flush=True,
            )
            for index in range(sizes.compressions):
                # A real run first (over HTTP, to its end): new messages after the previous cutoff.
                if error := _turn(client, conversation_id, LOAD_TEXTS[index % len(LOAD_TEXTS)]):
                    result.errors.append(error)
                offset = timings.stat().st_size
                begun = time.perf_counter()
                response = client.post(f"/api/conversations/{conversation_id}/compress")
                round_trip = time.perf_counter() - begun
                body = response.json()
                if response.status_code != 200 or not body.get("compressed"):
                    result.errors.append(f"compress: HTTP {response.status_code} {body}")
                    continue
                with timings.open(encoding="utf-8") as lines:
                    lines.seek(offset)
                    timing = json.loads(lines.readline())
                result.calls.append(
                    Compression(
                        round_trip,
                        timing["summary_model_s"],
                        timing["service_s"],
                        timing["steps"],
                        timing.get("counts", {}),
                        int(body["cutoff_index"]) - cutoff,
                    )
                )
                cutoff = int(body["cutoff_index"])
                begun = time.perf_counter()
                _context(client, conversation_id)
                result.context_s.append(time.perf_counter() - begun)
            if profile:
                stats = pstats.Stats(str(root / "compress.prof"))
                print(f"\ncProfile of the compress calls ({backend}, event-loop thread), by cumulative time:")
                stats.sort_stats("cumulative").print_stats(25)
    return result


# --------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------


def ms(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def p50_p95(result: LoadResult, attribute: str) -> str:
    return f"{ms(result.p(attribute, 0.5))} / {ms(result.p(attribute, 0.95))}"


def load_table(results: Sequence[LoadResult]) -> list[str]:
    rows = []
    for result in results:
        turns = result.finished
        queued = sum(turn.queued for turn in result.turns)
        rows.append(
            [
                result.backend,
                result.agent,
                f"{len(turns)} / {result.planned}",
                f"{queued} ({100 * queued / max(1, len(result.turns)):.0f}%)",
                p50_p95(result, "first_event"),
                p50_p95(result, "first_token"),
                p50_p95(result, "finished"),
                p50_p95(result, "executing"),
                f"{result.turns_per_s:.2f}",
                f"{result.events_per_s:.0f}",
                f"{sum(t.events for t in result.turns) / max(1, len(result.turns)):.0f}",
                f"{100 * result.service_cpu_s / result.elapsed_s:.0f}% / {100 * result.client_cpu_s / result.elapsed_s:.0f}%",
                f"{1e3 * result.service_cpu_s / max(1, len(turns)):.0f}",
                "–"
                if result.sql_transactions is None
                else f"{result.sql_transactions / max(1, len(turns)):.1f}",
                str(result.errors),
                str(result.lost),
                str(result.stream_mismatch),
            ]
        )
    return table(
        [
            "database",
            "agent",
            "turns done",
            "queued at intake",
            "first event p50 / p95 ms",
            "first token p50 / p95 ms",
            "run end p50 / p95 ms",
            "run execution p50 / p95 ms",
            "turns/s",
            "SSE events/s",
            "events per turn",
            "CPU service / load generator (% of one core)",
            "service CPU ms per turn",
            "SQL transactions per turn (PostgreSQL)",
            "errors",
            "lost messages",
            "SSE ≠ record",
        ],
        rows,
    )


def cpu_per_turn(result: LoadResult) -> float:
    return result.service_cpu_s / max(1, len(result.finished))


def peers(results: Sequence[LoadResult], backend: str) -> tuple[LoadResult, LoadResult] | None:
    ours = next((r for r in results if r.backend == backend and r.agent == CTXPRESS), None)
    peer = next((r for r in results if r.backend == backend and r.agent == PEER), None)
    return (ours, peer) if ours is not None and peer is not None else None


def ratio_table(results: Sequence[LoadResult]) -> list[str]:
    rows = []
    for backend in BACKENDS:
        pair = peers(results, backend)
        if pair is None:
            continue
        ours, peer = pair
        rows.append(
            [
                backend,
                ratio(ours.p("first_event", 0.5), peer.p("first_event", 0.5)),
                ratio(ours.p("first_token", 0.5), peer.p("first_token", 0.5)),
                ratio(ours.p("finished", 0.5), peer.p("finished", 0.5)),
                ratio(ours.p("finished", 0.95), peer.p("finished", 0.95)),
                ratio(ours.p("executing", 0.5), peer.p("executing", 0.5)),
                ratio(ours.turns_per_s, peer.turns_per_s),
                ratio(cpu_per_turn(ours), cpu_per_turn(peer)),
            ]
        )
    return table(
        [
            "database",
            "first event p50",
            "first token p50",
            "run end p50",
            "run end p95",
            "run execution p50",
            "turns/s",
            "service CPU per turn",
        ],
        rows,
    )


def compression_table(results: Sequence[CompressionResult]) -> list[str]:
    rows = []
    for result in results:
        calls = result.calls
        if not calls:
            rows.append([result.backend, "–", "–", "–", "–", "–", "–", str(len(result.errors))])
            continue
        net = [c.net_s for c in calls]
        rows.append(
            [
                result.backend,
                f"{result.thread_messages:,} ({result.thread_tokens:,} tok)",
                str(len(calls)),
                f"{ms(result.p(net, 0.5))} / {ms(result.p(net, 0.95))}",
                f"{ms(result.p([c.round_trip_s for c in calls], 0.5))} / "
                f"{ms(result.p([c.round_trip_s for c in calls], 0.95))}",
                f"{ms(result.p([c.summary_model_s for c in calls], 0.5))}",
                f"{ms(result.p(result.context_s, 0.5))} / {ms(result.p(result.context_s, 0.95))}",
                str(len(result.errors)),
            ]
        )
    return table(
        [
            "database",
            "thread: messages (estimated tokens)",
            "compressions",
            "**model excluded** p50 / p95 ms",
            "HTTP round trip p50 / p95 ms",
            "summary model p50 ms",
            "`GET …/context` p50 / p95 ms (reference)",
            "errors",
        ],
        rows,
    )


GOAL_TOTAL_TO_LATEST = 3.0
GOAL_GROWTH_ON_DOUBLING = 2.2


def mb(value: int | None) -> str:
    return "–" if value is None else f"{value / 1e6:.2f} MB"


def storage_table(results: Sequence[CompressionResult]) -> list[str]:
    rows = []
    for result in results:
        previous: StoragePoint | None = None
        for point in result.storage:
            growth = (
                f"{point.storage.total_bytes / previous.storage.total_bytes:.2f}× for "
                f"{point.messages / previous.messages:.2f}× the messages"
                if previous is not None
                else "–"
            )
            rows.append(
                [
                    result.backend,
                    f"{point.messages:,}",
                    str(point.storage.checkpoints),
                    mb(point.storage.total_bytes),
                    mb(point.storage.latest_bytes),
                    f"{point.storage.total_bytes / max(point.storage.latest_bytes, 1):.2f}×",
                    growth,
                    mb(point.file_bytes),
                ]
            )
            previous = point
    return table(
        [
            "database",
            "messages",
            "checkpoints kept",
            "checkpoint bytes of the conversation",
            "latest checkpoint",
            "bytes ÷ latest (goal ≤ 3×)",
            "growth from the previous row (goal ≤ 2.2× when doubling)",
            "SQLite checkpoint file",
        ],
        rows,
    )


def unpruned_table(results: Sequence[CompressionResult]) -> list[str]:
    rows = [
        [
            result.backend,
            f"{result.unpruned.messages:,}",
            f"{result.unpruned.before.checkpoints:,} → {result.unpruned.after.checkpoints}",
            f"{mb(result.unpruned.before.total_bytes)} → {mb(result.unpruned.after.total_bytes)}",
            f"{mb(result.unpruned.file_before)} → {mb(result.unpruned.file_after)}",
        ]
        for result in results
        if result.unpruned.before is not None and result.unpruned.after is not None
    ]
    return table(["database", "messages", "checkpoints", "checkpoint bytes", "SQLite checkpoint file"], rows)


def storage_verdicts(results: Sequence[CompressionResult]) -> list[str]:
    lines = []
    for result in results:
        if not result.storage:
            continue
        ratio_max = max(p.storage.total_bytes / max(p.storage.latest_bytes, 1) for p in result.storage)
        growths = [
            b.storage.total_bytes / a.storage.total_bytes
            for a, b in zip(result.storage, result.storage[1:], strict=False)
        ]
        met = ratio_max <= GOAL_TOTAL_TO_LATEST and all(g <= GOAL_GROWTH_ON_DOUBLING for g in growths)
        lines.append(
            f"{result.backend}: bytes ÷ latest checkpoint at most {ratio_max:.2f}× (goal ≤ 3×), growth when "
            f"doubling {', '.join(f'{g:.2f}×' for g in growths)} (goal ≤ 2.2×): goal "
            + ("met." if met else "**missed**.")
        )
    return lines


def steps_table(results: Sequence[CompressionResult]) -> list[str]:
    """Median of each timed step, per database (model-excluded figures add up to the service time)."""
    names: list[str] = []
    for result in results:
        for call in result.calls:
            names.extend(name for name in call.steps if name not in names)
    rows = []
    for name in [*names, "rest of the service call", "HTTP, routing, auth (round trip − service)"]:
        row = [f"↳ {name} (inside the {NESTED[name]})" if name in NESTED else name]
        for result in results:
            if name == "rest of the service call":
                values = [c.service_s - sum(_outer(c.steps).values()) for c in result.calls]
            elif name.startswith("HTTP"):
                values = [c.round_trip_s - c.service_s for c in result.calls]
            else:
                values = [c.steps.get(name, 0.0) for c in result.calls]
            row.append(ms(percentile(values, 0.5) * 1e3) if values else "–")
        rows.append(row)
    rows.append(
        [
            "checkpoint reads from the database per call",
            *(f"{reads_per_call(result):g}" for result in results),
        ]
    )
    return table(["step (p50 ms)", *(result.backend for result in results)], rows)


def reads_per_call(result: CompressionResult) -> float:
    return percentile([c.counts.get(CHECKPOINT_READ, 0) for c in result.calls], 0.5)


#: Steps measured inside other steps (not added again when computing the rest): where they are.
NESTED = {
    SUMMARY_MODEL: "summary call",
    CHECKPOINT_READ: "state read and update",
    CHECKPOINT_WRITE: "state update",
}


def _outer(steps: dict[str, float]) -> dict[str, float]:
    return {name: seconds for name, seconds in steps.items() if name not in NESTED}


def report(
    sizes: Sizes,
    loads: Sequence[LoadResult],
    compressions: Sequence[CompressionResult],
    skipped: Sequence[str],
    elapsed_s: float,
) -> list[str]:
    lost = sum(result.lost for result in loads)
    lines = [
        "## Service under load",
        "",
        f"Reproduce: `{COMMAND}` ({elapsed_s / 60:.0f} min here; `--quick`: "
        f"{QUICK.conversations} conversations × {QUICK.turns} turns, a {QUICK.thread_messages}-message thread, "
        f"docs untouched; `--profile`: the services under cProfile, printing where their time goes). "
        f"Python {platform.python_version()}, {platform.machine()}, 2 cores shared by the service process, "
        "PostgreSQL and the load generator (all on 127.0.0.1).",
        "",
        "### 50 concurrent conversations over SSE"
        if sizes.conversations == 50
        else f"### {sizes.conversations} concurrent conversations over SSE",
        "",
        f"A real `ctxpress serve` process (uvicorn, default settings: {Settings().max_concurrent_runs} runs "
        "at once per process (the per-user share lifted to the same: the load is one user's), "
        f"the rest queued FIFO) with the built-in offline model, on SQLite and on a fresh PostgreSQL "
        f"database. {sizes.conversations} conversations, each its own `httpx.AsyncClient`, send "
        f"{sizes.turns} turns each at the same moment; each turn is `POST …/runs/stream` (the message "
        "and its run's SSE stream in one request, since issue 17's last session; before, `POST …/runs` "
        "then `GET /api/runs/{id}/events`) until `run_finished`. The questions mix knowledge-base questions in Chinese and English "
        "(`query_kb`, then an extractive answer streamed in 8-character deltas), a note (`write_file`) and "
        "a listing (`ls`). Times are from the POST: first event (often `run_queued` when every slot "
        "is busy), first token (first `message_delta`), run end (`run_finished`). Lost messages: read "
        "back with `GET …/messages` after the load, every user message sent must be stored exactly once "
        "and every run must have stored one final answer; SSE ≠ record counts stored assistant/tool "
        "messages of a run never announced on its stream, or announced but not stored. The peer is the "
        "same service and agent without the compression middleware (an agents file repeating the "
        "default agent with `capabilities = []`); each of the four services starts on an empty "
        "database and gets two warm-up turns first.",
        "",
        *load_table(loads),
        "",
        "ctxpress ÷ no middleware (same run, same database):",
        "",
        *ratio_table(loads),
        "",
    ]
    lines.extend([*load_notes(loads), ""])
    errors = sum(result.errors for result in loads)
    lines.append(
        f"Lost messages: {lost} (goal {GOAL_LOST}): goal {'met' if lost == GOAL_LOST else '**missed**'}. "
        f"Errors: {errors}."
    )
    problems = [p for result in loads for p in result.problems]
    if problems:
        lines.extend(["", "Problems found:", "", *(f"- {p}" for p in problems[:20])])
    for skip in skipped:
        lines.extend(["", skip])
    lines.extend(
        [
            "",
            f"### Manual compression on a {sizes.thread_messages:,}-message thread",
            "",
            "The thread: turns of the offline model (the questions above, plus greps and reading a saved "
            "result back) through the service's own compiled graph and checkpointer -- the agent, "
            "middleware, tools and state of real runs, automatic compression acting on the way -- made in "
            "the benchmark's process before the service starts, without the HTTP, SSE and chat-record "
            "work (which would make 250 turns take minutes). Then `bench/timed_service.py` serves it: the "
            "same app and default agent as `ctxpress serve`, its summary model the built-in model with a "
            "stopwatch. Repeatedly: one real run over HTTP (new messages after the previous cutoff), then "
            "`POST /api/conversations/{id}/compress` (200, `compressed: true`). **Model excluded** = the "
            "HTTP round trip minus the summary model's own time, measured inside the service around the "
            "model's summary call (the built-in model writes an extractive summary in a few ms; a real "
            "model takes seconds). The first call summarises everything since the last automatic summary, "
            "the later ones the one new turn. No peer has a manual-compression endpoint; `GET …/context` "
            "on the same thread (one state read and an estimate, no write) is the reference.",
            "",
        ]
    )
    for result in compressions:
        if result.calls:
            summarised = [c.summarised for c in result.calls]
            lines.append(
                f"- {result.backend}: thread made in {result.build_turns} turns ({result.build_s:.0f} s), "
                f"{result.automatic_summaries} automatic summaries on the way; the compressions summarised "
                f"{summarised[0]} messages first ({ms(result.calls[0].net_s * 1e3)} ms, model excluded), then "
                f"{percentile(summarised[1:] or summarised, 0.5):.0f} (median)."
            )
    if any(result.storage for result in compressions):
        lines.extend(
            [
                "",
                "**Checkpoint storage of one conversation** (issue 16). LangGraph keeps every checkpoint of "
                "a thread, each holding the whole message list (SQLite: inside every checkpoint row; "
                "PostgreSQL: a new blob of the `messages` channel for every step), so a thread that is never "
                "pruned grows with the square of its length. The service now prunes a thread to its latest "
                "checkpoint (with its pending writes) after each run and each manual compression "
                "(`runtime/checkpoint_pruning.py`); the thread above was made the same way, pruned after "
                "every turn. Bytes are the payloads of the thread's rows (checkpoints, blobs, pending "
                "writes; `runtime/checkpoint_pruning.thread_storage`), the latest checkpoint with the blobs "
                "it references; the SQLite file is the checkpoint database with its log, as on disk.",
                "",
                *storage_table(compressions),
                "",
                *storage_verdicts(compressions),
                "",
                "The same kind of thread made again without pruning (what the service stored before), then "
                "pruned once -- on SQLite the file gives the pages back (`auto_vacuum = INCREMENTAL`, "
                "`incremental_vacuum`); PostgreSQL reuses the freed rows' space (its files do not shrink):",
                "",
                *unpruned_table(compressions),
            ]
        )
    lines.extend(["", *compression_table(compressions), ""])
    lines.extend(
        ["Where the time goes (medians per step, inside the service):", "", *steps_table(compressions)]
    )
    missed = False
    for result in compressions:
        if not result.calls:
            lines.extend(["", f"{result.backend}: manual compression not measured."])
        else:
            p50 = result.p([c.net_s for c in result.calls], 0.5)
            missed |= p50 > GOAL_COMPRESS_P50_MS
            state = _median_step(result, STATE_READ) + _median_step(result, STATE_UPDATE)
            lines.extend(
                [
                    "",
                    f"{result.backend}: manual compression, model excluded, p50 {ms(p50)} ms (goal ≤ "
                    f"{GOAL_COMPRESS_P50_MS:g} ms): goal {'met' if p50 <= GOAL_COMPRESS_P50_MS else '**missed**'}; "
                    f"reading and updating the state through the graph take {ms(state)} ms of it, the "
                    f"compression work itself (token counts, L1 view, summary call without the model, history "
                    f"file) {ms(sum(_median_step(result, name) for name in OWN_WORK))} ms.",
                ]
            )
        lines.extend(f"- {result.backend} error: {error}" for error in result.errors[:5])
    if missed:
        lines.extend(["", compression_miss(compressions, sizes.thread_messages)])
    return lines


STATE_READ, STATE_UPDATE = "state read (aget_state)", "state update (aupdate_state)"
OWN_WORK = ("token counts", "L1 view", "summary call", "history file")


def _median_step(result: CompressionResult, name: str) -> float:
    """Median milliseconds of a step; the summary call counts without the model's own time."""
    if name == "summary call":
        values = [c.steps.get("summary call (with the model)", 0.0) - c.summary_model_s for c in result.calls]
    else:
        values = [c.steps.get(name, 0.0) for c in result.calls]
    return percentile(values, 0.5) * 1e3


def load_notes(loads: Sequence[LoadResult]) -> list[str]:
    """What the load figures say (from the CPU columns and a cProfile of the service: `--profile`)."""
    if not loads:
        return []
    busy = [100 * r.service_cpu_s / r.elapsed_s for r in loads]
    queued = sum(t.queued for r in loads for t in r.turns) / max(1, sum(len(r.turns) for r in loads))
    pairs = [(backend, pair) for backend in BACKENDS if (pair := peers(loads, backend)) is not None]
    cpu = ", ".join(f"{ratio(cpu_per_turn(o), cpu_per_turn(p))} ({b})" for b, (o, p) in pairs)
    run = ", ".join(f"{ratio(o.p('executing', 0.5), p.p('executing', 0.5))} ({b})" for b, (o, p) in pairs)
    conversations = max(len({t.conversation for t in r.turns}) for r in loads)
    return [
        "Reading the figures: the service process is CPU-bound on one core -- one uvicorn worker, one "
        f"event loop; it used {min(busy):.0f}-{max(busy):.0f}% of one core (its model and tool calls run "
        "in worker threads), the load generator a few per cent, so the second core mostly idles and "
        f"turns/s is one core divided by the service's CPU per turn. With {Settings().max_concurrent_runs} runs at once and "
        f"{conversations} conversations, {100 * queued:.0f}% of the turns wait in the queue: their first "
        "event is the intake's `run_queued`, their time to the first token mostly the wait; run "
        "execution (`run_started` → `run_finished`) is the run itself."
        + (
            f" ctxpress ÷ no middleware: service CPU per turn {cpu}, run execution p50 {run}. Below "
            "the threshold (these conversations stay far below 100K) the middleware counts tokens and "
            "publishes two `context_pressure` events per turn (each an event row plus a pressure-record "
            "upsert, stored in the transaction of the step that answers its model call). The phases run one "
            "after another on a "
            "shared machine, the order alternating between the databases, so part of a difference can "
            "be drift: compare the two databases."
            if pairs
            else ""
        ),
        "",
        "Where the service's time goes, from `--profile` (cProfile of the service process during the "
        "same load): SQLAlchemy about 30% of the busy time, the database drivers and their thread "
        "hand-offs 12% (SQLite), the HTTP stack 12%, the offline model, knowledge base and engine 10%, "
        "LangGraph and LangChain 5%, asyncio and the rest of Python the remainder. Token deltas are "
        "live only (coalesced, never an SQL row); what the chat record stores per turn is the intake, "
        "each step's messages with their events and usage, the pressure events and the finish, beside "
        "the checkpointer's writes.",
    ]


def compression_miss(results: Sequence[CompressionResult], thread_messages: int) -> str:
    """Why the compression goal is missed and what would fix it, from the step timings."""
    measured = [r for r in results if r.calls]
    per_backend = "; ".join(
        f"{r.backend}: {reads_per_call(r):g} read(s), {ms(_median_step(r, CHECKPOINT_READ))} ms, and one write, "
        f"{ms(_median_step(r, CHECKPOINT_WRITE))} ms"
        for r in measured
    )
    twice = any(reads_per_call(r) >= 2 for r in measured)
    return (
        "**Why the 50 ms goal is missed.** The time goes into the thread's checkpoint, not into "
        "compressing (the compression work itself is the few ms above). Per call the state read "
        "(`aget_state`) and the state update (`aupdate_state`, which writes the new "
        f"`_summarization_event`) read the ~{thread_messages:,}-message checkpoint from the database and "
        f"write a new one ({per_backend}; medians). The serializer keeps its last decoded large "
        "payloads (`ctxpress/checkpoint_serde.py`): a checkpoint the run's end has already read is not "
        "decoded again, and its messages are written back as the bytes they were read from. What is left "
        "follows the thread's length, not what is summarised (the calls that summarise a single turn, 4 "
        "messages, make the p50 above; `--profile` prints the functions): on PostgreSQL fetching the "
        "~1.4 MB blob of the `messages` channel from the database; on SQLite storing a new ~1.5 MB "
        "checkpoint row, because `AsyncSqliteSaver.aput` stores every channel's value inside each "
        "checkpoint. What would fix it: "
        + (
            "read the checkpoint once per call (`aupdate_state` reads the checkpoint `aget_state` has just "
            "read again); "
            if twice
            else ""
        )
        + "on SQLite a saver that keeps channel values in separate blobs, as the PostgreSQL saver does, "
        "so that writing `_summarization_event` does not rewrite the messages; on both, a read that "
        "does not fetch an unchanged messages blob again."
    )


PEER_MARKER = "service_load_agent_server"
PEER_COMMAND = f"{COMMAND} --only peer"
#: Issue 17's goals, ctxpress ÷ Agent Server (its default run concurrency), all rounds pooled.
GOAL_THROUGHPUT_RATIO = 1.0
GOAL_FIRST_TOKEN_P95_RATIO = 1.0


def _server_name(server: str, slots: int) -> str:
    return "ctxpress (SQLite)" if server == CTXPRESS else f"Agent Server, {slots} runs at once"


def _server_row(label: str, slots: int, result: LoadResult) -> list[str]:
    turns = max(1, len(result.turns))
    return [
        label,
        str(slots),
        f"{len(result.finished)} / {result.planned}",
        p50_p95(result, "first_event"),
        p50_p95(result, "first_token"),
        p50_p95(result, "finished"),
        f"{result.turns_per_s:.2f}",
        f"{sum(t.events for t in result.turns) / turns:.0f}",
        f"{sum(t.received for t in result.turns) / turns / 1024:.1f}",
        f"{100 * result.service_cpu_s / result.elapsed_s:.0f}% / {100 * result.client_cpu_s / result.elapsed_s:.0f}%",
        f"{1e3 * cpu_per_turn(result):.0f}",
        str(result.errors),
        str(result.lost),
    ]


def _ratio_row(label: str, ours: LoadResult, theirs: LoadResult) -> list[str]:
    def pair(attribute: str) -> str:
        return (
            f"{ratio(ours.p(attribute, 0.5), theirs.p(attribute, 0.5))} / "
            f"{ratio(ours.p(attribute, 0.95), theirs.p(attribute, 0.95))}"
        )

    return [
        label,
        ratio(ours.turns_per_s, theirs.turns_per_s),
        pair("first_event"),
        pair("first_token"),
        pair("finished"),
        ratio(cpu_per_turn(ours), cpu_per_turn(theirs)),
    ]


def peer_tables(comparison: PeerComparison) -> list[str]:
    """Every load of every round, then ctxpress ÷ each Agent Server set-up, per round and pooled."""
    rows = [
        [
            str(p.round),
            *_server_row(_server_name(p.server, p.slots), p.slots, p.result),
            f"{p.load_average:.1f}",
        ]
        for p in comparison.phases
    ]
    ratios = []
    ours_slots = comparison.set_ups(CTXPRESS)[0]
    for jobs in comparison.set_ups(AGENT_SERVER):
        rounds = sorted({p.round for p in comparison.phases})
        for number in rounds:
            ours = next(p.result for p in comparison.phases if p.server == CTXPRESS and p.round == number)
            theirs = next(
                p.result
                for p in comparison.phases
                if p.server == AGENT_SERVER and p.slots == jobs and p.round == number
            )
            ratios.append(_ratio_row(f"{jobs} runs at once, round {number}", ours, theirs))
        pooled_ours, pooled_theirs = (
            comparison.pooled(CTXPRESS, ours_slots),
            comparison.pooled(AGENT_SERVER, jobs),
        )
        assert pooled_ours is not None and pooled_theirs is not None
        ratios.append(_ratio_row(f"**{jobs} runs at once, all rounds**", pooled_ours, pooled_theirs))
    return [
        *table(
            [
                "round",
                "server",
                "runs at once",
                "turns done",
                "first event p50 / p95 ms",
                "first token p50 / p95 ms",
                "run end p50 / p95 ms",
                "turns/s",
                "SSE events per turn",
                "SSE KB per turn",
                "CPU server / load generator (% of one core)",
                "server CPU ms per turn",
                "errors",
                "lost messages",
                "load average after (2 cores)",
            ],
            rows,
        ),
        "",
        "ctxpress ÷ Agent Server (same run; all rounds = every round's turns pooled):",
        "",
        *table(
            [
                "Agent Server",
                "turns/s",
                "first event p50 / p95",
                "first token p50 / p95",
                "run end p50 / p95",
                "server CPU per turn",
            ],
            ratios,
        ),
    ]


def peer_goals(comparison: PeerComparison) -> str:
    ours = comparison.pooled(CTXPRESS, comparison.set_ups(CTXPRESS)[0])
    theirs = comparison.pooled(AGENT_SERVER, AGENT_SERVER_JOBS)
    if ours is None or theirs is None:
        return f"Goals: not judged (no Agent Server load with its default {AGENT_SERVER_JOBS} runs at once)."
    throughput = ours.turns_per_s / theirs.turns_per_s
    token_p95 = ours.p("first_token", 0.95) / theirs.p("first_token", 0.95)
    return (
        f"Goals (all rounds, against the Agent Server's default {AGENT_SERVER_JOBS} runs at once): throughput "
        f"≥ {GOAL_THROUGHPUT_RATIO:g}× the Agent Server's: {throughput:.2f}×, "
        + ("met" if throughput >= GOAL_THROUGHPUT_RATIO else "**missed**")
        + f"; first-token p95 ≤ {GOAL_FIRST_TOKEN_P95_RATIO:g}× the Agent Server's: {token_p95:.2f}×, "
        + ("met" if token_p95 <= GOAL_FIRST_TOKEN_P95_RATIO else "**missed**")
        + "."
    )


def peer_notes(comparison: PeerComparison) -> list[str]:
    """What the figures say, from the CPU and stream columns (pooled over the rounds)."""
    ours = comparison.pooled(CTXPRESS, comparison.set_ups(CTXPRESS)[0])
    theirs = {
        jobs: result
        for jobs in comparison.set_ups(AGENT_SERVER)
        if (result := comparison.pooled(AGENT_SERVER, jobs)) is not None
    }
    if ours is None or not theirs:
        return []

    def busy(result: LoadResult) -> float:
        return 100 * result.service_cpu_s / result.elapsed_s

    def client(result: LoadResult) -> str:
        return f"{100 * result.client_cpu_s / result.elapsed_s:.0f}%"

    def kb(result: LoadResult) -> str:
        return f"{sum(t.received for t in result.turns) / max(1, len(result.turns)) / 1024:.0f} KB"

    cpu = ", ".join(
        f"{ratio(cpu_per_turn(ours), cpu_per_turn(r))} ({jobs} runs at once)" for jobs, r in theirs.items()
    )
    used = ", ".join(f"{busy(r):.0f}% at {jobs} runs at once" for jobs, r in theirs.items())
    default, most = theirs.get(AGENT_SERVER_JOBS), theirs[max(theirs)]
    # Its run limit binds when more runs at once bring more turns/s (and more CPU used).
    limited = default is not None and most is not default and most.turns_per_s > 1.15 * default.turns_per_s
    busiest = max(p.load_average for p in comparison.phases)
    lines = [
        f"Reading the figures: ctxpress's process spends {cpu} the Agent Server's CPU per turn (process CPU "
        "time: the steadiest figure on a shared machine). Per turn the service writes the chat record (the "
        "user message, every assistant and tool message) and the run's durable events to SQLite, and its "
        "SSE streams read them back; the Agent Server keeps threads, runs and checkpoints in its process's "
        "memory and streams from an in-process queue. Both uvicorns run on uvloop and httptools (the "
        "Agent Server's installed with `langgraph-api`, ctxpress's with its `server` extra). "
        f"Busy: the Agent Server {used}, ctxpress {busy(ours):.0f}% (% of one core; the "
        f"machine's load average reached {busiest:.1f} on 2 cores, so no server had a core to itself and "
        "turns/s and latencies move by ±20% from round to round)."
        + (
            f" At its default of {AGENT_SERVER_JOBS} runs at once the Agent Server's throughput is set by "
            f"that limit: {max(theirs)} at once gave it {ratio(most.turns_per_s, default.turns_per_s)} the "
            "turns/s."
            if limited and default is not None
            else ""
        )
        + " First event: ctxpress sends it at intake, before the run starts (`run_queued` when the run "
        "waits); the Agent Server's stream says nothing until a worker starts the run, so its first event "
        "comes shortly before its first token and both include the wait in its queue. Its "
        f"`{comparison.stream_mode}` stream sends "
        + (
            "the whole message so far with every chunk"
            if comparison.stream_mode == "messages"
            else "every chunk with the run's metadata"
        )
        + f": {', '.join(kb(r) for r in theirs.values())} per turn against ctxpress's {kb(ours)}, and the "
        f"load generator spent {', '.join(client(r) for r in theirs.values())} of a core reading it (ctxpress "
        f"{client(ours)}) -- on the same two cores as the servers.",
    ]
    return lines


def peer_report(comparison: PeerComparison, sizes: Sizes, elapsed_s: float) -> list[str]:
    """The Agent Server section of docs/benchmarks.md."""
    project = project_versions()
    shown = ", ".join(f"{name} {version}" for name, version in comparison.versions.items())
    same = [name for name, version in comparison.versions.items() if project.get(name) == version]
    slots = Settings().max_concurrent_runs
    rounds = max((p.round for p in comparison.phases), default=0)
    lines = [
        "### The same load on LangGraph's Agent Server (issue 17)",
        "",
        f"Reproduce: `{PEER_COMMAND}` ({elapsed_s / 60:.0f} min here; the full run measures it too, after "
        "the other phases; the first run makes `.venv-agent-server/` in the repository: `python -m venv`, "
        "then `pip install 'langgraph-cli[inmem]' -e '.[server]'` with the langgraph / langchain packages "
        "pinned to the project virtualenv's versions -- `bench/agent_server.py`, which does only that when "
        "run alone). Load average (1 / 5 / 15 min) "
        f"{' / '.join(f'{v:.2f}' for v in comparison.load_before)} before the phases, "
        f"{' / '.join(f'{v:.2f}' for v in comparison.load_after)} after (2 cores, shared).",
        "",
        "The peer: `langgraph dev --no-browser --no-reload --n-jobs-per-worker N` (LangGraph's Agent Server, "
        "its in-memory runtime, `LANGSMITH_TRACING=false`; `langgraph dev` executes 1 run at a time unless "
        f"told; {AGENT_SERVER_JOBS} is the documented default of `N_JOBS_PER_WORKER`, the goals are against "
        f"it; {slots} is ctxpress's default) serving `bench/agent_server_graph.py`: the graph `ctxpress serve` "
        "builds for its default agent -- built-in offline model, prompt, tools (`query_kb` over the built-in "
        "documents in a SQLite knowledge base, the workdir file tools on a workdir per thread), ctxpress's "
        "compression middleware and the service's other two -- without a checkpointer (the Agent Server's "
        f"own, in memory). The same load as above: {sizes.conversations} threads (`POST /threads`), "
        f"{sizes.turns} turns each, all at once, each turn `POST /threads/{{id}}/runs/stream` with "
        f'`stream_mode: ["{comparison.stream_mode}"]` read to its end; first event = its `metadata` event '
        "(sent when a worker starts the run: a queued run sends nothing before), first token = the first "
        "message event with text of the model's answer. Lost messages: read back from "
        "`GET /threads/{id}/state` (each question once, one final answer after each); a run not listed "
        f"`success` counts as an error. ctxpress: `ctxpress serve` on SQLite with its defaults ({slots} runs "
        "at once), which also writes the chat record (every message and the run's durable events, in "
        "SQLite), announces the run at intake (`run_queued` when it waits) and streams it from its events. "
        f"{rounds} rounds, the servers' order reversed in the second; every server starts empty and gets "
        "two warm-up turns. CPU: the server's process (with any children); load generator: this process.",
        "",
        *peer_tables(comparison),
        "",
        *peer_notes(comparison),
        "",
        peer_goals(comparison),
        "",
        f"Versions in `.venv-agent-server/`: {shown}"
        + (f" ({', '.join(same)} the same as in the project's virtualenv)." if same else "."),
    ]
    problems = [
        item
        for p in comparison.phases
        if p.server == AGENT_SERVER
        for item in [*p.result.problems, *(e for t in p.result.turns for e in t.errors)]
    ]
    if problems:
        lines.extend(["", "Agent Server problems found:", "", *(f"- {p}" for p in problems[:10])])
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = bench_parser(
        __doc__,
        f"{QUICK.conversations} conversations × {QUICK.turns} turns, a {QUICK.thread_messages}-message "
        "thread; no docs update",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="run the services under cProfile and print where their time goes (slower; docs untouched)",
    )
    parser.add_argument(
        "--only",
        choices=["load", "compress", "peer"],
        help="run one part only (docs untouched, except `peer`: ctxpress on SQLite and LangGraph's Agent "
        "Server, which updates its own section)",
    )
    parser.add_argument(
        "--agent-server-jobs",
        type=int,
        nargs="+",
        default=None,
        help=f"runs the Agent Server executes at once, one load per value (default: {AGENT_SERVER_JOBS} "
        "and ctxpress's own number)",
    )
    parser.add_argument("--rounds", type=int, default=PEER_ROUNDS, help="rounds of the peer comparison")
    parser.add_argument(
        "--agent-server-stream-mode",
        choices=["messages", "messages-tuple"],
        default=AGENT_SERVER_STREAM_MODE,
        help="the Agent Server's stream mode",
    )
    args = parser.parse_args(argv)
    jobs = args.agent_server_jobs or sorted({AGENT_SERVER_JOBS, Settings().max_concurrent_runs})
    sizes = QUICK if args.quick else FULL
    started = time.perf_counter()
    loads: list[LoadResult] = []
    compressions: list[CompressionResult] = []
    skipped: list[str] = []
    comparison: PeerComparison | None = None
    docs = not (args.quick or args.no_docs or args.profile)
    with tempfile.TemporaryDirectory(prefix="ctxpress-service-load-") as scratch_name:
        scratch = Path(scratch_name)
        for backend in BACKENDS if args.only != "peer" else ():
            try:
                if args.only != "compress":
                    print(f"load, {backend}:", flush=True)
                    # Alternate the order (ctxpress first on SQLite, second on PostgreSQL) against drift.
                    for agent in (CTXPRESS, PEER) if backend == BACKENDS[0] else (PEER, CTXPRESS):
                        loads.append(load_phase(backend, agent, sizes, scratch, args.profile))
                if args.only != "load":
                    print(f"manual compression, {backend}:", flush=True)
                    compressions.append(compression_phase(backend, sizes, scratch, args.profile))
            except PostgresUnavailableError as exc:
                skipped.append(f"PostgreSQL: not measured ({exc}).")
                print(skipped[-1])
        if args.only in (None, "peer") and not args.profile:
            peer_started = time.perf_counter()
            comparison = peer_comparison(
                sizes, scratch / "peer", jobs, args.rounds, args.agent_server_stream_mode
            )
            peer_elapsed = time.perf_counter() - peer_started
    if args.only != "peer":
        lines = report(sizes, loads, compressions, skipped, time.perf_counter() - started)
        print("\n".join(lines))
        if docs and args.only is None:
            update_docs(MARKER, lines)
    if comparison is not None:
        peer_lines = peer_report(comparison, sizes, peer_elapsed)
        print("\n".join(peer_lines))
        if docs:
            update_docs(PEER_MARKER, peer_lines)


if __name__ == "__main__":
    main()
