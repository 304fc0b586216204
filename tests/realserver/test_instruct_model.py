"""A real instruct model (SmolLM2-135M-Instruct on llama-server): the summary path writing real
text through a real chat template, the service end to end with a real reply, and usage from the
server's own counters.

The model is tiny: nothing here depends on what it says, only on protocol, structure and
bookkeeping. Oracles are llama-server's own endpoints: `/apply-template` (the prompt its chat
template makes of the messages), `/tokenize` (that prompt's tokens) and `/metrics` (tokens
processed and predicted since start).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import LLMResult
from langgraph.checkpoint.memory import InMemorySaver

from ctxpress import CompressionConfig, ContextCompressionMiddleware, LocalWorkdir
from ctxpress.app.testing.api import create_conversation, read_events, send
from ctxpress.middleware import EVENT_KEY
from ctxpress.summary.event import SUMMARY_MARKER
from ctxpress.summary.history import is_conversation_file, read_history
from ctxpress.summary.recovery import recover_messages
from tests.realserver.clients import chat_model
from tests.realserver.conftest import (
    INSTRUCT_MODEL_ALIAS,
    RealServer,
    log_count_reaches,
    started_tasks,
    token_counters,
)
from tests.realserver.test_service_real import (
    Service,
    assert_streamed_for_real,
    assert_usage_matches_server,
    compression,
    of_type,
    running_service,
    usage_of,
)

SUMMARY_TAG = "ctxpress:summary"
#: Generous: a busy 2-core machine processes this model's prompts at a few dozen tokens a second.
TIMEOUT_S = 300
CHATML_USER = "<|im_start|>user\n"
CHATML_END = "<|im_end|>\n"
CHATML_REPLY = "<|im_start|>assistant\n"
EARLIER_TURNS = [
    "I am fixing a bug in src/billing/invoice.py: totals are off by one cent for order W2378156.",
    "The rounding happens in round_total() before the tax is added, which is the wrong order.",
    "The test tests/test_invoice.py::test_cents fails with AssertionError: 1999 != 2000.",
    "Please do not change the public API of the invoice module.",
]

#: Four turns the agent below accepts one by one (each within its per-message limit at a
#: 460-token threshold) and whose text alone passes that threshold by the fourth.
SERVICE_TURNS = [
    "I am fixing a bug in src/billing/invoice.py: totals are off by one cent for order W2378156. "
    "The rounding happens in round_total() before the tax is added, which is the wrong order. "
    "The test tests/test_invoice.py::test_cents fails with AssertionError: 1999 != 2000. "
    "Please do not change the public API of the invoice module, other services import it. "
    "The tax rate for this customer is 8.25% and the subtotal was $18.47 before shipping.",
    "I also looked at src/billing/tax.py, which computes the tax with floats instead of Decimal. "
    "The CI job build-4411 shows the same failure on Python 3.11 and 3.12, so it is not a version issue. "
    "The fix must keep the rounding mode ROUND_HALF_UP because the accountants rely on it. "
    "The invoice total is written to the ledger table by write_ledger_entry() in src/billing/ledger.py, "
    "so the stored amounts will change for new invoices only.",
    "Before that, the support ticket SUP-20931 says the customer was charged $19.99 instead of $20.00 twice, "
    "on 2026-11-02 and on 2026-11-19, and asked for a refund of both differences to the card ending 7447. "
    "The refund tool lives in tools/refund.py and needs the payment id, for example pay_8f3a91c2. "
    "I must not issue refunds from a development machine.",
    "One more constraint: do not touch the migration files under migrations/, they are frozen for the release. "
    "The release is planned for 2026-12-15 and the change needs a changelog entry in CHANGELOG.md. "
    "The reviewer asked for a regression test with three orders: W2378156, W2378157 and W2378158. "
    "Which function should I change first, and what should the new test assert about the ledger?",
]


class CallRecorder(BaseCallbackHandler):
    """Every chat-model call of a run: its messages, its tags, and the reply with its usage."""

    def __init__(self) -> None:
        self.calls: dict[UUID, dict[str, Any]] = {}

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        self.calls[run_id] = {"messages": messages[0], "tags": list(tags or [])}

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        message = response.generations[0][0].message  # type: ignore[attr-defined]
        self.calls[run_id]["reply"] = message

    def summary_calls(self) -> list[dict[str, Any]]:
        return [call for call in self.calls.values() if SUMMARY_TAG in call["tags"]]

    def main_calls(self) -> list[dict[str, Any]]:
        return [call for call in self.calls.values() if SUMMARY_TAG not in call["tags"]]


def server_root(server: RealServer) -> str:
    return server.base_url.removesuffix("/v1")


def templated(server: RealServer, messages: list[dict[str, str]]) -> str:
    """The prompt llama-server's chat template makes of `messages`."""
    answer = httpx.post(f"{server_root(server)}/apply-template", json={"messages": messages}, timeout=30)
    answer.raise_for_status()
    prompt: str = answer.json()["prompt"]
    return prompt


