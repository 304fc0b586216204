"""S8–S10 at small limits, and S9's identifiers and sources.

A preview, markers included, stays within its budget at every limit; below the least a preview
needs there is none (the offload header names the file and the size), never pieces without a
marker. S9 keeps every identifier of a record and says how many results it left out, even when
no result fits.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from langchain_core.messages import ToolMessage

from ctxpress.compaction import CompactionCache, compact_view, offload_path
from ctxpress.compaction.markers import offload_header, parse_offload_reference
from ctxpress.compaction.retrieval_preview import PreviewHeader, parse_preview_header, retrieval_preview
from ctxpress.compaction.text_preview import (
    MIN_PIECE_TOKENS,
    head_middle_tail_preview,
    smallest_preview_budget,
)
from ctxpress.config import CompressionConfig
from ctxpress.tokens import estimate_tokens
from ctxpress.workdir import LocalWorkdir
from tests.engine.compaction_support import (
    PREVIEW_SEPARATOR,
    chinese_text,
    crosswoz_records,
    english_text,
    exchange,
    gap_pieces,
    kb_results_json,
    numbers_in,
    tau2_documents,
    text_of,
    trace_conversations,
)

pytestmark = pytest.mark.shared_data


def assert_accounts_for_every_character(preview: str, original: str) -> list[str]:
    """The kept pieces are the text's own, in order, and the markers count exactly what is between."""
    kept, gaps = gap_pieces(preview)
    assert 1 <= len(gaps) <= 2, "a cut preview always has a marker"
    assert all(gap > 0 for gap in gaps)
    assert original.startswith(kept[0]) and original.endswith(kept[-1])
    assert sum(map(len, kept)) + sum(gaps) == len(original)
    if len(kept) == 3:
        start = len(kept[0]) + gaps[0]
        assert kept[1] and original[start : start + len(kept[1])] == kept[1]
    return kept


def widest_marker_tokens(text: str, tokens: int) -> int:
    return smallest_preview_budget(len(text), tokens) - 2 * MIN_PIECE_TOKENS


# ============================================================================================
# S10: the examples
# ============================================================================================


@pytest.mark.parametrize("source", ["english", "chinese"])
def test_s10_a_96_token_budget_keeps_head_middle_and_tail_within_it(source: str) -> None:
    # Before: 109 tokens for a budget of 96 (the markers were outside the budget).
    text = (english_text() if source == "english" else chinese_text())[:80_000]
    preview = head_middle_tail_preview(text, 96)
    assert estimate_tokens(preview) <= 96
    assert len(assert_accounts_for_every_character(preview, text)) == 3


@pytest.mark.parametrize("budget", [1, 5, 10, 20])
def test_s10_a_budget_below_the_smallest_preview_gives_none(budget: int) -> None:
    # Before: 53 tokens for a budget of 10 -- a head and a tail around a marker bigger than the budget.
    text = english_text()[:80_000]
    assert budget < smallest_preview_budget(len(text), estimate_tokens(text))
    assert head_middle_tail_preview(text, budget) == ""


def test_s10_the_smallest_preview_budget_holds_a_head_a_marker_and_a_tail() -> None:
    text = chinese_text()[:80_000]
    least = smallest_preview_budget(len(text), estimate_tokens(text))
    preview = head_middle_tail_preview(text, least)
    assert estimate_tokens(preview) <= least
    assert len(assert_accounts_for_every_character(preview, text)) == 2


def test_s10_a_size_overstated_by_the_caller_never_gives_a_negative_marker() -> None:
    # A caller sizing a message with its image counted ~1,000 tokens for a short text.
    text = "What does this receipt say about the monthly maintenance fee?"
    preview = head_middle_tail_preview(text, 40, total_tokens=1_011)
    assert preview == text


# ============================================================================================
# The property: within the limit at every limit, markers kept
# ============================================================================================


