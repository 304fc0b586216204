"""Thin FastAPI routers: parse, check ownership through the services, shape the response."""

from ctxpress.app.server.routes import admin, compression, conversations, files, meta, metrics, runs

ROUTERS = (
    meta.router,
    conversations.router,
    runs.router,
    files.router,
    compression.router,
    admin.router,
    metrics.router,
)

__all__ = ["ROUTERS"]
