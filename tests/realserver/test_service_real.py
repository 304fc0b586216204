"""The chat service end to end against a real model server: `ctxpress serve` (a subprocess, as a user
starts it) with an agents file pointing at llama-server, a real conversation over HTTP and SSE, and
the usage accounting (S26) checked against the model server's own token counters.

Oracles: the SSE stream (tokens, messages, `context_compression`, `usage`), the service's usage and
state endpoints, and llama-server's `/metrics` (prompt, cached-prompt and predicted token counters),
which must equal the usage the service recorded, call for call. Both agents use
`wide_llama_server` (-c 2048); the `long` agent's second turn exceeds that context for real.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain_core.messages import HumanMessage

from ctxpress.app.server.runtime.usage_recording import UsageCollector
from ctxpress.app.testing.api import SseEvent, create_conversation, read_events, send
from ctxpress.summary.summarizer import summary_call_config
from tests.realserver.clients import MAX_TOKENS, chat_model
from tests.realserver.conftest import (
    MODEL_ALIAS,
    RealServer,
    TokenCounters,
    context_rejections,
    free_local_port,
    log_count_reaches,
    started_tasks,
    token_counters,
)

SERVE_START_TIMEOUT_S = 60.0
STORY_TURNS = [
    "Once upon a time there was a little girl named Lily.",
    "She liked to play in the park with her red ball.",
    "One day the ball rolled away into the big green tree.",
    "Lily asked her mom to help her find the ball.",
    "They looked under the bench and behind the flowers.",
    "A friendly dog came running with the red ball in its mouth.",
    "Lily said thank you and they all played together until dinner.",
]
# Story text is ~1.3 real tokens per estimated token: about 1,500 real tokens, 1,150 estimated.
LONG_FIRST_TURN = " ".join(["The little dog ran to the park and played with the ball all day."] * 60)
LONG_SECOND_TURN = " ".join(["Then the sun went down and the dog went home to sleep."] * 25)


def agents_toml(server: RealServer) -> str:
    """Two agents on the same real server: `story` summarises early, `long` only on overflow."""
    model = f"""model = "openai:{server.model}"
base_url = "{server.base_url}"
usage_provider = "llama.cpp"
kwargs = {{ temperature = 0, max_tokens = {MAX_TOKENS}, max_retries = 0, timeout = 30, stream_usage = true }}
"""
    return f"""
[agents.story]
default = true
description = "stories260K on llama-server"
system_prompt = "You tell stories."
tools = []
capabilities = ["context_compression"]

[agents.story.model]
{model}
[agents.story.compression]
summary_threshold = 0.2
summary_keep_messages = 2

[agents.long]
description = "stories260K, compressed only when the server says the context is exceeded"
system_prompt = "You tell stories."
tools = []

