"""`create_app(settings)`: the FastAPI application of the chat service.

Migrations, the checkpointer, the agents' graphs and the run worker start with the app (lifespan)
and stop with it. Every error, FastAPI's own included, answers with the one body of `errors.py`:
`{"error": {"code", "message", <its own fields>, "details"?}}`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ctxpress import __version__
from ctxpress.app.server.agents_file import AgentDefinition
from ctxpress.app.server.errors import (
    BadRequestError,
    InternalError,
    MalformedJsonError,
    PayloadTooLargeError,
    RequestValidationFailedError,
    ServiceError,
    error_for_status,
)
from ctxpress.app.server.log_context import install_run_context
from ctxpress.app.server.log_redaction import install_log_redaction
from ctxpress.app.server.routes import ROUTERS, web
from ctxpress.app.server.runtime.container import open_services
from ctxpress.app.server.schemas import DEFAULT_ERROR_RESPONSE
from ctxpress.app.server.settings import Settings

logger = logging.getLogger(__name__)


def create_app(
    settings: Settings | None = None, *, agents: Sequence[AgentDefinition] | None = None
) -> FastAPI:
    """The service. `agents` (Python definitions) replaces the agents file, e.g. in tests and embeddings."""
    resolved = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        install_log_redaction()  # uvicorn's handlers exist by now
        install_run_context()
        async with open_services(resolved, agents) as services:
            app.state.services = services
            yield

    app = FastAPI(
        title="ctxpress chat service",
        version=__version__,
        description="Agent conversations with context compression: runs, SSE events, usage, workdir files.",
        lifespan=lifespan,
        responses={"default": DEFAULT_ERROR_RESPONSE},
    )
    for router in ROUTERS:
        app.include_router(router)
    app.include_router(web.router)  # the page: / and /static/
    _install_error_handlers(app)
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=resolved.max_body_bytes)
    app.add_middleware(RequestActivityMiddleware)
    app.state.settings = resolved  # what serves it reads its HTTP settings here (`http_serving`)
    return app


def error_response(error: ServiceError) -> JSONResponse:
    """The one rendering of an error (`ServiceError.body()`), for every handler below."""
    headers = dict(error.headers) if error.headers else None
    return JSONResponse(error.body(), status_code=error.status_code, headers=headers)


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(_validation_failure(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(error_for_status(exc.status_code, str(exc.detail)))

    @app.exception_handler(Exception)
    async def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(InternalError("internal error; see the service log"))


def _validation_failure(exc: RequestValidationError) -> ServiceError:
    errors = exc.errors()
    if any(error.get("type") == "json_invalid" for error in errors):
        return MalformedJsonError("the request body is not valid JSON")
    # Only where and what: echoing the rejected input back could be large or sensitive.
    details = [
        {
            "loc": list(error.get("loc", ())),
            "message": error.get("msg", ""),
            "type": error.get("type", ""),
        }
        for error in errors
    ]
    return RequestValidationFailedError("the request is not valid", details=details)


class RequestActivityMiddleware:
    """Counts each HTTP request as activity until its response starts, so that runs about to
    start let it go first (`runtime/intake_activity.py`)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        services = getattr(scope["app"].state, "services", None) if scope["type"] == "http" else None
        if services is None:  # lifespan, or no services (yet)
            await self.app(scope, receive, send)
            return
        with services.runs.intake.request_in_progress() as answered:

            async def send_noting_the_answer(message: Message) -> None:
                if message["type"] == "http.response.start":
                    answered()
                await send(message)

            await self.app(scope, receive, send_noting_the_answer)


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
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await error_response(BadRequestError("invalid Content-Length"))(scope, receive, send)
                    return
                if declared > self.max_bytes:
                    # Rendered only here: a JSON response per request would cost every request.
                    too_large = PayloadTooLargeError(
                        f"the request body is larger than {self.max_bytes} bytes"
                    )
                    await error_response(too_large)(scope, receive, send)
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
