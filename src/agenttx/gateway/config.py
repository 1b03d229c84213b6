"""The gateway file (TOML): which downstream MCP servers to reach and how their tools behave.

The format is a contract (``docs/gateway.md``). Loading checks everything before a server is
started: an unknown key, a wrong type, a server with neither ``command`` nor ``url`` (or both),
an ``effect`` outside the list, a missing ``${env:NAME}`` — each is one ``StartupError``
naming the file, the line and what to write instead. ``${env:NAME}`` is replaced by the
variable's value here, once; every value so resolved is remembered in ``Secrets`` so logs,
hints and listings can mask it.
"""

from __future__ import annotations

import os
import re
import shutil
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agenttx.errors import StartupError
from agenttx.files import read_capped
from agenttx.gateway.mapping import MappingError, check_template
from agenttx.renamed import RENAMED, notice

# Effects a downstream tool may be given by override (``state`` is AgentTx-managed state only).
OVERRIDE_EFFECTS = ("read", "compensatable", "staged", "irreversible")
# A server's name becomes the tools' namespace (``files.read_text_file``): a plain word.
_SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# Namespaces of AgentTx's own tools: a server of that name would shadow them.
RESERVED_NAMES = frozenset({"kv", "record", "fs", "effect", "email", "webhook"})
_ENV_REF = re.compile(r"\$\{env:([^}]*)\}")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The gateway file is read whole at start; a bigger one is surely not a gateway file.
MAX_GATEWAY_FILE_BYTES = 1 << 20
DEFAULT_CONNECT_TIMEOUT_MS = 20_000
# What an undo's arguments may refer to: the call's arguments and its structured output (and
# ``before`` when the tool has a before call).
UNDO_ROOTS = ("args", "output")


@dataclass(frozen=True)
class CallSpec:
    """A downstream call another one triggers: an undo or a ``before`` capture."""

    tool: str  # a tool of the same server
    arguments: Any  # JSON template: ``${args.…}``, ``${output.…}``, ``${before.…}``


@dataclass(frozen=True)
class ToolSettings:
    """``[servers.<name>.tools.<tool>]``: what the operator says about one downstream tool."""

    effect: str | None = None  # one of OVERRIDE_EFFECTS; None: from the tool's annotations
    timeout_ms: int | None = None  # the file's timeout_s, in ms; None: --step-timeout-s
    idempotent: bool | None = None  # None: the tool's idempotentHint
    undo: CallSpec | None = None
    before: CallSpec | None = None


@dataclass(frozen=True)
class ServerSettings:
    """``[servers.<name>]``: one downstream MCP server, over stdio or streamable HTTP."""

    name: str
    command: str | None = None  # stdio iff set
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None  # streamable HTTP iff set
    headers: Mapping[str, str] = field(default_factory=dict)
    include: frozenset[str] | None = None  # None: every tool
    exclude: frozenset[str] = frozenset()
    tools: Mapping[str, ToolSettings] = field(default_factory=dict)
    connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS  # the file's connect_timeout_s, in ms

    def exposes(self, tool: str) -> bool:
        """True iff the operator lets the agent see ``tool`` (include/exclude)."""
        if self.include is not None and tool not in self.include:
            return False
        return tool not in self.exclude


class Secrets:
    """The values resolved from ``${env:…}``: masked wherever text leaves the gateway."""

    MASK = "***"

    def __init__(self, values: set[str] | None = None) -> None:
        # Longest first, so a secret containing another is masked whole.
        self._values = sorted((v for v in values or () if v), key=len, reverse=True)

    def redact(self, text: str) -> str:
        for value in self._values:
            if value in text:
                text = text.replace(value, self.MASK)
        return text

    def __bool__(self) -> bool:
        return bool(self._values)


@dataclass(frozen=True)
class GatewayConfig:
    path: Path
    servers: Mapping[str, ServerSettings]
    secrets: Secrets


