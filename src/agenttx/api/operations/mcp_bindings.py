"""Each row's MCP tool (``McpTool``): its name, title, description for a model, hints, inputs
and declared output fields, set on its row in ``table.py`` (``mcp=``). Kept here, not in the
rows, because they are most of the words: a row stays readable on one screen.

The first six names and their parameters are the reference server's (``begin_transaction``,
``run_step``, ``commit_transaction``, ``rollback_transaction``, ``get_transaction``,
``list_tools``); inputs are declared strictly (``step_id`` an integer, ``arguments`` an object)
and read leniently (``api/mcp/arguments.py``). The hints are decisions for hosts, some of which
ask a person before each call hinted destructive: of an agent's own calls only
``commit_transaction`` is destructive (it makes the steps' changes final and releases the
emails and webhooks); a step, an undo and a rollback change nothing that outlives the
transaction (bar a tool declared ``irreversible``, which the safety policy can forbid), so a
person is asked once, before the commit (docs/mcp.md, Tools).

``LISTED`` is the order ``tools/list`` shows them in: the reference's first, as clients have
always seen them (the table's order is the service's).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agenttx.api.effects_wire import MAX_EFFECTS
from agenttx.api.operations.mcp_schemas import (
    ANY_JSON,
    BOOL,
    INT,
    NUMBER,
    OBJECTS,
    RECEIPT_ID,
    SNAPSHOT,
    STR,
    STRS,
    TRANSACTION_ID,
)
from agenttx.api.operations.model import Hints, McpInput, McpTool
from agenttx.numbers import EFFECTS_PAGE, TRANSACTIONS_PAGE

_TX = McpInput("transaction_id", TRANSACTION_ID, required=True)
# What the hints say (read_only, destructive, idempotent, open_world), by kind of call.
_READ = Hints(read_only=True, destructive=False, idempotent=True, open_world=False)
_ACT = Hints(read_only=False, destructive=False, idempotent=True, open_world=False)
_DECIDE_UNDO = Hints(read_only=False, destructive=True, idempotent=False, open_world=True)

BEGIN_TRANSACTION = McpTool(
    "begin_transaction",
    "Begin a transaction",
    "Start a transaction for one task. Every later call names its transaction_id; run "
    "the first step with step_id 1. Nothing done inside takes effect outside until "
    "commit_transaction.",
    Hints(read_only=False, destructive=False, idempotent=False, open_world=False),
    (
        McpInput(
            "goal",
            {
                "type": "string",
                "description": "The task in a sentence or two (kept with the transaction as "
                "metadata goal; at most 4 KB).",
            },
            reading="text",
        ),
        McpInput("agent_id", {"type": "string", "maxLength": 256, "description": "Who is acting."}),
        McpInput(
            "principal",
            {
                "type": "string",
                "maxLength": 256,
                "description": "The person or service the agent acts for (approval_required "
                "needs one: a different principal approves).",
            },
        ),
        McpInput(
            "mode",
            {
                "enum": ["transactional", "approval_required", "autonomous_trusted"],
                "description": "How the transaction may commit: transactional (default), "
                "approval_required (an approver must approve the previewed change), "
                "autonomous_trusted.",
            },
        ),
    ),
    output={"transaction_id": STR, "next_step_id": INT, "snapshot": SNAPSHOT},
)

# What a model reads of a run_step result, described; the rest of the reference's fields
# named in the description (a run_step result is validated by the client on every step).
RUN_STEP = McpTool(
    "run_step",
    "Run one step",
    "Run one AgentTx tool (see list_tools) as the next step of the transaction. step_id "
    "must be the next_step_id of the last reply. On failure AgentTx undoes what is needed "
    "and says where to resume (ROLLBACK_TRIGGERED + next_step_id); read clean_hint and "
    "constraints before retrying. Earlier outputs: ${steps.<id>.<field>} in arguments.",
    Hints(read_only=False, destructive=False, idempotent=True, open_world=True),
    (
        _TX,
        McpInput(
            "step_id",
            {
                "type": "integer",
                "minimum": 1,
                "description": "The next_step_id of the last reply (a numeric string is taken).",
            },
            required=True,
        ),
        McpInput(
            "tool",
            {
                "type": "string",
                "minLength": 1,
                "maxLength": 128,
                "description": "An AgentTx tool name from list_tools, e.g. kv.put.",
            },
            required=True,
            reading="text",
        ),
        McpInput(
            "arguments",
            {"type": "object", "description": "The tool's arguments (a JSON object, or its text)."},
            reading="json",
        ),
        McpInput(
            "reasoning",
            {
                "type": "string",
                "description": "Why this step (kept in the transaction's context log).",
            },
            reading="text",
        ),
        McpInput(
            "dry_run",
            {
                "type": "boolean",
                "description": "true: only say what this step would do (validated as far as "
                "the tool allows, a simulated output, the changes it would make); nothing is "
                "run or kept and next_step_id stays.",
            },
        ),
    ),
    output={
        "status": {
            "enum": ["SUCCESS", "ROLLBACK_TRIGGERED", "FAILED", "OUTCOME_UNKNOWN"],
            "description": "SUCCESS; ROLLBACK_TRIGGERED: rewound, resume at next_step_id; "
            "FAILED: the transaction was aborted; OUTCOME_UNKNOWN: an outside call may have "
            "happened.",
        },
        "output": {**ANY_JSON, "description": "The tool's output (JSON), on success."},
        "clean_hint": {"type": "string", "description": "One line: why it failed, what to change."},
        "next_step_id": {"type": "integer", "description": "The step_id of your next run_step."},
        "constraints": {"type": "array", "items": STR, "description": "Rules learned so far."},
    },
    also=(
        "step_id",
        "tool",
        "strategy",
        "rollback_to_step",
        "context_reset",
        "error_category",
        "abort_reason",
        "compensation_errors",
    ),
)

COMMIT_TRANSACTION = McpTool(
    "commit_transaction",
    "Commit the transaction",
    "Make every step's changes take effect and release the staged effects (emails, "
    "webhooks) once. Call it only when all steps succeeded. A conflict with another "
    "transaction aborts this one; the reply says what to redo. With expected_revision "
    "(the last snapshot's revision) and receipt_id (from preview_commit) it commits only "
    "the change you previewed; if anything moved since, it is refused and nothing happens.",
    Hints(read_only=False, destructive=True, idempotent=True, open_world=True),
    (
        _TX,
        McpInput(
            "expected_revision",
            {
                "type": "integer",
                "minimum": 1,
                "description": "snapshot.revision of the reply your decision is based on.",
            },
        ),
        McpInput(
            "receipt_id",
            {
                "type": "string",
                "maxLength": 64,
                "description": "The receipt_id preview_commit returned (required, approved, "
                "for an approval_required transaction).",
            },
        ),
    ),
    output={
        "committed": BOOL,
        "steps_committed": INT,
        "effects_dispatched": INT,
        "effects_queued": INT,
        "dispatch_errors": STRS,
    },
)

ROLLBACK_TRANSACTION = McpTool(
    "rollback_transaction",
    "Roll back",
    "Undo steps. With to_step N: undo step N and everything after it, and keep the "
    "transaction open at step_id N. Without to_step: undo everything and end the "
    "transaction (nothing is sent).",
    Hints(read_only=False, destructive=False, idempotent=True, open_world=True),
    (
        _TX,
        McpInput(
            "to_step",
            {
                "type": "integer",
                "minimum": 0,
                "description": "Rewind to just before this step; omit or 0 to abort.",
            },
        ),
        McpInput("reason", {"type": "string", "description": "Why (kept with the transaction)."}),
    ),
    output={
        "rolled_back": BOOL,
        "next_step_id": INT,
        "compensations_run": INT,
        "compensation_errors": STRS,
        "snapshot": SNAPSHOT,
    },
)

GET_TRANSACTION = McpTool(
    "get_transaction",
    "Show a transaction",
    "The transaction's status, next_step_id, learned constraints, context log, its "
    "newest step attempts (history: true for every attempt and the dependency edges) and "
    "newest preview receipts (approved, refused, expired or voided; by whom and why). Use "
    "it to find where you are after losing track.",
    _READ,
    (
        _TX,
        McpInput(
            "history",
            {
                "type": "boolean",
                "description": "true: every attempt of every step and the dependency edges; "
                "default: the newest 10 attempts (earlier_steps_omitted counts the rest).",
            },
            reading="flag",
        ),
    ),
    output={"transaction_id": STR, "status": STR, "next_step_id": INT, "constraints": STRS},
    also=("steps", "earlier_steps_omitted"),
)

LIST_TOOLS = McpTool(
    "list_tools",
    "List AgentTx tools",
    "Every tool run_step can run: name, input schema, effect class (read, state, "
    "compensatable, staged, irreversible) and an example call. Call it once per session.",
    _READ,
    (),
    output={"tools": OBJECTS},
)

LIST_TRANSACTIONS = McpTool(
    "list_transactions",
    "List transactions",
    "Transactions oldest first, optionally only some statuses (ACTIVE, COMMITTED, "
    "ROLLED_BACK, FAILED, ...) or one agent_id; pass next_page_token back for more.",
    _READ,
    (
        McpInput(
            "status",
            {"type": "array", "items": STR, "description": "Statuses to keep."},
            reading="strings",
        ),
        McpInput("agent_id", STR),
        McpInput(
            "page_size",
            {"type": "integer", "minimum": 1, "maximum": 500},
            reading=TRANSACTIONS_PAGE,
        ),
        McpInput("page_token", STR),
    ),
    output={"transactions": OBJECTS, "next_page_token": STR},
)

# Outcome unknown, reconciled (docs/reconcile.md).
RECONCILE_STEP = McpTool(
    "reconcile_step",
    "Reconcile an unknown outcome",
    "Settle a step whose outside call may or may not have happened (OUTCOME_UNKNOWN): "
    "AgentTx asks the outside system through the tool's reconcile handler. happened: the "
    "step succeeded, go on; not_happened: run it again; still unknown: call again after "
    "retry_after_ms. Never run such a step again without reconciling it first.",
    Hints(read_only=False, destructive=False, idempotent=False, open_world=True),
    (
        _TX,
        McpInput(
            "step_id",
            {
                "type": "integer",
                "minimum": 1,
                "description": "The OUTCOME_UNKNOWN step (get_transaction: outcome_unknown_step).",
            },
            required=True,
        ),
    ),
    output={
        "outcome": {"enum": ["happened", "not_happened", "unknown"]},
        "step_id": INT,
        "next_step_id": INT,
        "retry_after_ms": INT,
        "output": {**ANY_JSON, "description": "happened: the step's output (JSON)."},
        "clean_hint": STR,
        "operation_provider": STR,
        "operation_id": STR,
        "snapshot": SNAPSHOT,
    },
)

# Consequential actions (docs/safety.md): the approver's decisions are explicit calls.
PREVIEW_COMMIT = McpTool(
    "preview_commit",
    "Preview the commit",
    "Show exactly what commit_transaction would change now: state keys (before → after), "
    "files written (hashes and a diff), staged effects it would release, irreversible "
    "steps already taken and undo actions it would discard — with a receipt_id bound to "
    "this exact change (change_hash) and revision, valid for 15 minutes. Changes nothing.",
    _READ,
    (_TX,),
    output={
        "receipt_id": STR,
        "change_hash": STR,
        "revision": INT,
        "expires_at": NUMBER,
        "changes": {"type": "object"},
        "approval_required": BOOL,
        "approval_reasons": STRS,
        "snapshot": SNAPSHOT,
    },
)


def _decider(who: str, role: str) -> tuple[McpInput, McpInput]:
    """An approver's principal and roles, as approve_commit and refuse_commit take them."""
    principal = {"type": "string", "minLength": 1, "maxLength": 256, "description": who}
    roles = {"type": "array", "items": STR, "description": role}
    return (
        McpInput("principal", principal, required=True),
        McpInput("roles", roles, required=True),
    )


