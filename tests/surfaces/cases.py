"""The conformance table: each case is a few calls made through one surface — ``setup``, which
must all succeed, then the ``call`` under test — and the outcome every surface must give:
``expect`` is the refusal's reason code, or the reply's fields (dotted, ``a[].b`` for each
element), by the contract's names and the short enum names. ``replaces`` names the per-surface
tests the row took over.

Inputs may hold placeholders the runner fills in: ``$tx`` (the transaction the last ``begin``
made), ``$receipt`` (the last preview's receipt), ``$compensation`` (the compensating
transaction the last ``compensate`` started), ``$effect`` (the first effect the last
``list_effects`` listed), ``$log`` (a file the ``comp.*`` tools' undos append to) and ``$dir``
(a directory whose ``provider`` file says "happened", for the ``pay.*`` tools).

``LACKS`` lists the operations a surface does not offer, and why; the suite checks each is
really absent there. ``DIFFERS`` lists the (surface, case) pairs where a surface gives another
outcome than the engine by design, and that outcome, which the suite asserts exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import grpc


@dataclass(frozen=True)
class Call:
    operation: str
    inputs: dict[str, Any] = field(default_factory=dict)


def call(operation: str, **inputs: Any) -> Call:
    return Call(operation, inputs)


@dataclass(frozen=True)
class Case:
    id: str
    setup: tuple[Call, ...]
    call: Call
    expect: dict[str, Any] | str  # the reply's fields, or the refusal's reason code
    replaces: tuple[str, ...] = ()

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(self.expect) if isinstance(self.expect, dict) else ()

    @property
    def expected(self) -> dict[str, Any]:
        """``expect`` as ``Outcome.view`` gives it: ok, reason, the fields."""
        if isinstance(self.expect, str):
            return {"ok": False, "reason": self.expect, "fields": {}}
        return {"ok": True, "reason": "", "fields": self.expect}


NO_TX = "tx_" + "0" * 32  # a transaction id of the right shape that names no transaction

BEGIN = call("begin", principal="bob")


def step(step_id: int, tool: str, arguments: Any = None, *, transaction_id: str = "$tx") -> Call:
    """Step ``step_id`` of the case's transaction: ``tool`` with ``arguments``."""
    inputs = {"arguments": arguments} if arguments is not None else {}
    return call(
        "execute_step",
        transaction_id=transaction_id,
        step_id=step_id,
        tool_name=tool,
        **inputs,
    )


def put(step_id: int) -> Call:
    """Step ``step_id``: ``kv.put`` of key k, the value ``step_id``."""
    return step(step_id, "kv.put", {"key": "k", "value": step_id})


PUT_1, PUT_2 = put(1), put(2)
COMMIT = call("commit", transaction_id="$tx")
APPROVAL = (call("begin", principal="bob", mode="approval_required"), PUT_1)
PREVIEWED = (*APPROVAL, call("preview_commit", transaction_id="$tx"))
ALICE = {"principal": "alice", "roles": ["approver"]}
APPROVED = (
    *PREVIEWED,
    call("approve_commit", transaction_id="$tx", receipt_id="$receipt", **ALICE),
)


def comp_step(step_id: int, tool: str) -> Call:
    return step(step_id, tool, {"n": step_id, "log": "$log"})


def pay_step(tool: str) -> Call:
    return step(1, tool, {"n": 1, "log": "$dir"})


ROLLBACK = call("rollback", transaction_id="$tx")
UNKNOWN_UNDO = (BEGIN, pay_step("pay.uncertain"), ROLLBACK)
UNASKED_UNDO = (BEGIN, pay_step("pay.unasked"), ROLLBACK)
WAITING_ROLLBACK = (BEGIN, comp_step(1, "comp.charge"), comp_step(2, "comp.refund"), ROLLBACK)
WAITING_COMPENSATION = (
    BEGIN,
    comp_step(1, "comp.refund"),
    COMMIT,
    call("compensate", transaction_id="$tx", reason="chargeback", principal="bob"),
)
EFFECT = step(
    1,
    "effect.stage",
    {"channel": "email", "payload": {"to": "z@example.com", "subject": "s", "body": "b"}},
)

