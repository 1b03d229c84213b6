"""The MCP tools derived from the operation table: one per row with an ``mcp`` binding
(``agenttx.api.operations.McpTool``), listed and served by ``server.py`` beside the tools
written by hand in ``catalog.py``.

From the binding and the row's messages alone:

- the input schema: the binding's fields, each with its JSON Schema, nothing else allowed;
- each argument's lenient reading (``arguments.py``) by its request field's type: a string
  field is text, a whole-number field a number within the schema's bounds and the field's,
  a bool a flag, a repeated string strings;
- the output schema (``catalog._output``): ``ok`` and the reply's top-level fields, each
  typed from the reply message by a schema that constrains (the TypeScript SDK refuses
  ``true``; the Inspector flags ``{}``), plus the failure-only fields;
- the call: the arguments read → the row's request (``operations.requests.filled``) → the
  row run for the request's caller (``Served.send``) → ``{"ok": true, **fields}``, the
  reply's fields as ``api.fields`` reads them, and the binding's line of text. A refusal is
  the public error policy's, as for every tool (``server.py``).
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from google.protobuf.descriptor import FieldDescriptor

from agenttx.api.fields import enum_prefix, message_fields
from agenttx.api.mcp import arguments as a
from agenttx.api.mcp.catalog import ANY_JSON, _output
from agenttx.api.mcp.results import ok
from agenttx.api.mcp.served import Served
from agenttx.api.operations import ROWS, McpTool, Row
from agenttx.api.operations.requests import filled
from agenttx.core.eager import run_detached
from agenttx.numbers import MAX_INT64, MAX_UINT32, WholeNumber

# The rows whose MCP tool is derived, by tool name.
MCP_ROWS: dict[str, Row] = {r.mcp.name: r for r in ROWS if r.mcp is not None}

_T = FieldDescriptor
_INTEGERS = {
    _T.TYPE_UINT32: (0, MAX_UINT32),
    _T.TYPE_UINT64: (0, MAX_INT64),  # a store's integer holds no more (``agenttx.numbers``)
    _T.TYPE_INT32: (-(1 << 31), (1 << 31) - 1),
    _T.TYPE_INT64: (-MAX_INT64 - 1, MAX_INT64),
}
_SCALARS = {
    _T.TYPE_STRING: "string",
    _T.TYPE_BOOL: "boolean",
    _T.TYPE_DOUBLE: "number",
    _T.TYPE_FLOAT: "number",
    **dict.fromkeys(_INTEGERS, "integer"),
}


def tool(row: Row) -> types.Tool:
    """``row``'s MCP tool as ``tools/list`` shows it."""
    b = _binding(row)
    return types.Tool(
        name=b.name,
        title=b.title,
        description=b.description,
        input_schema={
            "type": "object",
            "properties": {i.name: dict(i.schema) for i in b.inputs},
            "required": [i.name for i in b.inputs if i.required],
            "additionalProperties": False,
        },
        output_schema=_output({_out_name(f): _schema(f) for f in row.reply.DESCRIPTOR.fields}),
        annotations=types.ToolAnnotations(
            title=b.title,
            read_only_hint=b.hints.read_only,
            destructive_hint=b.hints.destructive,
            idempotent_hint=b.hints.idempotent,
            open_world_hint=b.hints.open_world,
        ),
    )


def reading(row: Row) -> tuple[a.Arg, ...]:
    """How ``row``'s tool reads its arguments, in the binding's order."""
    b = _binding(row)
    fields = row.request.DESCRIPTOR.fields_by_name
    return tuple(_arg(fields[i.name], i.schema, i.required) for i in b.inputs)


async def call(row: Row, served: Served, args: a.Arguments) -> types.CallToolResult:
    """One ``tools/call`` of ``row``'s tool: its arguments read, the row run, the reply."""
    values = {arg.name: arg.read(args.values.get(arg.name)) for arg in _READING[row.name]}
    # Detached, as every tool's service call: a caller that goes away stops nothing half-way.
    reply = await run_detached(served.send(row, filled(row.request, values)))
    fields = message_fields(reply, short_enums=True)
    return ok(fields, _binding(row).text.format_map(fields))


def _binding(row: Row) -> McpTool:
    assert row.mcp is not None, row.name
    return row.mcp


def _arg(fd: Any, schema: Any, required: bool) -> a.Arg:
    if fd.is_repeated and fd.type == _T.TYPE_STRING:
        return a.strings(fd.name)
    if fd.type == _T.TYPE_STRING:
        return a.text(fd.name, required=required)
    if fd.type == _T.TYPE_BOOL:
        return a.flag(fd.name)
    if fd.type in _INTEGERS and not fd.is_repeated:
        low, high = _INTEGERS[fd.type]
        bounds = WholeNumber(
            fd.name, max(low, schema.get("minimum", low)), min(high, schema.get("maximum", high))
        )
        return a.number(bounds, required=required)
    raise TypeError(f"no MCP argument reads {fd.full_name} (of type {fd.type})")


def _out_name(fd: Any) -> str:
    # ``api.fields``: a ``*_json`` text field is its parsed value, without the suffix.
    name = str(fd.name)
    if fd.type == _T.TYPE_STRING and not fd.is_repeated and name.endswith("_json"):
        return name.removesuffix("_json")
    return name


def _schema(fd: Any) -> dict[str, Any]:
    """The JSON Schema of a reply field as ``api.fields`` renders it (short enum names)."""
    if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
        one: dict[str, Any] = {"type": "object"}
        return one
    one = _one(fd)
    return {"type": "array", "items": one} if fd.is_repeated else one


def _one(fd: Any) -> dict[str, Any]:
    if fd.message_type is not None:
        return {"type": "object", "description": _names(fd.message_type)}
    if fd.enum_type is not None:
        prefix = enum_prefix(fd.enum_type.name)
        return {"enum": [str(v.name).removeprefix(prefix) for v in fd.enum_type.values]}
    if _out_name(fd) != fd.name:
        return dict(ANY_JSON)
    return {"type": _SCALARS.get(fd.type, "string")}


def _names(message: Any) -> str:
    return "Fields: " + ", ".join(f.name for f in message.fields) + "."


# Each bound row's reading, by row name, worked out once.
_READING = {row.name: reading(row) for row in MCP_ROWS.values()}
