"""The page's routes and assets without a browser: `/`, `/static/…`, security headers, offline assets,
module imports that resolve, and interface strings present in both languages."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


def _values(vocabulary: dict[str, Any]) -> set[str]:
    found: set[str] = set()
    for value in vocabulary.values():
        if isinstance(value, dict):
            found |= set(value.values())
        elif isinstance(value, list):
            found |= set(value)
        elif isinstance(value, str):
            found.add(value)
    return found


def test_no_module_copies_a_value_of_the_vocabulary(client: TestClient) -> None:
    """Names the service defines reach the page through `GET /api/vocabulary`, never as copies.

    (Short plain words such as "message" or "error" are also CSS classes and element names: only
    values a module could not spell by accident are looked for — with `_`, `:`, `/` or `[`.)
    """
    vocabulary = client.get("/api/vocabulary").json()
    distinctive = {value for value in _values(vocabulary) if re.search(r"[_:/\[]", value)}
    assert {"context_compression", "thread_busy", "[ctxpress:summary]"} <= distinctive  # the premise
    literal = re.compile(r"""(["'`])((?:(?!\1).)*)\1""")
    comment = re.compile(r"/\*.*?\*/|(?:^|(?<=\s))//[^\n]*", re.DOTALL | re.MULTILINE)
    for path in JS_DIR.glob("*.js"):
        source = comment.sub("", path.read_text(encoding="utf-8"))
        copies = {text for _quote, text in literal.findall(source) if text in distinctive}
        assert copies == set(), f"{path.name} copies {copies}"
        assert str(vocabulary["suggest_ratio"]) not in source, path.name
        assert f".{vocabulary['summary_event_key']}" not in source, path.name


def test_the_page_has_words_for_every_value_it_shows(client: TestClient) -> None:
    """Statuses, levels, reasons and failed parts come from the service; the page looks up their words."""
    vocabulary = client.get("/api/vocabulary").json()
    source = (JS_DIR / "i18n.js").read_text(encoding="utf-8")
    words = _dictionary(source, "zh")
    # A compression is put in words by what happened (issue 20): running, failed, or by its level.
    wanted = {"ev_running", "ev_failed"} | {f"ev_{level}" for level in vocabulary["levels"].values()}
    wanted |= {f"nothing_{code}" for code in vocabulary["compress_reasons"]}
    wanted |= {f"evLevel_{level}" for level in vocabulary["levels"].values()}
    wanted |= {f"busy_{reason}" for reason in vocabulary["busy_reasons"]}
    wanted |= {f"status_{reason}" for reason in vocabulary["busy_reasons"]}
    wanted |= {f"queuedBecause_{reason}" for reason in vocabulary["queued_reasons"]}
    wanted |= {f"part_{part}" for part in vocabulary["failed_parts"]}
    wanted |= {f"group_{folder.rsplit('/', 1)[-1]}" for folder in vocabulary["workdir_dirs"].values()}
    assert wanted - words == set()
