"""Through a real `create_agent` graph: what the summary model and the main model are sent stays
within its bound -- the summary request within `summary_request_budget` with uploads named once
(S14), and tool-result previews within `summary_tool_result_token_limit` with every retrieval
identifier kept (S8–S10)."""

from __future__ import annotations

import base64
import hashlib
import json
import re

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.base import BaseCheckpointSaver

from ctxpress import CompressionConfig, ContextCompressionMiddleware, LocalWorkdir
from ctxpress.compaction.markers import parse_offload_reference
from ctxpress.summary.summarizer import summary_request_budget
from ctxpress.tokens import count_request_tokens, estimate_tokens
from tests.conftest import require_shared_data
from tests.fakes import ScriptedChatModel, tool_call
from tests.middleware.conftest import SYSTEM_PROMPT, build_agent, kb_call

pytestmark = pytest.mark.shared_data

THREAD = {"configurable": {"thread_id": "bounded-1"}}
PHOTO_URL = "https://cdn.example/uploads/ticket-photo.jpg"
PHOTO_BYTES = base64.b64encode(bytes(range(256)) * 40).decode()
NEGATIVE_MARKER = re.compile(r"\[… -\d")
PREVIEW_SEPARATOR = "\nPreview:\n"


def tau2_documents(count: int) -> list[dict[str, str]]:
    folder = require_shared_data("kb", "tau2-banking", "documents")
    return [json.loads(path.read_text("utf-8")) for path in sorted(folder.glob("*.json"))[:count]]


def short_sentences(count: int) -> list[str]:
    sentences = [
        " ".join(piece.split())
        for doc in tau2_documents(60)
        for piece in re.split(r"(?<=[.?!])\s+", doc["content"])
        if 40 <= len(" ".join(piece.split())) <= 160
    ]
    assert len(sentences) >= count
    return sentences[:count]


def summary_requests_within_budget(summary_model: ScriptedChatModel, config: CompressionConfig) -> None:
    assert summary_model.requests, "the premise: the summary model was called"
    for request in summary_model.requests:
        assert count_request_tokens(request, profile=config.token_profile) <= summary_request_budget(config)
        assert not NEGATIVE_MARKER.search(request[0].text)


def test_s14_an_uploaded_image_reaches_the_summary_request_once_by_its_url(
    workdir: LocalWorkdir, checkpointer: BaseCheckpointSaver
) -> None:
    config = CompressionConfig(summary_threshold=1, summary_keep_messages=4)
    summary_model = ScriptedChatModel(script=[AIMessage(content="摘要：用户上传了门票照片并查询景点。")] * 5)
    model = ScriptedChatModel(script=[kb_call("call-0"), AIMessage("第0轮：这是故宫的门票。")])
    middleware = ContextCompressionMiddleware(config, workdir=workdir, summary_model=summary_model)
    agent = build_agent(model, middleware, checkpointer)
    question = "这张门票上的景点在哪里？附近还有哪些景点？"
    upload = HumanMessage(
        content=[
            {"type": "text", "text": question},
            {"type": "image_url", "image_url": {"url": PHOTO_URL}},
            {"type": "image", "base64": PHOTO_BYTES, "mime_type": "image/png"},
        ]
    )
    agent.invoke({"messages": [upload]}, THREAD)
    for turn in range(1, 4):
        model.script.extend(
            [kb_call(f"call-{turn}", offset=turn * 3), AIMessage(f"第{turn}轮：故宫、颐和园都值得去。")]
        )
        agent.invoke({"messages": [HumanMessage(f"第{turn}个问题：还有别的景点吗？")]}, THREAD)

    summary_requests_within_budget(summary_model, config)
    first = summary_model.requests[0][0].text
    assert first.count(PHOTO_URL) == 1 and first.count(question) == 1
    assert f"[1] user: {question}\n[image: {PHOTO_URL}]\n[image: image/png, inline data not shown]" in first
    assert PHOTO_BYTES[:40] not in first
    # The checkpoint still holds the upload itself (S1, S16): only the summary input names it.
    stored = agent.get_state(THREAD).values["messages"][0]
    assert stored.content[1]["image_url"]["url"] == PHOTO_URL


