"""What an agent app launches or reaches: the installed ``agenttx`` with ``mcp`` and the
options given to ``connect``, or the URL of a running server's streamable-HTTP endpoint.

An app starts its servers from a directory of its own choosing (Claude Desktop from ``/``),
with a PATH of its own, so everything written here is absolute: the executable's path, the
data directory (by default one per user, so every app and every session shares one set of
transactions) and a relative SQLite path in ``--store``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from agenttx.cli.connect.apps import Host, Http, Stdio

MAX_URL_BYTES = 2048  # what a config file's URL field may hold (docs/operations.md, limits)
MAX_ADDRESS_BYTES = 255  # --server host:port
MCP_PATH = "/mcp"  # where `agenttx serve --http-addr` serves streamable HTTP


class LaunchError(ValueError):
    """An option ``connect`` cannot turn into a working launch; the message says which."""


@dataclass(frozen=True)
class EngineOptions:
    """``agenttx mcp``'s own engine, as ``connect`` was asked to configure it."""

    data_dir: Path | None
    store: str | None
    fs_root: Path | None
    tools: tuple[str, ...]


def find_executable(argv0: str, python: str, which: Callable[[str], str | None]) -> str:
    """The absolute path of the ``agenttx`` that is running, else the one installed beside
    this interpreter, else the one on PATH. The path is made absolute but not resolved: a
    pipx-style link keeps working across reinstalls, where its target would not."""
    bin_dir = Path(python).parent
    candidates = [Path(argv0)] if Path(argv0).stem == "agenttx" else []
    candidates += [bin_dir / "agenttx", bin_dir / "agenttx.exe"]
    on_path = which("agenttx")
    if on_path:
        candidates.append(Path(on_path))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    raise LaunchError(
        "cannot find the installed `agenttx` executable (looked at the running command, "
        f"{bin_dir} and PATH); install AgentTx with pip so the command exists"
    )


def default_data_dir(host: Host) -> Path:
    """One data directory per user, in the platform's place for application data."""
    if host.platform == "darwin":
        return host.home / "Library" / "Application Support" / "AgentTx"
    if host.platform == "win32":
        local = host.environ.get("LOCALAPPDATA")
        return (Path(local) if local else host.home / "AppData" / "Local") / "AgentTx"
    xdg = host.environ.get("XDG_DATA_HOME")
    return (Path(xdg) if xdg else host.home / ".local" / "share") / "agenttx"


def absolute(path: Path, host: Host) -> Path:
    expanded = path.expanduser()
    return expanded if expanded.is_absolute() else host.cwd / expanded


def absolute_store(url: str, host: Host) -> str:
    """A relative ``sqlite:///path`` made absolute (``sqlite:////abs/path``); other URLs as
    given."""
    prefix = "sqlite:///"
    if not url.startswith(prefix):
        return url
    path = Path(url.removeprefix(prefix))
    return url if path.is_absolute() else prefix + str(host.cwd / path)


def stdio_launch(
    executable: str,
    host: Host,
    *,
    engine: EngineOptions,
    server: str | None,
    extra: tuple[str, ...],
) -> Stdio:
    """``agenttx mcp`` with an embedded engine, or with ``--server`` driving a running one."""
    args = ["mcp"]
    if server is not None:
        given = [
            flag
            for flag, value in (
                ("--data-dir", engine.data_dir),
                ("--store", engine.store),
                ("--fs-root", engine.fs_root),
                ("--tools", engine.tools),
            )
            if value
        ]
        if given:
            raise LaunchError(
                f"--server drives a running AgentTx, which has its own engine: drop "
                f"{', '.join(given)} (they belong to that server's `agenttx serve`)"
            )
        args += ["--server", check_address(server)]
    else:
        data_dir = absolute(engine.data_dir, host) if engine.data_dir else default_data_dir(host)
        if data_dir.exists() and not data_dir.is_dir():
            raise LaunchError(f"--data-dir {data_dir} is a file, not a directory")
        args += ["--data-dir", str(data_dir)]
        if engine.store:
            args += ["--store", absolute_store(engine.store, host)]
        if engine.fs_root:
            args += ["--fs-root", str(absolute(engine.fs_root, host))]
        for module in engine.tools:
            args += ["--tools", module]
    return Stdio(command=executable, args=(*args, *extra))


def check_address(address: str) -> str:
    """``host:port`` (``[v6]:port``) with a port in 1–65535."""
    if len(address.encode()) > MAX_ADDRESS_BYTES:
        raise LaunchError(f"--server is longer than {MAX_ADDRESS_BYTES} bytes")
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise LaunchError(f"--server {address!r} is not host:port (for example 127.0.0.1:50051)")
    return f"{host}:{port}"


def http_launch(url: str) -> Http:
    """A checked streamable-HTTP URL; a bare server address gets ``/mcp``, where
    ``agenttx serve --http-addr`` serves it."""
    if len(url.encode()) > MAX_URL_BYTES:
        raise LaunchError(f"--http URL is longer than {MAX_URL_BYTES} bytes")
    if any(ch.isspace() or ord(ch) < 32 for ch in url):
        raise LaunchError("--http URL contains whitespace or control characters")
    parts = urlsplit(url)
    try:
        port = parts.port  # raises on a port that is not a number in 0-65535
    except ValueError:
        port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or port == 0 or port == -1:
        raise LaunchError(
            f"--http {url!r} is not an http(s) URL with a host (for example "
            f"http://127.0.0.1:8080{MCP_PATH})"
        )
    path = parts.path if parts.path not in ("", "/") else MCP_PATH
    return Http(urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment)))
