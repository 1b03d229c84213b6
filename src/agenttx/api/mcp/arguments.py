"""A tool call's arguments, read as its row's binding declares them (``McpInput``): each by
the type of the request field of its name, or by the kind its ``reading`` names.

Inputs are declared strictly in the schemas (``catalog.py``) and read leniently here: models
often send a number as text or an object as JSON text, and refusing that would only cost
them a turn. The kinds:

    text      a string; missing: "" (required: refused, and so is "")
    number    a bounded whole number (``agenttx.numbers``: an int, a whole float or digits);
              missing or "": None (required: refused)
    flag      true/false, or their text; missing: false
    strings   a list of strings, or one comma-separated string; missing: []
    json      a JSON object, or its text (parsed in the step); missing: None

Anything else is a ``BadArgument`` naming the argument: the call is refused with
INVALID_ARGUMENT and a continuation saying what to fix. ``Arguments.read`` returns every
argument of the tool, by name; ``tests/surfaces/test_mcp_arguments.py`` checks each reading
against the tool's input schema.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf.descriptor import FieldDescriptor

from agenttx.api.operations import ROWS, McpInput, Row
from agenttx.errors import InvalidArgument
from agenttx.numbers import MAX_INT64, MAX_UINT32, WholeNumber


class BadArgument(Exception):
    """An MCP tool argument the adapter cannot use; becomes a ReviseRequest refusal."""


@dataclass(frozen=True, slots=True)
class Arg:
    """One argument of a tool: ``kind`` reads the value sent (None if absent)."""

    name: str
    kind: str  # text, number, flag, strings or json: the schema types they read
    read: Callable[[Any], Any]


def text(name: str, *, required: bool = False) -> Arg:
    def read(value: Any) -> str:
        if value is None:
            if required:
                raise BadArgument(f"{name} is required")
            return ""
        if not isinstance(value, str):
            raise BadArgument(f"{name} must be a string, got {type(value).__name__}")
        if required and not value:
            raise BadArgument(f"{name} must not be empty")
        return value

    return Arg(name, "text", read)


def number(field: WholeNumber, *, required: bool = False) -> Arg:
    def read(value: Any) -> int | None:
        if value is None or value == "":
            if required:
                raise BadArgument(f"{field.name} is required")
            return None
        try:
            return field.parse(value)  # bounded before int(): a 5,000-digit text is refused
        except InvalidArgument as exc:
            raise BadArgument(exc.message) from None

    return Arg(field.name, "number", read)


def flag(name: str) -> Arg:
    def read(value: Any) -> bool:
        if value is None or isinstance(value, bool):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise BadArgument(f"{name} must be true or false, got {value!r}")

    return Arg(name, "flag", read)


def strings(name: str) -> Arg:
    def read(value: Any) -> list[str]:
        if value is None:
            return []
        if isinstance(value, str):
            return [v for v in (p.strip() for p in value.split(",")) if v]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return list(value)
        raise BadArgument(f"{name} must be a list of strings")

    return Arg(name, "strings", read)


def json_object(name: str) -> Arg:
    def read(value: Any) -> dict[str, Any] | str | None:
        if value is not None and not isinstance(value, dict | str):
            raise BadArgument(f"{name} must be a JSON object (or its text)")
        return value

    return Arg(name, "json", read)


_T = FieldDescriptor
# A whole-number request field's own bounds (a store's integer holds no more than int64).
_INTEGERS = {
    _T.TYPE_UINT32: (0, MAX_UINT32),
    _T.TYPE_UINT64: (0, MAX_INT64),
    _T.TYPE_INT32: (-(1 << 31), (1 << 31) - 1),
    _T.TYPE_INT64: (-MAX_INT64 - 1, MAX_INT64),
}
_KINDS: dict[str, Callable[[str, bool], Arg]] = {
    "text": lambda name, required: text(name, required=required),
    "flag": lambda name, required: flag(name),
    "strings": lambda name, required: strings(name),
    "json": lambda name, required: json_object(name),
}


def reading(row: Row) -> tuple[Arg, ...]:
    """How ``row``'s tool reads its arguments, in the order its binding declares them (the
    first wrong one is named)."""
    assert row.mcp is not None, row.name
    fields = row.request.DESCRIPTOR.fields_by_name
    return tuple(_arg(i, fields.get(i.name)) for i in row.mcp.inputs)


def _arg(i: McpInput, fd: Any) -> Arg:
    if isinstance(i.reading, WholeNumber):
        return number(i.reading, required=i.required)
    if i.reading:
        return _KINDS[i.reading](i.name, i.required)
    if fd is None:
        raise TypeError(f"{i.name} is no field of the request: say how it is read")
    if fd.is_repeated and fd.type == _T.TYPE_STRING:
        return strings(i.name)
    if fd.type == _T.TYPE_STRING:
        return text(i.name, required=i.required)
    if fd.type == _T.TYPE_BOOL:
        return flag(i.name)
    if fd.type in _INTEGERS and not fd.is_repeated:
        low, high = _INTEGERS[fd.type]
        low, high = max(low, i.schema.get("minimum", low)), min(high, i.schema.get("maximum", high))
        return number(WholeNumber(i.name, low, high), required=i.required)
    raise TypeError(f"no MCP argument reads {fd.full_name} (of type {fd.type})")


# Each tool's arguments, by tool name, worked out once from its row's binding.
ARGUMENTS: dict[str, tuple[Arg, ...]] = {
    row.mcp.name: reading(row) for row in ROWS if row.mcp is not None
}


@dataclass(frozen=True, slots=True)
class Arguments:
    """A tool call's arguments as sent (``values``: what a refusal and the log quote)."""

    values: dict[str, Any]

    def read(self, tool: str) -> dict[str, Any]:
        """Every argument of ``tool``, by name, read in its binding's order."""
        return {arg.name: arg.read(self.values.get(arg.name)) for arg in ARGUMENTS[tool]}
