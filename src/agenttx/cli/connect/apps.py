"""The agent apps ``agenttx connect`` knows, as data: where each keeps its user configuration,
in which format, under which key, what one server entry looks like there for a local (stdio)
or a streamable-HTTP server, and the app's own command that adds one, where it has one.

Nothing here reads or writes a file; ``config_file`` does that. Paths are worked out from a
:class:`Host` (home, environment, platform, working directory) so that every platform's path
is a plain function of its inputs, testable anywhere. docs/connect.md cites the documentation
each row follows.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath, PurePosixPath, PureWindowsPath
from typing import Any, Literal

SERVER_NAME = "agenttx"  # the entry's name in every app: one entry, however often we write it

# Keys of an entry that say how to reach the server. Writing an entry replaces these and
# keeps any other key a user added to it (a timeout, `trust`, `env`, `disabled`, ...), so a
# switch from stdio to HTTP leaves no stale `command` and a re-run keeps the user's tuning.
TRANSPORT_KEYS = frozenset({"type", "command", "args", "url", "httpUrl", "serverUrl"})


@dataclass(frozen=True)
class Host:
    """What an app's paths depend on. ``platform`` is ``sys.platform``'s value."""

    home: Path
    environ: Mapping[str, str]
    platform: str
    cwd: Path

    def path(self, *parts: str) -> PurePath:
        """``parts`` joined in this host's flavour of path (Windows paths on "win32")."""
        flavour = PureWindowsPath if self.platform == "win32" else PurePosixPath
        return flavour(*parts)


@dataclass(frozen=True)
class Stdio:
    """The app starts ``command args…`` and speaks MCP over its stdin/stdout."""

    command: str
    args: tuple[str, ...]


@dataclass(frozen=True)
class Http:
    """The app connects to a running ``agenttx serve --http-addr`` at ``url``."""

    url: str


Launch = Stdio | Http


@dataclass(frozen=True, kw_only=True)
class App:
    """One app's row. The defaults are the form Claude Desktop's file introduced and most
    apps copied (a JSON file, servers under ``mcpServers``, entries without a ``type``), so
    a row states only where its app departs from it."""

    name: str  # what `agenttx connect <name>` takes
    title: str  # the app's own name, for messages
    config_path: Callable[[Host], PurePath]  # its user configuration file on this host
    http_field: str | None  # the URL's key in an HTTP entry; None: its file has no HTTP form
    scope_note: str  # where the entry applies, for messages
    docs: str  # the documentation the row follows (docs/connect.md lists them all)
    format: Literal["json", "toml"] = "json"
    key: str = "mcpServers"  # the table of servers in that file; our entry is <key>.agenttx
    stdio_type: bool = False  # true iff a stdio entry carries "type": "stdio"
    http_type: bool = False  # true iff an HTTP entry carries "type": "http"
    # The app's own CLI that adds the entry; None: it has none, the file is written.
    add_command: Callable[[Launch], list[str]] | None = None
    no_http_reason: str = ""  # why --http is refused, when http_field is None
    add_note: str = ""  # what to know about add_command, when it writes somewhere else

    def entry(self, launch: Launch) -> dict[str, Any]:
        """Our server's entry in this app's file, keys in the order the app's docs show."""
        if isinstance(launch, Http):
            if self.http_field is None:
                raise ValueError(f"{self.title} has no HTTP form")
            entry: dict[str, Any] = {"type": "http"} if self.http_type else {}
            entry[self.http_field] = launch.url
            return entry
        entry = {"type": "stdio"} if self.stdio_type else {}
        entry["command"] = launch.command
        entry["args"] = list(launch.args)
        return entry


# ---------------------------------------------------------------- where each app keeps it


def _home(host: Host, *parts: str) -> PurePath:
    return host.path(str(host.home), *parts)


def _moved(host: Host, variable: str, *usual: str) -> PurePath:
    """The directory environment ``variable`` names when it is set, else ``~/<usual…>``:
    each app's own way to move its configuration."""
    moved = host.environ.get(variable)
    return host.path(moved) if moved else _home(host, *usual)


def _claude_code_path(host: Host) -> PurePath:
    # Claude Code keeps user-scope servers at the top level of ~/.claude.json, or of
    # $CLAUDE_CONFIG_DIR/.claude.json when that variable moves its configuration.
    return _moved(host, "CLAUDE_CONFIG_DIR") / ".claude.json"


def _codex_path(host: Host) -> PurePath:
    return _moved(host, "CODEX_HOME", ".codex") / "config.toml"  # Codex's own ~/.codex