APPROVE_COMMIT = McpTool(
    "approve_commit",
    "Approve a previewed commit",
    "For an approver only — a principal other than the one who began the transaction, "
    "holding the approver role: approve the receipt's exact change, once. Any later step "
    "voids the approval. Never call it to approve your own work.",
    _ACT,
    (
        _TX,
        McpInput("receipt_id", RECEIPT_ID, required=True),
        *_decider("Who approves.", "The approver's roles; must include approver."),
    ),
    output={
        "receipt_id": STR,
        "change_hash": STR,
        "revision": INT,
        "approved_by": STR,
        "snapshot": SNAPSHOT,
    },
)

REFUSE_COMMIT = McpTool(
    "refuse_commit",
    "Refuse a previewed commit",
    "For an approver only — a principal other than the one who began the transaction, "
    "holding the approver role: refuse the receipt's change, once, saying why. The "
    "transaction stays open; its agent is told who refused and why when it commits, and "
    "can change the transaction and preview again, or roll back. A receipt is decided "
    "once: an approved one cannot be refused.",
    _ACT,
    (
        _TX,
        McpInput("receipt_id", RECEIPT_ID, required=True),
        *_decider("Who refuses.", "The refuser's roles; must include approver."),
        McpInput(
            "reason",
            {
                "type": "string",
                "minLength": 1,
                "maxLength": 4096,
                "description": "Why, and what would make the change acceptable (at most 4096 "
                "bytes of UTF-8; the agent reads it).",
            },
            required=True,
        ),
    ),
    output={
        "receipt_id": STR,
        "refused_by": STR,
        "refused_at": NUMBER,
        "reason": STR,
        "snapshot": SNAPSHOT,
    },
)