# The lifecycle and the approval of a commit.
LIFECYCLE: tuple[Case, ...] = (
    # -- the lifecycle ----------------------------------------------------------------------
    Case(
        "begin",
        (),
        BEGIN,
        {
            "next_step_id": 1,
            "transaction_status": "ACTIVE",
            "revision": 1,
            "mode": "transactional",
            "snapshot.revision": 1,
        },
    ),
    Case(
        "begin an approval transaction",
        (),
        call("begin", principal="bob", mode="approval_required"),
        {"mode": "approval_required", "revision": 1, "snapshot.revision": 1},
        replaces=(
            "test_receipts_surfaces::test_preview_approve_and_commit_over_grpc (begin, snapshot)",
        ),
    ),
    Case(
        "a step succeeds",
        (BEGIN,),
        PUT_1,
        {
            "status": "SUCCESS",
            "strategy": "NONE",
            "next_step_id": 2,
            "transaction_status": "ACTIVE",
            "revision": 2,
            "snapshot.revision": 2,
            "output": {"key": "k", "value": 1},
        },
        replaces=("test_receipts_surfaces::test_preview_approve_and_commit_over_grpc",),
    ),
    Case(
        "a failing step is retried after its effects are undone",
        (BEGIN, PUT_1),
        step(2, "fs.read", {"path": "missing.txt"}),
        {
            "status": "ROLLBACK_TRIGGERED",
            "strategy": "RETRY",
            "next_step_id": 2,
            "transaction_status": "ACTIVE",
            "revision": 3,
            "error_category": "file_not_found",
            "clean_hint": "Hint: file 'missing.txt' does not exist; check the path or create the "
            "file first.",
        },
    ),
    Case(
        "a fatal step aborts the transaction",
        (BEGIN, PUT_1),
        step(2, "comp.fatal"),
        {
            "status": "FAILED",
            "strategy": "ABORT",
            "next_step_id": 0,
            "transaction_status": "FAILED",
            "clean_hint": "Hint: the provider closed the account",
        },
    ),
    Case(
        "a wrong step id",
        (BEGIN,),
        step(5, "kv.put", {"key": "k"}),
        "WRONG_STEP",
        replaces=(
            "test_next_calls_surfaces::test_a_wrong_step_names_each_surfaces_own_call (reason)",
        ),
    ),
    Case(
        "a step of an unknown transaction",
        (),
        step(1, "kv.put", {"key": "k"}, transaction_id=NO_TX),
        "NOT_FOUND",
    ),
    Case(
        "an unknown transaction",
        (),
        call("get_transaction", transaction_id=NO_TX),
        "NOT_FOUND",
    ),
    Case(
        "commit",
        (BEGIN, PUT_1),
        COMMIT,
        {"committed": True, "steps_committed": 1, "transaction_status": "COMMITTED", "revision": 3},
    ),
    Case("commit twice", (BEGIN, PUT_1, COMMIT), COMMIT, "NOT_ACTIVE"),
    Case(
        "a step of a rolled-back transaction",
        (BEGIN, call("rollback", transaction_id="$tx")),
        put(1),
        "NOT_ACTIVE",
    ),
    Case(
        "rollback",
        (BEGIN, PUT_1),
        call("rollback", transaction_id="$tx", reason="done"),
        {"rolled_back": True, "transaction_status": "ROLLED_BACK", "compensations_run": 0},
    ),
    Case(
        "rollback to a step",
        (BEGIN, PUT_1, PUT_2),
        call("rollback", transaction_id="$tx", to_step=2, reason="again"),
        {"rolled_back": True, "next_step_id": 2, "transaction_status": "ACTIVE"},
    ),
    Case(
        "get_transaction",
        (BEGIN, PUT_1, PUT_2),
        call("get_transaction", transaction_id="$tx"),
        {
            "status": "ACTIVE",
            "next_step_id": 3,
            "revision": 3,
            "snapshot.revision": 3,
            "mode": "transactional",
            "principal": "bob",
            "revision_count": 2,
            "remaining_revisions": 99_998,
            "can_undo": True,
            "can_redo": False,
            "can_commit": True,
            "can_rollback": True,
            "steps[].step_id": [1, 2],
            "steps[].tool_name": ["kv.put"] * 2,
        },
        replaces=("test_undo_surfaces::test_grpc_undo_redo_and_the_counters (counters)",),
    ),
    # -- approval of a commit -----------------------------------------------------------------
    Case(
        "preview_commit",
        APPROVAL,
        call("preview_commit", transaction_id="$tx"),
        {
            "approval_required": True,
            "revision": 2,
            "approval_reasons": ["mode approval_required"],
            "mode": "approval_required",
            "changes.state[].key": ["kv/k"],
        },
        replaces=("test_receipts_surfaces::test_preview_approve_and_commit_over_grpc (preview)",),
    ),
    Case(
        "commit without an approval",
        PREVIEWED,
        COMMIT,
        "APPROVAL_REQUIRED",
        replaces=("test_receipts_surfaces::test_preview_approve_and_commit_over_grpc (refusal)",),
    ),
    Case(
        "approve as the principal who began it",
        PREVIEWED,
        call(
            "approve_commit",
            transaction_id="$tx",
            receipt_id="$receipt",
            principal="bob",
            roles=["approver"],
        ),
        "APPROVAL_REFUSED",
        replaces=(
            "test_receipts_surfaces::test_cli_preview_and_approve (same principal)",
            "test_refusals_surfaces::test_cli_refuse_and_show (same principal)",
        ),
    ),
    Case(
        "approve without the approver role",
        PREVIEWED,
        call(
            "approve_commit",
            transaction_id="$tx",
            receipt_id="$receipt",
            principal="carol",
            roles=["agent"],
        ),
        "APPROVAL_REFUSED",
    ),
    Case(
        "approve_commit",
        PREVIEWED,
        call("approve_commit", transaction_id="$tx", receipt_id="$receipt", **ALICE),
        {"approved_by": "alice", "revision": 2},
        replaces=("test_receipts_surfaces::test_preview_approve_and_commit_over_grpc (approve)",),
    ),
    Case(
        "find_transaction by its receipt",
        (*APPROVED, call("commit", transaction_id="$tx", receipt_id="$receipt")),
        call("find_transaction", receipt_id="$receipt"),
        {
            "receipt_id": "$receipt",
            "result.ending": "committed",
            "result.commit_receipt_id": "$receipt",
            "receipts[].status": ["approved"],
        },
    ),
    Case(
        "find_transaction by an unknown receipt",
        (),
        call("find_transaction", receipt_id="rcpt_00000000000000000000000000000000"),
        "NOT_FOUND",
    ),
    Case(
        "commit an approved receipt",
        APPROVED,
        call("commit", transaction_id="$tx", receipt_id="$receipt", expected_revision=2),
        {"committed": True, "transaction_status": "COMMITTED", "snapshot.revision": 3},
        replaces=(
            "test_receipts_surfaces::test_preview_approve_and_commit_over_grpc (commit)",
            "test_receipts_surfaces::test_the_sync_client_does_the_same",
        ),
    ),
    Case(
        "commit on a stale snapshot",
        APPROVED,
        call("commit", transaction_id="$tx", receipt_id="$receipt", expected_revision=1),
        "SNAPSHOT_MISMATCH",
        replaces=("test_receipts_surfaces::test_preview_approve_and_commit_over_grpc",),
    ),
    Case(
        "refuse_commit",
        PREVIEWED,
        call(
            "refuse_commit", transaction_id="$tx", receipt_id="$receipt", reason="too big", **ALICE
        ),
        {"refused_by": "alice", "reason": "too big", "snapshot.revision": 2},
        replaces=("test_refusals_surfaces::test_the_sync_client_refuses_too",),
    ),
    Case(
        "commit a refused receipt",
        (
            *PREVIEWED,
            call(
                "refuse_commit", transaction_id="$tx", receipt_id="$receipt", reason="no", **ALICE
            ),
        ),
        call("commit", transaction_id="$tx", receipt_id="$receipt"),
        "RECEIPT_REFUSED",
    ),
    Case(
        "approve a refused receipt",
        (
            *PREVIEWED,
            call(
                "refuse_commit", transaction_id="$tx", receipt_id="$receipt", reason="no", **ALICE
            ),
        ),
        call(
            "approve_commit",
            transaction_id="$tx",
            receipt_id="$receipt",
            principal="dave",
            roles=["approver"],
        ),
        "APPROVAL_REFUSED",
    ),
    Case(
        "a refused receipt in get_transaction",
        (
            *PREVIEWED,
            call(
                "refuse_commit", transaction_id="$tx", receipt_id="$receipt", reason="no", **ALICE
            ),
        ),
        call("get_transaction", transaction_id="$tx"),
        {
            "status": "ACTIVE",
            "receipts[].status": ["refused"],
            "receipts[].decided_by": ["alice"],
            "receipts[].reason": ["no"],
        },
    ),
    Case(
        "approve a voided receipt",
        (*PREVIEWED, PUT_2),
        call("approve_commit", transaction_id="$tx", receipt_id="$receipt", **ALICE),
        "SNAPSHOT_MISMATCH",
        replaces=(
            "test_receipt_voided_surfaces::test_v1_json_shows_voided_and_refuses_its_approval_as_a_"
            "snapshot_mismatch (approve)",
        ),
    ),
    Case(
        "refuse a voided receipt",
        (*PREVIEWED, PUT_2),
        call("refuse_commit", transaction_id="$tx", receipt_id="$receipt", reason="no", **ALICE),
        "SNAPSHOT_MISMATCH",
        replaces=(
            "test_receipt_voided_surfaces::test_v1_json_shows_voided_and_refuses_its_approval_as_a_"
            "snapshot_mismatch (refuse)",
        ),
    ),
    Case(
        "a voided receipt in get_transaction",
        (*PREVIEWED, PUT_2),
        call("get_transaction", transaction_id="$tx"),
        {"revision": 3, "receipts[].status": ["voided"], "receipts[].revision": [2]},
    ),
)