def prompt_tokens(server: RealServer, prompt: str) -> int:
    answer = httpx.post(
        f"{server_root(server)}/tokenize", json={"content": prompt, "parse_special": True}, timeout=30
    )
    answer.raise_for_status()
    return len(answer.json()["tokens"])


def openai_messages(messages: list[BaseMessage]) -> list[dict[str, str]]:
    roles = {"human": "user", "ai": "assistant", "system": "system"}
    return [{"role": roles[message.type], "content": message.text} for message in messages]


def test_the_chat_template_and_the_usage_agree_token_for_token(instruct_llama_server: RealServer) -> None:
    server = instruct_llama_server
    messages = [HumanMessage("Name one file of this project: src/billing/invoice.py or README.md?")]
    before = token_counters(server)

    reply = chat_model(server, max_tokens=12, timeout=TIMEOUT_S).invoke(messages)

    served = token_counters(server) - before
    prompt = templated(server, openai_messages(messages))
    # ChatML: the user's text between the template's own markers, the reply primed after it.
    assert prompt.endswith(f"{CHATML_USER}{messages[0].text}{CHATML_END}{CHATML_REPLY}")
    usage = reply.usage_metadata
    assert usage is not None
    assert usage["input_tokens"] == prompt_tokens(server, prompt)
    assert usage["input_tokens"] == served.prompt_tokens + served.cached_prompt_tokens
    assert 0 < usage["output_tokens"] <= 12 and usage["output_tokens"] == served.predicted_tokens
    assert reply.response_metadata["model_name"] == INSTRUCT_MODEL_ALIAS


def test_the_summary_path_writes_real_text_through_the_chat_template(
    instruct_llama_server: RealServer, tmp_path: Path
) -> None:
    server = instruct_llama_server
    workdir = LocalWorkdir(tmp_path)
    middleware = ContextCompressionMiddleware(
        CompressionConfig(summary_threshold=0.12, summary_keep_messages=2),
        workdir=workdir,
        summary_model=chat_model(server, max_tokens=48, timeout=TIMEOUT_S),
    )
    agent = create_agent(
        chat_model(server, max_tokens=16, timeout=TIMEOUT_S),
        tools=[],
        middleware=[middleware],
        checkpointer=InMemorySaver(),
    )
    history: list[BaseMessage] = []
    for number, text in enumerate(EARLIER_TURNS):
        history += [HumanMessage(text, id=f"user-{number}"), AIMessage("Noted.", id=f"assistant-{number}")]
    history.append(HumanMessage("What should I change first?", id="question"))
    recorder = CallRecorder()
    before = token_counters(server)
    tasks_before = started_tasks(server)

    thread = {"configurable": {"thread_id": "instruct"}}
    result = agent.invoke({"messages": history}, config={**thread, "callbacks": [recorder]})

    served = token_counters(server) - before
    # One summary call, then the main call, both answered by the server.
    [summary_call] = recorder.summary_calls()
    [main_call] = recorder.main_calls()
    assert log_count_reaches(started_tasks, server, tasks_before + 2) == tasks_before + 2

    # The summary request went through the model's real chat template, token for token.
    [request] = summary_call["messages"]
    prompt = templated(server, openai_messages([request]))
    assert prompt.endswith(f"{CHATML_USER}{request.text}{CHATML_END}{CHATML_REPLY}")
    summary_reply: AIMessage = summary_call["reply"]
    assert summary_reply.usage_metadata is not None
    assert summary_reply.usage_metadata["input_tokens"] == prompt_tokens(server, prompt)

    # The model's own text is the summary: placed after the marker, not replaced by the failure digest.
    event = agent.get_state(thread).values[EVENT_KEY]  # type: ignore[arg-type]
    summary_text = event["summary_message"].text
    header, body = summary_text.split("\n\n", 1)
    named = re.search(r"every earlier message is in full at (\S+)\.$", header)
    assert header.startswith(SUMMARY_MARKER) and named and is_conversation_file(named.group(1))
    conversation_header, _ = read_history(workdir, named.group(1))
    assert event["file_path"] in conversation_header["history_files"]  # type: ignore[operator]
    assert summary_reply.text.strip() and body == summary_reply.text.strip()
    assert "summary model failed" not in summary_text

    # What was summarised is in the history file, whole; the main model got summary + kept messages.
    cutoff = event["cutoff_index"]
    recovered = recover_messages(workdir, event["file_path"])
    assert [m.id for m in recovered] == [m.id for m in history[:cutoff]]
    assert [m.text for m in recovered] == [m.text for m in history[:cutoff]]
    assert [m.text for m in main_call["messages"]] == [summary_text, *(m.text for m in history[cutoff:])]

    # A real reply, and the two calls' usage is what the server counted.
    answer = result["messages"][-1]
    assert isinstance(answer, AIMessage) and answer.text.strip()
    replies = [summary_reply, main_call["reply"]]
    assert sum(r.usage_metadata["input_tokens"] for r in replies) == (
        served.prompt_tokens + served.cached_prompt_tokens
    )
    assert sum(r.usage_metadata["output_tokens"] for r in replies) == served.predicted_tokens


