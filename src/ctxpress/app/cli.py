"""The `ctxpress` command: `serve` the chat service, manage `users` and the knowledge base (`kb`),
`replay` recorded conversations through the middleware, and `doctor` one conversation."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Column, Table

from ctxpress.app.doctor import ConversationNotFoundError, DoctorReport, diagnose
from ctxpress.app.kb import KnowledgeBase, KnowledgeBaseError
from ctxpress.app.kb.documents import DocumentFormatError
from ctxpress.app.models import BUILTIN_NOTICE, replay_summary_model
from ctxpress.app.owner_only import NotOwnerOnlyError
from ctxpress.app.server.agents_file import AgentConfigError, AgentDefinition, demo_agent
from ctxpress.app.server.errors import ServiceError
from ctxpress.app.server.knowledge import open_knowledge_base
from ctxpress.app.server.runtime.container import agent_definitions, open_database
from ctxpress.app.server.settings import Settings
from ctxpress.app.server.usecases.auth import AuthService, IssuedToken
from ctxpress.config import CompressionConfig
from ctxpress.events import L1, L2
from ctxpress.tools.replay_report import (
    ConversationFigures,
    ReplayReport,
    model_calls,
    render_html,
    replay_conversation,
    report_as_dict,
)
from ctxpress.tools.traces import iter_conversations

app = typer.Typer(
    help="ctxpress: context compression for LangChain / LangGraph agents, and its chat service.",
    no_args_is_help=True,
)
users_app = typer.Typer(help="Users of the chat service and their API tokens.", no_args_is_help=True)
app.add_typer(users_app, name="users")
kb_app = typer.Typer(
    help="The knowledge base `query_kb` searches (SQLite FTS5 or the service's PostgreSQL).",
    no_args_is_help=True,
)
app.add_typer(kb_app, name="kb")

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
AgentsOption = Annotated[
    Path | None, typer.Option("--agents", help="Agents file (TOML) [default: one built-in agent].")
]


@contextlib.contextmanager
def _data_dir_checked() -> Iterator[None]:
    """A data directory or SQLite file others can read, that cannot be restricted: exit 2, saying why."""
    try:
        yield
    except NotOwnerOnlyError as exc:
        err.print(f"[red]data directory:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from None


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
    agents: AgentsOption = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning, error.")] = "info",
    demo: Annotated[
        bool,
        typer.Option(
            "--demo",
            help="One built-in agent with a 4K threshold: compression shows within a few messages.",
        ),
    ] = False,
    redis_url: Annotated[
        str | None,
        typer.Option(
            "--redis-url",
            help="Redis shared by several processes (env CTXPRESS_REDIS_URL): failed-authentication counts.",
        ),
    ] = None,
) -> None:
    """Run the chat service (HTTP API + SSE). The first start prints the admin token."""
    from ctxpress.app.server.app import create_app
    from ctxpress.app.server.http_serving import serve_http

    settings = _settings(
        data_dir=data_dir, database_url=database_url, agents_file=agents, redis_url=redis_url
    )
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if demo and agents is not None:
        err.print("[red]--demo[/red] runs its own agent: leave out --agents")
        raise typer.Exit(2)
    try:
        definitions = [demo_agent()] if demo else agent_definitions(settings)
    except AgentConfigError as exc:
        err.print(f"[red]agents file:[/red] {exc}")
        raise typer.Exit(2) from None
    with _data_dir_checked():
        admin = asyncio.run(first_start(settings))
    _print_banner(
        settings, definitions, host, port, admin, _knowledge_base_status(open_knowledge_base(settings))
    )
    serve_http(create_app(settings, agents=definitions), settings, host=host, port=port, log_level=log_level)


async def first_start(settings: Settings) -> IssuedToken | None:
    async with open_database(settings) as database:
        return await AuthService(database).ensure_admin()


def _knowledge_base_status(knowledge_base: KnowledgeBase) -> str:
    """Prepare the knowledge base now (tables, the shipped docs), so a problem shows at start."""
    try:
        documents = knowledge_base.documents()
    except KnowledgeBaseError as exc:
        return f"[red]unavailable[/red]: {escape(str(exc))} (query_kb answers with this error)"
    added = sum(1 for document in documents if document.origin == "user")
    return f"{knowledge_base.describe()}: {len(documents) - added} ctxpress docs + {added} added (`ctxpress kb add`)"


def _print_banner(
    settings: Settings,
    definitions: list[AgentDefinition],
    host: str,
    port: int,
    admin: IssuedToken | None,
    knowledge_base: str,
) -> None:
    url = f"http://{host}:{port}"
    lines = [
        f"[bold]ctxpress chat service[/bold] on [link={url}]{url}[/link]  (API docs: {url}/docs)",
        f"database: {settings.database().describe()}",
        f"data dir: {settings.data_dir}",
        f"agents:   {', '.join(d.name + (' (built-in model)' if d.model.is_builtin else '') for d in definitions)}",
        f"knowledge base: {knowledge_base}",
    ]
    out.print(Panel("\n".join(lines), expand=False))
    if any(definition.model.is_builtin for definition in definitions):
        out.print(f"[yellow]note:[/yellow] {BUILTIN_NOTICE}")
    for notice in dict.fromkeys(notice for definition in definitions for notice in definition.notices):
        out.print(f"[yellow]note:[/yellow] {escape(notice)}")
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


_DURATION = re.compile(r"^\s*(\d+)\s*([smhd]?)\s*$")
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    """`90s`, `30m`, `12h`, `30d` or plain seconds."""
    match = _DURATION.match(text.lower())
    if match is None or int(match.group(1)) == 0:
        raise typer.BadParameter("give a duration such as 3600, 90m, 12h or 30d")
    return timedelta(seconds=int(match.group(1)) * _DURATION_UNITS[match.group(2)])


@users_app.command("token")
def issue_token(
    name: Annotated[str, typer.Argument(help="Existing user name.")],
    label: Annotated[str, typer.Option(help="What the token is for (shown in `users tokens`).")] = (
        "ctxpress users token"
    ),
    expires_in: Annotated[
        str | None, typer.Option("--expires-in", help="Expire after this long: 3600, 90m, 12h, 30d.")
    ] = None,
    data_dir: DataDirOption = None,
    database_url: DatabaseUrlOption = None,
) -> None:
    """Print a new API token for an existing user (older tokens stay valid)."""
    settings = _settings(data_dir=data_dir, database_url=database_url)
    lifetime = parse_duration(expires_in) if expires_in is not None else None
    issued = _run_user_command(
        settings, lambda auth: auth.issue_token(name, label=label, expires_in=lifetime)
    )
    expiry = f", expires {issued.expires_at:%Y-%m-%d %H:%M:%S} UTC" if issued.expires_at else ""
    err.print(
        f"new API token for [bold]{issued.user.name}[/bold] (id {issued.token_id}{expiry}; shown only now):"
    )
    print(issued.token)


@users_app.command("tokens")
def list_tokens(
    name: Annotated[str | None, typer.Argument(help="Only this user's tokens.")] = None,
    data_dir: DataDirOption = None,
    database_url: DatabaseUrlOption = None,
) -> None:
    """List the API tokens: id, user, label, dates and status (never the tokens themselves)."""
    settings = _settings(data_dir=data_dir, database_url=database_url)
    tokens = _run_user_command(settings, lambda auth: auth.list_tokens(name))
    table = Table(Column("id", no_wrap=True), "user", "label", "created (UTC)", "expires (UTC)", "status")
    for token in tokens:
        table.add_row(
            token.id,
            escape(token.user),
            escape(token.label),
            f"{token.created_at:%Y-%m-%d %H:%M}",
            f"{token.expires_at:%Y-%m-%d %H:%M}" if token.expires_at else "never",
            token.status,
        )
    out.print(table)


@users_app.command("revoke")
def revoke_token(
    token_id: Annotated[str, typer.Argument(help="The token's id (from `ctxpress users tokens`).")],
    data_dir: DataDirOption = None,
    database_url: DatabaseUrlOption = None,
) -> None:
    """Revoke an API token: it stops working at once, on every service process."""
    settings = _settings(data_dir=data_dir, database_url=database_url)
    token = _run_user_command(settings, lambda auth: auth.revoke_token(token_id))
    out.print(f"revoked token {token.id} of [bold]{escape(token.user)}[/bold] ({escape(token.label)})")


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


T = TypeVar("T")


def _run_user_command(settings: Settings, action: Callable[[AuthService], Awaitable[T]]) -> T:
    async def run() -> T:
        async with open_database(settings) as database:
            return await action(AuthService(database))

    try:
        with _data_dir_checked():
            return asyncio.run(run())
    except ServiceError as exc:
        err.print(f"[red]error:[/red] {exc.message}")
        raise typer.Exit(1) from None


# --- the knowledge base -----------------------------------------------------------------------------


def _knowledge_base(data_dir: Path | None, database_url: str | None) -> KnowledgeBase:
    return open_knowledge_base(_settings(data_dir=data_dir, database_url=database_url))


@kb_app.command("add")
def kb_add(
    paths: Annotated[list[Path], typer.Argument(help="Markdown, text or JSON files, or folders of them.")],
    data_dir: DataDirOption = None,
    database_url: DatabaseUrlOption = None,
) -> None:
    """Add documents (a file added again replaces its earlier version)."""
    knowledge_base = _knowledge_base(data_dir, database_url)
    try:
        report = knowledge_base.add_paths(paths)
    except (KnowledgeBaseError, DocumentFormatError) as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(1) from None
    out.print(
        f"added {report.documents:,} documents ({report.chunks:,} chunks) from {report.files:,} files "
        f"to {knowledge_base.describe()}"
    )
    for original, renamed in list(report.renamed_ids.items())[:10]:
        out.print(f"  id {original!r} was taken by another source: stored as {renamed!r}")


@kb_app.command("search")
def kb_search(
    query: Annotated[str, typer.Argument(help="What to look for (Chinese or English).")],
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=50, help="Results to show.")] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="Print the JSON `query_kb` returns.")] = False,
    data_dir: DataDirOption = None,
    database_url: DatabaseUrlOption = None,
) -> None:
    """Search the knowledge base the way the `query_kb` tool does."""
    try:
        result = _knowledge_base(data_dir, database_url).search(query, limit)
    except KnowledgeBaseError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(1) from None
    if as_json:
        print(result.to_json())
        return
    out.print(f"{len(result.hits)} results for {query!r} (terms: {', '.join(result.terms) or 'none'})")
    for rank, hit in enumerate(result.hits, start=1):
        out.print(
            f"[bold]{rank}. {escape(hit.title)}[/bold]  [{escape(hit.id)}] {escape(hit.source)}  score {hit.score}"
        )
        out.print("   " + escape(" ".join(hit.content.split())[:200]))


@kb_app.command("list")
def kb_list(data_dir: DataDirOption = None, database_url: DatabaseUrlOption = None) -> None:
    """List the documents."""
    try:
        documents = _knowledge_base(data_dir, database_url).documents()
    except KnowledgeBaseError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(1) from None
    table = Table("id", "title", "source", "origin", "chunks")
    for document in documents:
        table.add_row(
            document.id, document.title, document.source, document.origin, str(document.chunk_count)
        )
    out.print(table)


# --- replay -------------------------------------------------------------------------------------------


class CallsShown(StrEnum):
    auto = "auto"
    all = "all"
    compressed = "compressed"
    none = "none"


@app.command()
def replay(
    trace: Annotated[
        Path, typer.Argument(help="A trace file or a folder of them (OpenAI JSON/JSONL, SWE-agent, …).")
    ],
    threshold: Annotated[float | None, typer.Option("--threshold", help="summary_threshold in K.")] = None,
    keep: Annotated[int | None, typer.Option("--keep", help="summary_keep_messages.")] = None,
    tool_limit: Annotated[
        int | None, typer.Option("--tool-limit", help="summary_tool_result_token_limit.")
    ] = None,
    profile: Annotated[str | None, typer.Option("--profile", help="token_profile of the estimate.")] = None,
    context_window: Annotated[
        int | None,
        typer.Option("--context-window", min=1, help="The target model's context window, in tokens."),
    ] = None,
    report: Annotated[Path | None, typer.Option("--report", help="Write an HTML report here.")] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write the per-call figures as JSON here.")
    ] = None,
    calls: Annotated[
        CallsShown,
        typer.Option(
            help="Calls to print: all, compressed, none; auto = all for one conversation, else compressed."
        ),
    ] = CallsShown.auto,
    only: Annotated[
        str | None, typer.Option("--only", help="Only conversations whose name contains this.")
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="At most this many conversations.")
    ] = None,
    workdir: Annotated[
        Path | None,
        typer.Option("--workdir", help="Keep the files written here [default: a temporary folder]."),
    ] = None,
) -> None:
    """Replay recorded conversations through the middleware with the offline summary model (S23).

    Per model call: the estimate, the L1/L2 decision, the files written and the tokens saved.
    """
    config = _replay_config(threshold, keep, tool_limit, profile)
    try:
        conversations = [c for c in iter_conversations(trace) if only is None or only in c.name][:limit]
    except (OSError, ValueError) as exc:
        err.print(f"[red]cannot read the trace:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from None
    if not conversations:
        err.print(f"[red]no conversations found in {escape(str(trace))}[/red]")
        raise typer.Exit(2)
    shown = (
        calls
        if calls != CallsShown.auto
        else (CallsShown.all if len(conversations) == 1 else CallsShown.compressed)
    )
    result = ReplayReport(trace=trace.name or str(trace), config=config, context_window=context_window)
    out.print(
        f"replaying {_count(len(conversations), 'conversation')}: threshold {config.threshold_tokens:,} tokens, keep "
        f"{config.summary_keep_messages}, tool limit {config.summary_tool_result_token_limit}, profile "
        f"{config.token_profile}" + (f", context window {context_window:,}" if context_window else "")
    )
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    summary_model = replay_summary_model(config.threshold_tokens)
    with Progress(*columns, console=out, transient=True) as progress:
        task = progress.add_task("model calls", total=sum(model_calls(c) for c in conversations))
        for conversation in conversations:
            progress.update(task, description=escape(conversation.name[-48:]))
            figures = replay_conversation(
                conversation,
                config,
                summary_model,
                workdir_root=workdir,
                on_call=lambda _call: progress.advance(task),
            )
            result.conversations.append(figures)
            _print_calls(figures, result, shown)
    _print_replay_summary(result)
    if json_out is not None:
        json_out.write_text(
            json.dumps(report_as_dict(result), ensure_ascii=False, indent=1), encoding="utf-8"
        )
        out.print(f"figures: {json_out}")
    if report is not None:
        report.write_text(render_html(result), encoding="utf-8")
        out.print(f"report: {report}")
    if any(conversation.error for conversation in result.conversations):
        raise typer.Exit(1)


def _count(number: int, noun: str) -> str:
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def _replay_config(
    threshold: float | None, keep: int | None, tool_limit: int | None, profile: str | None
) -> CompressionConfig:
    overrides = {
        "summary_threshold": threshold,
        "summary_keep_messages": keep,
        "summary_tool_result_token_limit": tool_limit,
        "token_profile": profile,
    }
    try:
        base = CompressionConfig.from_env()
        return CompressionConfig.from_mapping(
            {**base.model_dump(), **{key: value for key, value in overrides.items() if value is not None}}
        )
    except ValueError as exc:
        err.print(f"[red]invalid settings:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from None


def _print_calls(figures: ConversationFigures, report: ReplayReport, shown: CallsShown) -> None:
    rows = [
        call
        for call in figures.calls
        if shown == CallsShown.all or (shown == CallsShown.compressed and call.level)
    ]
    if figures.error:
        out.print(f"[red]{escape(figures.name)}: {escape(figures.error)}[/red]")
    if not rows:
        return
    table = Table(
        "call",
        "msg",
        Column("estimate", justify="right"),
        Column("of threshold", justify="right"),
        "decision",
        Column("sent", justify="right"),
        Column("saved", justify="right"),
        Column("files written", overflow="fold"),
        title=escape(f"{figures.name} ({figures.source}, {figures.messages} messages)"),
        title_justify="left",
    )
    for call in rows:
        decision = {None: "—", L1: "[yellow]L1[/yellow]", L2: "[red]L2[/red]"}[call.level]
        if call.failed:
            decision += f" [red]failed: {escape(call.failed[:60])}[/red]"
        sent = f"{call.tokens_sent:,}" + (
            " [magenta](over window)[/magenta]" if report.over_window(call) else ""
        )
        table.add_row(
            str(call.number),
            str(call.position),
            f"{call.tokens_before:,}",
            f"{call.tokens_before / report.threshold:.0%}",
            decision,
            sent,
            f"{call.tokens_saved:,}" if call.level else "",
            escape("\n".join(call.files_written)),
        )
    out.print(table)


def _print_replay_summary(report: ReplayReport) -> None:
    failed = [conversation for conversation in report.conversations if conversation.error]
    lines = [
        f"{_count(len(report.conversations), 'conversation')}, {_count(len(report.calls), 'model call')}: "
        f"{report.count(L1):,} with L1 only, {report.count(L2):,} with L2 (summary)",
        f"tokens saved (approximate): {report.tokens_saved:,}",
    ]
    if report.context_window:
        lines.append(
            f"calls still over the {report.context_window:,}-token context window: {report.calls_over_window:,}"
        )
    fixed = report.fixed_over_threshold
    if fixed:
        lines.append(
            f"[yellow]{len(fixed)} conversations carry a system prompt + tool schemas of at least the threshold "
            f"(up to {max(c.fixed_tokens for c in fixed):,} tokens): every request compresses; raise the threshold[/yellow]"
        )
    if failed:
        lines.append(f"[red]{len(failed)} conversations failed to replay[/red]")
    out.print(Panel("\n".join(lines), title="replay", expand=False))


# --- doctor -------------------------------------------------------------------------------------------


@app.command()
def doctor(
    conversation: Annotated[str, typer.Argument(help="The conversation id.")],
    data_dir: DataDirOption = None,
    database_url: DatabaseUrlOption = None,
    agents: AgentsOption = None,
    context_window: Annotated[
        int | None,
        typer.Option("--context-window", min=1, help="The main model's context window, if it declares none."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the findings as JSON.")] = False,
) -> None:
    """Walk the spec's symptom table for one conversation. Exit status 1 when a problem is found."""
    settings = _settings(data_dir=data_dir, database_url=database_url, agents_file=agents)
    try:
        report = asyncio.run(diagnose(settings, conversation, context_window=context_window))
    except ConversationNotFoundError as exc:
        err.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(2) from None
    except AgentConfigError as exc:
        err.print(f"[red]agents file:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from None
    if as_json:
        print(json.dumps(report.as_dict(), ensure_ascii=False, indent=1, default=str))
    else:
        _print_doctor(report)
    if report.problems:
        raise typer.Exit(1)


def _print_doctor(report: DoctorReport) -> None:
    out.print(
        Panel(
            "\n".join(escape(line) for line in report.overview),
            title=f"conversation {report.conversation_id}",
            expand=False,
        )
    )
    marks = {"ok": "[green]ok[/green]", "problem": "[red]FOUND[/red]", "info": "[cyan]info[/cyan]"}
    for finding in report.findings:
        out.print(f"{marks[finding.status]}  [bold]{escape(finding.title)}[/bold]")
        out.print(f"      {escape(finding.summary)}")
        for detail in finding.details:
            out.print(f"      · {escape(detail)}", soft_wrap=True)
    count = len(report.problems)
    out.print(f"{count} problem{'s' if count != 1 else ''} found" if count else "no problems found")


if __name__ == "__main__":
    app()
