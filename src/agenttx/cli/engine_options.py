"""The flags of ``agenttx serve`` and ``agenttx mcp``, derived from ``agenttx.settings``: one
option per setting with a flag (its name, default, help, environment variable
``AGENTTX_<FLAG>``), each read by the one converter, ``SettingType``, that reads the same
setting given as a keyword — so a value out of range gets the same message on every entry
(click adds which flag or variable it came from, and exits 2). ``serve_config`` turns the
parsed flags into the server's ``ServeConfig``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

from agenttx.cli.renamed_flags import accepting_old_names
from agenttx.errors import InvalidArgument
from agenttx.renamed import renamed
from agenttx.settings import SETTINGS, Scope, Setting

if TYPE_CHECKING:
    from agenttx.server import ServeConfig

F = TypeVar("F", bound=Callable[..., Any])

_METAVARS = {"whole": "INTEGER", "real": "FLOAT", "bool": "BOOLEAN", "path": "PATH"}


class SettingType(click.ParamType[Any, Any]):
    """A flag's value read as its setting reads it (``Setting.read``): one value, or for a
    setting of ``,``-separated text the whole text. ``scale``: an old flag's unit
    (``agenttx.renamed``), checked against the new setting's range once scaled."""

    def __init__(self, setting: Setting, scale: float = 1.0) -> None:
        self.setting = setting
        self.scale = scale
        self.name = _METAVARS.get(setting.kind, "TEXT")

    @property
    def bare_flag(self) -> dict[str, Any]:
        """How click reads the flag: for a bool setting a bare flag means true, and "--flag
        false" and the variable say either."""
        return {"is_flag": False, "flag_value": True} if self.setting.kind == "bool" else {}

    def split_envvar_value(self, rv: str) -> Sequence[str]:
        """A repeatable flag's variable: files listed as PATH lists them, else space-separated."""
        if self.setting.kind == "path":
            return [p for p in (rv or "").split(os.pathsep) if p]
        return (rv or "").split()

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str | None:
        if self.setting.choices:
            return "[" + "|".join(self.setting.choices) + "]"
        return self.name

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        s = self.setting
        try:
            if s.many and s.separator:
                return s.read(value)
            if self.scale != 1.0:
                number = float(value) if isinstance(value, str) else value
                s.read_one(number * self.scale)
                return number
            return s.read_one(value)
        except (InvalidArgument, ValueError) as exc:
            self.fail(exc.message if isinstance(exc, InvalidArgument) else str(exc), param, ctx)


def option(s: Setting) -> Callable[[F], F]:
    """The click option of setting ``s``."""
    assert s.option is not None
    decls = [s.option] if s.option == "--" + s.name.replace("_", "-") else [s.option, s.name]
    kind = SettingType(s)
    help_text = s.help + (f"  [{s.shown_range}]" if s.shown_range and not s.choices else "")
    shown: Any = True
    if s.shown_default:
        shown = s.shown_default
    elif s.off and s.default is None:
        shown = "off"
    elif s.separator:
        shown = s.separator.join(s.default)
    return click.option(
        *decls,
        type=kind,
        default=s.default,
        multiple=s.many and not s.separator,
        envvar=s.env,
        show_envvar=True,
        show_default=shown,
        help=help_text,
        **kind.bare_flag,
    )


def setting_options(*scopes: Scope, alone: str = "serve") -> Callable[[F], F]:
    """Every flag of the settings in ``scopes`` (in ``Settings`` order), and their old names
    on both commands and on the command ``alone`` names (hidden, read with a notice:
    ``agenttx.renamed``)."""
    chosen = [s for s in SETTINGS.values() if s.scope in scopes and s.option is not None]
    names = {s.name for s in chosen}

    def decorate(command: F) -> F:
        for where in ("serve", f"{alone} only"):
            rows = [r for r in renamed(where) if r.new in names]
            if rows:
                types = {r.old: SettingType(SETTINGS[r.new], r.scale) for r in rows}
                command = accepting_old_names(where, types)(command)
        for s in reversed(chosen):
            command = option(s)(command)
        return command

    return decorate


# The flags of every command that opens an engine (``agenttx serve``, ``agenttx mcp``).
engine_options = setting_options("command", "engine", alone="mcp")


def serve_config(opts: dict[str, Any], **server: Any) -> ServeConfig:
    """The ``ServeConfig`` of the setting flags in ``opts`` plus what the command adds
    (``server``: TLS, or ``metrics_addr=None`` for ``agenttx mcp``). Sets up logging on
    stderr as the flags say, and lets user tool modules be found from the working
    directory, like ``python -m``."""
    from agenttx import logs
    from agenttx.server import ServeConfig

    logs.configure(opts["log_format"], opts["log_level"])
    if opts["tools"] and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    # Only the settings' flags: a command's own option of the same name (``mcp --tenant``,
    # its session's tenant) is not the engine's setting.
    given = {n: opts[n] for n, s in SETTINGS.items() if s.option is not None and n in opts}
    try:
        return ServeConfig(**{**given, **server})
    except InvalidArgument as exc:  # settings that disagree with each other: exit 2 too
        raise click.UsageError(exc.message) from None
