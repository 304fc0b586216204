"""Small calls of the service's HTTP API, and reading a run's SSE stream."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from ctxpress.app.server.runtime.live_events import EventPosition


@dataclass(frozen=True)
class SseEvent:
    #: The SSE `id:` (`41` for a stored event, `41-7` for a live `message_delta`).
    id: str
    type: str
    data: dict[str, Any]

    @property
    def position(self) -> EventPosition:
        position = EventPosition.parse(self.id)
        assert position is not None, f"not an event id: {self.id!r}"
        return position


class SseLines:
    """An SSE stream's lines gathered into events, for readers that look at each line as well."""

    def __init__(self) -> None:
        self._fields: dict[str, str] = {}

    def feed(self, line: str) -> dict[str, str] | None:
        """The fields of an event (`event`, `id`, `data`) when `line` is the blank line that ends
        one, else None (comments, such as pings, are skipped)."""
        if line == "":
            fields, self._fields = self._fields, {}
            return fields if "event" in fields else None
        if not line.startswith(":"):
            name, _, value = line.partition(":")
            self._fields[name] = value[1:] if value.startswith(" ") else value
        return None


def iter_events(response: httpx.Response) -> Iterator[SseEvent]:
    """The events of an open SSE response, as they arrive."""
    lines = SseLines()
    for line in response.iter_lines():
        if (fields := lines.feed(line)) is not None:
            yield SseEvent(fields["id"], fields["event"], json.loads(fields["data"]))


def read_events(
    client: httpx.Client, run_id: str, *, last_event_id: str | None = None, timeout: float = 60
) -> list[SseEvent]:
    """Read a run's SSE stream until the server ends it (run finished or waiting for input)."""
    headers = {"Last-Event-ID": last_event_id} if last_event_id is not None else {}
    with client.stream("GET", f"/api/runs/{run_id}/events", headers=headers, timeout=timeout) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        return list(iter_events(response))


def wait_for_status(
    client: httpx.Client, run_id: str, statuses: set[str], timeout: float = 30
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        run: dict[str, Any] = client.get(f"/api/runs/{run_id}").json()
        if run["status"] in statuses:
            return run
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run_id} stayed {run['status']} (wanted {statuses})")
        time.sleep(0.05)


def create_conversation(client: httpx.Client, agent: str | None = None) -> str:
    body = {"agent": agent} if agent else {}
    response = client.post("/api/conversations", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def send(client: httpx.Client, conversation_id: str, text: str) -> dict[str, Any]:
    response = client.post(f"/api/conversations/{conversation_id}/runs", json={"input": text})
    assert response.status_code == 202, response.text
    accepted: dict[str, Any] = response.json()
    return accepted
