"""A row's request message filled from named values: what its MCP tool's arguments and its
CLI command's options come to (``McpTool``, ``CliCommand``), each value already read by its
surface (a number parsed, a flag a bool).

A value left out, or empty (``""``, ``[]``, false), leaves its field unset: the request's
default, as gRPC sends it. Two members of one oneof are refused (``InvalidArgument`` naming
both): a message holds one, and the later would silently replace the earlier.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf.message import Message
from pydantic import BaseModel

from agenttx.errors import InvalidArgument


def filled(request_type: type[Message], values: Mapping[str, Any]) -> Message:
    """A ``request_type`` with each given value in the field of its name."""
    given = {k: list(v) if isinstance(v, tuple) else v for k, v in values.items() if _given(v)}
    refuse_clash(request_type, given)
    request = request_type()
    for name, value in given.items():
        set_field(request, name, value)
    return request


def set_field(message: Message, name: str, value: Any) -> None:
    """``value`` into the field ``name`` of ``message``: a nested message field by field (set
    even when empty, as an explicit one is), a map, a list, or a scalar. Every surface fills a
    row's request through this (MCP's and the CLI's values here, ``/v1``'s validated body)."""
    if isinstance(value, BaseModel):  # a nested message (a begin's policy), read by pydantic
        nested = getattr(message, name)
        nested.SetInParent()
        for key in type(value).model_fields:
            if getattr(value, key) is not None:
                set_field(nested, key, getattr(value, key))
    elif isinstance(value, dict):  # a map field
        getattr(message, name).update(value)
    elif isinstance(value, list):
        getattr(message, name).extend(value)
    else:
        setattr(message, name, value)


def refuse_clash(request_type: type[Message], values: Mapping[str, Any]) -> None:
    """Refuse ``values`` that give two members of one oneof of ``request_type``."""
    named = clash(request_type, values)
    if named:
        raise InvalidArgument(
            f"give only one of {', '.join(named[:-1])} and {named[-1]}; {len(named)} were given"
        )


def clash(request_type: type[Message], values: Mapping[str, Any]) -> list[str]:
    """The fields of one oneof that ``values`` gives more than one of (none: [])."""
    for oneof in request_type.DESCRIPTOR.oneofs:
        named = [f.name for f in oneof.fields if _given(values.get(f.name))]
        if len(named) > 1:
            return named
    return []


def _given(value: Any) -> bool:
    if isinstance(value, list | tuple | str):
        return bool(value)
    return value is not None and value is not False
