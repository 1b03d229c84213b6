"""``agenttx connect <app>``: the configuration that makes an agent app start ``agenttx mcp``
(or reach a running server's ``/mcp``), printed in the app's own format with the app's own
command where it has one, or merged into its user config with ``--write``.

apps.py holds the apps as data, launch.py what they launch, config_file.py the safe merge.
docs/connect.md is the user's page.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import click

from agenttx.cli.common import echo_json, json_option
from agenttx.cli.connect.apps import APPS, SERVER_NAME, App, Host, Http, Launch, shell_line
from agenttx.cli.connect.config_file import ConfigError, render, write_entry
from agenttx.cli.connect.launch import (
    EngineOptions,
    LaunchError,
    find_executable,
    http_launch,
    stdio_launch,
)

__all__ = ["connect"]


def this_host() -> Host:
    # Path.home() reads $HOME on POSIX, so a HOME set for one run is the home used.
    return Host(home=Path.home(), environ=os.environ, platform=sys.platform, cwd=Path.cwd())


@click.command()
@click.argument("app_name", metavar="[APP]", required=False)
@click.argument("mcp_args", metavar="[-- MCP_ARGS...]", nargs=-1, type=click.UNPROCESSED)
@click.option(
    "--write", is_flag=True, help="Merge the entry into the app's user config (backup kept)."
)
@click.option(
    "--http",
    "http_url",
    metavar="URL",
    help="The streamable-HTTP form: the app connects to a running `agenttx serve "
    "--http-addr` at URL (a bare http://host:port gets /mcp).",
)
@click.option(
    "--server",
    metavar="HOST:PORT",
    help="`agenttx mcp` drives the AgentTx running there over gRPC instead of embedding one.",
)
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    help="The embedded engine's data directory, made absolute.  "
    "[default: a per-user directory, shared by every app]",
)
@click.option("--store", metavar="URL", help="The embedded engine's store URL.")
@click.option("--fs-root", type=click.Path(path_type=Path), help="Sandbox of the fs.* tools.")
@click.option("--tools", multiple=True, metavar="MODULE[:ATTR]", help="User tools (repeatable).")
@json_option
def connect(
    app_name: str | None,
    mcp_args: tuple[str, ...],
    write: bool,
    http_url: str | None,
    server: str | None,
    data_dir: Path | None,
    store: str | None,
    fs_root: Path | None,
    tools: tuple[str, ...],
    as_json: bool,
) -> None:
    """Configure an agent app to use AgentTx over MCP.

    APP is one of claude-code, codex, claude-desktop, cursor, vscode, gemini, windsurf.
    Without APP: every app, where its config lives and what it would get. With APP: the
    app's configuration and its own command to add it. With --write: merged into the app's
    user config, keeping everything else, with a timestamped backup beside it; running it
    again changes nothing. Words after `--` are passed to `agenttx mcp` as they are.
    """
    host = this_host()
    app = _app(app_name) if app_name is not None else None
    if app is None and write:
        raise click.UsageError("--write needs an APP: agenttx connect APP --write")
    engine = EngineOptions(data_dir=data_dir, store=store, fs_root=fs_root, tools=tools)
    try:
        launch = _launch(host, http_url, server, engine, mcp_args)
    except LaunchError as exc:
        raise click.UsageError(str(exc)) from None
    if app is None:
        _list_apps(host, launch, as_json)
    elif write:
        _write(app, host, launch, as_json)
    else:
        _show(app, host, launch, as_json)


def _app(name: str) -> App:
    if name in APPS:
        return APPS[name]
    close = difflib.get_close_matches(name, list(APPS), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise click.BadParameter(
        f"unknown app {name!r}{hint}; choose one of: {', '.join(APPS)}", param_hint="APP"
    )


def _launch(
    host: Host,
    http_url: str | None,
    server: str | None,
    engine: EngineOptions,
    mcp_args: tuple[str, ...],
) -> Launch:
    if http_url is not None:
        given = [
            flag
            for flag, value in (
                ("--server", server),
                ("--data-dir", engine.data_dir),
                ("--store", engine.store),
                ("--fs-root", engine.fs_root),
                ("--tools", engine.tools),
                ("MCP_ARGS", mcp_args),
            )
            if value
        ]
        if given:
            raise LaunchError(
                f"--http points the app at a running server, which starts nothing: drop "
                f"{', '.join(given)}"
            )
        return http_launch(http_url)
    try:
        executable = find_executable(sys.argv[0], sys.executable, shutil.which)
    except LaunchError as exc:
        raise click.ClickException(str(exc)) from None  # not a usage error: exit status 1
    return stdio_launch(executable, host, engine=engine, server=server, extra=mcp_args)


def _entry(app: App, launch: Launch) -> dict[str, Any]:
    if isinstance(launch, Http) and app.http_field is None:
        raise click.UsageError(f"--http: {app.no_http_reason}")
    return app.entry(launch)


def _describe(app: App, host: Host, launch: Launch) -> dict[str, Any]:
    """What the app gets, as data: what --json prints and the text is made from."""
    entry = _entry(app, launch)
    command = app.add_command(launch) if app.add_command else None
    return {
        "app": app.name,
        "title": app.title,
        "config_path": str(app.config_path(host)),
        "format": app.format,
        "key": app.key,
        "name": SERVER_NAME,
        "entry": entry,
        "snippet": render(app.format, app.key, SERVER_NAME, entry),
        "command": command,
        "command_line": shell_line(command, host.platform) if command else None,
        "applies_to": app.scope_note,
        "docs": app.docs,
    }


def _launch_line(launch: Launch, host: Host) -> str:
    if isinstance(launch, Http):
        return f"connect to {launch.url}"
    return "launch " + shell_line([launch.command, *launch.args], host.platform)


def _show(app: App, host: Host, launch: Launch, as_json: bool) -> None:
    about = _describe(app, host, launch)
    if as_json:
        echo_json(about)
        return
    click.echo(f"{app.title} reads {about['config_path']} ({about['applies_to']}).")
    click.echo(f"Its entry {app.key}.{SERVER_NAME} makes it {_launch_line(launch, host)}:\n")
    click.echo(about["snippet"].rstrip("\n") + "\n")
    if about["command_line"]:
        note = f" ({app.add_note})" if app.add_note else ""
        click.echo(f"Add it with {app.title}'s own command{note}:\n")
        click.echo(f"  {about['command_line']}\n")
    click.echo("Or run this command again with --write to merge it into that file")
    click.echo("(everything else kept, a backup left beside it).")


def _list_apps(host: Host, launch: Launch, as_json: bool) -> None:
    rows = []
    for app in APPS.values():
        if isinstance(launch, Http) and app.http_field is None:
            rows.append({"app": app.name, "title": app.title, "refused": app.no_http_reason})
        else:
            rows.append(_describe(app, host, launch))
    if as_json:
        echo_json({"server_name": SERVER_NAME, "apps": rows})
        return
    click.echo(f"Every app gets an entry {SERVER_NAME!r} to {_launch_line(launch, host)}")
    click.echo()
    width = max(len(name) for name in APPS) + 2
    for row in rows:
        click.echo(f"{row['app']:<{width}}{row['title']}: ", nl=False)
        if "refused" in row:
            click.echo("no HTTP form: its file holds local servers only; use --server HOST:PORT")
            continue
        click.echo(f"{row['config_path']}, {row['key']}.{SERVER_NAME}")
        click.echo(f"{'':<{width}}{json.dumps(row['entry'], ensure_ascii=False)}")
    click.echo()
    click.echo("Show one app's configuration and command: agenttx connect APP")
    click.echo("Merge it into the app's config file:      agenttx connect APP --write")


def _write(app: App, host: Host, launch: Launch, as_json: bool) -> None:
    entry = _entry(app, launch)
    path = Path(app.config_path(host))
    try:
        outcome = write_entry(path, app.format, app.key, SERVER_NAME, entry)
    except ConfigError as exc:
        raise click.ClickException(
            f"{exc}. Fix the file, or add the entry that `agenttx connect {app.name}` prints "
            "by hand."
        ) from None
    if as_json:
        echo_json(
            {
                "app": app.name,
                "path": str(outcome.path),
                "action": outcome.action,
                "backup": str(outcome.backup) if outcome.backup else None,
                "entry": entry,
            }
        )
        return
    where = f"{app.key}.{SERVER_NAME} in {outcome.path}"
    message = {
        "created": f"Created {outcome.path} with {app.key}.{SERVER_NAME}.",
        "added": f"Added {where}.",
        "updated": f"Updated {where}.",
        "unchanged": f"Already up to date: {where}; nothing written.",
    }[outcome.action]
    click.echo(message)
    if outcome.backup:
        click.echo(f"The previous file is kept as {outcome.backup}.")
    if outcome.action != "unchanged":
        click.echo(f"Restart {app.title} (or reload its MCP servers) to pick it up.")