def test_s14_every_summary_request_of_a_long_chat_fits_its_budget(
    workdir: LocalWorkdir, checkpointer: BaseCheckpointSaver
) -> None:
    # The defect: the `[n] role:` prefixes, a per-message floor and the markers were outside the
    # budget, so short messages piled up past it (100 of them: 2,929 tokens for a 1,577 budget).
    config = CompressionConfig(summary_threshold=2103 / 1024, summary_keep_messages=10)
    summary_model = ScriptedChatModel(script=[AIMessage(content=f"Summary {i}.") for i in range(40)])
    model = ScriptedChatModel()
    middleware = ContextCompressionMiddleware(config, workdir=workdir, summary_model=summary_model)
    agent = create_agent(
        model, [], system_prompt=SYSTEM_PROMPT, middleware=[middleware], checkpointer=checkpointer
    )
    sentences = short_sentences(240)
    for turn in range(120):
        model.script.append(AIMessage(sentences[2 * turn + 1]))
        agent.invoke({"messages": [HumanMessage(sentences[2 * turn])]}, THREAD)

    summary_requests_within_budget(summary_model, config)
    largest = max(count_request_tokens(request) for request in summary_model.requests)
    assert largest > summary_request_budget(config) // 2, "the requests were squeezed, not emptied"
    for request in model.requests:
        assert count_request_tokens(request) < config.threshold_tokens + 200


# --- S8–S10 in the main model's view at small and default limits ------------------------------


def chunk_results() -> str:
    """A RAG result whose records carry a chunk id, a document id and a file id, and a site name."""
    return json.dumps(
        {
            "results": [
                {
                    "chunk_id": f"{doc['id']}#c{rank}",
                    "document_id": doc["id"],
                    "file_id": "file-" + hashlib.sha256(doc["id"].encode()).hexdigest()[:12],
                    "site_name": "Rho-Bank policies",
                    "title": doc["title"],
                    "score": round(0.9 - rank / 100, 3),
                    "content": doc["content"],
                }
                for rank, doc in enumerate(tau2_documents(30))
            ]
        }
    )


@tool
def query_kb(query: str) -> str:
    """Search the bank's policy documents."""
    return chunk_results()


@tool
def read_policy(name: str) -> str:
    """Read a policy document in full."""
    return "\n\n".join(doc["content"] for doc in tau2_documents(40))


@pytest.mark.parametrize("limit", [40, 96, 300])
def test_s8_s9_s10_previews_in_the_view_stay_within_the_limit(
    workdir: LocalWorkdir, checkpointer: BaseCheckpointSaver, limit: int
) -> None:
    config = CompressionConfig(summary_threshold=4, summary_tool_result_token_limit=limit)
    model = ScriptedChatModel(
        script=[
            tool_call("query_kb", {"query": "checking account fees"}, "c1"),
            tool_call("read_policy", {"name": "checking"}, "c2"),
            AIMessage("The monthly fee is waived with direct deposit."),
        ]
    )
    middleware = ContextCompressionMiddleware(config, workdir=workdir, summary_model=ScriptedChatModel())
    agent = create_agent(
        model,
        [query_kb, read_policy],
        system_prompt=SYSTEM_PROMPT,
        middleware=[middleware],
        checkpointer=checkpointer,
    )
    agent.invoke({"messages": [HumanMessage("What does a checking account cost?")]}, THREAD)

    view: list[BaseMessage] = model.requests[-1]
    previews = {}
    for message in view:
        if isinstance(message, ToolMessage):
            assert parse_offload_reference(message.text) is not None, message.name
            previews[message.name] = message.text.partition(PREVIEW_SEPARATOR)[2]
    assert set(previews) == {"query_kb", "read_policy"}
    for name, preview in previews.items():
        assert estimate_tokens(preview) <= limit, (name, estimate_tokens(preview))
    kb_preview = previews["query_kb"]
    assert "30 results" in kb_preview and "left out" in kb_preview
    records = json.loads(chunk_results())["results"]
    shown = [line for line in kb_preview.split("\n") if line.startswith("#")]
    # Every chunk comes from the same site: it is named once, in the first line (when any is shown).
    if shown:
        assert f"site_name={records[0]['site_name']}" in kb_preview.split("\n")[0]
    for line, record in zip(shown, records, strict=False):
        for key in ("chunk_id", "document_id", "file_id"):
            assert f"{key}={record[key]}" in line
    if limit == 300:
        assert shown, "the default limit shows results"
    # A small limit's preview gets half of it: one marker between head and tail; the default limit
    # has room for two markers, around the middle.
    assert previews["read_policy"].count("characters (~") == (2 if limit == 300 else 1)
