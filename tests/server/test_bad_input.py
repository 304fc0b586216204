"""Bad input gets a clear 4xx with one JSON error shape, and leaves nothing half-written."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from fastapi.responses import JSONResponse

from ctxpress.app.server import app as app_module
from ctxpress.app.server.agents_file import AgentDefinition, ModelSpec
from ctxpress.app.server.errors import ServiceError
from ctxpress.app.testing.api import create_conversation
from ctxpress.app.testing.records import query_sql
from tests.fakes import ScriptedChatModel

from .conftest import ServerFactory
from .fakes import echo_script

MAX_BODY = 4096


def echo_agent() -> AgentDefinition:
    return AgentDefinition(
        name="echo", model=ModelSpec(model=ScriptedChatModel(script=echo_script)), tools=(), capabilities=()
    )


def test_bad_requests_answer_4xx_json(start_server: ServerFactory) -> None:
    server = start_server(agents=[echo_agent()], max_body_bytes=MAX_BODY, max_input_chars=200)
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    runs = f"/api/conversations/{conversation_id}/runs"

    def error(response: httpx.Response, status: int, code: str) -> None:
        assert response.status_code == status, response.text
        assert response.json()["error"]["code"] == code

    json_headers = {"Content-Type": "application/json"}
    error(alice.post(runs, content=b'{"input": "unterminated', headers=json_headers), 400, "malformed_json")
    error(alice.post(runs, json={"input": 5}), 422, "validation_error")
    error(alice.post(runs, json={"input": "hi", "extra": True}), 422, "validation_error")
    error(alice.post(runs, json={"input": "   "}), 422, "validation_error")
    error(alice.post(runs, json={}), 422, "validation_error")
    error(alice.post(runs, json=["input"]), 422, "validation_error")
    details = alice.post(runs, json={"input": 5}).json()["error"]["details"]
    assert details[0]["loc"] == ["body", "input"] and "input" not in details[0]
    error(alice.post(runs, json={"input": "长" * 201}), 400, "input_too_long")
    error(alice.post(runs, json={"input": "x" * (MAX_BODY + 1)}), 413, "payload_too_large")

    def chunked_body() -> Iterator[bytes]:  # no Content-Length: the limit applies while reading
        yield b'{"input": "'
        for _ in range(MAX_BODY // 512 + 1):
            yield b"y" * 512
        yield b'"}'

    error(alice.post(runs, content=chunked_body(), headers=json_headers), 413, "payload_too_large")

    error(
        alice.post("/api/conversations/0123456789abcdef0123456789abcdef/runs", json={"input": "hi"}),
        404,
        "not_found",
    )
    error(alice.post("/api/conversations/../../etc/runs", json={"input": "hi"}), 404, "not_found")
    error(alice.get("/api/runs/not-a-run"), 404, "not_found")
    error(alice.post("/api/conversations", json={"agent": "nobody"}), 400, "unknown_agent")
    error(alice.post("/api/conversations", json={"title": "t" * 201}), 422, "validation_error")
    error(alice.get("/api/conversations", params={"limit": 0}), 422, "validation_error")
    error(
        alice.get(f"/api/conversations/{conversation_id}/messages", params={"after": "x"}),
        422,
        "validation_error",
    )
    error(alice.get("/api/no-such-route"), 404, "not_found")
    error(alice.delete(f"/api/conversations/{conversation_id}"), 405, "method_not_allowed")

    # Nothing was half-written by any of the rejected requests.
    assert query_sql(server.services.settings, "SELECT id FROM runs") == []
    assert query_sql(server.services.settings, "SELECT id FROM messages") == []
    assert alice.get(f"/api/conversations/{conversation_id}/status").json()["busy"] is False


def test_openapi_health_and_agents(start_server: ServerFactory) -> None:
    server = start_server()  # no agents given and no agents file: the built-in default agent
    alice = server.client(server.create_user("alice"))
    schema = server.client().get("/openapi.json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    for path in (
        "/api/conversations",
        "/api/conversations/{conversation_id}/runs",
        "/api/conversations/{conversation_id}/messages",
        "/api/conversations/{conversation_id}/state",
        "/api/conversations/{conversation_id}/usage",
        "/api/conversations/{conversation_id}/files",
        "/api/conversations/{conversation_id}/files/{path}",
        "/api/runs/{run_id}/events",
        "/api/runs/{run_id}/resume",
    ):
        assert path in paths, path
    assert "bearer" in str(schema.json()["components"]["securitySchemes"]).lower()

    health = server.client().get("/api/health").json()
    assert health["status"] == "ok" and health["builtin_model_agents"] == ["default"]
    assert health["database"] == server.services.database.backend
    agents = alice.get("/api/agents").json()
    assert len(agents) == 1 and agents[0]["builtin_model"] is True and agents[0]["default"] is True
    assert "built-in" in agents[0]["notice"] and agents[0]["capabilities"] == ["context_compression"]
    assert agents[0]["compression"]["threshold_tokens"] == 100 * 1024
    assert alice.get("/api/me").json()["name"] == "alice"


def test_a_request_within_the_body_limit_renders_no_error(
    start_server: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The body-size check renders its 413 only for a body it refuses, not for every request (each
    rendering is a JSON response built and thrown away: CPU on every message of a burst)."""
    rendered: list[int] = []
    real_error_response = app_module.error_response

    def counting_error_response(error: ServiceError) -> JSONResponse:
        rendered.append(error.status_code)
        return real_error_response(error)

    monkeypatch.setattr(app_module, "error_response", counting_error_response)
    server = start_server(agents=[echo_agent()], max_body_bytes=MAX_BODY)
    alice = server.client(server.create_user("alice"))
    assert alice.post("/api/conversations", json={}).status_code == 201
    assert rendered == []
    too_large = alice.post(
        "/api/conversations",
        content=b"{" + b" " * (MAX_BODY + 1) + b"}",
        headers={"Content-Type": "application/json"},
    )
    assert too_large.status_code == 413 and too_large.json()["error"]["code"] == "payload_too_large"
    assert rendered == [413]