# Undo and redo of the last step (docs/undo.md).
_MOVE_FIELDS: dict[str, Mapping[str, Any]] = {
    "transaction_id": STR,
    "step_id": INT,
    "next_step_id": INT,
    "transaction_status": STR,
    "revision": INT,
    "can_undo": BOOL,
    "can_redo": BOOL,
    "snapshot": SNAPSHOT,
}

UNDO_STEP = McpTool(
    "undo_step",
    "Undo the last step",
    "Undo the transaction's last successful step: its changes are dropped (an outside "
    "action is compensated, a staged email or webhook is dropped unsent) and next_step_id "
    "goes back to that step. An irreversible step cannot be undone. A state-only step "
    "undone this way can be put back exactly with redo_step.",
    Hints(read_only=False, destructive=False, idempotent=False, open_world=True),
    (_TX,),
    output={
        **_MOVE_FIELDS,
        "compensations_run": INT,
        "compensation_errors": STRS,
        "effects_dropped": INT,
    },
)

REDO_STEP = McpTool(
    "redo_step",
    "Redo the undone step",
    "Put back the step undo_step just undid, exactly as it was (same writes, same output; "
    "nothing is run again). Only right after the undo: once another step or rollback ran, "
    "send the step again with run_step instead.",
    _ACT,
    (_TX,),
    output=_MOVE_FIELDS,
)

