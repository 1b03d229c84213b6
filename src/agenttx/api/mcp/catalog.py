"""The MCP tools AgentTx offers: names, titles, descriptions written for a model, input and
output schemas, annotations, and the workflow ``instructions`` sent at initialization.

The six names and parameters are the reference server's (``begin_transaction``, ``run_step``,
``commit_transaction``, ``rollback_transaction``, ``get_transaction``, ``list_tools``), plus
``list_transactions``. Inputs are declared strictly (``step_id`` an integer, ``arguments`` an
object) and read leniently (``arguments.py``): models often send a number as a string or an
object as JSON text, and refusing that would only cost them a turn.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types

INSTRUCTIONS = """\
AgentTx runs your tool calls as one transaction: undone together on failure, committed once.
1. begin_transaction (optionally with the goal) → transaction_id; next_step_id is 1.
2. list_tools once, to see the AgentTx tools (kv.put, record.insert, fs.write, ...).
3. run_step for each action with step_id = the last next_step_id you were given. Reuse an \
earlier output with ${steps.<id>.<field>} in arguments.
4. If a step says ROLLBACK_TRIGGERED, read its hint and the constraints, then resume at the \
step_id it names; the undone steps must be sent again.
5. commit_transaction when every step succeeded (nothing outside happens before), or \
rollback_transaction to undo everything.
A refused call has ok=false and a continuation saying exactly what to call next."""

TRANSACTION_ID = {
    "type": "string",
    "minLength": 1,
    "maxLength": 128,
    "description": "The transaction_id begin_transaction returned.",
}

_FAILURE: dict[str, Any] = {
    "type": "object",
    "required": ["ok", "error", "continuation"],
    "properties": {
        "ok": {"const": False},
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
            "description": "What to do next; follow it instead of guessing.",
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
    },
}


def _output(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """Success (``ok: true``, the wire fields) or failure (``ok: false``, error, continuation)."""
    success = {
        "type": "object",
        "required": ["ok", *required],
        "properties": {"ok": {"const": True}, **properties},
    }
    return {"type": "object", "oneOf": [success, _FAILURE]}


_INT = {"type": "integer"}
_STR = {"type": "string"}
_STRS = {"type": "array", "items": _STR}
_BOOL = {"type": "boolean"}

_STEP_FIELDS = {
    "status": {
        "enum": ["SUCCESS", "ROLLBACK_TRIGGERED", "FAILED", "OUTCOME_UNKNOWN"],
        "description": "SUCCESS; ROLLBACK_TRIGGERED: rewound, resume at next_step_id; FAILED: "
        "the transaction was aborted; OUTCOME_UNKNOWN: an outside call may have happened.",
    },
    "step_id": _INT,
    "tool": _STR,
    "output": {"description": "The tool's output (JSON), on success."},
    "clean_hint": {"type": "string", "description": "One line: why it failed, what to change."},
    "strategy": _STR,
    "rollback_to_step": _INT,
    "next_step_id": {"type": "integer", "description": "The step_id of your next run_step."},
    "constraints": {"type": "array", "items": _STR, "description": "Rules learned so far."},
    "context_reset": _BOOL,
    "error_category": _STR,
    "abort_reason": _STR,
    "compensation_errors": _STRS,
}


def _tool(
    name: str,
    title: str,
    description: str,
    properties: dict[str, Any],
    required: list[str],
    output: dict[str, Any],
    annotations: types.ToolAnnotations,
) -> types.Tool:
    return types.Tool(
        name=name,
        title=title,
        description=description,
        input_schema={
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        },
        output_schema=output,
        annotations=annotations,
    )


TOOLS: tuple[types.Tool, ...] = (
    _tool(
        "begin_transaction",
        "Begin a transaction",
        "Start a transaction for one task. Every later call names its transaction_id; run "
        "the first step with step_id 1. Nothing done inside takes effect outside until "
        "commit_transaction.",
        {
            "goal": {
                "type": "string",
                "description": "The task in a sentence or two (kept with the transaction as "
                "metadata goal; at most 4 KB).",
            },
            "agent_id": {"type": "string", "maxLength": 256, "description": "Who is acting."},
        },
        [],
        _output({"transaction_id": _STR, "next_step_id": _INT}, ["transaction_id"]),
        types.ToolAnnotations(
            title="Begin a transaction",
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=False,
            open_world_hint=False,
        ),
    ),
    _tool(
        "run_step",
        "Run one step",
        "Run one AgentTx tool (see list_tools) as the next step of the transaction. step_id "
        "must be the next_step_id of the last reply. On failure AgentTx undoes what is needed "
        "and says where to resume (ROLLBACK_TRIGGERED + next_step_id); read clean_hint and "
        "constraints before retrying. Earlier outputs: ${steps.<id>.<field>} in arguments.",
        {
            "transaction_id": TRANSACTION_ID,
            "step_id": {
                "type": "integer",
                "minimum": 1,
                "description": "The next_step_id of the last reply (a numeric string is taken).",
            },
            "tool": {
                "type": "string",
                "minLength": 1,
                "maxLength": 128,
                "description": "An AgentTx tool name from list_tools, e.g. kv.put.",
            },
            "arguments": {
                "type": "object",
                "description": "The tool's arguments (a JSON object, or its text).",
            },
            "reasoning": {
                "type": "string",
                "description": "Why this step (kept in the transaction's context log).",
            },
        },
        ["transaction_id", "step_id", "tool"],
        _output(_STEP_FIELDS, ["status", "next_step_id"]),
        types.ToolAnnotations(
            title="Run one step",
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=False,
            open_world_hint=True,
        ),
    ),
    _tool(
        "commit_transaction",
        "Commit the transaction",
        "Make every step's changes take effect and release the staged effects (emails, "
        "webhooks) once. Call it only when all steps succeeded. A conflict with another "
        "transaction aborts this one; the reply says what to redo.",
        {"transaction_id": TRANSACTION_ID},
        ["transaction_id"],
        _output(
            {
                "committed": _BOOL,
                "steps_committed": _INT,
                "effects_dispatched": _INT,
                "effects_queued": _INT,
                "dispatch_errors": _STRS,
            },
            ["committed"],
        ),
        types.ToolAnnotations(
            title="Commit the transaction",
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=False,
            open_world_hint=True,
        ),
    ),
    _tool(
        "rollback_transaction",
        "Roll back",
        "Undo steps. With to_step N: undo step N and everything after it, and keep the "
        "transaction open at step_id N. Without to_step: undo everything and end the "
        "transaction (nothing is sent).",
        {
            "transaction_id": TRANSACTION_ID,
            "to_step": {
                "type": "integer",
                "minimum": 0,
                "description": "Rewind to just before this step; omit or 0 to abort.",
            },
            "reason": {"type": "string", "description": "Why (kept with the transaction)."},
        },
        ["transaction_id"],
        _output(
            {
                "rolled_back": _BOOL,
                "next_step_id": _INT,
                "compensations_run": _INT,
                "compensation_errors": _STRS,
            },
            ["rolled_back"],
        ),
        types.ToolAnnotations(
            title="Roll back",
            read_only_hint=False,
            destructive_hint=True,
            idempotent_hint=False,
            open_world_hint=False,
        ),
    ),
    _tool(
        "get_transaction",
        "Show a transaction",
        "The transaction's status, next_step_id, learned constraints, context log and step "
        "history. Use it to find where you are after losing track.",
        {"transaction_id": TRANSACTION_ID},
        ["transaction_id"],
        _output(
            {"transaction_id": _STR, "status": _STR, "next_step_id": _INT, "constraints": _STRS},
            ["transaction_id", "status"],
        ),
        types.ToolAnnotations(
            title="Show a transaction",
            read_only_hint=True,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=False,
        ),
    ),
    _tool(
        "list_tools",
        "List AgentTx tools",
        "Every tool run_step can run: name, input schema, effect class (read, state, "
        "compensatable, staged, irreversible) and an example call. Call it once per session.",
        {},
        [],
        _output({"tools": {"type": "array", "items": {"type": "object"}}}, ["tools"]),
        types.ToolAnnotations(
            title="List AgentTx tools",
            read_only_hint=True,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=False,
        ),
    ),
    _tool(
        "list_transactions",
        "List transactions",
        "Transactions oldest first, optionally only some statuses (ACTIVE, COMMITTED, "
        "ROLLED_BACK, FAILED, ...) or one agent_id; pass next_page_token back for more.",
        {
            "status": {"type": "array", "items": _STR, "description": "Statuses to keep."},
            "agent_id": _STR,
            "page_size": {"type": "integer", "minimum": 1, "maximum": 500},
            "page_token": _STR,
        },
        [],
        _output(
            {
                "transactions": {"type": "array", "items": {"type": "object"}},
                "next_page_token": _STR,
            },
            ["transactions"],
        ),
        types.ToolAnnotations(
            title="List transactions",
            read_only_hint=True,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=False,
        ),
    ),
)

TOOL_NAMES = frozenset(t.name for t in TOOLS)