[agents.long.model]
{model}
[agents.long.compression]
summary_threshold = 2
summary_keep_messages = 1
summary_prompt = "Summarise the story so far.\\n\\n{{messages}}"
"""


@dataclass(frozen=True)
class Service:
    base_url: str
    token: str
    data_dir: Path

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.base_url, headers={"Authorization": f"Bearer {self.token}"}, timeout=60
        )


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "ctxpress.app.cli", *args]


@contextmanager
def running_service(agents_text: str, tmp_path: Path) -> Iterator[Service]:
    """`ctxpress serve --agents agents.toml` on SQLite in `tmp_path`, and a user's token from
    `ctxpress users create`; stopped afterwards."""
    agents = tmp_path / "agents.toml"
    agents.write_text(agents_text, encoding="utf-8")
    data_dir = tmp_path / "data"
    env = {key: value for key, value in os.environ.items() if not key.startswith("CTXPRESS_")}
    env["CTXPRESS_WORKER_POLL_SECONDS"] = "0.1"
    env["CTXPRESS_DELTA_MAX_CHARS"] = "1"  # every token its own message_delta
    created = subprocess.run(
        cli("users", "create", "alice", "--data-dir", str(data_dir)),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    token = created.stdout.strip()
    port = free_local_port()
    log_path = tmp_path / "serve.log"
    command = cli("serve", "--agents", str(agents), "--data-dir", str(data_dir), "--port", str(port))
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVE_START_TIMEOUT_S
        while True:
            assert process.poll() is None, f"ctxpress serve exited:\n{log_path.read_text()[-3000:]}"
            try:
                if httpx.get(f"{base_url}/api/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (
                f"ctxpress serve did not start:\n{log_path.read_text()[-3000:]}"
            )
            time.sleep(0.2)
        yield Service(base_url, token, data_dir)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture(scope="module")
def service(wide_llama_server: RealServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """The service with the two stories260K agents. Shared by this module's tests (each uses its
    own conversation): starting it takes ~10 s."""
    with running_service(
        agents_toml(wide_llama_server), tmp_path_factory.mktemp("ctxpress-serve")
    ) as running:
        yield running


# --- reading a run's events ------------------------------------------------------------------------


def of_type(events: list[SseEvent], kind: str) -> list[dict[str, Any]]:
    return [event.data for event in events if event.type == kind]


def assert_streamed_for_real(events: list[SseEvent]) -> str:
    """One assistant message, its text spelled out by the `message_delta`s before it when the stream
    was read during the run; returns the text."""
    assert events[0].type == "run_started" and events[-1].type == "run_finished"
    assert events[-1].data == {"status": "succeeded", "error": None}
    [message] = of_type(events, "message")
    deltas = of_type(events, "message_delta")
    # Deltas are live only: a stream opened after the run ended has the complete message alone.
    if deltas:
        # Every token belongs to the assistant message: none from the summary model (S21).
        assert {delta["message_id"] for delta in deltas} == {message["message_id"]}
        assert "".join(delta["delta"] for delta in deltas) == message["content"]
    assert message["content"].strip() and message["tool_calls"] == []
    return str(message["content"])


def compression(events: list[SseEvent]) -> list[tuple[str, str, str | None]]:
    return [(e["status"], e["level"], e.get("reason")) for e in of_type(events, "context_compression")]


def usage_of(events: list[SseEvent], category: str) -> list[dict[str, Any]]:
    return [usage for usage in of_type(events, "usage") if usage["category"] == category]


def assert_usage_matches_server(
    usage: dict[str, Any],
    lines: list[dict[str, Any]],
    served: TokenCounters,
    calls: int,
    model: str = MODEL_ALIAS,
) -> None:
    """The service's per-line usage adds up to what llama-server counted, token for token."""
    assert [line["usage_available"] for line in lines] == [True] * len(lines)
    assert all(line["provider"] == "llama.cpp" and line["model"] == model for line in lines)
    input_tokens = sum(line["input_tokens"] for line in lines)
    cached = sum(line["cache_read_tokens"] for line in lines)
    assert sum(line["calls"] for line in lines) == calls
    assert input_tokens == served.prompt_tokens + served.cached_prompt_tokens
    assert cached == served.cached_prompt_tokens
    assert sum(line["output_tokens"] for line in lines) == served.predicted_tokens
    totals = usage["totals"]
    assert totals["main"]["input_tokens"] + totals["summary"]["input_tokens"] == input_tokens


# --- the tests -------------------------------------------------------------------------------------


def test_serve_streams_a_real_conversation_that_gets_summarised(
    service: Service, wide_llama_server: RealServer
) -> None:
    client = service.client()
    conversation_id = create_conversation(client)
    before = token_counters(wide_llama_server)
    tasks_before, rejected_before = started_tasks(wide_llama_server), context_rejections(wide_llama_server)

    runs = []
    for text in STORY_TURNS:
        accepted = send(client, conversation_id, text)
        runs.append(read_events(client, accepted["run"]["id"]))

    served = token_counters(wide_llama_server) - before
    for events in runs:
        assert_streamed_for_real(events)
        [main_usage] = usage_of(events, "main")
        assert main_usage["usage_available"] and main_usage["input_tokens"] > 0
        assert 0 < main_usage["output_tokens"] <= MAX_TOKENS
    # Below the threshold for six turns (S4), then L1 finds nothing to compact and L2 summarises.
    assert [compression(events) for events in runs] == [[]] * (len(STORY_TURNS) - 1) + [
        [("started", "l1", None), ("completed", "l2", None)]
    ]
    completed = of_type(runs[-1], "context_compression")[1]
    assert completed["tokens_after"] < completed["tokens_before"]
    [summary_usage] = usage_of(runs[-1], "summary")
    assert summary_usage["usage_available"] and summary_usage["input_tokens"] > 0
    # One main call per turn and one summary call reached the server, no more.
    expected_tasks = tasks_before + len(STORY_TURNS) + 1
    assert log_count_reaches(started_tasks, wide_llama_server, expected_tasks) == expected_tasks
    assert context_rejections(wide_llama_server) == rejected_before

    # The checkpoint holds the summary; the chat record (S1) still has every message.
    state = client.get(f"/api/conversations/{conversation_id}/state").json()
    event = state["values"]["_summarization_event"]
    assert event["cutoff_index"] == completed["cutoff_index"] == 2 * len(STORY_TURNS) - 1 - 2
    assert event["file_path"] == completed["file_path"] and event["file_path"].startswith(
        "outputs/conversation_history/"
    )
    messages = client.get(f"/api/conversations/{conversation_id}/messages").json()["items"]
    assert [item["message"]["type"] for item in messages] == ["human", "ai"] * len(STORY_TURNS)

    # S26: real usage per provider/model, the summary call on its own line, equal to the server's counts.
    usage = client.get(f"/api/conversations/{conversation_id}/usage").json()
    lines = {line["category"]: line for line in usage["lines"]}
    assert set(lines) == {"main", "summary"} and len(usage["lines"]) == 2
    assert lines["main"]["calls"] == len(STORY_TURNS) and lines["summary"]["calls"] == 1
    assert lines["summary"]["input_tokens"] == summary_usage["input_tokens"]
    assert_usage_matches_server(usage, usage["lines"], served, calls=len(STORY_TURNS) + 1)