# Compensation of a committed transaction (docs/compensation.md); approving or refusing the
# undo a rollback or a compensation waits for is an approver's explicit call.
COMPENSATE_TRANSACTION = McpTool(
    "compensate_transaction",
    "Compensate a committed transaction",
    "Undo a COMMITTED transaction's outside effects in a new compensating transaction: "
    "it runs the kept undo actions newest first and ends COMPENSATED, or FAILED with the "
    "steps it could not undo (past their compensation window, or rollback_not_supported). "
    "preview=true starts nothing and shows what would run. An open transaction is undone "
    "with rollback_transaction instead.",
    _DECIDE_UNDO,
    (
        _TX,
        McpInput("reason", {"type": "string", "description": "Why (at most 4 KB; audited)."}),
        McpInput("principal", {"type": "string", "description": "Who asks."}),
        McpInput("preview", {"type": "boolean", "description": "Only show what would run."}),
    ),
    output={
        "transaction_id": STR,
        "compensation_for": STR,
        "status": STR,
        "actions": {
            "type": "array",
            "items": {"type": "object"},
            "description": "Newest step first: tool, contract, verdict (run, awaiting_approval, "
            "past_window, not_supported, refused, done, failed) and why.",
        },
        "requires_human": BOOL,
    },
)

_UNDO_ROLES = McpInput(
    "roles", {"type": "array", "items": STR, "description": "Must hold approver."}
)

APPROVE_COMPENSATION = McpTool(
    "approve_compensation",
    "Approve a compensation",
    "For an approver only: approve the undo a rollback or a compensating transaction "
    "waits for (a tool's contract asks for an approver). The approver holds the "
    "'approver' role and is not the transaction's own principal.",
    _DECIDE_UNDO,
    (
        _TX,
        McpInput("principal", {"type": "string", "description": "The approver."}, required=True),
        _UNDO_ROLES,
    ),
    output={"transaction_id": STR, "finished": BOOL, "transaction_status": STR},
)

