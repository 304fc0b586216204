"""Issue 44 item 1, as a user met it: one huge message must not end a conversation for good.

The default agent of the service (built-in offline model, `query_kb` over the built-in knowledge
base) with its default threshold, over real HTTP, on SQLite and PostgreSQL.
"""

from __future__ import annotations

from ctxpress.app.server.agents_file import default_agent
from ctxpress.app.testing.api import create_conversation, read_events, send

from .conftest import ServerFactory


def test_a_huge_chinese_message_and_the_turns_after_it_succeed(start_server: ServerFactory) -> None:
    server = start_server(agents=[default_agent()])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    # As large as the default agent accepts in one message (~65K tokens), echoed by the search.
    for text in ("汉" * 30_000, "hello", "故宫在哪里？"):
        accepted = send(alice, conversation_id, text)
        events = read_events(alice, accepted["run"]["id"], timeout=120)
        finished = events[-1]
        assert finished.type == "run_finished", [event.type for event in events]
        assert finished.data["status"] == "succeeded", finished.data
        statuses = [event.data["status"] for event in events if event.type == "context_compression"]
        assert "failed" not in statuses
