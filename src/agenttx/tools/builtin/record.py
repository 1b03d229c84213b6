"""``record.insert`` and ``record.get``: rows with a primary key and foreign keys, stored as
managed state under ``records/<table>/<id>``, failing with PostgreSQL's wording."""

from __future__ import annotations

from typing import Any

from agenttx.errors import clip
from agenttx.tools.builtin.args import (
    MAX_KEY_BYTES,
    SCHEMA_IDENTIFIER,
    ToolArgumentError,
    as_object,
    compact,
    identifier,
    json_type,
    required_str,
)
from agenttx.tools.builtin.state import state_tool
from agenttx.tools.context import ToolContext


class IntegrityError(Exception):
    """A constraint the row breaks; the text is PostgreSQL's, so hints and agents know it."""


def _row_id(args: dict[str, Any]) -> str | int | float:
    value = args.get("id")
    if value is None:
        raise ToolArgumentError("missing field `id`")
    if isinstance(value, bool) or not isinstance(value, str | int | float) or value == "":
        raise ToolArgumentError(
            f"invalid type: {json_type(value)} for field `id`, expected a string or number"
        )
    return value


def _key_part(row_id: str | int | float) -> str:
    return row_id if isinstance(row_id, str) else compact(row_id)


def _record_key(table: str, row_id: str | int | float) -> str:
    """The state key of a row, refused with the id named when it is over the key limit."""
    part = _key_part(row_id)
    key = f"records/{table}/{part}"
    size = len(key.encode("utf-8", "surrogatepass"))
    if size > MAX_KEY_BYTES:
        room = MAX_KEY_BYTES - (size - len(part.encode("utf-8", "surrogatepass")))
        raise ToolArgumentError(
            f"invalid value for field `id`: record id {clip(part, 40)!r} is too long; ids in "
            f"table `{table}` are at most {room} bytes"
        )
    return key


_ID_SCHEMA = {"type": ["string", "number"]}


@state_tool(
    name="record.insert",
    effect="state",
    description="Insert a row; duplicate ids and missing foreign-key targets fail.",
    schema={
        "type": "object",
        "properties": {
            "table": SCHEMA_IDENTIFIER,
            "id": _ID_SCHEMA,
            "fields": {"type": "object"},
            "references": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": "field name -> referenced table; those fields are not-null",
            },
        },
        "required": ["table", "id"],
        "additionalProperties": False,
    },
    examples=[
        {"table": "customers", "id": "c-1", "fields": {"name": "Acme GmbH"}},
        {
            "table": "invoices",
            "id": "inv-1",
            "fields": {"customer_id": "c-1", "amount": 1200},
            "references": {"customer_id": "customers"},
        },
    ],
)
async def record_insert(ctx: ToolContext, arguments: Any) -> dict[str, Any]:
    args = as_object(arguments)
    table = identifier(required_str(args, "table"), "table")
    row_id = _row_id(args)
    fields = args.get("fields")
    if fields is None:
        fields = {}
    if not isinstance(fields, dict):
        raise ToolArgumentError(
            f"invalid type: {json_type(fields)} for field `fields`, expected an object"
        )
    references = args.get("references")
    if references is not None and not isinstance(references, dict):
        raise ToolArgumentError(
            f"invalid type: {json_type(references)} for field `references`, expected an object "
            "(field name -> referenced table)"
        )
    key = _record_key(table, row_id)
    if await ctx.state.exists(key):
        raise IntegrityError(
            f'ERROR: duplicate key value violates unique constraint "{table}_pkey"\n'
            f"DETAIL: Key (id)=({_key_part(row_id)}) already exists."
        )
    if references:
        for field, ref_table in references.items():
            if not isinstance(ref_table, str):
                raise ToolArgumentError(
                    f"invalid type: {json_type(ref_table)} for references.{field}, "
                    "expected a string"
                )
            identifier(ref_table, "referenced table")
            value = fields.get(field)
            if value is None:
                raise IntegrityError(
                    f'ERROR: null value in column "{field}" of relation "{table}" '
                    "violates not-null constraint"
                )
            ref_id = value if isinstance(value, str) else compact(value)
            if not await ctx.state.exists(f"records/{ref_table}/{ref_id}"):
                raise IntegrityError(
                    f'ERROR: insert or update on table "{table}" violates foreign key '
                    f'constraint "{table}_{field}_fkey"\n'
                    f'DETAIL: Key ({field})=({ref_id}) is not present in table "{ref_table}".'
                )
    row = {**fields, "id": row_id}
    await ctx.state.put(key, row)
    return {**row, "table": table}


@state_tool(
    name="record.get",
    effect="read",
    idempotent=True,
    description="Read a row by id.",
    schema={
        "type": "object",
        "properties": {"table": {"type": "string"}, "id": _ID_SCHEMA},
        "required": ["table", "id"],
        "additionalProperties": False,
    },
    examples=[{"table": "customers", "id": "c-1"}],
)
async def record_get(ctx: ToolContext, arguments: Any) -> dict[str, Any]:
    args = as_object(arguments)
    table = identifier(required_str(args, "table"), "table")
    raw_id = _row_id(args)
    row_id = _key_part(raw_id)
    key = _record_key(table, raw_id)
    if not await ctx.state.exists(key):
        raise LookupError(f'no row with id={row_id} in table "{table}"')
    row: dict[str, Any] = await ctx.state.get(key)
    return row
