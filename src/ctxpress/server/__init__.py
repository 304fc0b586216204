"""The chat service: `create_app(settings)` (FastAPI), started by `ctxpress serve`."""

from ctxpress.server.app import create_app
from ctxpress.server.settings import Settings

__all__ = ["Settings", "create_app"]