# Undo and redo, unknown outcomes, compensation, the audit chain and the outbox.
SAFETY: tuple[Case, ...] = (
    # -- undo and redo --------------------------------------------------------------------------
    Case(
        "undo_step",
        (BEGIN, PUT_1, PUT_2),
        call("undo_step", transaction_id="$tx"),
        {
            "step_id": 2,
            "next_step_id": 2,
            "can_redo": True,
            "can_undo": True,
            "transaction_status": "ACTIVE",
        },
        replaces=(
            "test_undo_surfaces::test_grpc_undo_redo_and_the_counters (undo)",
            "test_http_safety::test_undo_then_redo_over_http (undo)",
            "test_undo_surfaces::test_mcp_undo_over_a_running_server (undo)",
        ),
    ),
    Case(
        "undo with no live step",
        (BEGIN,),
        call("undo_step", transaction_id="$tx"),
        "UNDO_REFUSED",
    ),
    Case(
        "redo_step",
        (BEGIN, PUT_1, call("undo_step", transaction_id="$tx")),
        call("redo_step", transaction_id="$tx"),
        {"step_id": 1, "next_step_id": 2, "can_redo": False, "can_undo": True},
        replaces=(
            "test_undo_surfaces::test_grpc_undo_redo_and_the_counters (redo)",
            "test_http_safety::test_undo_then_redo_over_http (redo)",
            "test_undo_surfaces::test_mcp_undo_over_a_running_server (redo)",
        ),
    ),
    Case(
        "redo with nothing undone",
        (BEGIN, PUT_1),
        call("redo_step", transaction_id="$tx"),
        "REDO_REFUSED",
        replaces=(
            "test_next_calls_surfaces::test_a_refused_redo_names_each_surfaces_own_call (reason)",
            "test_undo_surfaces::test_grpc_undo_redo_and_the_counters (refused redo)",
            "test_http_safety::test_undo_then_redo_over_http (refused redo)",
            "test_undo_surfaces::test_mcp_undo_over_a_running_server (refused redo)",
        ),
    ),
    # -- unknown outcomes -----------------------------------------------------------------------
    Case(
        "a rollback whose undo's outcome is unknown",
        UNKNOWN_UNDO[:2],
        ROLLBACK,
        {"transaction_status": "ROLLING_BACK", "rolled_back": False},
        replaces=(
            "test_undo_outcome_surfaces::test_http_v1_shows_it_and_settles_it_over_a_real_server",
        ),
    ),
    Case(
        "an unknown undo in get_transaction",
        UNKNOWN_UNDO,
        call("get_transaction", transaction_id="$tx"),
        {
            "requires_human": True,
            "outcome_unknown_step": 1,
            "reconcile_state": "undo_outcome_unknown",
            "compensation_errors": [
                "undo pay.uncertain#undo of step 1: outcome unknown (UncertainOutcome: the refund "
                "was sent; the provider did not answer (operation rf-1)); it is never run again "
                "blindly: reconcile_step($tx, 1) asks its undo_reconcile handler, or an operator "
                "runs `agenttx tx resolve $tx 1 happened|not-happened`"
            ],
        },
        replaces=(
            "test_undo_outcome_surfaces::test_http_v1_shows_it_and_settles_it_over_a_real_server "
            "(the view)",
        ),
    ),
    Case(
        "a reconciled undo in get_transaction",
        (*UNKNOWN_UNDO, call("reconcile_step", transaction_id="$tx", step_id=1)),
        call("get_transaction", transaction_id="$tx"),
        {"status": "ROLLED_BACK", "requires_human": False, "reconcile_state": ""},
        replaces=(
            "test_undo_outcome_surfaces::test_http_v1_shows_it_and_settles_it_over_a_real_server "
            "(settled)",
        ),
    ),
    Case(
        "reconcile_step",
        UNKNOWN_UNDO,
        call("reconcile_step", transaction_id="$tx", step_id=1),
        {"outcome": "happened", "transaction_status": "ROLLED_BACK", "step_id": 1},
        replaces=(
            "test_undo_outcome_surfaces::test_http_v1_shows_it_and_settles_it_over_a_real_server",
            "test_undo_outcome_surfaces::test_mcp_says_the_rollback_waits_and_reconcile_step_"
            "settles_it (reconcile)",
        ),
    ),
    Case(
        "reconcile a step whose tool cannot",
        UNASKED_UNDO,
        call("reconcile_step", transaction_id="$tx", step_id=1),
        "NO_RECONCILE_HANDLER",
    ),
    Case(
        "reconcile a step whose outcome is known",
        (BEGIN, PUT_1),
        call("reconcile_step", transaction_id="$tx", step_id=1),
        "FAILED_PRECONDITION",
        replaces=(
            "test_http_safety::test_reconcile_and_resolve_refuse_a_step_that_is_not_unknown "
            "(which takes 400 or 409)",
        ),
    ),
    Case(
        "resolve a step whose outcome is known",
        (BEGIN, PUT_1),
        call("resolve_step", transaction_id="$tx", step_id=1, outcome="happened"),
        "FAILED_PRECONDITION",
    ),
    Case(
        "resolve_step",
        UNASKED_UNDO,
        call(
            "resolve_step",
            transaction_id="$tx",
            step_id=1,
            outcome="not_happened",
            reason="no refund at the bank",
        ),
        {"outcome": "not_happened", "transaction_status": "ROLLED_BACK"},
        replaces=(
            "test_undo_outcome_surfaces::test_the_cli_and_the_client_show_and_settle_an_unknown_"
            "undo (resolve)",
        ),
    ),
    # -- compensation ---------------------------------------------------------------------------
    Case(
        "compensation_plan",
        (
            BEGIN,
            comp_step(1, "comp.charge"),
            comp_step(2, "comp.launch"),
            comp_step(3, "comp.best"),
            COMMIT,
        ),
        call("compensation_plan", transaction_id="$tx"),
        {"actions[].step_id": [3, 2, 1], "actions[].verdict": ["run", "not_supported", "run"]},
        replaces=(
            "test_compensation_surfaces::test_compensate_over_grpc_and_the_async_client (plan)",
        ),
    ),
    Case(
        "compensate",
        (BEGIN, comp_step(1, "comp.charge"), COMMIT),
        call("compensate", transaction_id="$tx", reason="refund"),
        {"status": "compensated", "requires_human": False},
    ),
    Case(
        "compensate an active transaction",
        (BEGIN, comp_step(1, "comp.charge")),
        call("compensate", transaction_id="$tx", reason="refund"),
        "NOT_ACTIVE",
    ),
    Case(
        "compensate twice",
        (BEGIN, comp_step(1, "comp.charge"), COMMIT, call("compensate", transaction_id="$tx")),
        call("compensate", transaction_id="$tx"),
        "ALREADY_EXISTS",
        replaces=(
            "none: test_compensation_surfaces::test_compensate_over_grpc_and_the_async_client "
            "also checks the gRPC status code of the second compensation (ALREADY_EXISTS)",
        ),
    ),
    Case(
        "a compensation waiting for an approver",
        WAITING_COMPENSATION[:-1],
        WAITING_COMPENSATION[-1],
        {"status": "awaiting_approval"},
    ),
    Case(
        "approve_compensation",
        WAITING_COMPENSATION,
        call("approve_compensation", transaction_id="$compensation", **ALICE),
        {"transaction_status": "COMPENSATED", "compensations_run": 1},
        replaces=(
            "test_compensation_surfaces::test_approval_over_grpc_refuses_the_wrong_principal",
        ),
    ),
    Case(
        "approve a compensation as its own principal",
        WAITING_COMPENSATION,
        call(
            "approve_compensation",
            transaction_id="$compensation",
            principal="bob",
            roles=["approver"],
        ),
        "COMPENSATION_APPROVAL_REFUSED",
    ),
    Case(
        "a rollback waiting for an approver",
        WAITING_ROLLBACK[:-1],
        ROLLBACK,
        {"transaction_status": "ROLLING_BACK", "compensation_approval_pending": True},
        replaces=(
            "test_compensation_surfaces::test_a_waiting_rollback_over_grpc_and_the_sync_"
            "client (waiting)",
        ),
    ),
    Case(
        "a step on a rollback waiting for an approver",
        WAITING_ROLLBACK,
        comp_step(3, "comp.charge"),
        "NOT_ACTIVE",
    ),
    Case(
        "refuse_compensation",
        WAITING_ROLLBACK,
        call("refuse_compensation", transaction_id="$tx", reason="refunded by hand", **ALICE),
        {
            "transaction_status": "ROLLED_BACK",
            "compensations_run": 1,
            "compensation_approval_pending": False,
            "compensation_errors": [
                "step 2 (comp.refund) not undone: compensation refused by alice: refunded by hand"
            ],
        },
        replaces=(
            "test_compensation_refusal_surfaces::test_the_sync_client_refuses_a_waiting_rollback",
            "test_compensation_refusal_surfaces::test_cli_refuse_compensation_as_json",
        ),
    ),
    Case(
        "a refused compensation in get_transaction",
        (
            *WAITING_ROLLBACK,
            call("refuse_compensation", transaction_id="$tx", reason="no", **ALICE),
        ),
        call("get_transaction", transaction_id="$tx"),
        {"status": "ROLLED_BACK", "requires_human": True, "compensation_approval_pending": False},
        replaces=(
            "test_compensation_refusal_surfaces::test_the_sync_client_refuses_a_waiting_rollback "
            "(the view)",
        ),
    ),
    Case(
        "refuse a compensation as its own principal",
        WAITING_ROLLBACK,
        call(
            "refuse_compensation",
            transaction_id="$tx",
            reason="no",
            principal="bob",
            roles=["approver"],
        ),
        "COMPENSATION_APPROVAL_REFUSED",
    ),
    # -- the audit chain and the outbox ---------------------------------------------------------
    Case(
        "verify_audit",
        (BEGIN, PUT_1, COMMIT),
        call("verify_audit", transaction_id="$tx"),
        {"ok": True, "records": 3, "first_bad": 0},
        replaces=(
            "test_audit_surfaces::test_verify_and_list_over_grpc_and_the_async_client (verify)",
            "test_http_api::test_the_audit_chain_of_a_transaction_is_checked",
        ),
    ),
    Case(
        "verify_audit of an unknown transaction",
        (),
        call("verify_audit", transaction_id=NO_TX),
        "NOT_FOUND",
    ),
    Case(
        "list_effects",
        (BEGIN, EFFECT, COMMIT),
        call("list_effects", transaction_id="$tx"),
        {
            "effects[].step_id": [1],
            "effects[].channel": ["email"],
            "effects[].status": ["delivered"],
        },
    ),
    Case(
        "retry an effect that is not dead",
        (BEGIN, EFFECT, COMMIT, call("list_effects", transaction_id="$tx")),
        call("retry_effect", effect_id="$effect"),
        "FAILED_PRECONDITION",
    ),
    Case(
        "retry an unknown effect",
        (BEGIN,),
        call("retry_effect", effect_id=999_999_999),
        "NOT_FOUND",
    ),
)