def _gemini_path(host: Host) -> PurePath:
    # Gemini CLI takes $GEMINI_CLI_HOME, when set, in place of the home directory: its user
    # settings are then $GEMINI_CLI_HOME/.gemini/settings.json.
    return _moved(host, "GEMINI_CLI_HOME") / ".gemini" / "settings.json"


def _claude_desktop_path(host: Host) -> PurePath:
    name = "claude_desktop_config.json"
    if host.platform == "darwin":
        return _home(host, "Library", "Application Support", "Claude", name)
    if host.platform == "win32":
        return _moved(host, "APPDATA", "AppData", "Roaming") / "Claude" / name
    # Linux builds are Electron apps: their config lives in $XDG_CONFIG_HOME, ~/.config.
    return _moved(host, "XDG_CONFIG_HOME", ".config") / "Claude" / name


# ---------------------------------------------------------------- the apps' own commands


def _claude_add(launch: Launch) -> list[str]:
    head = ["claude", "mcp", "add", "--scope", "user"]
    if isinstance(launch, Http):
        return [*head, "--transport", "http", SERVER_NAME, launch.url]
    return [*head, SERVER_NAME, "--", launch.command, *launch.args]


def _codex_add(launch: Launch) -> list[str]:
    if isinstance(launch, Http):
        return ["codex", "mcp", "add", SERVER_NAME, "--url", launch.url]
    return ["codex", "mcp", "add", SERVER_NAME, "--", launch.command, *launch.args]


def _gemini_add(launch: Launch) -> list[str]:
    head = ["gemini", "mcp", "add", "--scope", "user"]
    if isinstance(launch, Http):
        return [*head, "--transport", "http", SERVER_NAME, launch.url]
    # After `--` Gemini takes every word as the server's argument, flags included.
    return [*head, SERVER_NAME, launch.command, "--", *launch.args]


def _vscode_add(launch: Launch) -> list[str]:
    entry = {"name": SERVER_NAME, **VSCODE.entry(launch)}
    return ["code", "--add-mcp", json.dumps(entry, ensure_ascii=False)]


VSCODE = App(
    name="vscode",
    title="VS Code",
    config_path=lambda host: host.path(str(host.cwd), ".vscode", "mcp.json"),
    key="servers",
    stdio_type=True,
    http_field="url",
    http_type=True,
    add_command=_vscode_add,
    scope_note="this folder's workspace",
    add_note="it goes to your user profile, not this folder",
    docs="https://code.visualstudio.com/docs/copilot/reference/mcp-configuration",
)

APPS: dict[str, App] = {
    app.name: app
    for app in (
        App(
            name="claude-code",
            title="Claude Code",
            config_path=_claude_code_path,
            stdio_type=True,
            http_field="url",
            http_type=True,
            add_command=_claude_add,
            scope_note="user scope: every project",
            docs="https://code.claude.com/docs/en/mcp",
        ),
        App(
            name="codex",
            title="Codex",
            config_path=_codex_path,
            format="toml",
            key="mcp_servers",
            http_field="url",
            add_command=_codex_add,
            scope_note="read by the Codex CLI, IDE extension and app",
            docs="https://developers.openai.com/codex/mcp",
        ),
        App(
            name="claude-desktop",
            title="Claude Desktop",
            config_path=_claude_desktop_path,
            http_field=None,
            scope_note="the desktop app",
            docs="https://modelcontextprotocol.io/quickstart/user",
            no_http_reason=(
                "Claude Desktop's config file holds local (stdio) servers only, and its "
                "remote connectors are reached from Anthropic's cloud, not from this machine. "
                "Use `agenttx connect claude-desktop --server HOST:PORT` instead: a local "
                "`agenttx mcp` that drives the running AgentTx over gRPC"
            ),
        ),
        App(
            name="cursor",
            title="Cursor",
            config_path=lambda host: _home(host, ".cursor", "mcp.json"),
            http_field="url",
            scope_note="global: every project",
            docs="https://cursor.com/docs/mcp",
        ),
        VSCODE,
        App(
            name="gemini",
            title="Gemini CLI",
            config_path=_gemini_path,
            http_field="httpUrl",  # `url` there means the older SSE transport
            add_command=_gemini_add,
            scope_note="user settings: every project",
            docs="https://geminicli.com/docs/tools/mcp-server/",
        ),
        App(
            name="windsurf",
            title="Windsurf",
            config_path=lambda host: _home(host, ".codeium", "windsurf", "mcp_config.json"),
            http_field="serverUrl",
            scope_note="Cascade, every workspace",
            docs="https://docs.windsurf.com/windsurf/cascade/mcp",
        ),
    )
}


def shell_line(words: list[str], platform: str) -> str:
    """``words`` as one line to paste into this platform's usual shell."""
    return subprocess.list2cmdline(words) if platform == "win32" else shlex.join(words)
