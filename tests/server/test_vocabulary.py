"""One vocabulary: `GET /api/vocabulary` names what the service really streams and answers, every error
body comes from one tree of named errors, and the OpenAPI description documents those bodies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

from ctxpress.app.server.agents_file import AgentDefinition, ModelSpec
from ctxpress.app.server.errors import ErrorCode, ServiceError
from ctxpress.app.testing.api import create_conversation, read_events, send
from ctxpress.config import CompressionConfig
from ctxpress.manual import FailedPart
from ctxpress.pressure import SUGGEST_COMPRESS_RATIO
from tests.fakes import ScriptedChatModel

from .conftest import ServerFactory
from .fakes import echo_script

#: About 500 tokens per message (under the agent's per-message limit) against a 1 K threshold: the
#: echoed replies push every call from the second turn over it, and L1 alone cannot help (no tools).
LONG_TEXT = "北京的景点很多，故宫、颐和园、天坛都值得一去。" * 19


def summary_script(_messages: Sequence[BaseMessage]) -> AIMessage:
    return AIMessage("摘要：用户介绍了北京的景点。")


def tight_agent() -> AgentDefinition:
    return AgentDefinition(
        name="tight",
        model=ModelSpec(model=ScriptedChatModel(script=echo_script)),
        summary_model=ModelSpec(model=ScriptedChatModel(script=summary_script, model_name="summarizer")),
        tools=(),
        capabilities=("context_compression",),
        compression=CompressionConfig(summary_threshold=1, summary_keep_messages=2),
    )


def test_the_vocabulary_names_what_a_real_run_streams(start_server: ServerFactory) -> None:
    server = start_server(agents=[tight_agent()])
    vocabulary: dict[str, Any] = server.client().get("/api/vocabulary").json()  # public: no token
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    streamed = []
    for turn in range(4):
        run_id = send(alice, conversation_id, f"第{turn}轮：{LONG_TEXT}")["run"]["id"]
        streamed.extend(read_events(alice, run_id))

    names = vocabulary["events"]
    assert {event.type for event in streamed} <= set(names.values())
    compression = [event.data for event in streamed if event.type == names["CONTEXT_COMPRESSION"]]
    statuses = {event["status"] for event in compression}
    assert statuses == {vocabulary["statuses"]["STARTED"], vocabulary["statuses"]["COMPLETED"]}
    assert {event["level"] for event in compression} == set(vocabulary["levels"].values())
    assert any(event.type == names["CONTEXT_PRESSURE"] for event in streamed)
    finished = [event.data["status"] for event in streamed if event.type == names["RUN_FINISHED"]]
    assert finished == [vocabulary["run_statuses"]["SUCCEEDED"]] * 4

    # The page hides summary messages by the marker and finds the summary under the key it is told.
    state = alice.get(f"/api/conversations/{conversation_id}/state").json()["values"]
    summary = state[vocabulary["summary_event_key"]]["summary_message"]["data"]["content"]
    assert summary.startswith(vocabulary["summary_marker"])
    history = state[vocabulary["summary_event_key"]]["file_path"]
    assert history.startswith(vocabulary["workdir_dirs"]["CONVERSATION_HISTORY"] + "/")
    # The ratio the page is told is the one the panel's figures use.
    context = alice.get(f"/api/conversations/{conversation_id}/context").json()
    assert context["suggest_ratio"] == vocabulary["suggest_ratio"] == SUGGEST_COMPRESS_RATIO
    assert (
        vocabulary["capabilities"]["CONTEXT_COMPRESSION"]
        in alice.get("/api/agents").json()[0]["capabilities"]
    )
    # Every part manual compression can name.
    assert {part.value for part in FailedPart} == set(vocabulary["failed_parts"])


def test_error_answers_use_the_codes_of_the_vocabulary(start_server: ServerFactory) -> None:
    server = start_server(agents=[tight_agent()])
    codes = server.client().get("/api/vocabulary").json()["error_codes"]
    assert codes == {code.name: code.value for code in ErrorCode}
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    answers = {
        codes["UNAUTHORIZED"]: server.client().get("/api/me"),
        codes["UNKNOWN_AGENT"]: alice.post("/api/conversations", json={"agent": "nobody"}),
        codes["NOT_FOUND"]: alice.get("/api/no-such-route"),
        codes["METHOD_NOT_ALLOWED"]: alice.delete(f"/api/conversations/{conversation_id}"),
        codes["VALIDATION_ERROR"]: alice.post(f"/api/conversations/{conversation_id}/runs", json={}),
        codes["INVALID_PATH"]: alice.get(
            f"/api/conversations/{conversation_id}/files", params={"prefix": "../x"}
        ),
    }
    for code, response in answers.items():
        error = response.json()["error"]
        assert error["code"] == code, response.text
        # One body: code and message first, then (only where there are any) the details.
        assert list(error)[:2] == ["code", "message"] and set(error) <= {"code", "message", "details"}
    assert answers[codes["UNAUTHORIZED"]].headers["www-authenticate"] == "Bearer"
    assert "details" in answers[codes["VALIDATION_ERROR"]].json()["error"]


def _named_errors(root: type[ServiceError]) -> list[type[ServiceError]]:
    found = [root]
    for subclass in root.__subclasses__():
        found.extend(_named_errors(subclass))
    return found


def test_every_error_code_has_its_named_error() -> None:
    """The tree and the list of codes agree: no code without its error, no error without its code."""
    errors = [error for error in _named_errors(ServiceError) if error is not ServiceError]
    assert {error.code for error in errors} == set(ErrorCode)
    assert all(400 <= error.status_code < 600 for error in errors)


def test_openapi_documents_every_error_body(start_server: ServerFactory) -> None:
    server = start_server(agents=[tight_agent()])
    schema = server.client().get("/openapi.json").json()
    vocabulary = server.client().get("/api/vocabulary").json()
    components = schema["components"]["schemas"]

    def ref(response: dict[str, Any]) -> str:
        return str(response["content"]["application/json"]["schema"]["$ref"]).rsplit("/", 1)[-1]

    # FastAPI's own 422 shape is never answered, so never documented: every error is an ErrorResponse.
    assert "HTTPValidationError" not in components
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            assert ref(responses["default"]) == "ErrorResponse", (method, path)
            for status, response in responses.items():
                if status.startswith(("4", "5")):
                    assert ref(response).endswith("Response"), (method, path, status)
    compress = schema["paths"]["/api/conversations/{conversation_id}/compress"]["post"]["responses"]
    assert ref(compress["409"]) == "ThreadBusyResponse"
    assert ref(compress["500"]) == ref(compress["502"]) == "CompressionFailedResponse"
    assert components["ErrorCode"]["enum"] == list(vocabulary["error_codes"].values())
    assert components["ThreadBusyDetail"]["properties"]["reason"]["enum"] == vocabulary["busy_reasons"]
    assert (
        ref(
            {
                "content": {
                    "application/json": {
                        "schema": components["CompressionFailedDetail"]["properties"]["part"]
                    }
                }
            }
        )
        == "FailedPart"
    )
    assert set(components["FailedPart"]["enum"]) == set(vocabulary["failed_parts"])
    assert "/api/vocabulary" in schema["paths"]
