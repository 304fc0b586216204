"""The `ctxpress` console script. The script is installed with the library, but the command line
belongs to the application: without the `server` extra this says what to install instead of
failing with an import traceback."""

from __future__ import annotations

import sys

#: Top-level modules that only `ctxpress[server]` brings.
SERVER_EXTRA_MODULES = frozenset(
    {"typer", "rich", "fastapi", "uvicorn", "sqlalchemy", "alembic", "sse_starlette", "httpx", "redis"}
)


def main() -> None:
    try:
        from ctxpress.app.cli import app
    except ModuleNotFoundError as missing:
        if (missing.name or "").split(".")[0] not in SERVER_EXTRA_MODULES:
            raise
        sys.stderr.write(
            f"ctxpress: the command line needs the application's dependencies ({missing.name} is "
            "missing). Install them with:  pip install 'ctxpress[server]'\n"
        )
        raise SystemExit(2) from None
    app()
