"""Helpers of the service tests: a live server (uvicorn in a thread), SSE reading, small API calls,
a scratch PostgreSQL database (also used by `bench/service_load.py`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import psycopg
import uvicorn
from fastapi import FastAPI
from sqlalchemy import Row, create_engine, text

from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.db.models import Conversation
from ctxpress.app.server.repositories import AgentRepository, ConversationRepository, UserRepository
from ctxpress.app.server.runtime.container import Services
from ctxpress.app.server.settings import Settings

SERVER_START_TIMEOUT = 60.0
T = TypeVar("T")

PG_HOST = os.environ.get("CTXPRESS_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("CTXPRESS_TEST_PG_PORT", "5432"))
PG_ADMIN_DATABASE = os.environ.get("CTXPRESS_TEST_PG_DATABASE", "test")
PG_USERS = ("postgres", "root")


class PostgresUnavailableError(RuntimeError):
    """No PostgreSQL server answers at PG_HOST:PG_PORT for any of PG_USERS (the message says why)."""


def _pg_url(user: str, database: str) -> str:
    return f"postgresql://{user}@{PG_HOST}:{PG_PORT}/{database}"


@contextlib.contextmanager
def scratch_postgres_database(prefix: str = "ctxpress_test_") -> Iterator[str]:
    """A fresh PostgreSQL database (`<prefix><random>`), dropped on exit; yields its libpq URL."""
    errors = []
    for user in PG_USERS:
        try:
            admin = psycopg.connect(_pg_url(user, PG_ADMIN_DATABASE), autocommit=True, connect_timeout=3)
        except psycopg.Error as exc:
            errors.append(
                f"{user}: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
            )
            continue
        name = f"{prefix}{uuid.uuid4().hex[:10]}"
        with admin:
            admin.execute(f'CREATE DATABASE "{name}"')
            try:
                yield _pg_url(user, name)
            finally:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        return
    raise PostgresUnavailableError(
        f"PostgreSQL at {PG_HOST}:{PG_PORT} (database {PG_ADMIN_DATABASE!r}, users {'/'.join(PG_USERS)}) "
        f"is not reachable: {'; '.join(errors)}"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LiveServer:
    """The app under uvicorn on 127.0.0.1, in a thread with its own event loop."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self.port = free_port()
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        )
        self.loop: asyncio.AbstractEventLoop | None = None
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"uvicorn-{self.port}", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def services(self) -> Services:
        services: Services = self.app.state.services
        return services

    def _run(self) -> None:
        async def serve() -> None:
            self.loop = asyncio.get_running_loop()
            await self.server.serve()

        try:
            asyncio.run(serve())
        except BaseException as exc:
            self._failure = exc

    def start(self) -> LiveServer:
        self._thread.start()
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start: {self._failure!r}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=30)

    def call(self, coroutine: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        """Run a coroutine on the server's event loop (e.g. to reach its services)."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def create_user(self, name: str) -> str:
        return self.call(self.services.auth.create_user(name)).token

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=30)


@dataclass(frozen=True)
class SseEvent:
    id: int
    type: str
    data: dict[str, Any]


def read_events(
    client: httpx.Client, run_id: str, *, last_event_id: int | None = None, timeout: float = 60
) -> list[SseEvent]:
    """Read a run's SSE stream until the server ends it (run finished or waiting for input)."""
    headers = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
    received: list[SseEvent] = []
    with client.stream("GET", f"/api/runs/{run_id}/events", headers=headers, timeout=timeout) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        fields: dict[str, str] = {}
        for line in response.iter_lines():
            if line == "":
                if "event" in fields:
                    received.append(SseEvent(int(fields["id"]), fields["event"], json.loads(fields["data"])))
                fields = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(":")
                fields[name] = value[1:] if value.startswith(" ") else value
    return received


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


def query_sql(settings: Settings, sql: str, **params: Any) -> list[Row[Any]]:
    """Read the service's tables directly (a separate, synchronous connection)."""
    target = settings.database()
    driver = "sqlite" if target.backend == "sqlite" else "postgresql+psycopg"
    engine = create_engine(target.sqlalchemy_url.set(drivername=driver))
    try:
        with engine.connect() as connection:
            return list(connection.execute(text(sql), params).all())
    finally:
        engine.dispose()


async def add_conversation(database: Database, owner: str = "alice") -> str:
    """A user (if new), the `echo` agent record and a conversation; returns the conversation id."""
    async with database.session() as session:
        users = UserRepository(session)
        user = await users.by_name(owner) or await users.add(owner, is_admin=False)
        await AgentRepository(session).upsert(
            "echo", description="", model="m", builtin_model=False, capabilities=[]
        )
        conversation = await ConversationRepository(session).add(
            Conversation(owner_id=user.id, agent_name="echo", workdir="workdirs/x")
        )
        await session.commit()
        return conversation.id