CASES = (*LIFECYCLE, *SAFETY)

SURFACES = ("embedded", "client", "grpc", "http", "mcp-stdio", "mcp-http", "mcp-remote", "cli")
MCP_SURFACES = ("mcp-stdio", "mcp-http", "mcp-remote")

# What a surface does not offer, and why; each is checked to be really absent there.
LACKS: dict[tuple[str, str], str] = {
    **{
        (surface, "resolve_step"): "an operator settles an unknown outcome, not the agent: no "
        "MCP tool (docs/mcp.md)"
        for surface in MCP_SURFACES
    },
    **{
        (surface, "verify_audit"): "the audit chain is the operator's: no MCP tool"
        for surface in MCP_SURFACES
    },
}

# The surfaces in front of `agenttx serve`'s engine.
SERVED = ("client", "grpc", "http", "mcp-http", "mcp-remote", "cli")
STATUS_NAMES = {code.name for code in grpc.StatusCode}

# (surface, case id) → what that surface gives by design instead of the engine's outcome:
# the differences each surface documents, asserted exactly (any other outcome fails).
DIFFERS: dict[tuple[str, str], dict[str, Any]] = {
    # A plain gRPC client that does not say it knows RETRY (the reference's enum has none) is
    # told LOCAL_BACKTRACK (kept for the reference's clients); our client and the CLI announce
    # it and get RETRY (docs/api.md).
    ("grpc", "a failing step is retried after its effects are undone"): {
        "strategy": "LOCAL_BACKTRACK"
    },
    # MCP makes a step that aborted the transaction a refused call (isError) with the reason
    # TRANSACTION_ABORTED, so a model stops there (docs/mcp.md); the other surfaces return the
    # FAILED step as a reply.
    **{
        (surface, "a fatal step aborts the transaction"): {"reason": "TRANSACTION_ABORTED"}
        for surface in MCP_SURFACES
    },
}


def expected_on(case: Case, surface: str, engine: dict[str, Any]) -> dict[str, Any]:
    """The outcome ``surface`` must give: the engine's, or its documented difference."""
    differs = DIFFERS.get((surface, case.id))
    if differs is None:
        return engine
    if "reason" in differs:  # a refusal there: no reply fields
        return {"ok": False, "reason": differs["reason"], "fields": {}}
    return {**engine, "fields": {**engine["fields"], **differs}}
