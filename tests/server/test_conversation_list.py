"""Issue 20, item 8: conversations are renamed, archived (hidden from the list, never deleted) and
found by title; an untitled one is named after its first question. SQLite and PostgreSQL."""

from __future__ import annotations

import httpx

from ctxpress.app.server.agents_file import AgentDefinition, ModelSpec
from ctxpress.app.server.usecases.conversations import AUTOMATIC_TITLE_CHARS, automatic_title
from ctxpress.app.testing.api import create_conversation, read_events, send
from tests.fakes import ScriptedChatModel

from .conftest import ServerFactory
from .fakes import echo_script


def echo_agent() -> AgentDefinition:
    return AgentDefinition(
        name="echo", model=ModelSpec(model=ScriptedChatModel(script=echo_script)), tools=()
    )


def titles(client: httpx.Client, **params: object) -> list[str]:
    response = client.get("/api/conversations", params=params)
    assert response.status_code == 200, response.text
    return [item["title"] for item in response.json()["items"]]


def test_rename_archive_search_and_automatic_titles(start_server: ServerFactory) -> None:
    server = start_server(agents=[echo_agent()])
    alice = server.client(server.create_user("alice"))
    bob = server.client(server.create_user("bob"))

    first = create_conversation(alice)
    read_events(alice, send(alice, first, "\n  北京有哪些   好吃的烤鸭店？\n第二行不算")["run"]["id"])
    read_events(alice, send(alice, first, "第二个问题不改标题")["run"]["id"])
    assert alice.get(f"/api/conversations/{first}").json()["title"] == "北京有哪些 好吃的烤鸭店？"

    named = alice.post("/api/conversations", json={"title": "Travel 100% plan"}).json()["id"]
    send(alice, named, "这个问题不改标题")
    assert alice.get(f"/api/conversations/{named}").json()["title"] == "Travel 100% plan"
    assert titles(alice) == ["Travel 100% plan", "北京有哪些 好吃的烤鸭店？"]

    # Search by title: case-insensitive for Latin letters, `%` and `_` literal.
    assert titles(alice, q="烤鸭") == ["北京有哪些 好吃的烤鸭店？"]
    assert titles(alice, q="travel") == ["Travel 100% plan"]
    assert titles(alice, q="100%") == ["Travel 100% plan"]
    assert titles(alice, q="1_0") == []
    assert titles(bob, q="烤鸭") == []

    renamed = alice.patch(f"/api/conversations/{first}", json={"title": "  烤鸭店  "})
    assert renamed.status_code == 200 and renamed.json()["title"] == "烤鸭店"
    archived = alice.patch(f"/api/conversations/{first}", json={"archived": True}).json()
    assert archived["archived_at"] is not None
    assert titles(alice) == ["Travel 100% plan"]  # hidden from the list …
    assert titles(alice, archived="true") == ["烤鸭店"]  # … listed among the archived …
    opened = alice.get(f"/api/conversations/{first}")  # … and kept whole
    assert opened.status_code == 200
    assert len(alice.get(f"/api/conversations/{first}/messages").json()["items"]) == 4
    back = alice.patch(f"/api/conversations/{first}", json={"archived": False}).json()
    assert back["archived_at"] is None and titles(alice) == [
        "Travel 100% plan",
        "烤鸭店",
    ]  # newest first, by creation

    # Untrusted input: clear 4xx, never 500; another user's conversation is not found.
    assert alice.patch(f"/api/conversations/{first}", json={"title": "x" * 201}).status_code == 422
    assert alice.patch(f"/api/conversations/{first}", json={"owner": "bob"}).status_code == 422
    assert alice.patch(f"/api/conversations/{first}", json={"archived": "maybe"}).status_code == 422
    assert bob.patch(f"/api/conversations/{first}", json={"title": "mine"}).status_code == 404
    assert alice.get("/api/conversations", params={"q": "x" * 201}).status_code == 422
    # NUL (PostgreSQL refuses it in text): repaired as stored titles are, never a 500.
    nul = alice.post("/api/conversations", json={"title": "a\x00b"}).json()
    assert titles(alice, q="a\x00b") == [nul["title"]] == ["a\ufffdb"]


def test_automatic_title_is_the_first_line_cut_short() -> None:
    assert automatic_title("  \n 你好   世界 \n其余") == "你好 世界"
    long = automatic_title("问" * 100)
    assert len(long) == AUTOMATIC_TITLE_CHARS and long.endswith("…")
    assert automatic_title("   \n  ") == ""
