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

from agenttx.errors import InvalidArgument


def filled(request_type: type[Message], values: Mapping[str, Any]) -> Message:
    """A ``request_type`` with each given value in the field of its name."""
    given = {k: list(v) if isinstance(v, tuple) else v for k, v in values.items() if _given(v)}
    named = clash(request_type, given)
    if named:
        raise InvalidArgument(
            f"give only one of {', '.join(named[:-1])} and {named[-1]}; {len(named)} were given"
        )
    return request_type(**given)


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
