"""Issue 20, item 6: a reply's Markdown reaches the page as sanitised HTML — in the chat record
(`GET …/messages` `html`) and from `POST /api/render` for a reply that just finished streaming —
parsed by markdown-it-py and cleaned by nh3, on SQLite and PostgreSQL."""

from __future__ import annotations

from html.parser import HTMLParser

from ctxpress.app.server.agents_file import AgentDefinition, ModelSpec
from ctxpress.app.server.rendering import MAX_RENDER_CHARS, render_markdown
from ctxpress.app.testing.api import create_conversation, read_events, send
from tests.fakes import ScriptedChatModel

from .conftest import ServerFactory
from .fakes import echo_script

HOSTILE = (
    "# 标题\n\n| a | b |\n| --- | --- |\n| 1 | 2 |\n\n"
    "```js\nalert('<x>')\n```\n\n"
    '<script>alert(1)</script> <img src=x onerror="alert(2)"> '
    "[bad](javascript:alert(3)) [ok](https://example.org) ![pic](https://example.org/p.png)\n"
)


class Elements(HTMLParser):
    """Every element and attribute of an HTML fragment, as a browser's parser would see them."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str | None]]] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, dict(attrs)))


def echo_agent() -> AgentDefinition:
    return AgentDefinition(
        name="echo", model=ModelSpec(model=ScriptedChatModel(script=echo_script)), tools=()
    )


def test_markdown_is_rendered_and_nothing_active_survives() -> None:
    html = render_markdown(HOSTILE)
    assert "<h1>标题</h1>" in html
    assert "<th>a</th>" in html and "<td>2</td>" in html
    assert "<pre><code class=\"language-js\">alert('&lt;x&gt;')\n</code></pre>" in html
    assert '<a href="https://example.org" target="_blank" rel="noopener noreferrer">ok</a>' in html
    # Raw HTML stays text; no script, image, event handler or javascript: link remains.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    elements = Elements(html).found
    tags = {tag for tag, _ in elements}
    assert tags == {"h1", "table", "thead", "tbody", "tr", "th", "td", "pre", "code", "p", "a"}
    assert [attrs["href"] for tag, attrs in elements if tag == "a"] == ["https://example.org"]
    assert not [name for _, attrs in elements for name in attrs if name.startswith("on") or name == "style"]


def test_the_record_carries_rendered_html_of_replies(start_server: ServerFactory) -> None:
    server = start_server(agents=[echo_agent()])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    run_id = send(alice, conversation_id, HOSTILE)["run"]["id"]
    read_events(alice, run_id)
    items = alice.get(f"/api/conversations/{conversation_id}/messages").json()["items"]
    by_role = {item["role"]: item for item in items}
    assert by_role["user"]["html"] is None  # people's own text is shown as they typed it
    reply = by_role["assistant"]
    assert reply["content"].startswith("回声：# 标题")
    assert reply["html"] == render_markdown(reply["content"])
    assert "<table>" in reply["html"]
    assert "script" not in {tag for tag, _ in Elements(reply["html"]).found}


def test_render_endpoint(start_server: ServerFactory) -> None:
    server = start_server(agents=[echo_agent()])
    anonymous = server.client()
    assert anonymous.post("/api/render", json={"text": "*x*"}).status_code == 401
    alice = server.client(server.create_user("alice"))
    answer = alice.post("/api/render", json={"text": "**粗体** `code`"})
    assert answer.status_code == 200
    assert answer.json() == {"html": "<p><strong>粗体</strong> <code>code</code></p>\n"}
    too_long = alice.post("/api/render", json={"text": "a" * (MAX_RENDER_CHARS + 1)})
    assert too_long.status_code == 422
    assert too_long.json()["error"]["code"] == "validation_error"
    assert alice.post("/api/render", json={"text": "x", "extra": 1}).status_code == 422
    vocabulary = anonymous.get("/api/vocabulary").json()
    assert vocabulary["max_render_chars"] == MAX_RENDER_CHARS
