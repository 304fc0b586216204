"""The `ctxpress` command: `serve` the chat service, manage `users`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.panel import Panel

from ctxpress.models import BUILTIN_NOTICE
from ctxpress.server.errors import ServiceError
from ctxpress.server.services.agents import AgentConfigError, AgentDefinition
from ctxpress.server.services.auth import AuthService, IssuedToken
from ctxpress.server.services.container import agent_definitions, open_database
from ctxpress.server.settings import Settings

app = typer.Typer(
    help="ctxpress: context compression for LangChain / LangGraph agents, and its chat service.",
    no_args_is_help=True,
)
users_app = typer.Typer(help="Users of the chat service and their API tokens.", no_args_is_help=True)
app.add_typer(users_app, name="users")

out = Console()
err = Console(stderr=True)

DataDirOption = Annotated[
    Path | None,
    typer.Option("--data-dir", help="SQLite files and workdirs [default: the user's data directory]."),
]
DatabaseUrlOption = Annotated[
    str | None,
    typer.Option("--database-url", help="PostgreSQL URL (env CTXPRESS_DATABASE_URL) [default: SQLite]."),
]


def _settings(**overrides: Any) -> Settings:
    try:
        return Settings(**{key: value for key, value in overrides.items() if value is not None})
    except ValueError as exc:
        err.print(f"[red]invalid settings:[/red] {exc}")
        raise typer.Exit(2) from None


@app.command()
def serve(
    data_dir: DataDirOption = None,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    database_url: DatabaseUrlOption = None,
    agents: Annotated[
        Path | None, typer.Option("--agents", help="Agents file (TOML) [default: one built-in agent].")
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning, error.")] = "info",
) -> None:
    """Run the chat service (HTTP API + SSE). The first start prints the admin token."""
    import uvicorn

    from ctxpress.server.app import create_app

    settings = _settings(data_dir=data_dir, database_url=database_url, agents_file=agents)
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        definitions = agent_definitions(settings)
    except AgentConfigError as exc:
        err.print(f"[red]agents file:[/red] {exc}")
        raise typer.Exit(2) from None
    admin = asyncio.run(first_start(settings))
    _print_banner(settings, definitions, host, port, admin)
    uvicorn.run(create_app(settings, agents=definitions), host=host, port=port, log_level=log_level.lower())


async def first_start(settings: Settings) -> IssuedToken | None:
    async with open_database(settings) as database:
        return await AuthService(database).ensure_admin()


def _print_banner(
    settings: Settings, definitions: list[AgentDefinition], host: str, port: int, admin: IssuedToken | None
) -> None:
    url = f"http://{host}:{port}"
    lines = [
        f"[bold]ctxpress chat service[/bold] on [link={url}]{url}[/link]  (API docs: {url}/docs)",
        f"database: {settings.database().describe()}",
        f"data dir: {settings.data_dir}",
        f"agents:   {', '.join(d.name + (' (built-in model)' if d.model.is_builtin else '') for d in definitions)}",
    ]
    out.print(Panel("\n".join(lines), expand=False))
    if any(definition.model.is_builtin for definition in definitions):
        out.print(f"[yellow]note:[/yellow] {BUILTIN_NOTICE}")
    if admin is not None:
        out.print(
            Panel(
                f"First start: created user [bold]{admin.user.name}[/bold]. Its API token (shown only now):\n\n"
                f"[bold green]{admin.token}[/bold green]\n\nSend it as 'Authorization: Bearer <token>'.",
                title="admin token",
                expand=False,
            )
        )


@users_app.command("create")
def create_user(
    name: Annotated[str, typer.Argument(help="User name (letters, digits, . _ @ -).")],
    admin: Annotated[bool, typer.Option("--admin", help="Make the user an administrator.")] = False,
    data_dir: DataDirOption = None,
    database_url: DatabaseUrlOption = None,
) -> None:
    """Create a user and print its API token (on stdout, alone, so scripts can capture it)."""
    settings = _settings(data_dir=data_dir, database_url=database_url)
    issued = _run_user_command(settings, lambda auth: auth.create_user(name, is_admin=admin))
    err.print(f"created user [bold]{issued.user.name}[/bold]; its API token (shown only now):")
    print(issued.token)


@users_app.command("token")
def issue_token(
    name: Annotated[str, typer.Argument(help="Existing user name.")],
    data_dir: DataDirOption = None,
    database_url: DatabaseUrlOption = None,
) -> None:
    """Print a new API token for an existing user (older tokens stay valid)."""
    settings = _settings(data_dir=data_dir, database_url=database_url)
    issued = _run_user_command(settings, lambda auth: auth.issue_token(name, label="ctxpress users token"))
    err.print(f"new API token for [bold]{issued.user.name}[/bold] (shown only now):")
    print(issued.token)


@users_app.command("list")
def list_users(data_dir: DataDirOption = None, database_url: DatabaseUrlOption = None) -> None:
    """List the users."""
    settings = _settings(data_dir=data_dir, database_url=database_url)

    async def names() -> list[str]:
        async with open_database(settings) as database:
            return [
                f"{user.name}{' (admin)' if user.is_admin else ''}"
                for user in await AuthService(database).list_users()
            ]

    for line in asyncio.run(names()):
        out.print(line)


def _run_user_command(
    settings: Settings, action: Callable[[AuthService], Awaitable[IssuedToken]]
) -> IssuedToken:
    async def run() -> IssuedToken:
        async with open_database(settings) as database:
            return await action(AuthService(database))

    try:
        return asyncio.run(run())
    except ServiceError as exc:
        err.print(f"[red]error:[/red] {exc.message}")
        raise typer.Exit(1) from None


if __name__ == "__main__":
    app()
