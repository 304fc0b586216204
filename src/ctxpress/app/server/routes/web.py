"""The web page: `/` and its static assets under `/static/` (HTML, CSS, ES modules shipped in the package).

Fully offline: no CDN, no build step. The page talks to the same JSON API with the user's bearer
token (sent by `fetch`, never in a URL). Every answer here carries a strict Content-Security-Policy:
scripts and styles only from this origin, no inline script, no framing.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Final

from fastapi import APIRouter
from fastapi.responses import FileResponse

from ctxpress.app.server.errors import NotFoundError

#: `src/ctxpress/app/web/static` (package data: pyproject ships `web/static/**/*`).
STATIC_DIR: Final = Path(__file__).resolve().parents[2] / "web" / "static"
INDEX_FILE: Final = "index.html"

_MEDIA_TYPES: Final = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".json": "application/json",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".woff2": "font/woff2",
    ".txt": "text/plain; charset=utf-8",
}

CONTENT_SECURITY_POLICY: Final = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data: blob:",
        "connect-src 'self'",
        "font-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
_SECURITY_HEADERS: Final = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    # Revalidate every time (ETag / Last-Modified): a new package version is picked up at once.
    "Cache-Control": "no-cache",
}

router = APIRouter(tags=["web"], include_in_schema=False)


def _static_file(relative: str) -> FileResponse:
    parts = PurePosixPath(relative).parts
    if not parts or any(_unsafe_part(part) for part in parts):
        raise NotFoundError("no such asset")
    path = STATIC_DIR.joinpath(*parts)
    media_type = _MEDIA_TYPES.get(path.suffix.lower())
    try:
        inside = path.resolve().is_relative_to(STATIC_DIR.resolve())
    except (OSError, ValueError):  # ValueError: what the OS cannot name (NUL is refused above)
        inside = False
    if media_type is None or not inside or not path.is_file():
        raise NotFoundError("no such asset")
    return FileResponse(path, media_type=media_type, headers=_SECURITY_HEADERS)


def _unsafe_part(part: str) -> bool:
    """Traversal, hidden files, backslashes and NUL (which the OS refuses with an error, not a 404)."""
    return part in ("..", ".") or part.startswith(".") or "\\" in part or "\x00" in part


@router.api_route("/", methods=["GET", "HEAD"])
async def index() -> FileResponse:
    """The single page (conversations, chat, status panel)."""
    return _static_file(INDEX_FILE)


@router.api_route("/static/{path:path}", methods=["GET", "HEAD"])
async def static_asset(path: str) -> FileResponse:
    return _static_file(path)
