"""Old flag names that still work (``agenttx.renamed``): each is a hidden option with its old
environment variable; when one is given, the command reads its value as the new flag's (in the
new unit) and a one-line notice on stderr says what to write instead."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from agenttx.cli.common import env_var
from agenttx.renamed import notice, renamed

F = TypeVar("F", bound=Callable[..., Any])

_GIVEN = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


def accepting_old_names(
    where: str, types: Mapping[str, click.ParamType[Any]] | None = None, *, with_env: bool = True
) -> Callable[[F], F]:
    """Add the old flags of ``where`` (hidden, ``types`` by old name) to a command whose new
    flags are already there; an old flag given sets the new one unless that was given too."""
    rows = renamed(where)
    types = types or {}

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def run(**opts: Any) -> Any:
            ctx = click.get_current_context()
            for r in rows:
                value = opts.pop(r.old, None)
                source = ctx.get_parameter_source(r.old)
                if source not in _GIVEN:
                    continue
                if source is ParameterSource.ENVIRONMENT:
                    notice(env_var(r.old_flag), env_var(r.new_flag))
                else:
                    notice(r.old_flag, r.new_flag)
                if ctx.get_parameter_source(r.new) not in _GIVEN:
                    opts[r.new] = r.converted(value)
            return command(**opts)

        wrapped: Any = run
        for r in reversed(rows):
            kind = types.get(r.old)
            wrapped = click.option(
                r.old_flag,
                r.old,
                type=kind,
                default=None,
                hidden=True,
                envvar=env_var(r.old_flag) if with_env else None,
                **getattr(kind, "bare_flag", {}),  # a bool setting's: as its new flag reads
            )(wrapped)
        return wrapped  # type: ignore[no-any-return]

    return decorate
