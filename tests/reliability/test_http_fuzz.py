"""HTTP: the service's OpenAPI schema fuzzed with schemathesis against a live server (127.0.0.1 only).

Two runs over every operation of the schema, with the same checks:

- generated requests (`test_openapi_schema_fuzz_no_5xx_documented_4xx`): as generated (random ids,
  so mostly the 404 path), and with the path ids replaced by a real conversation and run of the
  user, so the bodies and query strings reach the handlers;
- explicit bad values for every parameter, by its type (`test_explicit_bad_values_per_parameter_type`):
  schemathesis generates values that match the declared format, so it never sent a date-time
  without offset, a date alone, an instant outside years 1-9999 once in UTC, an integer beyond
  64 bits in a JSON body, NaN, or NUL in a path id. Each parameter (path, query, header) and each
  body field gets the values of its type from `BAD_VALUES` / `BAD_BODY_VALUES`, the other
  parameters staying valid.

Checks on every answer:
- no 5xx from bad input (`not_a_server_error`);
- the status code is one the schema documents for the operation (`status_code_conformance`);
- the content type and the body match the schema (`content_type_conformance`,
  `response_schema_conformance`);
- every error body has the service's one shape, `{"error": {"code", "message"}}`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
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

#: Bad values of a path, query or header parameter, by the parameter's type (or format).
BAD_VALUES: dict[str, list[str]] = {
    "date-time": [
        "2026-01-01T00:00:00",  # no offset
        "2026-01-01",  # a date alone
        "0001-01-01T00:00:00+14:00",  # before year 1 once in UTC
        "9999-12-31T23:59:59-14:00",  # after year 9999 once in UTC
        "2026-02-30T00:00:00Z",
        "yesterday",
        "",
        "1e400",
        "\x00",
    ],
    "integer": [
        "1" + "0" * 30,
        str(2**63),
        str(-(2**63) - 1),
        "-1",
        "1.5",
        "1e3",
        "0x10",
        "NaN",
        "abc",
        "",
        "²",
        "\x00",
    ],
    "string": [
        "\x00",
        "a\x00b",
        "../../etc/passwd",
        "..%2F..%2Fetc",
        "x" * 5000,
        "é☃漢字",
        " ",
        "\\",
        "\u202e",
        "NaN",
    ],
}
#: Bad values of a JSON body field, by the field's type; `any` is a JSON value of any type.
BAD_BODY_VALUES: dict[str, list[Any]] = {
    "string": ["a\x00b", "\ud800", 5, None, [], {"x": 1}, "x" * 70_000],
    "integer": [10**30, -(2**63) - 1, 1.5, "1", None, True],
    "boolean": ["yes", 2, None],
    "any": [10**30, -(2**64), float("nan"), float("inf"), {"n": 10**30}, "a\x00b", {"k\x00": 1}],
}
NESTING_TOO_DEEP = 300


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@dataclass
class Fuzzer:
    """Calls cases against the live server and collects every check failure."""

    base_url: str
    headers: dict[str, str]
    failures: list[str] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    calls: int = 0

    def record(self, label: str, case: Any) -> None:
        try:
            response = case.call(base_url=self.base_url, headers=self.headers, timeout=STREAM_TIMEOUT_S)
        except (httpx.HTTPError, OSError) as exc:
            self.failures.append(f"{label}: no answer ({type(exc).__name__})")
            return
        self.calls += 1
        self.statuses[response.status_code] = self.statuses.get(response.status_code, 0) + 1
        try:
            case.validate_response(response, checks=CHECKS, headers=self.headers)
        except FailureGroup as group:  # collected, so one run reports every operation's problems
            for failure in group.exceptions:
                self.failures.append(f"{label} -> {response.status_code}: {_first_lines(failure)}")
        content_type = " ".join(response.headers.get("content-type", []))
        if response.status_code >= 400 and content_type.startswith("application/json"):
            error = response.json().get("error")
            if not (isinstance(error, dict) and {"code", "message"} <= set(error)):
                self.failures.append(f"{label} -> {response.status_code}: error body {response.text[:200]}")


def _prepared_server(start_server: Any) -> tuple[Any, httpx.Client, dict[str, str], dict[str, str]]:
    agent, _ = kb_agent()
    server = start_server(agents=[agent], max_body_bytes=64 * 1024)
    token = server.create_user("alice")
    alice = server.client(token)
    conversation_id = alice.post("/api/conversations", json={}).json()["id"]
    finished = turn(alice, conversation_id, TOPICS[0])
    assert finished.status == "succeeded"
    real_ids = {"conversation_id": conversation_id, "run_id": finished.run["id"]}
    return server, alice, real_ids, {"Authorization": f"Bearer {token}"}


@pytest.mark.heavy
@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")  # inside schemathesis
def test_openapi_schema_fuzz_no_5xx_documented_4xx(start_server: Any) -> None:
    server, alice, real_ids, headers = _prepared_server(start_server)
    conversation_id = real_ids["conversation_id"]
    schema = schemathesis.openapi.from_url(f"{server.base_url}/openapi.json")
    fuzzer = Fuzzer(server.base_url, headers)

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
            fuzzer.record(operation.label, case)

        check()

    for result in schema.get_all_operations():
        fuzz(result.ok())

    assert fuzzer.calls >= 100, f"only {fuzzer.calls} requests were made"
    assert not fuzzer.failures, "\n".join(sorted(set(fuzzer.failures)))
    assert not any(status >= 500 for status in fuzzer.statuses), fuzzer.statuses
    # The service still works after the fuzzing.
    assert turn(alice, conversation_id, TOPICS[1]).status == "succeeded"


# --- explicit bad values, per parameter type ---------------------------------------------------------


def _kind(schema: dict[str, Any]) -> str:
    """`date-time`, `integer`, `string`, `boolean` or `any`, looking through `anyOf: [X, null]`."""
    options = [o for o in schema.get("anyOf", [schema]) if o.get("type") != "null"]
    if len(options) != 1:
        return "any"
    option = options[0]
    if option.get("format") == "date-time":
        return "date-time"
    return str(option.get("type") or "any")


def _body_fields(raw: dict[str, Any], operation: dict[str, Any]) -> dict[str, str]:
    """Each JSON body field of an operation and its kind."""
    reference = (
        operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
    )
    if "$ref" not in reference:
        return {}
    model = raw["components"]["schemas"][reference["$ref"].rsplit("/", 1)[-1]]
    return {name: _kind(schema) for name, schema in model.get("properties", {}).items()}


def _valid_body(fields: dict[str, str]) -> dict[str, Any]:
    valid = {"input": "你好", "value": "好的", "title": "t", "agent": None}
    return {name: valid[name] for name in fields if name in valid and valid[name] is not None}


def _header_safe(value: str) -> bool:
    return value.isprintable() and value.isascii() and value == value.strip()


def explicit_cases(
    operation: Any, raw: dict[str, Any], real_ids: dict[str, str]
) -> Iterator[tuple[str, Any]]:
    """(what, case) for every bad value of every parameter and body field of `operation`."""
    method, path = operation.method.lower(), operation.path
    definition = raw["paths"][path][method]
    parameters = definition.get("parameters", [])
    valid_path = {p["name"]: real_ids.get(p["name"], "notes.md") for p in parameters if p["in"] == "path"}
    fields = _body_fields(raw, definition)
    base_body = _valid_body(fields) if fields else None

    def case(**overrides: Any) -> Any:
        values: dict[str, Any] = {"path_parameters": dict(valid_path), "query": {}, "headers": {}}
        if base_body is not None:
            values["body"] = dict(base_body)
            values["media_type"] = "application/json"
        for key, value in overrides.items():
            if key == "body":
                values["body"] = value
            else:
                values[key].update(value)
        if "body" in values:
            # Sent as the bytes Python's JSON writes: NaN, Infinity and `\\ud800` escapes included.
            values["body"] = json.dumps(values["body"]).encode()
        return operation.Case(**values)

    for parameter in parameters:
        where, name, kind = parameter["in"], parameter["name"], _kind(parameter.get("schema", {}))
        for value in BAD_VALUES.get(kind, BAD_VALUES["string"]):
            if where == "header" and not _header_safe(value):
                continue  # not sendable as a header at all
            location = {"path": "path_parameters", "query": "query", "header": "headers"}[where]
            yield f"{where} {name}={value[:40]!r}", case(**{location: {name: value}})
    for name, kind in fields.items():
        for bad in BAD_BODY_VALUES.get(kind, BAD_BODY_VALUES["any"]):
            yield f"body {name}={str(bad)[:40]!r}", case(body={**(base_body or {}), name: bad})
        if kind == "any":
            yield (
                f"body {name} nested {NESTING_TOO_DEEP}",
                case(body={**(base_body or {}), name: _nested(NESTING_TOO_DEEP)}),
            )
    if fields:
        for body in ([], "x", 10**30, {**(base_body or {}), "unknown": 1}):
            yield f"body {str(body)[:40]!r}", case(body=body)


def test_explicit_bad_values_per_parameter_type(start_server: Any) -> None:
    """Every path, query and header parameter and every body field of every operation, with the bad
    values of its type: 4xx with the one error shape, never a 5xx, and the service keeps working."""
    server, alice, real_ids, headers = _prepared_server(start_server)
    raw = httpx.get(f"{server.base_url}/openapi.json").json()
    schema = schemathesis.openapi.from_dict(raw)
    fuzzer = Fuzzer(server.base_url, headers)
    # The administrators' operations answer anyone else 403 before reading a parameter.
    admin_token = server.call(server.services.auth.create_user("root", is_admin=True)).token
    admin = Fuzzer(server.base_url, {"Authorization": f"Bearer {admin_token}"})
    tried: dict[str, int] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        caller = admin if operation.path.startswith("/api/admin/") else fuzzer
        for what, case in explicit_cases(operation, raw, real_ids):
            caller.record(f"{operation.label} [{what}]", case)
            tried[operation.label] = tried.get(operation.label, 0) + 1
    fuzzer.failures += admin.failures
    fuzzer.calls += admin.calls
    for status, count in admin.statuses.items():
        fuzzer.statuses[status] = fuzzer.statuses.get(status, 0) + count

    with_parameters = [
        f"{method.upper()} {path}"
        for path, item in raw["paths"].items()
        for method, definition in item.items()
        if definition.get("parameters") or definition.get("requestBody")
    ]
    assert set(with_parameters) <= set(tried), "every operation with parameters was tried"
    assert not fuzzer.failures, "\n".join(sorted(set(fuzzer.failures)))
    assert fuzzer.calls >= 250, f"only {fuzzer.calls} requests were made"
    assert not any(status >= 500 for status in fuzzer.statuses), fuzzer.statuses
    assert fuzzer.statuses.get(422, 0) >= 50, fuzzer.statuses  # the bad values were refused, not ignored
    assert turn(alice, real_ids["conversation_id"], TOPICS[1]).status == "succeeded"