@pytest.fixture(scope="module")
def contents() -> dict[str, str]:
    """Real texts of every kind: English, Chinese, a retrieval result, the longest trace outputs."""
    outputs = [
        text_of(message)
        for conversation in trace_conversations()
        for message in conversation.messages
        if isinstance(message, ToolMessage)
    ]
    longest = sorted(outputs, key=len)[-40:]
    return {
        "english": english_text()[:200_000],
        "chinese": chinese_text()[:200_000],
        "kb-json": kb_results_json(50)[0],
        **{f"trace-{index}": text for index, text in enumerate(longest)},
    }


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_s10_preview_within_its_budget_at_every_budget(contents: dict[str, str], data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(contents)), label="content")
    source = contents[name]
    size = data.draw(st.integers(min_value=1, max_value=len(source)), label="chars")
    start = data.draw(st.integers(min_value=0, max_value=len(source) - size), label="start")
    text = source[start : start + size]
    budget = data.draw(st.one_of(st.integers(0, 80), st.integers(80, 2_000)), label="budget")
    profile = data.draw(st.sampled_from(["default", "cl100k", "qwen"]), label="profile")
    tokens = estimate_tokens(text, profile)

    preview = head_middle_tail_preview(text, budget, profile, tokens)
    if tokens <= budget:
        assert preview == text
        event("whole")
        return
    assert estimate_tokens(preview, profile) <= budget
    if preview == "":
        event("none")
        assert budget < smallest_preview_budget(len(text), tokens, profile)
        return
    kept = assert_accounts_for_every_character(preview, text)
    event(f"{len(kept)} pieces")
    marker = widest_marker_tokens(text, tokens)
    if tokens >= 3 * budget and budget >= 2 * marker + 12 and profile == "default":
        assert len(kept) == 3, "room for two markers keeps the middle"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_s8_offloaded_preview_within_the_limit_or_the_result_kept_when_smaller(
    contents: dict[str, str], tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    name = data.draw(st.sampled_from(sorted(contents)), label="content")
    source = contents[name]
    size = data.draw(st.integers(min_value=1, max_value=min(len(source), 60_000)), label="chars")
    text = source[:size]
    limit = data.draw(st.one_of(st.integers(0, 130), st.integers(130, 1_500)), label="limit")
    tool = data.draw(st.sampled_from(["execute_bash", "query_kb", "web_search"]), label="tool")
    workdir = LocalWorkdir(tmp_path_factory.mktemp("wd"))
    config = CompressionConfig(summary_tool_result_token_limit=limit)
    result = compact_view(exchange("c1", tool, text), config, workdir, cache=CompactionCache())
    view = text_of(result.messages[1])
    tokens = estimate_tokens(text)
    if not result.offloaded:
        # Kept inline: within the limit, or the offload view (its header, the "Preview:" line and a
        # preview of at most the limit) could be as large as the text itself.
        digest = hashlib.sha256(text.encode()).hexdigest()
        header = offload_header(tool, offload_path(tool, digest), digest, len(text), tokens)
        assert view == text
        assert tokens <= limit or estimate_tokens(header + PREVIEW_SEPARATOR) + limit >= tokens
        event("inline")
        return
    assert parse_offload_reference(view) is not None
    _, separator, preview = view.partition(PREVIEW_SEPARATOR)
    event("preview" if separator else "reference only")
    assert estimate_tokens(preview) <= limit
    assert estimate_tokens(view) < tokens


# ============================================================================================
# S9: identifiers, sources, and the count when nothing fits
# ============================================================================================


def chunk_records(count: int = 20) -> list[dict[str, Any]]:
    """RAG chunks over real tau2 documents with a chunk id, a document id and a file id each."""
    records = []
    for rank, doc in enumerate(tau2_documents()[:count]):
        records.append(
            {
                "chunk_id": f"{doc['id']}#c{rank % 3}",
                "document_id": doc["id"],
                "file_id": f"file-{hashlib.sha256(doc['id'].encode()).hexdigest()[:12]}",
                "title": doc["title"],
                "score": round(0.9 - rank / 100, 3),
                "content": doc["content"],
            }
        )
    return records


def record_lines(preview: str) -> list[str]:
    return [line for line in preview.split("\n") if line.startswith("#")]


def test_s9_a_record_keeps_its_chunk_document_and_file_ids() -> None:
    # Before: only the first id key of a record survived (`chunk_id` here, never the document's).
    records = chunk_records()
    preview = retrieval_preview(json.dumps({"results": records}), 1_500)
    assert preview is not None
    lines = record_lines(preview)
    assert len(lines) >= 3
    for line, record in zip(lines, records, strict=False):
        for key in ("chunk_id", "document_id", "file_id", "title", "score"):
            assert f"{key}={record[key]}" in line, (key, line)
    assert estimate_tokens(preview) <= 1_500


def test_s9_ids_in_langchain_metadata_are_kept_beside_the_top_level_id() -> None:
    documents = [
        {
            "id": f"{doc['id']}#0",
            "page_content": doc["content"],
            "metadata": {"doc_id": doc["id"], "file_id": f"f{rank}", "source": f"kb/{doc['id']}.json"},
        }
        for rank, doc in enumerate(tau2_documents()[:10])
    ]
    preview = retrieval_preview(json.dumps(documents), 800)
    assert preview is not None
    for line, document in zip(record_lines(preview), documents, strict=False):
        metadata = document["metadata"]
        assert f"id={document['id']}" in line and f"doc_id={metadata['doc_id']}" in line
        assert f"file_id={metadata['file_id']}" in line and f"source={metadata['source']}" in line


def test_s9_the_same_identifier_under_two_keys_is_shown_once() -> None:
    records = [
        {"id": doc["id"], "doc_id": doc["id"], "content": doc["content"]} for doc in tau2_documents()[:5]
    ]
    preview = retrieval_preview(json.dumps(records), 600)
    assert preview is not None
    for line, record in zip(record_lines(preview), records, strict=False):
        assert line.count(record["id"]) == 1


@pytest.mark.parametrize("key", ["site_name", "source", "domain", "publisher"])
def test_s9_common_source_fields_are_kept(key: str) -> None:
    results = [
        {
            "title": doc["title"],
            "url": f"https://bank.example/help/{doc['id']}",
            key: "Evergreen Bank Help Centre",
            "snippet": doc["content"],
        }
        for doc in tau2_documents()[:10]
    ]
    preview = retrieval_preview(json.dumps({"results": results}), 500)
    assert preview is not None
    lines = record_lines(preview)
    # Shared by every result: named once, in the first line, not on every result's line.
    assert f"{key}=Evergreen Bank Help Centre" in preview.split("\n")[0]
    assert lines and not any(f"{key}=" in line for line in lines)

    # Sources that differ stay on each result's line.
    for rank, result in enumerate(results):
        result[key] = f"Evergreen Bank Help Centre {rank}"
    preview = retrieval_preview(json.dumps({"results": results}), 500)
    assert preview is not None
    lines = record_lines(preview)
    assert key not in preview.split("\n")[0]
    assert lines and all(
        f"{key}=Evergreen Bank Help Centre {rank} " in line for rank, line in enumerate(lines)
    )


def test_s9_a_source_every_result_shares_is_said_once_so_more_results_fit() -> None:
    """Real tau2 knowledge-base results all carry the same `source`: naming it once for all of them
    (not on each line) leaves the metadata share of the budget room for more results."""
    text, results = kb_results_json(50)
    assert len({result["source"] for result in results}) == 1
    preview = retrieval_preview(text, 200)
    assert preview is not None
    first = preview.split("\n")[0]
    assert f"source={results[0]['source']}" in first and "50 results" in first
    assert parse_preview_header(first) == PreviewHeader(50, ("source", results[0]["source"]))
    lines = record_lines(preview)
    assert len(lines) >= 2
    for line, result in zip(lines, results, strict=False):
        assert f"id={result['id']}" in line and "source=" not in line
    # Against the same list with one differing source (the source then stays on every line), as
    # many results fit in every budget, and more in some.
    differing = [dict(result) for result in results]
    differing[-1]["source"] = "elsewhere"
    shown_counts = []
    for budget in range(120, 420, 20):
        once, repeated = retrieval_preview(text, budget), retrieval_preview(json.dumps(differing), budget)
        assert once is not None and repeated is not None
        assert all("source=" in line for line in record_lines(repeated))
        assert parse_preview_header(repeated.split("\n")[0]) == PreviewHeader(50, None)
        shown_counts.append((len(record_lines(once)), len(record_lines(repeated))))
    assert all(once >= repeated for once, repeated in shown_counts), shown_counts
    assert any(once > repeated for once, repeated in shown_counts), shown_counts


@pytest.mark.parametrize("budget", [7, 10, 20])
def test_s9_when_no_result_fits_the_count_left_out_is_still_said_within_the_budget(budget: int) -> None:
    # Before: the header and the footer alone (about 30 tokens) were sent whatever the budget.
    text = json.dumps([list(item) for item in crosswoz_records("hotel_db.json")[:60]], ensure_ascii=False)
    preview = retrieval_preview(text, budget)
    assert preview is not None and record_lines(preview) == []
    assert estimate_tokens(preview) <= budget
    assert 60 in numbers_in(preview) and "left out" in preview


def test_s9_a_budget_too_small_for_the_count_gives_no_preview() -> None:
    text, _ = kb_results_json(50)
    assert retrieval_preview(text, 3) == ""


@settings(max_examples=200, deadline=None)
@given(
    budget=st.integers(0, 3_000),
    count=st.integers(1, 60),
    shape=st.sampled_from(["chunks", "kb", "crosswoz"]),
)
def test_s9_retrieval_preview_within_its_budget_and_counting_what_it_left_out(
    budget: int, count: int, shape: str
) -> None:
    if shape == "chunks":
        records: list[Any] = chunk_records(min(count, 20))
        text = json.dumps({"results": records})
    elif shape == "kb":
        text, records = kb_results_json(count)
    else:
        records = [list(item) for item in crosswoz_records("attraction_db.json")[:count]]
        text = json.dumps(records, ensure_ascii=False)
    preview = retrieval_preview(text, budget)
    assert preview is not None and estimate_tokens(preview) <= budget
    if not preview:
        event("none")
        assert budget < estimate_tokens(f"{len(records)} results left out.")
        return
    shown = len(record_lines(preview))
    event("all" if shown == len(records) else "some" if shown else "count only")
    assert len(records) in numbers_in(preview.split("\n")[0])
    if shown < len(records):
        assert len(records) - shown in numbers_in(preview.split("\n")[-1]) and "left out" in preview


def test_s9_tau2_kb_at_the_default_limit_still_shows_results(tmp_path: Path) -> None:
    text, results = kb_results_json(50)
    result = compact_view(exchange("c1", "query_kb", text), CompressionConfig(), LocalWorkdir(tmp_path))
    preview = text_of(result.messages[1]).partition(PREVIEW_SEPARATOR)[2]
    lines = record_lines(preview)
    assert len(lines) >= 2 and f"id={results[0]['id']}" in lines[0]
    assert estimate_tokens(preview) <= 300