def instruct_agents_toml(server: RealServer) -> str:
    return f"""
[agents.assistant]
default = true
description = "SmolLM2-135M-Instruct on llama-server"
system_prompt = "You are a helpful assistant. Answer in one short sentence."
tools = []
capabilities = ["context_compression"]

[agents.assistant.model]
model = "openai:{server.model}"
base_url = "{server.base_url}"
usage_provider = "llama.cpp"
kwargs = {{ temperature = 0, max_tokens = 24, max_retries = 0, timeout = 300, stream_usage = true }}

[agents.assistant.compression]
summary_threshold = 0.45
summary_keep_messages = 2
"""


@pytest.fixture(scope="module")
def instruct_service(
    instruct_llama_server: RealServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    with running_service(
        instruct_agents_toml(instruct_llama_server), tmp_path_factory.mktemp("ctxpress-serve-instruct")
    ) as running:
        yield running


def test_the_service_end_to_end_with_a_real_instruct_reply(
    instruct_service: Service, instruct_llama_server: RealServer
) -> None:
    server = instruct_llama_server
    client = instruct_service.client()
    conversation_id = create_conversation(client)
    before = token_counters(server)
    tasks_before = started_tasks(server)

    runs = [read_events(client, send(client, conversation_id, text)["run"]["id"]) for text in SERVICE_TURNS]

    served = token_counters(server) - before
    for events in runs:
        assert_streamed_for_real(events)  # a real reply, streamed token by token
        [main_usage] = usage_of(events, "main")
        assert main_usage["usage_available"] and 0 < main_usage["output_tokens"] <= 24
    # The user's turns alone pass the threshold by the last turn: at least one summary by then,
    # written by the model (the exact turn depends on how long its replies were).
    summarised = [events for events in runs if ("completed", "l2", None) in compression(events)]
    assert summarised, [compression(events) for events in runs]
    summaries = [usage for events in runs for usage in usage_of(events, "summary")]
    assert len(summaries) == len(summarised)
    for events in summarised:
        completed = [e for e in of_type(events, "context_compression") if e["status"] == "completed"][-1]
        assert completed["tokens_after"] < completed["tokens_before"]
        assert completed["file_path"].startswith("outputs/conversation_history/")
    state = client.get(f"/api/conversations/{conversation_id}/state").json()
    summary_text = state["values"][EVENT_KEY]["summary_message"]["data"]["content"]
    assert summary_text.startswith(SUMMARY_MARKER) and "summary model failed" not in summary_text

    # Every call reached the server once, and the service's usage equals the server's counters.
    calls = len(runs) + len(summaries)
    assert log_count_reaches(started_tasks, server, tasks_before + calls) == tasks_before + calls
    usage = client.get(f"/api/conversations/{conversation_id}/usage").json()
    lines = {line["category"]: line for line in usage["lines"]}
    assert lines["main"]["calls"] == len(runs) and lines["summary"]["calls"] == len(summaries)
    assert_usage_matches_server(usage, usage["lines"], served, calls=calls, model=INSTRUCT_MODEL_ALIAS)
