"""The knowledge base on SQLite (FTS5, trigram) and PostgreSQL, with the real documents of
../shared/data/kb: Chinese CrossWOZ records (Beijing restaurants, hotels, attractions, metro) and
the English tau2-bench banking policies."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from ctxpress.app.kb import KnowledgeBase, KnowledgeBaseError, builtin_documents
from ctxpress.app.kb import postgres_store as postgres_module
from ctxpress.app.kb.chunking import chunk_document
from ctxpress.app.kb.documents import DocumentFormatError, read_documents
from ctxpress.app.kb.postgres_store import PostgresKnowledgeStore
from ctxpress.app.kb.sqlite_store import SqliteKnowledgeStore, check_sqlite_support
from ctxpress.app.kb.store import KnowledgeStore
from ctxpress.app.kb.terms import query_terms
from ctxpress.app.kb.tools import query_kb_tool
from ctxpress.app.server.knowledge import sqlite_knowledge_base_path, store_for
from ctxpress.app.server.settings import Settings
from ctxpress.compaction.retrieval_preview import retrieval_preview
from tests.conftest import require_shared_data
from tests.server.conftest import postgres_database

#: The service tests' fixtures (both databases), used here by name.
SERVICE_FIXTURES = (postgres_database,)


BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


def new_store(backend: str, folder: Path, request: pytest.FixtureRequest) -> KnowledgeStore:
    if backend == "sqlite":
        return SqliteKnowledgeStore(folder / "kb.sqlite3")
    base: str = request.getfixturevalue("postgres_database")
    schema = f"kb_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base, autocommit=True) as connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')
    return PostgresKnowledgeStore(f"{base}?options=-csearch_path%3D{schema}")


def crosswoz_record_count() -> int:
    folder = require_shared_data("kb", "crosswoz")
    return sum(len(json.loads(path.read_text("utf-8"))) for path in folder.glob("*.json"))


@pytest.fixture(scope="module", params=BACKENDS)
def shared_kb(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> KnowledgeBase:
    """Every document of ../shared/data/kb, ingested once per backend."""
    store = new_store(request.param, tmp_path_factory.mktemp("kb"), request)
    knowledge_base = KnowledgeBase(store)
    knowledge_base.add_paths(
        [require_shared_data("kb", "crosswoz"), require_shared_data("kb", "tau2-banking")]
    )
    return knowledge_base


def test_every_real_document_is_ingested_with_relative_sources(shared_kb: KnowledgeBase) -> None:
    documents = shared_kb.documents()
    tau2 = len(list(require_shared_data("kb", "tau2-banking", "documents").glob("*.json")))
    # Every CrossWOZ record, database.md, every tau2 policy, and the shipped ctxpress docs.
    assert len(documents) == crosswoz_record_count() + 1 + tau2 + len(builtin_documents())
    assert len({document.id for document in documents}) == len(documents)
    assert all(not document.source.startswith("/") and ":" not in document.source for document in documents)
    sources = {document.source for document in documents}
    assert "crosswoz/restaurant_db.json" in sources and "crosswoz/database.md" in sources
    assert "tau2-banking/documents/doc_checking_accounts_evergreen_account_002.json" in sources
    restaurant = next(d for d in documents if d.title == "北京全聚德(王府井店)")
    assert restaurant.origin == "user" and restaurant.chunk_count >= 1


def test_a_two_character_chinese_query_is_found_without_the_trigram_index(shared_kb: KnowledgeBase) -> None:
    terms = query_terms("烤鸭")
    assert terms.terms == ("烤鸭",) and terms.short == ("烤鸭",) and not terms.indexed  # the LIKE path
    result = shared_kb.search("烤鸭", limit=10)
    assert len(result.hits) == 10
    assert all("烤鸭" in hit.title + hit.content for hit in result.hits)
    assert [hit.score for hit in result.hits] == sorted((hit.score for hit in result.hits), reverse=True)


def test_a_chinese_question_ranks_records_about_everything_asked_first(shared_kb: KnowledgeBase) -> None:
    result = shared_kb.search("全聚德的电话是多少？")
    assert result.terms[:3] == ("全聚德", "全聚", "聚德") and "电话" in result.terms
    top = result.hits[0]
    assert "全聚德" in top.title and "电话:" in top.content
    assert top.source == "crosswoz/restaurant_db.json"
    # The Wangfujing branch's real phone number is among the first results.
    assert any("65253310" in hit.content for hit in result.hits[:5])


def test_an_english_question_finds_the_policy_with_the_figure(shared_kb: KnowledgeBase) -> None:
    result = shared_kb.search("What is the monthly fee of the Evergreen Account?")
    top_documents = [hit.document_id for hit in result.hits[:3]]
    assert "doc_checking_accounts_evergreen_account_002" in top_documents
    assert any("$6.00" in hit.content for hit in result.hits[:3])
    assert all("evergreen" in (hit.title + hit.content).lower() for hit in result.hits[:5])


def test_the_project_documentation_is_in_the_knowledge_base(shared_kb: KnowledgeBase) -> None:
    for query in ("thread_busy 是什么意思", "summary_keep_messages"):
        hits = shared_kb.search(query).hits
        assert hits and hits[0].source.startswith("ctxpress-docs/"), query


def test_query_kb_returns_the_json_the_s9_preview_keeps(shared_kb: KnowledgeBase) -> None:
    text = query_kb_tool(shared_kb).invoke({"query": "故宫 门票", "limit": 8})
    data = json.loads(text)
    assert data["query"] == "故宫 门票" and data["total"] == len(data["results"]) == 8
    first = data["results"][0]
    assert set(first) == {"id", "document_id", "title", "source", "score", "content"}
    assert first["id"].startswith(first["document_id"] + "#") and isinstance(first["score"], float)
    preview = retrieval_preview(text, budget=300)
    assert preview is not None and preview.startswith("8 results")
    first_line = preview.split("\n")[0]
    # A source shared by every result is named once, in the first line (S9).
    if len({result["source"] for result in data["results"]}) == 1:
        assert f"source={first['source']}" in first_line
    assert first_line.endswith("preview in original order:")
    assert (
        f"id={first['id']}" in preview and first["title"] in preview and f"score={first['score']}" in preview
    )


def test_adding_a_file_again_replaces_it(
    tmp_path: Path, request: pytest.FixtureRequest, backend_name: str
) -> None:
    knowledge_base = KnowledgeBase(new_store(backend_name, tmp_path, request), builtin_docs=False)
    policy = require_shared_data(
        "kb", "tau2-banking", "documents", "doc_checking_accounts_evergreen_account_002.json"
    )
    first = knowledge_base.add_paths([policy])
    again = knowledge_base.add_paths([policy])
    assert first.documents == again.documents == 1 and first.chunks == again.chunks > 1
    assert [d.id for d in knowledge_base.documents()] == ["doc_checking_accounts_evergreen_account_002"]
    assert (
        knowledge_base.search("paper statements fee").hits[0].id.startswith("doc_checking_accounts_evergreen")
    )


@pytest.fixture(params=BACKENDS)
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.postgres
def test_both_backends_rank_alike(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    paths = [
        require_shared_data("kb", "crosswoz", "restaurant_db.json"),
        *sorted(require_shared_data("kb", "tau2-banking", "documents").glob("doc_checking_accounts_*.json")),
    ]
    lite = KnowledgeBase(new_store("sqlite", tmp_path, request))
    postgres = KnowledgeBase(new_store("postgresql", tmp_path, request))
    lite.add_paths(paths)
    postgres.add_paths(paths)
    for query in (
        "全聚德的电话是多少",
        "烤鸭 人均消费",
        "Evergreen monthly maintenance fee",
        "L1 和 L2 有什么区别",
    ):
        assert [h.id for h in lite.search(query, 5).hits] == [h.id for h in postgres.search(query, 5).hits], (
            query
        )


@pytest.mark.postgres
def test_postgres_without_pg_trgm_still_finds_chinese(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgres_module, "_pg_trgm_schema", lambda connection: None)
    store = new_store("postgresql", tmp_path, request)
    knowledge_base = KnowledgeBase(store, builtin_docs=False)
    knowledge_base.add_paths([require_shared_data("kb", "crosswoz", "restaurant_db.json")])
    assert store.trigram_index is False
    hits = knowledge_base.search("全聚德 烤鸭").hits
    assert hits and all("全聚德" in hit.title + hit.content for hit in hits[:3])


def test_the_service_keeps_its_knowledge_base_beside_its_data(tmp_path: Path) -> None:
    default = Settings(data_dir=tmp_path)
    assert store_for(default).describe().endswith("kb.sqlite3")
    assert sqlite_knowledge_base_path(default.database(), tmp_path) == tmp_path / "kb.sqlite3"
    custom = Settings(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'x' / 'chat.sqlite3'}")
    assert sqlite_knowledge_base_path(custom.database(), tmp_path) == tmp_path / "x" / "chat.kb.sqlite3"
    postgres = Settings(data_dir=tmp_path, database_url="postgresql://kb@db.internal:5433/agents")
    described = store_for(postgres).describe()
    assert isinstance(store_for(postgres), PostgresKnowledgeStore) and "db.internal:5433/agents" in described


def test_sqlite_without_the_trigram_tokenizer_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    check_sqlite_support()  # this Python's SQLite has it
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 31, 1))
    monkeypatch.setattr(sqlite3, "sqlite_version", "3.31.1")
    with pytest.raises(KnowledgeBaseError, match=r"3\.34"):
        check_sqlite_support()


def test_files_of_each_format_become_documents(tmp_path: Path) -> None:
    pairs = read_documents(require_shared_data("kb", "crosswoz", "hotel_db.json"), "crosswoz/hotel_db.json")
    name, fields = json.loads(require_shared_data("kb", "crosswoz", "hotel_db.json").read_text("utf-8"))[0]
    assert (
        pairs[0].title == name
        and pairs[0].id == "hotel_db-0001"
        and f"地址: {fields['地址']}" in pairs[0].body
    )
    policy_path = require_shared_data(
        "kb", "tau2-banking", "documents", "doc_credit_cards_gold_rewards_card_001.json"
    )
    policy = json.loads(policy_path.read_text("utf-8"))
    (document,) = read_documents(policy_path, "doc.json")
    assert (document.id, document.title, document.body, document.format) == (
        policy["id"],
        policy["title"],
        policy["content"],
        "markdown",
    )
    guide = read_documents(require_shared_data("kb", "crosswoz", "database.md"), "crosswoz/database.md")[0]
    assert guide.title == "database" and "### 景点" in guide.body
    lines = tmp_path / "policies.jsonl"
    lines.write_text("\n".join(policy_path.read_text("utf-8").replace("\n", " ") for _ in range(2)), "utf-8")
    assert [d.id for d in read_documents(lines, "policies.jsonl")] == [policy["id"], policy["id"]]
    broken = tmp_path / "broken.json"
    broken.write_text('{"title": ', "utf-8")
    with pytest.raises(DocumentFormatError, match=r"broken\.json: not valid JSON"):
        read_documents(broken, "broken.json")


def test_markdown_is_chunked_by_section_within_the_size() -> None:
    policy_path = require_shared_data(
        "kb", "tau2-banking", "documents", "doc_checking_accounts_evergreen_account_002.json"
    )
    (document,) = read_documents(policy_path, "evergreen.json")
    chunks = chunk_document(document, max_chars=200)
    assert [chunk.id for chunk in chunks] == [f"{document.id}#{n}" for n in range(1, len(chunks) + 1)]
    assert all(len(chunk.text) <= 200 for chunk in chunks)
    assert chunks[0].title == f"{document.title} › Fees and waivers"
    assert "Monthly maintenance fee: $6.00" in chunks[0].text
    joined = "\n".join(chunk.text for chunk in chunks)
    assert all(
        line.strip("- ") in joined for line in document.body.splitlines() if line and not line.startswith("#")
    )


def test_a_query_made_only_of_question_words_has_no_terms(shared_kb: KnowledgeBase) -> None:
    assert not query_terms("帮我查一下有什么")
    assert shared_kb.search("请问是什么？").hits == []


@pytest.fixture
def unreachable_postgres() -> Iterator[PostgresKnowledgeStore]:
    yield PostgresKnowledgeStore("postgresql://nobody@127.0.0.1:9/none?connect_timeout=1")


def test_an_unreachable_database_is_a_clear_tool_error(unreachable_postgres: PostgresKnowledgeStore) -> None:
    text = query_kb_tool(KnowledgeBase(unreachable_postgres)).invoke({"query": "烤鸭"})
    data = json.loads(text)
    assert data["total"] == 0 and data["error"] == "the knowledge-base database is not reachable"
    with pytest.raises(KnowledgeBaseError, match=r"127\.0\.0\.1"):  # the operator sees where
        KnowledgeBase(unreachable_postgres).search("烤鸭")
