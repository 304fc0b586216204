"""The page's routes and assets without a browser: `/`, `/static/…`, security headers, offline assets,
module imports that resolve, and interface strings present in both languages."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ctxpress.app.server.app import create_app
from ctxpress.app.server.routes.web import STATIC_DIR
from ctxpress.app.server.settings import Settings

JS_DIR = STATIC_DIR / "js"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(data_dir=tmp_path / "data"))) as test_client:
        yield test_client


def test_the_page_is_served_at_the_root_with_a_strict_policy(client: TestClient) -> None:
    response = client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    policy = response.headers["content-security-policy"]
    assert (
        "script-src 'self'" in policy and "unsafe-inline" not in policy and "frame-ancestors 'none'" in policy
    )
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"
    html = response.text
    assert '<script type="module" src="/static/js/main.js"></script>' in html
    assert '<html lang="zh-CN">' in html
    assert client.head("/").status_code == 200


@pytest.mark.parametrize(
    ("path", "media_type"),
    [
        ("/static/js/main.js", "text/javascript; charset=utf-8"),
        ("/static/css/app.css", "text/css; charset=utf-8"),
        ("/static/icon.svg", "image/svg+xml"),
    ],
)
def test_assets_have_their_types(client: TestClient, path: str, media_type: str) -> None:
    response = client.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"] == media_type
    assert response.headers["cache-control"] == "no-cache"
    assert "etag" in response.headers


@pytest.mark.parametrize(
    "path",
    [
        "/static/js/missing.js",
        "/static/js/",
        "/static/",
        "/static/../routes/web.py",
        "/static/%2e%2e/%2e%2e/server/routes/web.py",
        "/static/js/..%2f..%2findex.html",
        "/static/.hidden",
        "/static/js%5cmain.js",
    ],
)
def test_nothing_outside_the_assets_is_served(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_the_api_is_unchanged_by_the_page(client: TestClient) -> None:
    assert client.get("/api/me").status_code == 401
    assert client.get("/api/health").json()["status"] == "ok"


def _asset_files() -> list[Path]:
    return sorted(path for path in STATIC_DIR.rglob("*") if path.is_file())


def test_assets_load_nothing_from_the_network() -> None:
    """Fully offline: no CDN, no remote font or script (the SVG namespace is a name, not a request)."""
    remote = re.compile(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/", re.IGNORECASE)
    for path in _asset_files():
        text = path.read_text(encoding="utf-8").replace('xmlns="http://www.w3.org/2000/svg"', "")
        assert not remote.search(text), f"{path.relative_to(STATIC_DIR)} refers to the network"


def test_module_imports_resolve() -> None:
    imports = re.compile(r"""^\s*import\s.*?from\s+["'](\./[^"']+)["'];?\s*$""", re.MULTILINE)
    for path in JS_DIR.glob("*.js"):
        for target in imports.findall(path.read_text(encoding="utf-8")):
            assert (path.parent / target).is_file(), f"{path.name} imports missing {target}"
    html = (STATIC_DIR / "index.html").read_text(encoding="utf-8")
    for reference in re.findall(r'(?:src|href)="(/static/[^"]+)"', html):
        assert (STATIC_DIR / reference.removeprefix("/static/")).is_file(), reference


def _dictionary(source: str, language: str) -> set[str]:
    start = source.index(f"  {language}: {{")
    end = source.index("\n  },", start)
    return set(re.findall(r"^\s{4}(\w+):", source[start:end], re.MULTILINE))


def test_every_string_exists_in_chinese_and_english() -> None:
    source = (JS_DIR / "i18n.js").read_text(encoding="utf-8")
    chinese, english = _dictionary(source, "zh"), _dictionary(source, "en")
    assert chinese == english, {"only zh": chinese - english, "only en": english - chinese}
    used: set[str] = set()
    for path in JS_DIR.glob("*.js"):
        used |= set(re.findall(r"""\bt\(\s*["'](\w+)["']""", path.read_text(encoding="utf-8")))
    html = (STATIC_DIR / "index.html").read_text(encoding="utf-8")
    used |= set(re.findall(r'data-i18n(?:-placeholder|-aria-label)?="(\w+)"', html))
    assert used - chinese == set(), "strings used but not defined"
