"""The chat service: `create_app(settings)` (FastAPI), started by `ctxpress serve`."""

from ctxpress.app.server.app import create_app
from ctxpress.app.server.settings import Settings

__all__ = ["Settings", "create_app"]