REFUSE_COMPENSATION = McpTool(
    "refuse_compensation",
    "Refuse a compensation",
    "For an approver only: refuse the undo a rollback or a compensating transaction "
    "waits for, once, saying why. The refused undo actions never run; every other undo "
    "action runs, and the transaction ends needing a person, who reads the reason. The "
    "refuser holds the 'approver' role and is not the transaction's own principal; an "
    "approved undo cannot be refused.",
    _DECIDE_UNDO,
    (
        _TX,
        McpInput("principal", {"type": "string", "description": "The refuser."}, required=True),
        _UNDO_ROLES,
        McpInput(
            "reason",
            {
                "type": "string",
                "minLength": 1,
                "maxLength": 4096,
                "description": "Why the undo must not run (at most 4096 bytes of UTF-8; the "
                "person who settles the step reads it).",
            },
            required=True,
        ),
    ),
    output={
        "transaction_id": STR,
        "finished": BOOL,
        "transaction_status": STR,
        "compensation_errors": STRS,
    },
)

# A lost transaction_id, found again (seed 002): served generically from its row.
FIND_TRANSACTION = McpTool(
    "find_transaction",
    "Find a transaction",
    "Find the transaction a receipt_id (from preview_commit) or a request_id (sent with "
    "one of its calls) names, when its transaction_id is lost: its state, how it ended "
    "(result.ending: open, committed, rolled_back, aborted, compensated) and its newest "
    "receipts. Give exactly one of the two. get_transaction with the transaction_id "
    "shows its steps. Changes nothing.",
    _READ,
    (
        McpInput(
            "receipt_id",
            {
                "type": "string",
                "minLength": 1,
                "maxLength": 64,
                "description": "A receipt_id preview_commit returned.",
            },
        ),
        McpInput(
            "request_id",
            {
                "type": "string",
                "minLength": 1,
                "maxLength": 256,
                "description": "The request_id one of its calls was sent with.",
            },
        ),
    ),
    "Transaction {transaction[transaction_id]} is {transaction[status]} (ending: "
    "{result[ending]}). Next: get_transaction with this transaction_id for its steps.",
)

# The operator's outbox tools (docs/effects.md), listed only with ``--mcp-effect-tools``.
EFFECT_STATUSES = ["pending", "delivering", "delivered", "dead"]
_EFFECT = {
    "type": "object",
    "description": "effect_id, transaction_id, channel, status, attempts, last_error, payload …",
}

LIST_EFFECTS = McpTool(
    "list_effects",
    "List the outbox's effects",
    "Effects (emails, webhooks …) released by committed transactions, oldest "
    "first, each with its status (pending, delivering, delivered, dead), attempts and last "
    'error. Filter with status (e.g. ["dead"]) and transaction_id; continue a page with '
    "after_id = next_after_id.",
    _READ,
    (
        McpInput(
            "status", {"type": "array", "items": {"enum": EFFECT_STATUSES}}, reading="strings"
        ),
        McpInput("transaction_id", {"type": "string", "maxLength": 128}),
        McpInput("after_id", {"type": "integer", "minimum": 0}),
        McpInput(
            "page_size",
            {"type": "integer", "minimum": 1, "maximum": MAX_EFFECTS},
            reading=EFFECTS_PAGE,
        ),
    ),
    output={"effects": {"type": "array", "items": _EFFECT}, "next_after_id": INT},
    opt_in=True,
    bare=True,
)

RETRY_EFFECT = McpTool(
    "retry_effect",
    "Retry a dead effect",
    "Requeue one dead effect (see list_effects) and try to deliver it once now; "
    "the reply shows it after that attempt: delivered, pending (failed again, retried later) "
    "or dead (refused again, with last_error). Sends the email or webhook again.",
    Hints(read_only=False, destructive=False, idempotent=False, open_world=True),
    (McpInput("effect_id", {"type": "integer", "minimum": 1}, required=True),),
    output={"effect": _EFFECT},
    opt_in=True,
    bare=True,
)

LISTED = (
    BEGIN_TRANSACTION,
    RUN_STEP,
    COMMIT_TRANSACTION,
    ROLLBACK_TRANSACTION,
    GET_TRANSACTION,
    LIST_TOOLS,
    LIST_TRANSACTIONS,
    RECONCILE_STEP,
    PREVIEW_COMMIT,
    APPROVE_COMMIT,
    REFUSE_COMMIT,
    UNDO_STEP,
    REDO_STEP,
    COMPENSATE_TRANSACTION,
    APPROVE_COMPENSATION,
    REFUSE_COMPENSATION,
    FIND_TRANSACTION,
    LIST_EFFECTS,
    RETRY_EFFECT,
)
