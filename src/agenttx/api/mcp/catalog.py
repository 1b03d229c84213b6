"""The MCP tools AgentTx offers: names, titles, descriptions written for a model, input and
output schemas, annotations, and the workflow ``instructions`` sent at initialization.

The six names and parameters are the reference server's (``begin_transaction``, ``run_step``,
``commit_transaction``, ``rollback_transaction``, ``get_transaction``, ``list_tools``), plus
``list_transactions``, and ``preview_commit``, ``approve_commit`` and ``refuse_commit``
(docs/safety.md), ``reconcile_step``. Inputs are declared strictly (``step_id`` an integer,
``arguments`` an object) and read leniently (``arguments.py``): models often send a number as
a string or an object as JSON text, and refusing that would only cost them a turn.

The annotations are decisions for hosts, some of which ask a person before each call hinted
destructive: of an agent's own calls only ``commit_transaction`` is destructive (it makes the
steps' changes final and releases the emails and webhooks); a step, an undo and a rollback
change nothing that outlives the transaction (bar a tool declared ``irreversible``, which the
safety policy can forbid), so a person is asked once, before the commit. The table and the
reasons: docs/mcp.md, Tools.
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

TRANSACTION_ID = {
    "type": "string",
    "minLength": 1,
    "maxLength": 128,
    "description": "The transaction_id begin_transaction returned.",
}

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


# Any JSON value (a tool's output), spelled as a schema that constrains, so every client takes
# it: JSON Schema's own spelling, ``true`` or ``{}``, is refused or flagged (``_output``), and a
# ``type`` array is less portable than ``anyOf`` (hosts that map schemas onto one ``type``).
# The common case first: each branch tried costs the Python SDK one more subschema.
ANY_JSON: dict[str, Any] = {
    "anyOf": [{"type": t} for t in ("object", "array", "string", "number", "boolean", "null")],
}

_INT = {"type": "integer"}
_STR = {"type": "string"}
_STRS = {"type": "array", "items": _STR}
_BOOL = {"type": "boolean"}
_SNAPSHOT = {
    "type": "object",
    "properties": {"transaction_id": _STR, "revision": _INT},
    "description": "Echo snapshot.revision as expected_revision to commit only this state.",
}

# What a model reads of a run_step result, described; the rest of the reference's fields
# named in the description (a run_step result is validated by the client on every step:
# ``_output``).
_STEP_FIELDS = {
    "status": {
        "enum": ["SUCCESS", "ROLLBACK_TRIGGERED", "FAILED", "OUTCOME_UNKNOWN"],
        "description": "SUCCESS; ROLLBACK_TRIGGERED: rewound, resume at next_step_id; FAILED: "
        "the transaction was aborted; OUTCOME_UNKNOWN: an outside call may have happened.",
    },
    "output": {**ANY_JSON, "description": "The tool's output (JSON), on success."},
    "clean_hint": {"type": "string", "description": "One line: why it failed, what to change."},
    "next_step_id": {"type": "integer", "description": "The step_id of your next run_step."},
    "constraints": {"type": "array", "items": _STR, "description": "Rules learned so far."},
}
_STEP_NAMED = (
    "step_id",
    "tool",
    "strategy",
    "rollback_to_step",
    "context_reset",
    "error_category",
    "abort_reason",
    "compensation_errors",
)


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
            "principal": {
                "type": "string",
                "maxLength": 256,
                "description": "The person or service the agent acts for (approval_required "
                "needs one: a different principal approves).",
            },
            "mode": {
                "enum": ["transactional", "approval_required", "autonomous_trusted"],
                "description": "How the transaction may commit: transactional (default), "
                "approval_required (an approver must approve the previewed change), "
                "autonomous_trusted.",
            },
        },
        [],
        _output(
            {"transaction_id": _STR, "next_step_id": _INT, "snapshot": _SNAPSHOT},
        ),
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
            "dry_run": {
                "type": "boolean",
                "description": "true: only say what this step would do (validated as far as "
                "the tool allows, a simulated output, the changes it would make); nothing is "
                "run or kept and next_step_id stays.",
            },
        },
        ["transaction_id", "step_id", "tool"],
        _output(_STEP_FIELDS, _STEP_NAMED),
        types.ToolAnnotations(
            title="Run one step",
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=True,
        ),
    ),
    _tool(
        "commit_transaction",
        "Commit the transaction",
        "Make every step's changes take effect and release the staged effects (emails, "
        "webhooks) once. Call it only when all steps succeeded. A conflict with another "
        "transaction aborts this one; the reply says what to redo. With expected_revision "
        "(the last snapshot's revision) and receipt_id (from preview_commit) it commits only "
        "the change you previewed; if anything moved since, it is refused and nothing happens.",
        {
            "transaction_id": TRANSACTION_ID,
            "expected_revision": {
                "type": "integer",
                "minimum": 1,
                "description": "snapshot.revision of the reply your decision is based on.",
            },
            "receipt_id": {
                "type": "string",
                "maxLength": 64,
                "description": "The receipt_id preview_commit returned (required, approved, "
                "for an approval_required transaction).",
            },
        },
        ["transaction_id"],
        _output(
            {
                "committed": _BOOL,
                "steps_committed": _INT,
                "effects_dispatched": _INT,
                "effects_queued": _INT,
                "dispatch_errors": _STRS,
            },
        ),
        types.ToolAnnotations(
            title="Commit the transaction",
            read_only_hint=False,
            destructive_hint=True,
            idempotent_hint=True,
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
                "snapshot": _SNAPSHOT,
            },
        ),
        types.ToolAnnotations(
            title="Roll back",
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=True,
        ),
    ),
    _tool(
        "get_transaction",
        "Show a transaction",
        "The transaction's status, next_step_id, learned constraints, context log, its "
        "newest step attempts (history: true for every attempt and the dependency edges) and "
        "newest preview receipts (approved, refused, expired or voided; by whom and why). Use "
        "it to find where you are after losing track.",
        {
            "transaction_id": TRANSACTION_ID,
            "history": {
                "type": "boolean",
                "description": "true: every attempt of every step and the dependency edges; "
                "default: the newest 10 attempts (earlier_steps_omitted counts the rest).",
            },
        },
        ["transaction_id"],
        _output(
            {"transaction_id": _STR, "status": _STR, "next_step_id": _INT, "constraints": _STRS},
            ("steps", "earlier_steps_omitted"),
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
        _output({"tools": {"type": "array", "items": {"type": "object"}}}),
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
        ),
        types.ToolAnnotations(
            title="List transactions",
            read_only_hint=True,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=False,
        ),
    ),
    # Outcome unknown, reconciled (docs/reconcile.md).
    _tool(
        "reconcile_step",
        "Reconcile an unknown outcome",
        "Settle a step whose outside call may or may not have happened (OUTCOME_UNKNOWN): "
        "AgentTx asks the outside system through the tool's reconcile handler. happened: the "
        "step succeeded, go on; not_happened: run it again; still unknown: call again after "
        "retry_after_ms. Never run such a step again without reconciling it first.",
        {
            "transaction_id": TRANSACTION_ID,
            "step_id": {
                "type": "integer",
                "minimum": 1,
                "description": "The OUTCOME_UNKNOWN step (get_transaction: outcome_unknown_step).",
            },
        },
        ["transaction_id", "step_id"],
        _output(
            {
                "outcome": {"enum": ["happened", "not_happened", "unknown"]},
                "step_id": _INT,
                "next_step_id": _INT,
                "retry_after_ms": _INT,
                "output": {**ANY_JSON, "description": "happened: the step's output (JSON)."},
                "clean_hint": _STR,
                "operation_provider": _STR,
                "operation_id": _STR,
                "snapshot": _SNAPSHOT,
            },
        ),
        types.ToolAnnotations(
            title="Reconcile an unknown outcome",
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=False,
            open_world_hint=True,
        ),
    ),
)

_RECEIPT_ID = {
    "type": "string",
    "minLength": 1,
    "maxLength": 64,
    "description": "The receipt_id preview_commit returned.",
}

TOOLS += (
    _tool(
        "preview_commit",
        "Preview the commit",
        "Show exactly what commit_transaction would change now: state keys (before → after), "
        "files written (hashes and a diff), staged effects it would release, irreversible "
        "steps already taken and undo actions it would discard — with a receipt_id bound to "
        "this exact change (change_hash) and revision, valid for 15 minutes. Changes nothing.",
        {"transaction_id": TRANSACTION_ID},
        ["transaction_id"],
        _output(
            {
                "receipt_id": _STR,
                "change_hash": _STR,
                "revision": _INT,
                "expires_at": {"type": "number"},
                "changes": {"type": "object"},
                "approval_required": _BOOL,
                "approval_reasons": _STRS,
                "snapshot": _SNAPSHOT,
            },
        ),
        types.ToolAnnotations(
            title="Preview the commit",
            read_only_hint=True,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=False,
        ),
    ),
    _tool(
        "approve_commit",
        "Approve a previewed commit",
        "For an approver only — a principal other than the one who began the transaction, "
        "holding the approver role: approve the receipt's exact change, once. Any later step "
        "voids the approval. Never call it to approve your own work.",
        {
            "transaction_id": TRANSACTION_ID,
            "receipt_id": _RECEIPT_ID,
            "principal": {
                "type": "string",
                "minLength": 1,
                "maxLength": 256,
                "description": "Who approves.",
            },
            "roles": {
                "type": "array",
                "items": _STR,
                "description": "The approver's roles; must include approver.",
            },
        },
        ["transaction_id", "receipt_id", "principal", "roles"],
        _output(
            {
                "receipt_id": _STR,
                "change_hash": _STR,
                "revision": _INT,
                "approved_by": _STR,
                "snapshot": _SNAPSHOT,
            },
        ),
        types.ToolAnnotations(
            title="Approve a previewed commit",
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=False,
        ),
    ),
    _tool(
        "refuse_commit",
        "Refuse a previewed commit",
        "For an approver only — a principal other than the one who began the transaction, "
        "holding the approver role: refuse the receipt's change, once, saying why. The "
        "transaction stays open; its agent is told who refused and why when it commits, and "
        "can change the transaction and preview again, or roll back. A receipt is decided "
        "once: an approved one cannot be refused.",
        {
            "transaction_id": TRANSACTION_ID,
            "receipt_id": _RECEIPT_ID,
            "principal": {
                "type": "string",
                "minLength": 1,
                "maxLength": 256,
                "description": "Who refuses.",
            },
            "roles": {
                "type": "array",
                "items": _STR,
                "description": "The refuser's roles; must include approver.",
            },
            "reason": {
                "type": "string",
                "minLength": 1,
                "maxLength": 4096,
                "description": "Why, and what would make the change acceptable (at most 4096 "
                "bytes of UTF-8; the agent reads it).",
            },
        },
        ["transaction_id", "receipt_id", "principal", "roles", "reason"],
        _output(
            {
                "receipt_id": _STR,
                "refused_by": _STR,
                "refused_at": {"type": "number"},
                "reason": _STR,
                "snapshot": _SNAPSHOT,
            },
        ),
        types.ToolAnnotations(
            title="Refuse a previewed commit",
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=False,
        ),
    ),
)

TOOL_NAMES = frozenset(t.name for t in TOOLS)