def load_gateway(
    path: str | os.PathLike[str], environ: Mapping[str, str] | None = None
) -> GatewayConfig:
    """Read and check the gateway file at ``path``; raises ``StartupError``."""
    path = Path(path)
    env = os.environ if environ is None else environ
    try:
        size = path.stat().st_size
        if size > MAX_GATEWAY_FILE_BYTES:
            raise StartupError(
                f"--gateway {path}: the file is {size} bytes, over the "
                f"{MAX_GATEWAY_FILE_BYTES}-byte limit of a gateway file"
            )
        raw = read_capped(path, MAX_GATEWAY_FILE_BYTES)
        if raw is None:  # not a regular file, or it grew since: its size said nothing
            raise StartupError(
                f"--gateway {path}: it holds more than {MAX_GATEWAY_FILE_BYTES} bytes, "
                "the limit of a gateway file"
            )
    except OSError as exc:
        raise StartupError(
            f"--gateway {path}: cannot read the file: {exc.strerror or exc}"
        ) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise StartupError(f"--gateway {path}, line {line}: not UTF-8 text") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message ends "(at line N, column M)": keep it, it is the position.
        raise StartupError(f"--gateway {path}: not valid TOML: {exc}") from None
    return _Loader(path, text, env).load(data)


class _Loader:
    def __init__(self, path: Path, text: str, env: Mapping[str, str]) -> None:
        self.path = path
        self.lines = text.splitlines()
        self.env = env
        self.secrets: set[str] = set()

    # -------------------------------------------------------------- errors with a line

    def fail(self, where: tuple[str, ...], reason: str) -> StartupError:
        line = self._line_of(where)
        at = f", line {line}" if line else ""
        dotted = ".".join(where)
        return StartupError(f"--gateway {self.path}{at}: {dotted}: {reason}")

    def _line_of(self, where: tuple[str, ...]) -> int:
        """Best effort: the line of ``where``'s key inside its table, else the table's header.
        TOML parsers give no positions for values, so the text is searched."""
        for cut in range(len(where), 0, -1):
            table, key = where[: cut - 1], where[cut - 1]
            start = self._header_line(table) if table else 0
            if start >= 0:
                for n in range(start, len(self.lines)):
                    if n > start and table and self.lines[n].strip().startswith("["):
                        break  # the next table: the key is not in this one
                    if re.match(rf"^\s*\"?{re.escape(key)}\"?\s*=", self.lines[n]):
                        return n + 1
            header = self._header_line((*table, key))
            if header >= 0:
                return header + 1
        return 0

    def _header_line(self, table: tuple[str, ...]) -> int:
        """The line of ``[table]``; without one, of its first sub-table (``[servers.m.tools.t]``
        makes ``servers.m`` exist without a header of its own); -1 if neither is there."""
        first_below = -1
        for n, line in enumerate(self.lines):
            stripped = line.strip()
            if not stripped.startswith("["):
                continue
            header = _header(stripped)
            if header == table:
                return n
            if first_below < 0 and table and header[: len(table)] == table:
                first_below = n
        return first_below

    # -------------------------------------------------------------- values

    def load(self, data: dict[str, Any]) -> GatewayConfig:
        for key in data:
            if key != "servers":
                raise self.fail((key,), "unknown key; a gateway file holds only [servers.<name>]")
        servers_raw = data.get("servers", {})
        if not isinstance(servers_raw, dict) or not servers_raw:
            raise self.fail(("servers",), "no server: add a [servers.<name>] table")
        servers = {name: self.server(name, value) for name, value in servers_raw.items()}
        for name, server in servers.items():
            if server.command is not None and shutil.which(server.command) is None:
                # Checked last, once the file is otherwise sound: a typo here would only show
                # as a session that never opens.
                raise self.fail(
                    ("servers", name, "command"),
                    f"{server.command!r} is not an executable file or on PATH",
                )
        return GatewayConfig(self.path, servers, Secrets(self.secrets))

    def server(self, name: str, raw: Any) -> ServerSettings:
        where = ("servers", name)
        if not _SERVER_NAME.match(name):
            raise self.fail(where, "a server name is 1-64 letters, digits, '_' or '-'")
        if name in RESERVED_NAMES:
            raise self.fail(
                where,
                f"{name!r} is the namespace of AgentTx's own tools; name the server otherwise",
            )
        if not isinstance(raw, dict):
            raise self.fail(where, "must be a table")
        known = {
            "command",
            "args",
            "env",
            "cwd",
            "url",
            "headers",
            "include",
            "exclude",
            "tools",
            "connect_timeout_s",
            "connect_timeout_ms",  # the old name (agenttx.renamed)
        }
        for key in raw:
            if key not in known:
                raise self.fail(
                    (*where, key), f"unknown key; use one of {', '.join(sorted(known))}"
                )
        command = self.optional_text(raw, where, "command")
        url = self.optional_text(raw, where, "url")
        if (command is None) == (url is None):
            raise self.fail(where, "give exactly one of command (stdio) or url (streamable HTTP)")
        if url is not None and not url.startswith(("http://", "https://")):
            raise self.fail((*where, "url"), "must start with http:// or https://")
        stdio_only = ("args", "env", "cwd")
        for key in stdio_only if url is not None else ("headers",):
            if key in raw:
                other = "a stdio server (command)" if url is not None else "an HTTP server (url)"
                raise self.fail((*where, key), f"applies only to {other}")
        include = raw.get("include")
        exclude = raw.get("exclude", [])
        if include is not None and "exclude" in raw:
            raise self.fail((*where, "exclude"), "give include or exclude, not both")
        tools_raw = raw.get("tools", {})
        if not isinstance(tools_raw, dict):
            raise self.fail((*where, "tools"), "must be a table of [servers.<name>.tools.<tool>]")
        timeout = self.duration_ms(raw, where, "connect_timeout_s", 600)
        if timeout is None:
            timeout = DEFAULT_CONNECT_TIMEOUT_MS
        return ServerSettings(
            name=name,
            command=command,
            args=tuple(self.strings(raw, where, "args")),
            env=self.table(raw, where, "env"),
            cwd=self.optional_text(raw, where, "cwd"),
            url=url,
            headers=self.table(raw, where, "headers"),
            include=None if include is None else frozenset(self.strings(raw, where, "include")),
            exclude=frozenset(self.strings({"exclude": exclude}, where, "exclude")),
            tools={
                tool: self.tool((*where, "tools", tool), value) for tool, value in tools_raw.items()
            },
            connect_timeout_ms=timeout,
        )

    def tool(self, where: tuple[str, ...], raw: Any) -> ToolSettings:
        if not isinstance(raw, dict):
            raise self.fail(where, "must be a table")
        known = {"effect", "timeout_s", "timeout_ms", "idempotent", "undo", "before"}
        for key in raw:
            if key not in known:
                raise self.fail(
                    (*where, key), f"unknown key; use one of {', '.join(sorted(known))}"
                )
        effect = raw.get("effect")
        if effect is not None and effect not in OVERRIDE_EFFECTS:
            raise self.fail(
                (*where, "effect"),
                f"{effect!r} is not an effect; use one of {', '.join(OVERRIDE_EFFECTS)}",
            )
        timeout = self.duration_ms(raw, where, "timeout_s", 86_400)
        idempotent = raw.get("idempotent")
        if idempotent is not None and not isinstance(idempotent, bool):
            raise self.fail((*where, "idempotent"), "must be true or false")
        undo = self.call(where, raw, "undo")
        before = self.call(where, raw, "before")
        if undo is not None and effect not in (None, "compensatable"):
            raise self.fail(
                (*where, "undo"),
                f"an undo makes the tool compensatable; remove effect = {effect!r}",
            )
        if before is not None and undo is None:
            raise self.fail(
                (*where, "before"), "a before call feeds an undo: add undo = { tool, arguments }"
            )
        # A mapping's syntax and sources are known now: a mistake here would otherwise show
        # only at a call (a before call that cannot resolve stages every call; an undo that
        # needs the output, only after the call was made).
        if before is not None:
            self.mapping((*where, "before"), before, ("args",))
        if undo is not None:
            self.mapping((*where, "undo"), undo, UNDO_ROOTS + (("before",) if before else ()))
        return ToolSettings(effect, timeout, idempotent, undo, before)

    def mapping(self, where: tuple[str, ...], call: CallSpec, roots: tuple[str, ...]) -> None:
        try:
            check_template(call.arguments, roots)
        except MappingError as exc:
            raise self.fail((*where, "arguments"), str(exc)) from None

    def call(self, where: tuple[str, ...], raw: dict[str, Any], key: str) -> CallSpec | None:
        value = raw.get(key)
        if value is None:
            return None
        return parse_call(value, lambda reason: self.fail((*where, key), reason))

    def duration_ms(
        self, raw: dict[str, Any], where: tuple[str, ...], key: str, most_s: int
    ) -> int | None:
        """The duration ``key`` (seconds, 0.001..``most_s``) in milliseconds, None if absent.
        Its old name in milliseconds (``timeout_ms``: ``agenttx.renamed``) still works, with
        a notice on stderr; given both, ``key`` wins."""
        [old] = [r for r in RENAMED if r.new == key and r.where.startswith("gateway")]
        if old.old in raw:
            notice(".".join((*where, old.old)) + " (gateway file)", key + " (seconds)")
            value = raw[old.old]
            if not isinstance(value, int) or isinstance(value, bool):
                value = -1
            if not 1 <= value <= most_s * 1000:
                raise self.fail((*where, old.old), f"must be an integer 1..{most_s * 1000} (ms)")
            if key not in raw:
                return value
        if key not in raw:
            return None
        given = raw[key]
        seconds = (
            float(given) if isinstance(given, int | float) and not isinstance(given, bool) else -1.0
        )
        if not 0.001 <= seconds <= most_s:
            raise self.fail((*where, key), f"must be a number of seconds 0.001..{most_s}")
        return max(1, round(seconds * 1000))

    def optional_text(self, raw: dict[str, Any], where: tuple[str, ...], key: str) -> str | None:
        value = raw.get(key)
        if value is None:
            return None
        if not isinstance(value, str) or not value:
            raise self.fail((*where, key), "must be a non-empty string")
        return self.expand(value, (*where, key))

    def strings(self, raw: dict[str, Any], where: tuple[str, ...], key: str) -> list[str]:
        value = raw.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail((*where, key), "must be an array of strings")
        return [self.expand(v, (*where, key)) for v in value]

    def table(self, raw: dict[str, Any], where: tuple[str, ...], key: str) -> dict[str, str]:
        value = raw.get(key, {})
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise self.fail((*where, key), 'must be a table of strings, e.g. { NAME = "value" }')
        return {k: self.expand(v, (*where, key, k)) for k, v in value.items()}

    def expand(self, text: str, where: tuple[str, ...]) -> str:
        """``${env:NAME}`` → the variable's value (remembered as a secret)."""

        def value(match: re.Match[str]) -> str:
            name = match.group(1)
            if not _ENV_NAME.match(name):
                raise self.fail(where, f"${{env:{name}}}: not an environment variable name")
            if name.upper().startswith("AGENTTX_"):
                # AgentTx's own settings (its API key among them) never go downstream.
                raise self.fail(
                    where, f"${{env:{name}}}: AgentTx's own variables are never sent downstream"
                )
            if name not in self.env:
                raise self.fail(
                    where, f"${{env:{name}}}: the variable is not set; export it before starting"
                )
            resolved = self.env[name]
            self.secrets.add(resolved)
            return resolved

        return _ENV_REF.sub(value, text)


def parse_call(value: Any, fail: Any) -> CallSpec:
    """``{ tool = "...", arguments = {...} }`` (also the shape of ``_meta["io.agenttx/undo"]``)."""
    if not isinstance(value, dict):
        raise fail('must be a table { tool = "...", arguments = { ... } }')
    unknown = set(value) - {"tool", "arguments"}
    if unknown:
        raise fail(f"unknown key {sorted(unknown)[0]!r}; use tool and arguments")
    tool = value.get("tool")
    if not isinstance(tool, str) or not tool:
        raise fail("tool must name a tool of the same server")
    arguments = value.get("arguments", {})
    if not isinstance(arguments, dict):
        raise fail("arguments must be a table")
    return CallSpec(tool, arguments)


def _header(stripped: str) -> tuple[str, ...]:
    inner = stripped.strip("[]").split("#", 1)[0].strip().strip("[]").strip()
    return tuple(part.strip().strip('"') for part in inner.split("."))
