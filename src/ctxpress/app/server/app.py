"""`create_app(settings)`: the FastAPI application of the chat service.

Migrations, the checkpointer, the agents' graphs and the run worker start with the app (lifespan)
and stop with it. Every error answers with one JSON shape: `{"error": {"code", "message", "details"?}}`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ctxpress import __version__
from ctxpress.app.server.errors import PayloadTooLargeError, ServiceError
from ctxpress.app.server.log_redaction import install_log_redaction
from ctxpress.app.server.routes import ROUTERS, web
from ctxpress.app.server.runtime.agents import AgentDefinition
from ctxpress.app.server.runtime.container import open_services
from ctxpress.app.server.settings import Settings

logger = logging.getLogger(__name__)

_STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


def create_app(
    settings: Settings | None = None, *, agents: Sequence[AgentDefinition] | None = None
) -> FastAPI:
    """The service. `agents` (Python definitions) replaces the agents file, e.g. in tests and embeddings."""
    resolved = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        install_log_redaction()  # uvicorn's handlers exist by now
        async with open_services(resolved, agents) as services:
            app.state.services = services
            yield

    app = FastAPI(
        title="ctxpress chat service",
        version=__version__,
        description="Agent conversations with context compression: runs, SSE events, usage, workdir files.",
        lifespan=lifespan,
    )
    for router in ROUTERS:
        app.include_router(router)
    app.include_router(web.router)  # the page: / and /static/
    _install_error_handlers(app)
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=resolved.max_body_bytes)
    return app


def error_response(status_code: int, code: str, message: str, details: Any = None) -> JSONResponse:
    error: dict[str, Any] = {"code": code, "message": message}
    if details is not None:
        error["details"] = details
    headers = {"WWW-Authenticate": "Bearer"} if status_code == 401 else None
    return JSONResponse({"error": error}, status_code=status_code, headers=headers)


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError) -> JSONResponse:
        response = error_response(exc.status_code, exc.code, exc.message, exc.details)
        response.headers.update(exc.headers())
        return response

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if any(error.get("type") == "json_invalid" for error in errors):
            return error_response(400, "malformed_json", "the request body is not valid JSON")
        # Only where and what: echoing the rejected input back could be large or sensitive.
        details = [
            {
                "loc": list(error.get("loc", ())),
                "message": error.get("msg", ""),
                "type": error.get("type", ""),
            }
            for error in errors
        ]
        return error_response(422, "validation_error", "the request is not valid", details)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _STATUS_CODES.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal_error", "internal error; see the service log")


class BodySizeLimitMiddleware:
    """Rejects bodies over `max_bytes` with a JSON 413, by Content-Length or while a chunked body streams in.

    (FastAPI's own `max_body_size` answers some of these cases in plain text.)
    """

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = error_response(
            413, PayloadTooLargeError.code, f"the request body is larger than {self.max_bytes} bytes"
        )
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await error_response(400, "bad_request", "invalid Content-Length")(scope, receive, send)
                    return
                if declared > self.max_bytes:
                    await too_large(scope, receive, send)
                    return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # An HTTPException passes FastAPI's body reader unchanged and reaches the JSON handler.
                    raise StarletteHTTPException(
                        413, f"the request body is larger than {self.max_bytes} bytes"
                    )
            return message

        await self.app(scope, limited_receive, send)
