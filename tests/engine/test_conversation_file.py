"""The thread's conversation file (S14; issue 21): every message before the latest cutoff, whole,
one path for all of them.

Oracle: the file always reads back as exactly the state's messages before the cutoff, whether a
summary extends the previous version or the previous version cannot be extended (missing, cut
short, or holding another version of a message) and is written again.
"""

from __future__ import annotations

from pathlib import Path

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from ctxpress.summary.history import conversation_path, read_history, write_conversation
from ctxpress.workdir import LocalWorkdir


def thread(turns: int) -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    for n in range(turns):
        messages += [
            HumanMessage(f"第{n}个问题：订单 A{n:05d} 在哪里？", id=f"h{n}"),
            AIMessage(
                "", tool_calls=[{"name": "lookup", "args": {"order": f"A{n:05d}"}, "id": f"c{n}"}], id=f"a{n}"
            ),
            ToolMessage(f"order A{n:05d}: shipped\n" + "line\n" * 50, tool_call_id=f"c{n}", id=f"t{n}"),
        ]
    return messages


def as_written(workdir: LocalWorkdir, path: str) -> list[tuple[str | None, object]]:
    header, messages = read_history(workdir, path)
    assert header["message_count"] == len(messages) and header["range"] == [0, len(messages)]
    return [(message.id, message.content) for message in messages]


def test_each_summary_extends_the_conversation_file_to_its_cutoff(tmp_path: Path) -> None:
    workdir = LocalWorkdir(tmp_path)
    state = thread(10)
    path = ""
    for cutoff in (6, 15, 27):
        path = write_conversation(workdir, "t-1", state[:cutoff], ["outputs/conversation_history/h.jsonl"])
        assert as_written(workdir, path) == [(m.id, m.content) for m in state[:cutoff]]
    assert path == conversation_path("t-1", state)


def test_a_summary_serialises_only_its_new_span(tmp_path: Path) -> None:
    """The earlier lines are taken as written: a message replaced in the state before the old
    cutoff's last message (as an overflow trim replaces a result) keeps its whole text there."""
    workdir = LocalWorkdir(tmp_path)
    state = thread(6)
    path = write_conversation(workdir, "t-1", state[:9], [])
    trimmed = [*state[:2], ToolMessage("order A00000: [trimmed]", tool_call_id="c0", id="t0"), *state[3:]]
    write_conversation(workdir, "t-1", trimmed[:15], [])
    written = as_written(workdir, path)
    assert written[2] == ("t0", state[2].content) and written[9:] == [(m.id, m.content) for m in state[9:15]]


def test_a_conversation_file_that_cannot_be_extended_is_written_again(tmp_path: Path) -> None:
    workdir = LocalWorkdir(tmp_path)
    state = thread(8)
    path = write_conversation(workdir, "t-1", state[:9], [])
    # Another version of a message before the old cutoff (a replaced message): not extended.
    edited = [*state[:8], ToolMessage("order A00002: returned", tool_call_id="c2", id="t2"), *state[9:]]
    write_conversation(workdir, "t-1", edited[:15], [])
    assert as_written(workdir, path) == [(m.id, m.content) for m in edited[:15]]
    # Cut short (a file truncated by hand): written again from the state.
    data = workdir.read_bytes(path)
    workdir.write_bytes(path, data[: len(data) // 2])
    write_conversation(workdir, "t-1", state[:18], [])
    assert as_written(workdir, path) == [(m.id, m.content) for m in state[:18]]
    # Longer than the new cutoff (another thread's history under the same name): written again.
    write_conversation(workdir, "t-1", state[:12], [])
    assert as_written(workdir, path) == [(m.id, m.content) for m in state[:12]]
