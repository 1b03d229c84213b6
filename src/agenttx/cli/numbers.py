"""A command-line argument or option holding a whole number, read by ``agenttx.numbers`` as
every surface reads one: bounded before ``int()``, refused naming the field and its range
(exit 2, click's usage error) instead of a traceback from the wire message or ``int()``."""

from __future__ import annotations

from typing import Any

import click

from agenttx.errors import InvalidArgument
from agenttx.numbers import WholeNumber


class WholeNumberParam(click.ParamType[int]):
    name = "integer"

    def __init__(self, field: WholeNumber) -> None:
        self.field = field

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            return self.field.parse(value)
        except InvalidArgument as exc:
            self.fail(exc.message, param, ctx)

    def __repr__(self) -> str:
        return f"WholeNumberParam({self.field.low}..{self.field.high})"
