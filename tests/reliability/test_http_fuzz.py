"""HTTP: the service's OpenAPI schema fuzzed with schemathesis against a live server (127.0.0.1 only).

Every operation gets generated requests twice: as generated (random ids, so mostly the 404 path),
and with its path ids replaced by a real conversation and run of the user, so the bodies and
query strings reach the handlers. Checks on every answer:
- no 5xx from bad input (`not_a_server_error`);
- the status code is one the schema documents for the operation (`status_code_conformance`);
- the content type and the body match the schema (`content_type_conformance`,
  `response_schema_conformance`);
- every error body has the service's one shape, `{"error": {"code", "message"}}`.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.core.failures import FailureGroup

from .support import TOPICS, kb_agent, turn


def _first_lines(failure: BaseException) -> str:
    return " ".join(str(failure).split())[:300]


EXAMPLES_PER_OPERATION = 40
#: The SSE stream stays open while its run is active; every run here has finished.
STREAM_TIMEOUT_S = 10.0
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.mark.heavy
@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")  # inside schemathesis
def test_openapi_schema_fuzz_no_5xx_documented_4xx(start_server: Any) -> None:
    agent, _ = kb_agent()
    server = start_server(agents=[agent], max_body_bytes=64 * 1024)
    token = server.create_user("alice")
    alice = server.client(token)
    conversation_id = alice.post("/api/conversations", json={}).json()["id"]
    finished = turn(alice, conversation_id, TOPICS[0])
    assert finished.status == "succeeded"
    real_ids = {"conversation_id": conversation_id, "run_id": finished.run["id"]}
    headers = {"Authorization": f"Bearer {token}"}

    schema = schemathesis.openapi.from_url(f"{server.base_url}/openapi.json")
    failures: list[str] = []
    calls = 0
    statuses: dict[int, int] = {}

    def record(label: str, case: Any) -> None:
        nonlocal calls
        try:
            response = case.call(base_url=server.base_url, headers=headers, timeout=STREAM_TIMEOUT_S)
        except (httpx.HTTPError, OSError) as exc:
            failures.append(f"{label}: no answer ({type(exc).__name__})")
            return
        calls += 1
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
        try:
            case.validate_response(response, checks=CHECKS, headers=headers)
        except FailureGroup as group:  # collected, so one run reports every operation's problems
            for failure in group.exceptions:
                failures.append(f"{label} -> {response.status_code}: {_first_lines(failure)}")
        content_type = " ".join(response.headers.get("content-type", []))
        if response.status_code >= 400 and content_type.startswith("application/json"):
            error = response.json().get("error")
            if not (isinstance(error, dict) and {"code", "message"} <= set(error)):
                failures.append(f"{label} -> {response.status_code}: error body {response.text[:200]}")

    def fuzz(operation: Any) -> None:
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy(), use_real_ids=st.booleans())
        def check(case: Any, use_real_ids: bool) -> None:
            if use_real_ids and case.path_parameters:
                for name in list(case.path_parameters):
                    if name in real_ids:
                        case.path_parameters[name] = real_ids[name]
            record(operation.label, case)

        check()

    for result in schema.get_all_operations():
        fuzz(result.ok())

    assert calls >= 100, f"only {calls} requests were made"
    assert not failures, "\n".join(sorted(set(failures)))
    assert not any(status >= 500 for status in statuses), statuses
    # The service still works after the fuzzing.
    assert turn(alice, conversation_id, TOPICS[1]).status == "succeeded"