def test_serve_recovers_from_a_real_context_overflow(service: Service, wide_llama_server: RealServer) -> None:
    client = service.client()
    conversation_id = create_conversation(client, agent="long")
    before = token_counters(wide_llama_server)
    tasks_before, rejected_before = started_tasks(wide_llama_server), context_rejections(wide_llama_server)

    first = read_events(client, send(client, conversation_id, LONG_FIRST_TURN)["run"]["id"])
    second = read_events(client, send(client, conversation_id, LONG_SECOND_TURN)["run"]["id"])

    served = token_counters(wide_llama_server) - before
    # Server side: turn 1; turn 2 rejected for its size, the summary, turn 2 again (smaller).
    assert log_count_reaches(started_tasks, wide_llama_server, tasks_before + 4) == tasks_before + 4
    assert context_rejections(wide_llama_server) == rejected_before + 1
    assert_streamed_for_real(first)
    assert compression(first) == []
    # The second request exceeds the server's 2,048-token context: llama-server answers HTTP 400,
    # the service maps it to ContextOverflowError and the forced summary (S6) makes the turn succeed.
    assert_streamed_for_real(second)
    assert compression(second) == [
        ("started", "l2", "context_overflow"),
        ("completed", "l2", "context_overflow"),
    ]
    assert [usage["category"] for usage in of_type(second, "usage")] == ["summary", "main"]
    usage = client.get(f"/api/conversations/{conversation_id}/usage").json()
    # The rejected request processed nothing and reported no usage: the counts still match.
    assert_usage_matches_server(usage, usage["lines"], served, calls=3)


def test_usage_collector_records_real_non_streaming_and_streaming_usage(
    wide_llama_server: RealServer,
) -> None:
    model = chat_model(wide_llama_server, stream_usage=True)
    collector = UsageCollector(main_provider="llama.cpp", summary_provider="llama.cpp")
    prompt = [HumanMessage("Once upon a time")]
    before = token_counters(wide_llama_server)

    invoked = model.invoke(prompt, config={"callbacks": [collector]})
    streamed = list(model.stream(prompt, config={"callbacks": [collector]}))
    model.invoke(prompt, config={**summary_call_config(), "callbacks": [collector]})

    served = token_counters(wide_llama_server) - before
    drafts = collector.drain()
    assert [(draft.category, draft.provider, draft.model, draft.reported) for draft in drafts] == [
        ("main", "llama.cpp", "stories260K", True),
        ("main", "llama.cpp", "stories260K", True),
        ("summary", "llama.cpp", "stories260K", True),
    ]
    assert invoked.usage_metadata is not None
    assert drafts[0].input_tokens == invoked.usage_metadata["input_tokens"]
    streamed_usage = [chunk.usage_metadata for chunk in streamed if chunk.usage_metadata]
    assert [drafts[1].input_tokens] == [usage["input_tokens"] for usage in streamed_usage]
    assert sum(draft.input_tokens for draft in drafts) == served.prompt_tokens + served.cached_prompt_tokens
    assert sum(draft.output_tokens for draft in drafts) == served.predicted_tokens
    assert all(draft.total_tokens == draft.input_tokens + draft.output_tokens for draft in drafts)
