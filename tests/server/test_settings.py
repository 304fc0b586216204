"""Settings: `CTXPRESS_` environment, database URLs, where files go."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxpress.app.server.settings import Settings, default_data_dir, resolve_database_url


def test_environment_and_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CTXPRESS_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("CTXPRESS_USAGE_EXCLUDED_PROVIDERS", "SiliconFlow, deepseek ,")
    monkeypatch.setenv("CTXPRESS_SUMMARY_THRESHOLD", "64")  # a CompressionConfig variable: ignored here
    settings = Settings()
    assert settings.data_dir == tmp_path and settings.usage_excluded_providers == ("siliconflow", "deepseek")
    target = settings.database()
    assert target.backend == "sqlite" and target.checkpoint_target == str(tmp_path / "checkpoints.sqlite3")
    monkeypatch.delenv("CTXPRESS_USAGE_EXCLUDED_PROVIDERS")
    assert Settings().usage_excluded_providers == ("siliconflow", "siliconflow-cn")
    assert default_data_dir().name == "ctxpress"


def test_database_urls() -> None:
    postgres = resolve_database_url("postgres://app:secret@db.internal:5432/ctx?options=-csearch_path%3Dx")
    assert postgres.backend == "postgresql"
    assert postgres.sqlalchemy_url.drivername == "postgresql+psycopg"
    assert postgres.checkpoint_target.startswith("postgresql://app:secret@db.internal:5432/ctx")
    assert "secret" not in postgres.describe()
    sqlite = resolve_database_url("sqlite:///ctx/app.db")
    assert sqlite.sqlalchemy_url.drivername == "sqlite+aiosqlite"
    assert sqlite.checkpoint_target == "ctx/app.checkpoints.db"
    for bad in ("mysql://x/y", "sqlite://", "not a url"):
        with pytest.raises(ValueError):
            resolve_database_url(bad)
    with pytest.raises(ValueError, match="unsupported database"):
        Settings(database_url="mysql://x/y")
