"""Workdir quotas (issue 19, item 4): the agent's file tools cannot fill the disk or the memory.

`edit_file` with `replace_all` turned a ~60 KB request into a 60 MB file, and a second round would
have built terabytes in memory. Now:
- per-file and per-workdir quotas (settings `workdir_max_file_bytes`, `workdir_max_bytes`) are
  checked before the write — for an edit, before the new text is built — and the model gets a
  clear tool error naming the sizes; the file stays as it was;
- compression's own files count toward the total but are never refused (they are how a large
  result leaves the context);
- the file API looks at a file's size before reading it: a 1 TiB sparse file answers 413 at once.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from ctxpress.app.server.usecases.files import MAX_FILE_BYTES
from ctxpress.config import CompressionConfig
from tests.server.fakes import new_call_id, report_tool_script

from .support import kb_agent, turn, workdir_root

MIB = 1024 * 1024


def file_script(messages: Sequence[BaseMessage]) -> AIMessage:
    """`write NAME SIZE` / `edit NAME OLD NEW_CHAR REPEAT` -> that file tool call; topics -> reports."""
    last = messages[-1]
    if isinstance(last, ToolMessage) and last.name in ("write_file", "edit_file"):
        return AIMessage(f"结果：{last.text[:300]}")
    human = next(m for m in reversed(messages) if isinstance(m, HumanMessage))
    words = human.text.split()
    if isinstance(last, HumanMessage) and words[0] == "write":
        args: dict[str, Any] = {"path": words[1], "content": "a" * int(words[2])}
        return AIMessage("", tool_calls=[{"name": "write_file", "args": args, "id": new_call_id("w")}])
    if isinstance(last, HumanMessage) and words[0] == "edit":
        args = {"path": words[1], "old_string": words[2], "new_string": words[3] * int(words[4])}
        args["replace_all"] = True
        return AIMessage("", tool_calls=[{"name": "edit_file", "args": args, "id": new_call_id("e")}])
    return report_tool_script(messages)


def file_agent(**options: Any) -> Any:
    """The suite's knowledge-base agent (compressing), with `edit_file` as well."""
    agent, _ = kb_agent(main=file_script, **options)
    return agent.model_copy(update={"tools": (*agent.tools, "edit_file")})


def _tool_answer(client: Any, conversation_id: str, text: str) -> str:
    result = turn(client, conversation_id, text)
    assert result.status == "succeeded", result.events[-3:]
    tool_results = [e.data for e in result.events if e.type == "tool_result"]
    assert len(tool_results) == 1
    return str(tool_results[0]["content"])


def test_replace_all_cannot_multiply_a_file_past_its_quota(start_server: Any) -> None:
    server = start_server(agents=[file_agent()])
    client = server.client(server.create_user("alice"))
    conversation_id = client.post("/api/conversations", json={}).json()["id"]
    root = workdir_root(server.services.settings, conversation_id)

    assert _tool_answer(client, conversation_id, "write notes.txt 60000").startswith("wrote notes.txt")
    # 60,000 × 1,000 bytes = 60 MB, over the default 16 MiB per file.
    answer = _tool_answer(client, conversation_id, "edit notes.txt a b 1000")
    assert answer.startswith("error: notes.txt would be 60,000,000 bytes, over the limit of 16,777,216"), (
        answer
    )
    assert (root / "notes.txt").read_bytes() == b"a" * 60_000, "the file is as it was"

    # The next round of the attack: 1 MB × 1 MB replacements = 1 TB, refused before it is built.
    assert _tool_answer(client, conversation_id, "write big.txt 1000000").startswith("wrote big.txt")
    started = time.monotonic()
    answer = _tool_answer(client, conversation_id, "edit big.txt a b 1000000")
    assert answer.startswith("error: big.txt would be 1,000,000,000,000 bytes"), answer
    assert time.monotonic() - started < 20
    assert (root / "big.txt").stat().st_size == 1_000_000


def test_the_workdir_total_is_limited_but_compression_is_never_refused(start_server: Any) -> None:
    quiet = file_agent(name="quiet", compression=CompressionConfig(summary_threshold=64)).model_copy(
        update={"default": False}
    )
    compressing = file_agent(name="kb")
    server = start_server(
        agents=[compressing, quiet], workdir_max_file_bytes=60_000, workdir_max_bytes=100_000
    )
    client = server.client(server.create_user("alice"))

    # Without compression, the workdir holds exactly what the tools wrote.
    conversation_id = client.post("/api/conversations", json={"agent": "quiet"}).json()["id"]
    root = workdir_root(server.services.settings, conversation_id)
    assert _tool_answer(client, conversation_id, "write a.txt 50000").startswith("wrote a.txt")
    answer = _tool_answer(client, conversation_id, "write b.txt 70000")
    assert "b.txt would be 70,000 bytes, over the limit of 60,000 bytes per file" in answer, answer
    answer = _tool_answer(client, conversation_id, "write b.txt 55000")
    assert "would bring the workdir to 105,000 bytes, over its limit of 100,000 bytes" in answer, answer
    assert not (root / "b.txt").exists()
    # Replacing a file counts its new size only.
    assert _tool_answer(client, conversation_id, "write a.txt 40000").startswith("wrote a.txt")
    assert _tool_answer(client, conversation_id, "write b.txt 55000").startswith("wrote b.txt")
    assert sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) == 95_000

    # With compression, over a tiny quota: large results are still offloaded and summaries saved.
    conversation_id = client.post("/api/conversations", json={"agent": "kb"}).json()["id"]
    root = workdir_root(server.services.settings, conversation_id)
    assert _tool_answer(client, conversation_id, "write notes.txt 60000").startswith("wrote notes.txt")
    for topic in ("季度营收", "客户名单", "合同条款"):
        assert turn(client, conversation_id, topic).status == "succeeded"
    assert list((root / "outputs" / "large_tool_results").iterdir())
    assert list((root / "outputs" / "conversation_history").iterdir())
    assert sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) > 100_000
    answer = _tool_answer(client, conversation_id, "write c.txt 10")
    assert "over its limit of 100,000 bytes" in answer, answer


def test_the_file_api_checks_the_size_before_reading(start_server: Any) -> None:
    server = start_server(agents=[file_agent()])
    client = server.client(server.create_user("alice"))
    conversation_id = client.post("/api/conversations", json={}).json()["id"]
    root = workdir_root(server.services.settings, conversation_id)
    with (root / "huge.bin").open("wb") as handle:
        handle.truncate(1024**4)  # 1 TiB, sparse: reading it would never end
    (root / "small.txt").write_text("你好")
    with (root / "limit.bin").open("wb") as handle:
        handle.truncate(MAX_FILE_BYTES + 1)

    started = time.monotonic()
    for name in ("huge.bin", "limit.bin"):
        response = client.get(f"/api/conversations/{conversation_id}/files/{name}")
        assert response.status_code == 413, response.text
        assert response.json()["error"]["code"] == "payload_too_large"
    assert time.monotonic() - started < 5
    small = client.get(f"/api/conversations/{conversation_id}/files/small.txt")
    assert small.status_code == 200 and small.text == "你好"
    assert client.get(f"/api/conversations/{conversation_id}/files/absent.txt").status_code == 404
