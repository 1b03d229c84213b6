"""The MCP tools AgentTx offers, as ``tools/list`` shows them, and the workflow
``instructions`` sent at initialization.

Each tool is its row's ``mcp`` binding (``api/operations/mcp_bindings.py``: name, title,
description for a model, hints, inputs, declared output fields) made into an SDK ``Tool``
here, in ``LISTED`` order: one loop, nothing declared a second time. The input schema is the
binding's inputs, nothing else allowed; the output schema is ``ok``, the binding's declared
fields (or, for a row bound without them, every field of its reply typed from the reply
message) and the failure-only fields (``_output``).
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from google.protobuf.descriptor import FieldDescriptor

from agenttx.api.fields import enum_prefix
from agenttx.api.operations import ROWS, Row
from agenttx.api.operations.mcp_bindings import LISTED
from agenttx.api.operations.mcp_schemas import ANY_JSON

INSTRUCTIONS = """\
AgentTx runs your tool calls as one transaction: undone together on failure, committed once.
1. begin_transaction (optionally with the goal) → transaction_id; next_step_id is 1.
2. list_tools once, to see the AgentTx tools (kv.put, record.insert, fs.write, ...).
3. run_step for each action with step_id = the last next_step_id you were given. Reuse an \
earlier output with ${steps.<id>.<field>} in arguments.
4. If a step says ROLLBACK_TRIGGERED, read its hint and the constraints, then resume at the \
step_id it names; the undone steps must be sent again.
5. commit_transaction when every step succeeded (nothing outside happens before), or \
rollback_transaction to undo everything. preview_commit first shows exactly what the commit \
would change and gives a receipt_id; pass it (and the snapshot's revision as \
expected_revision) to commit_transaction to commit only that change. An approval_required \
transaction commits only after an approver (someone else) called approve_commit on the receipt; \
if the approver calls refuse_commit instead, the commit says who refused and why: change the \
transaction as asked and preview_commit again, or roll back.
6. A step that says OUTCOME_UNKNOWN may or may not have happened outside: never run it again; \
call reconcile_step (after retry_after_ms) and follow its answer.
7. run_step with dry_run: true shows what a step would do without doing it; undo_step takes \
back the last step (redo_step puts it back if nothing ran since).
A refused call has ok=false and a continuation saying exactly what to call next."""

# The fields only a refused call's result has (``ok: false``, ``isError: true``).
_FAILURE_FIELDS: dict[str, Any] = {
    "error": {
        "type": "object",
        "required": ["code", "message", "correlationId"],
        "properties": {
            "code": {"type": "string", "description": "Stable reason, e.g. WRONG_STEP."},
            "message": {"type": "string"},
            "correlationId": {
                "type": "string",
                "description": "Finds the matching line in the server log.",
            },
        },
        "description": "Refused calls only: why.",
    },
    "continuation": {
        "type": "object",
        "required": ["kind", "instruction"],
        "properties": {
            "kind": {
                "enum": [
                    "CallTool",
                    "ChooseTool",
                    "RetryRequest",
                    "ReviseRequest",
                    "ResolveExternally",
                ]
            },
            "tool": {"type": "string"},
            "tools": {"type": "array", "items": {"type": "string"}},
            "instruction": {"type": "string", "minLength": 1},
        },
        "description": "Refused calls only: what to do next; follow it instead of guessing.",
    },
    "diagnostics": {
        "type": "array",
        "items": {
            "type": "object",
            "required": ["id", "message"],
            "properties": {
                "id": {"type": "string"},
                "severity": {"enum": ["Info", "Warning", "Error"]},
                "message": {"type": "string"},
            },
        },
    },
}

_OK = {
    "type": "boolean",
    "description": "true: the call's fields; false (isError): refused, see error and continuation.",
}


def _output(fields: dict[str, Any], also: tuple[str, ...] = ()) -> dict[str, Any]:
    """One object for both shapes a result has: ``ok: true`` with the wire fields, or
    ``ok: false`` with error, continuation and diagnostics; only ``ok`` always appears.

    ``fields`` are described and typed; ``also`` are fields a result carries that are named in
    the schema's description only (docs/mcp.md says what each is), like every other wire
    field not declared: the object allows them (no ``additionalProperties``).

    Why so few declared fields, and no ``oneOf`` of the two shapes: the Python SDK's client
    validates every successful result against this schema with the pure-Python
    ``jsonschema``, which pays ~10-30 µs for each declared subschema present in the result,
    and nothing for a field the schema does not declare. Every declared one must be a schema
    object, and one that constrains: the TypeScript SDK refuses a property schema ``true``
    (``tools/list`` fails as a whole), and the Inspector flags ``true`` and ``{}`` as
    unportable; a ``{}`` costs as much as a typed field (docs/benchmarks.md, "MCP"). So the
    fields a model acts on are declared and typed, the rest are named, and the failure-only
    fields cost nothing on success."""
    schema: dict[str, Any] = {
        "type": "object",
        "required": ["ok"],
        "properties": {"ok": _OK, **fields, **_FAILURE_FIELDS},
    }
    if also:
        schema["description"] = f"Also returned: {', '.join(also)}."
    return schema


def tool(row: Row) -> types.Tool:
    """``row``'s MCP tool as ``tools/list`` shows it."""
    b = row.mcp
    assert b is not None, row.name
    declared = b.output
    if declared is None:  # every field of the reply, typed from the reply message
        declared = {_out_name(f): _schema(f) for f in row.reply.DESCRIPTOR.fields}
    fields = {k: dict(v) for k, v in declared.items()}
    inputs: dict[str, Any] = {
        "type": "object",
        "properties": {i.name: dict(i.schema) for i in b.inputs},
        "required": [i.name for i in b.inputs if i.required],
        "additionalProperties": False,
    }
    if b.bare:  # as first published: no empty required list, no refusal fields declared
        if not inputs["required"]:
            del inputs["required"]
        output = {"type": "object", "properties": {"ok": {"type": "boolean"}, **fields}}
    else:
        output = _output(fields, b.also)
    return types.Tool(
        name=b.name,
        title=b.title,
        description=b.description,
        input_schema=inputs,
        output_schema=output,
        annotations=types.ToolAnnotations(
            title=b.title,
            read_only_hint=b.hints.read_only,
            destructive_hint=b.hints.destructive,
            idempotent_hint=b.hints.idempotent,
            open_world_hint=b.hints.open_world,
        ),
    )


def _listed(rows: tuple[Row, ...]) -> tuple[Row, ...]:
    """The bound rows in ``LISTED`` order; each binding on one row, each listed."""
    position = {id(b): i for i, b in enumerate(LISTED)}
    bound = [r for r in rows if r.mcp is not None]
    assert sorted(position[id(r.mcp)] for r in bound) == list(range(len(LISTED))), "LISTED"
    return tuple(sorted(bound, key=lambda r: position[id(r.mcp)]))


# Every row with an MCP tool, in ``tools/list`` order; the opt-in ones are listed only when
# offered (``AgentTxMCP.offer``: ``--mcp-effect-tools``).
LISTED_ROWS = _listed(ROWS)
DEFAULT_ROWS = tuple(r for r in LISTED_ROWS if r.mcp is not None and not r.mcp.opt_in)

_T = FieldDescriptor
_SCALARS = {
    _T.TYPE_STRING: "string",
    _T.TYPE_BOOL: "boolean",
    _T.TYPE_DOUBLE: "number",
    _T.TYPE_FLOAT: "number",
    **dict.fromkeys((_T.TYPE_UINT32, _T.TYPE_UINT64, _T.TYPE_INT32, _T.TYPE_INT64), "integer"),
}


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
