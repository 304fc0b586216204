"""Helpers shared by the L1 compaction tests: real data, message builders, instrumented workdirs."""

from __future__ import annotations

import copy
import errno
import json
import re
from functools import cache
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from ctxpress.workdir import LocalWorkdir, WorkdirFile
from tests.conftest import require_shared_data

PREVIEW_SEPARATOR = "\nPreview:\n"
#: The S10 gap marker, derived from `text_preview._gap_marker`.
GAP_MARKER = re.compile(r"\n\[… ([\d,]+) characters \(~([\d,]+) tokens\) left out …\]\n")
#: Offload paths: `outputs/large_tool_results/<safe tool name>-<16 hex>.txt` (S8, S11).
OFFLOAD_PATH = re.compile(r"^outputs/large_tool_results/([A-Za-z0-9_.-]{1,64})-([0-9a-f]{16})\.txt$")
#: Fixed text of the offload header (`offload.offloaded_view_text`) without the tool name: about
#: 200 characters of prose, a 16-hex path, a 64-hex hash and two numbers. 400 leaves room for
#: numbers up to billions; the tool name is added on top.
HEADER_FIXED_CHARS = 400


# --- real data ---------------------------------------------------------------------------------


@cache
def tau2_documents() -> tuple[dict[str, str], ...]:
    """The tau2 banking knowledge base: English `{id, title, content}` documents, sorted by file."""
    folder = require_shared_data("kb", "tau2-banking", "documents")
    docs = []
    for path in sorted(folder.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        docs.append({"id": doc["id"], "title": doc["title"], "content": doc["content"]})
    assert len(docs) >= 50
    return tuple(docs)


@cache
def crosswoz_records(table: str = "hotel_db.json") -> tuple[tuple[str, dict[str, Any]], ...]:
    """CrossWOZ (Chinese) records `[name, {fields}]`."""
    records = json.loads(require_shared_data("kb", "crosswoz", table).read_text(encoding="utf-8"))
    return tuple((name, fields) for name, fields in records)


@cache
def english_text() -> str:
    """About 1.5 MB of real English prose and markdown (all tau2 documents)."""
    return "\n\n".join(f"# {doc['title']}\n\n{doc['content']}" for doc in tau2_documents())


@cache
def chinese_text() -> str:
    """Real Chinese text: CrossWOZ hotel and attraction records as readable lines."""
    lines = []
    for table in ("hotel_db.json", "attraction_db.json"):
        for name, fields in crosswoz_records(table):
            lines.append(name + "：" + "；".join(f"{k}={v}" for k, v in fields.items()))
    return "\n".join(lines)


def english_docs_text(chars: int) -> str:
    text = english_text()
    while len(text) < chars:
        text += "\n\n" + english_text()
    return text[:chars]


def kb_results_json(
    count: int = 50, *, key: str = "results", shuffle_scores: bool = True
) -> tuple[str, list]:
    """A `query_kb` result over real tau2 documents; returns the JSON text and the result records."""
    docs = tau2_documents()[:count]
    results = []
    for rank, doc in enumerate(docs):
        # Scores not sorted on purpose: the preview must keep the original order, not re-rank.
        score = round(0.95 - rank * 0.01 + (0.05 if shuffle_scores and rank % 7 == 3 else 0), 4)
        results.append(
            {
                "id": doc["id"],
                "title": doc["title"],
                "source": "tau2-banking/documents",
                "score": score,
                "content": doc["content"],
            }
        )
    return json.dumps({key: results, "query": "open a checking account", "took_ms": 12}), results


@cache
def trace_conversations() -> tuple[Any, ...]:
    """Every conversation of the shared traces (`ctxpress.tools.traces`), loaded once."""
    from ctxpress.tools.traces import iter_conversations

    loaded = tuple(iter_conversations(require_shared_data("traces")))
    assert len(loaded) > 100
    return loaded


# --- messages ------------------------------------------------------------------------------------


def provider_call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
    }


def ai_call(call_id: str, name: str, args: dict[str, Any], *, message_id: str | None = None) -> AIMessage:
    """An AI message with one tool call, in both the LangChain and the provider format."""
    return AIMessage(
        content="",
        id=message_id or f"ai-{call_id}",
        tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}],
        additional_kwargs={"tool_calls": [provider_call(call_id, name, args)]},
    )


def exchange(call_id: str, name: str, result: Any, args: dict[str, Any] | None = None) -> list[BaseMessage]:
    """A tool call and its result."""
    return [
        ai_call(call_id, name, args or {"query": "test"}),
        ToolMessage(content=result, tool_call_id=call_id, name=name, id=f"tool-{call_id}"),
    ]


def snapshot(messages: list[BaseMessage]) -> list[dict[str, Any]]:
    return copy.deepcopy([message.model_dump() for message in messages])


def text_of(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "\n".join(block if isinstance(block, str) else str(block.get("text", "")) for block in content)


def split_view(view_text: str) -> tuple[str, str]:
    """The offload header and the preview of an offloaded tool message."""
    header, separator, preview = view_text.partition(PREVIEW_SEPARATOR)
    assert separator, f"no preview in {view_text[:200]!r}"
    return header, preview


def numbers_in(text: str) -> set[int]:
    return {int(match.replace(",", "")) for match in re.findall(r"\d[\d,]*", text)}


def gap_pieces(preview: str) -> tuple[list[str], list[int]]:
    """The kept pieces of an S10 preview and the left-out character counts between them."""
    pieces = GAP_MARKER.split(preview)
    kept = pieces[0::3]
    gaps = [int(count.replace(",", "")) for count in pieces[1::3]]
    return kept, gaps


# --- instrumented workdirs -----------------------------------------------------------------------


class CountingWorkdir:
    """Wraps a real workdir and records every call."""

    def __init__(self, inner: LocalWorkdir) -> None:
        self.inner = inner
        self.writes: list[str] = []
        self.exists_calls: list[str] = []
        self.reads: list[str] = []

    @property
    def cache_key(self) -> str:
        return self.inner.cache_key

    def write_bytes(self, path: str, data: bytes) -> str:
        self.writes.append(path)
        return self.inner.write_bytes(path, data)

    def read_bytes(self, path: str) -> bytes:
        self.reads.append(path)
        return self.inner.read_bytes(path)

    def exists(self, path: str) -> bool:
        self.exists_calls.append(path)
        return self.inner.exists(path)

    def list_files(self, prefix: str = "") -> list[WorkdirFile]:
        return self.inner.list_files(prefix)

    def reset(self) -> None:
        self.writes.clear()
        self.exists_calls.clear()
        self.reads.clear()


class FailingWorkdir:
    """A workdir whose writes (and optionally `exists`) fail like a full disk."""

    def __init__(self, error: BaseException | None = None, *, fail_exists: bool = False) -> None:
        self.error = error or OSError(errno.ENOSPC, "No space left on device")
        self.fail_exists = fail_exists
        self.write_attempts: list[str] = []

    def write_bytes(self, path: str, data: bytes) -> str:
        self.write_attempts.append(path)
        raise self.error

    def read_bytes(self, path: str) -> bytes:
        raise FileNotFoundError(path)

    def exists(self, path: str) -> bool:
        if self.fail_exists:
            raise self.error
        return False

    def list_files(self, prefix: str = "") -> list[WorkdirFile]:
        return []
