"""`ctxpress users …` and the first start of `ctxpress serve` (on both databases)."""

from __future__ import annotations

import asyncio

from typer.testing import CliRunner

from ctxpress.app.cli import app, first_start
from ctxpress.app.server.runtime.container import open_database
from ctxpress.app.server.settings import Settings
from ctxpress.app.server.usecases.auth import TOKEN_PREFIX, AuthService

from .conftest import SettingsFactory

runner = CliRunner()


def cli_options(settings: Settings) -> list[str]:
    options = ["--data-dir", str(settings.data_dir)]
    return [*options, "--database-url", settings.database_url] if settings.database_url else options


async def user_of(settings: Settings, token: str) -> str | None:
    async with open_database(settings) as database:
        user = await AuthService(database).authenticate(token)
        return user.name if user else None


def test_users_create_prints_a_working_token(make_settings: SettingsFactory) -> None:
    settings = make_settings()
    created = runner.invoke(app, ["users", "create", "alice", *cli_options(settings)])
    assert created.exit_code == 0, created.output
    token = created.stdout.strip()
    assert token.startswith(TOKEN_PREFIX) and "\n" not in token
    assert asyncio.run(user_of(settings, token)) == "alice"

    again = runner.invoke(app, ["users", "create", "alice", *cli_options(settings)])
    assert again.exit_code == 1 and "already exists" in again.stderr

    second = runner.invoke(app, ["users", "token", "alice", *cli_options(settings)])
    assert second.exit_code == 0 and asyncio.run(user_of(settings, second.stdout.strip())) == "alice"
    listed = runner.invoke(app, ["users", "list", *cli_options(settings)])
    assert listed.exit_code == 0 and "alice" in listed.stdout
    bad_name = runner.invoke(app, ["users", "create", "no spaces", *cli_options(settings)])
    assert bad_name.exit_code == 1


def testfirst_start_creates_the_admin_once(make_settings: SettingsFactory) -> None:
    settings = make_settings()
    admin = asyncio.run(first_start(settings))
    assert admin is not None and admin.user.is_admin and admin.user.name == "admin"
    assert asyncio.run(user_of(settings, admin.token)) == "admin"
    assert asyncio.run(first_start(settings)) is None


def test_serve_rejects_a_broken_agents_file(make_settings: SettingsFactory) -> None:
    settings = make_settings()
    agents = settings.data_dir.parent / "agents.toml"
    agents.write_text(
        '[agents.kb]\nmodel = "builtin"\ntools = ["no_such_tool"]\nunknown_key = 1\n', encoding="utf-8"
    )
    result = runner.invoke(app, ["serve", "--agents", str(agents), *cli_options(settings)])
    assert result.exit_code == 2 and "unknown_key" in result.stderr
    assert "--data-dir" in runner.invoke(app, ["serve", "--help"]).stdout
    # --demo runs its own agent (issue 20, item 13): not together with an agents file.
    both = runner.invoke(app, ["serve", "--demo", "--agents", str(agents), *cli_options(settings)])
    assert both.exit_code == 2 and "--demo" in both.stderr


def test_the_demo_agent_shows_compression_within_a_few_messages() -> None:
    from ctxpress.app.server.agents_file import DEMO_COMPRESSION, default_agent, demo_agent

    demo = demo_agent()
    assert demo.compression == DEMO_COMPRESSION and demo.compression.threshold_tokens == 4 * 1024
    assert demo.tools == default_agent().tools and "query_kb" in demo.tools
    assert "--demo" in runner.invoke(app, ["serve", "--help"]).stdout
