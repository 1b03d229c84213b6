"""The conformance table: each case is a few calls made through one surface — ``setup``, which
must all succeed, then the ``call`` under test — and the outcome every surface must give:
``expect`` is the refusal's reason code, or the reply's fields (dotted, ``a[].b`` for each
element), by the contract's names and the short enum names. ``replaces`` names the per-surface
tests the row took over.

Inputs may hold placeholders the runner fills in: ``$tx`` (the transaction the last ``begin``
made), ``$receipt`` (the last preview's receipt), ``$compensation`` (the compensating
transaction the last ``compensate`` started), ``$effect`` (the first effect the last
``list_effects`` listed), ``$log`` (a file the ``comp.*`` tools' undos append to), ``$dir``
(a directory whose ``provider`` file says "happened", for the ``pay.*`` tools) and ``$file``
(a file name in the engine's sandbox no other run uses). A set-up call may also be SQL run on
the store behind the surface's engine (``behind_the_engine``: an edited audit chain).

A case may also say what the last call looks like in each surface's own form — keyed by a
surface, ``mcp`` for the three MCP surfaces, or ``*`` for all: ``says``, words the caller's text
holds (an id written as its placeholder); ``next``, the fields of the refusal's continuation
(a tuple: words its text holds); ``codes``, the surface's own status (the gRPC status, the HTTP
status, the CLI's exit status); ``own_call``, that the continuation names its own surface's
call and no other's; ``details``, the refusal's fields on every surface that carries them
(all but MCP and the CLI, which say them in words). ``undone`` is the undos the ``comp.*``
tools ran by then, on every surface; ``only``, reply fields that some surfaces name their own
way (the engine's and the clients' ``rolled_back`` is ``finished`` on the wire). The
families: ``service`` (the engine and both clients), ``wire`` (the rest), ``mcp``.

``LACKS`` lists the operations a surface does not offer, and why; the suite checks each is
really absent there. ``DIFFERS`` lists the (surface, case) pairs where a surface gives another
outcome than the engine by design, and that outcome, which the suite asserts exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc


@dataclass(frozen=True)
class Call:
    operation: str
    inputs: dict[str, Any] = field(default_factory=dict)
    # A set-up call a surface may refuse by design (a fatal step, which MCP refuses:
    # ``DIFFERS``); every other set-up call must succeed.
    anyhow: bool = False


def call(operation: str, **inputs: Any) -> Call:
    return Call(operation, inputs)


@dataclass(frozen=True)
class Case:
    id: str
    setup: tuple[Call, ...]
    call: Call
    expect: dict[str, Any] | str  # the reply's fields, or the refusal's reason code
    replaces: tuple[str, ...] = ()
    undone: tuple[tuple[str, int], ...] | None = None  # the comp.* undos run, oldest first
    says: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    next: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    codes: Mapping[str, str] = field(default_factory=dict)
    own_call: bool = False
    details: Mapping[str, Any] = field(default_factory=dict)  # the refusal's fields
    only: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(self.expect) if isinstance(self.expect, dict) else ()

    @property
    def expected(self) -> dict[str, Any]:
        """``expect`` as ``Outcome.view`` gives it: ok, reason, the fields (and the undos)."""
        if isinstance(self.expect, str):
            out = {"ok": False, "reason": self.expect, "fields": {}}
        else:
            out = {"ok": True, "reason": "", "fields": self.expect}
        if self.undone is not None:
            out["undone"] = [list(u) for u in self.undone]
        return out

    def on(self, surface: str, table: Mapping[str, Any]) -> list[Any]:
        """What ``table`` (``says``, ``next``, ``codes`` or ``only``) holds for ``surface``:
        the entry for all surfaces, for its families, for the surface itself, in that order."""
        keys = ("*", *FAMILIES.get(surface, ()), surface)
        return [table[k] for k in keys if k in table]


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
# A step of a tool that requires a plan before commit (plan_tools.py): no approver involved.
PLANNED = (BEGIN, step(1, "plan.migrate", {"table": "users"}))
ALICE = {"principal": "alice", "roles": ["approver"]}
AT_MOST = "at most 50"  # why alice refuses a receipt


def refuse_commit(reason: str = AT_MOST, **who: Any) -> Call:
    return call(
        "refuse_commit",
        transaction_id="$tx",
        receipt_id="$receipt",
        reason=reason,
        **(who or ALICE),
    )


REFUSED_RECEIPT = (*PREVIEWED, refuse_commit())
MCP_TASK = "test_receipts_mcp::test_an_approval_required_task_over_mcp"
# A step of the tool the policy holds for approval (conftest.POLICY).
HELD = (BEGIN, step(1, "kv.delete", {"key": "k"}))
APPROVED = (
    *PREVIEWED,
    call("approve_commit", transaction_id="$tx", receipt_id="$receipt", **ALICE),
)


def comp_step(step_id: int, tool: str) -> Call:
    return step(step_id, tool, {"n": step_id, "log": "$log"})


def pay_step(tool: str) -> Call:
    return step(1, tool, {"n": 1, "log": "$dir"})


def dry(step_id: int, tool: str, arguments: Any) -> Call:
    """Step ``step_id`` of ``tool`` as a dry run: what it would do, journaling nothing."""
    return call("execute_step", **step(step_id, tool, arguments).inputs, dry_run=True)


def report(fidelity: str = "", policy: str = "", **fields: Any) -> dict[str, dict[str, Any]]:
    """A dry run's ``fidelity``, ``policy`` and report ``fields`` (``only``) where each surface
    carries them: the engine's and the clients' ``dry_run`` report holds them all; the wire's
    ``dry_run_json`` (parsed as ``dry_run``, on gRPC and in the CLI's ``--json``) and MCP's
    ``report`` the fields, the fidelity and the policy's decision beside it."""
    ours = {f"dry_run.{k}": v for k, v in fields.items()}
    wire = dict(ours)
    mcp = {"dry_run": True, **{f"report.{k}": v for k, v in fields.items()}}
    if fidelity:
        ours["dry_run.fidelity"] = wire["fidelity"] = mcp["fidelity"] = fidelity
    if policy:
        ours["dry_run.policy"] = wire["policy_decision"] = mcp["policy_decision"] = policy
    return {"service": ours, "grpc": wire, "cli": wire, "mcp": mcp}


US = "test_undo_surfaces"
DRY_RUNS = (dry(2, "t.simulated", {"amount": 3}), dry(2, "kv.put", {"key": "k", "value": 2}))
UNDONE_AND_BACK = (call("redo_step", transaction_id="$tx"),)
ROLLBACK = call("rollback", transaction_id="$tx")
UNKNOWN_UNDO = (BEGIN, pay_step("pay.uncertain"), ROLLBACK)
# A charge whose answer was lost, with a reconcile handler and without; MCP refuses the step
# (``DIFFERS``), the others reply OUTCOME_UNKNOWN.
UNSURE = step(1, "pay.unsure", {"amount": 9})
UNSURE_STEP = (BEGIN, Call("execute_step", UNSURE.inputs, anyhow=True))
UNHANDLED_STEP = (
    BEGIN,
    Call("execute_step", step(1, "pay.unhandled", {"amount": 5}).inputs, anyhow=True),
)
RESOLVED_HAPPENED = call(
    "resolve_step", transaction_id="$tx", step_id=1, outcome="happened", output={"charge": "x"}
)
RG, RM, RC = "test_reconcile_grpc", "test_reconcile_mcp", "test_reconcile_cli"
UNASKED_UNDO = (BEGIN, pay_step("pay.unasked"), ROLLBACK)
RESOLVED_NOT_HAPPENED = call(
    "resolve_step",
    transaction_id="$tx",
    step_id=1,
    outcome="not_happened",
    reason="no refund at the bank",
)
UO = "test_undo_outcome_surfaces"
WAITING_ROLLBACK = (BEGIN, comp_step(1, "comp.charge"), comp_step(2, "comp.refund"), ROLLBACK)
WAITING_COMPENSATION = (
    BEGIN,
    comp_step(1, "comp.refund"),
    COMMIT,
    call("compensate", transaction_id="$tx", reason="chargeback", principal="bob"),
)
# A chain of four records (begun, two steps, committed) for the cases that edit it.
AUDITED = (BEGIN, PUT_1, PUT_2, COMMIT)
EDIT_RECORD_2 = "UPDATE audit SET body = body || ' ' WHERE tx_id = ? AND seq = 2"
BAD_CHAIN_EXIT = "3"  # `agenttx audit verify`: a chain is bad (cli/audit.py)


def behind_the_engine(sql: str, *params: Any) -> Call:
    """SQL run on the store behind the surface's engine, as an attacker or a bad restore
    would (the runner runs it, not the surface): ``params`` may hold placeholders."""
    return call(BEHIND_THE_ENGINE, sql=sql, params=list(params))


BEHIND_THE_ENGINE = "behind the engine"  # no operation of any surface: the runner's own


def effect_step(step_id: int) -> Call:
    """Step ``step_id``: an email staged in the outbox, sent at commit."""
    payload = {"to": "z@example.com", "subject": "s", "body": "b"}
    return step(step_id, "effect.stage", {"channel": "email", "payload": payload})


EFFECT = effect_step(1)

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
        {
            "mode": "approval_required",
            "revision": 1,
            "snapshot.revision": 1,
            "snapshot.transaction_id": "$tx",
        },
        # MCP's snapshot is the pair to echo, nothing more.
        only={"mcp": {"snapshot": {"transaction_id": "$tx", "revision": 1}}},
        replaces=(
            "test_receipts_surfaces::test_preview_approve_and_commit_over_grpc (begin, snapshot)",
            "test_receipts_surfaces::test_the_async_client_previews_approves_and_rebuilds_the_"
            "errors (the begin's snapshot)",
            f"{MCP_TASK} (begin)",
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
            "snapshot.transaction_id": "$tx",
            "output": {"key": "k", "value": 1},
        },
        only={"mcp": {"snapshot": {"transaction_id": "$tx", "revision": 2}}},
        replaces=(
            "test_receipts_surfaces::test_preview_approve_and_commit_over_grpc",
            f"{MCP_TASK} (the step's snapshot)",
        ),
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
        step(5, "kv.put", {"key": "k", "value": 1}),
        "WRONG_STEP",
        codes={"http": "409", "cli": "1"},
        next={
            "http": {"kind": "RetryRequest", "instruction": ("POST /v1/transactions/$tx/steps",)},
            "grpc": {"kind": "RetryRequest"},
            "mcp": {"kind": "RetryRequest"},
            "cli": {"instruction": ("agenttx tx step $tx", "step_id 1")},
        },
        own_call=True,
        replaces=(
            "test_next_calls_surfaces::test_a_wrong_step_names_each_surfaces_own_call",
            "test_next_calls_surfaces::test_a_wrong_step_over_mcp_names_the_tool",
        ),
    ),
    Case(
        "a step of an unknown transaction",
        (),
        step(1, "kv.put", {"key": "k"}, transaction_id=NO_TX),
        "NOT_FOUND",
        next={"mcp": {"kind": "CallTool", "tool": "begin_transaction"}},
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
        next={
            "mcp": {
                "kind": "CallTool",
                "tool": "begin_transaction",
                "instruction": ("ROLLED_BACK",),
            }
        },
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
        # A key of the run's own: what it held before is the same on every engine (none).
        (APPROVAL[0], step(1, "kv.put", {"key": "$file", "value": 1})),
        call("preview_commit", transaction_id="$tx"),
        {
            "approval_required": True,
            "revision": 2,
            "approval_reasons": ["mode approval_required"],
            "mode": "approval_required",
            "changes.state[].key": ["kv/$file"],
            "changes.state[].before": [None],
            "changes.state[].after": [1],
        },
        says={"mcp": ("receipt_id $receipt", "approve_commit")},
        replaces=(
            "test_receipts_surfaces::test_preview_approve_and_commit_over_grpc (preview)",
            "test_receipts_surfaces::test_grpc_refusals_carry_their_fields_and_listings_the_"
            "snapshot (the change)",
            f"{MCP_TASK} (preview)",
        ),
    ),
    Case(
        "preview_commit of a file and an effect",
        (
            call("begin", principal="bob", mode="approval_required"),
            step(1, "fs.write", {"path": "$file", "contents": "one\n"}),
            effect_step(2),
        ),
        call("preview_commit", transaction_id="$tx"),
        {
            "changes.files[].path": ["$file"],
            "changes.files[].diff": ["--- /dev/null\n+++ b/$file\n@@ -0,0 +1 @@\n+one\n"],
            "changes.effects[].step_id": [2],
            "changes.effects[].channel": ["email"],
            "changes.discarded_undo[].handler": ["fs.restore_file"],
        },
        replaces=(
            "test_receipts_surfaces::test_the_async_client_previews_approves_and_rebuilds_the_"
            "errors (the preview's changes)",
        ),
    ),
    Case(
        "commit without an approval",
        PREVIEWED,
        COMMIT,
        "APPROVAL_REQUIRED",
        details={"transaction_id": "$tx"},
        codes={"grpc": "FAILED_PRECONDITION"},
        next={"mcp": {"kind": "CallTool", "tool": "preview_commit"}},
        replaces=(
            "test_receipts_surfaces::test_preview_approve_and_commit_over_grpc (refusal)",
            "test_receipts_surfaces::test_grpc_refusals_carry_their_fields_and_listings_the_"
            "snapshot (APPROVAL_REQUIRED)",
            f"{MCP_TASK} (commit before a preview)",
        ),
    ),
    Case(
        "commit a receipt before its approval",
        PREVIEWED,
        call("commit", transaction_id="$tx", receipt_id="$receipt"),
        "APPROVAL_REQUIRED",
        details={"transaction_id": "$tx", "receipt_id": "$receipt"},
        says={"*": ("not approved yet",)},
        next={"mcp": {"kind": "ResolveExternally", "instruction": ("approve_commit",)}},
        replaces=(
            "test_receipts_surfaces::test_the_async_client_previews_approves_and_rebuilds_the_"
            "errors (ApprovalRequired)",
            f"{MCP_TASK} (waiting)",
        ),
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
        details={"why": "same_principal"},
        codes={"grpc": "FAILED_PRECONDITION", "cli": "1"},
        says={"*": ("began the transaction",)},
        next={"mcp": {"kind": "ResolveExternally"}},
        replaces=(
            "test_receipts_surfaces::test_cli_preview_and_approve (same principal)",
            "test_receipts_surfaces::test_grpc_refusals_carry_their_fields_and_listings_the_"
            "snapshot (same_principal)",
            f"{MCP_TASK} (own)",
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
        details={"why": "not_approver"},
        replaces=(
            "test_receipts_surfaces::test_the_async_client_previews_approves_and_rebuilds_the_"
            "errors (not_approver)",
        ),
    ),
    Case(
        "commit a planned change without its plan",
        PLANNED,
        COMMIT,
        "PLAN_REQUIRED",
        details={"transaction_id": "$tx", "tools": "plan.migrate"},
        says={"*": ("plan.migrate require a plan before commit",)},
        codes={"grpc": "FAILED_PRECONDITION"},
        next={"mcp": {"kind": "CallTool", "tool": "preview_commit"}},
    ),
    Case(
        "commit a planned change with its preview's receipt",
        (*PLANNED, call("preview_commit", transaction_id="$tx")),
        call("commit", transaction_id="$tx", receipt_id="$receipt"),
        {"committed": True, "steps_committed": 1},
    ),
    Case(
        "approve_commit",
        PREVIEWED,
        call("approve_commit", transaction_id="$tx", receipt_id="$receipt", **ALICE),
        {"approved_by": "alice", "revision": 2, "change_hash": "$change"},  # the preview's
        replaces=(
            "test_receipts_surfaces::test_preview_approve_and_commit_over_grpc (approve)",
            "test_receipts_surfaces::test_grpc_refusals_carry_their_fields_and_listings_the_"
            "snapshot (the approval's change hash and revision)",
            f"{MCP_TASK} (approved)",
        ),
    ),
    Case(
        "approve an approved receipt",
        APPROVED,
        call(
            "approve_commit",
            transaction_id="$tx",
            receipt_id="$receipt",
            principal="carol",
            roles=["approver"],
        ),
        "APPROVAL_REFUSED",
        details={"why": "already_approved"},
        says={"*": ("approved by 'alice' already",)},
        next={"mcp": {"kind": "CallTool", "tool": "commit_transaction"}},
        replaces=(f"{MCP_TASK} (again)",),
    ),
    Case(
        "an approval transaction in get_transaction",
        PREVIEWED,
        call("get_transaction", transaction_id="$tx"),
        {"mode": "approval_required", "principal": "bob", "snapshot.revision": 2},
        replaces=(
            "test_receipts_surfaces::test_the_async_client_previews_approves_and_rebuilds_the_"
            "errors (info)",
        ),
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
        details={"expected_revision": 1, "revision": 2},
        codes={"grpc": "ABORTED"},
        next={"mcp": {"kind": "CallTool", "tool": "preview_commit"}},
        replaces=(
            "test_receipts_surfaces::test_preview_approve_and_commit_over_grpc",
            "test_receipts_surfaces::test_grpc_refusals_carry_their_fields_and_listings_the_"
            "snapshot (stale)",
            "test_receipts_surfaces::test_the_async_client_previews_approves_and_rebuilds_the_"
            "errors (SnapshotMismatch)",
            f"{MCP_TASK} (stale)",
        ),
    ),
    Case(
        "commit an approval a later step voided",
        (*APPROVED, PUT_2),
        call("commit", transaction_id="$tx", receipt_id="$receipt"),
        "SNAPSHOT_MISMATCH",
        next={"mcp": {"tool": "preview_commit"}},
        replaces=(
            "test_receipts_mcp::test_a_step_voids_an_approval_and_the_policy_caps_steps_over_mcp "
            "(void)",
        ),
    ),
    # -- the safety policy's rules (conftest.POLICY) ------------------------------------------
    Case(
        "a step past the policy's cap",
        (BEGIN, *(put(n) for n in range(1, 7))),
        put(7),
        "POLICY_VIOLATION",
        details={"rule": "max_steps"},
        says={"*": ("past the safety policy's cap of 6 steps",)},
        codes={"grpc": "FAILED_PRECONDITION"},
        next={
            "mcp": {
                "kind": "ChooseTool",
                "tools": ("commit_transaction", "rollback_transaction"),
            }
        },
        replaces=(
            "test_receipts_surfaces::test_a_served_policy_holds_over_grpc",
            "test_receipts_mcp::test_a_step_voids_an_approval_and_the_policy_caps_steps_over_mcp "
            "(capped)",
        ),
    ),
    Case(
        "commit after a tool the policy holds for approval",
        HELD,
        COMMIT,
        "APPROVAL_REQUIRED",
        says={"*": ("tool 'kv.delete'",)},
        replaces=(
            "test_receipts_mcp::test_preview_and_approval_through_mcp_over_a_running_server (need)",
        ),
    ),
    Case(
        "preview_commit after a tool the policy holds for approval",
        HELD,
        call("preview_commit", transaction_id="$tx"),
        {
            "approval_required": True,
            "approval_reasons": ["policy: tool 'kv.delete' needs approval"],
            "mode": "transactional",
        },
        replaces=(
            "test_receipts_mcp::test_preview_and_approval_through_mcp_over_a_running_server "
            "(preview)",
        ),
    ),
    Case(
        "commit the approved receipt of a tool the policy holds",
        (
            *HELD,
            call("preview_commit", transaction_id="$tx"),
            call("approve_commit", transaction_id="$tx", receipt_id="$receipt", **ALICE),
        ),
        call("commit", transaction_id="$tx", receipt_id="$receipt", expected_revision=2),
        {"committed": True, "transaction_status": "COMMITTED"},
        replaces=(
            "test_receipts_mcp::test_preview_and_approval_through_mcp_over_a_running_server",
        ),
    ),
    *(
        Case(
            f"refuse_commit {without}",
            PREVIEWED,
            refuse_commit(reason=reason),
            "INVALID_ARGUMENT",
            # /v1 refuses a blank reason by its document's pattern, in the pattern's words.
            says={"*": ("reason",), "grpc": (word,)},
            codes={"grpc": "INVALID_ARGUMENT", "http": "400", "cli": "1"},
            replaces=(
                f"test_refusals_surfaces::test_refuse_commit_over_grpc ({without})",
                f"test_refusals_surfaces::test_refuse_over_http ({without})",
                "test_refusals_surfaces::test_the_async_client_refuses_and_rebuilds_the_errors "
                "(blank)",
            ),
        )
        for without, reason, word in (
            ("without a reason", "  ", "reason is required"),
            ("with a reason over the limit", "x" * 4097, "over the limit of 4096"),
        )
    ),
    Case(
        "refuse_commit as the principal who began it",
        PREVIEWED,
        refuse_commit(principal="bob", roles=["approver"]),
        "APPROVAL_REFUSED",
        details={"why": "same_principal"},
        says={"*": ("began the transaction",)},
        codes={"http": "409", "cli": "1"},
        replaces=(
            "test_refusals_surfaces::test_the_async_client_refuses_and_rebuilds_the_errors (own)",
            "test_refusals_surfaces::test_cli_refuse_and_show (same principal)",
            "test_refusals_surfaces::test_refuse_over_http (same)",
        ),
    ),
    Case(
        "refuse_commit",
        PREVIEWED,
        refuse_commit(),
        {
            "transaction_id": "$tx",
            "receipt_id": "$receipt",
            "refused_by": "alice",
            "reason": AT_MOST,
            "snapshot.transaction_id": "$tx",
            "snapshot.revision": 2,
        },
        says={"mcp": (AT_MOST,)},
        replaces=(
            "test_refusals_surfaces::test_the_sync_client_refuses_too",
            "test_refusals_surfaces::test_refuse_commit_over_grpc (refused)",
            "test_refusals_surfaces::test_refuse_over_http (refused)",
            "test_refusals_surfaces::test_refuse_over_mcp (refused)",
        ),
    ),
    Case(
        "commit a refused receipt",
        REFUSED_RECEIPT,
        call("commit", transaction_id="$tx", receipt_id="$receipt"),
        "RECEIPT_REFUSED",
        details={"why": "refused", "transaction_id": "$tx"},
        says={"*": ("'alice'", AT_MOST)},
        codes={"grpc": "FAILED_PRECONDITION", "http": "409"},
        next={
            "mcp": {
                "kind": "CallTool",
                "tool": "preview_commit",
                "instruction": ("rollback_transaction",),
            }
        },
        replaces=(
            "test_refusals_surfaces::test_refuse_commit_over_grpc (commit)",
            "test_refusals_surfaces::test_the_async_client_refuses_and_rebuilds_the_errors "
            "(commit)",
            "test_refusals_surfaces::test_refuse_over_http (commit)",
            "test_refusals_surfaces::test_refuse_over_mcp (commit)",
        ),
    ),
    Case(
        "approve a refused receipt",
        REFUSED_RECEIPT,
        call(
            "approve_commit",
            transaction_id="$tx",
            receipt_id="$receipt",
            principal="dave",
            roles=["approver"],
        ),
        "APPROVAL_REFUSED",
        details={"why": "already_refused"},
        next={"mcp": {"instruction": ("refused",)}},
        replaces=(
            "test_refusals_surfaces::test_the_async_client_refuses_and_rebuilds_the_errors (late)",
            "test_refusals_surfaces::test_refuse_over_mcp (late)",
        ),
    ),
    Case(
        "refuse a refused receipt",
        REFUSED_RECEIPT,
        refuse_commit(),
        "APPROVAL_REFUSED",
        next={"mcp": {"kind": "ResolveExternally"}},
        replaces=("test_refusals_surfaces::test_refuse_over_mcp (again)",),
    ),
    Case(
        "refuse an approved receipt",
        APPROVED,
        refuse_commit(),
        "APPROVAL_REFUSED",
        next={"mcp": {"kind": "ResolveExternally", "instruction": ("rolled back",)}},
        replaces=("test_refusals_surfaces::test_refuse_over_mcp (after an approval)",),
    ),
    Case(
        "a refused receipt in get_transaction",
        REFUSED_RECEIPT,
        call("get_transaction", transaction_id="$tx"),
        {
            "status": "ACTIVE",
            "receipts[].receipt_id": ["$receipt"],
            "receipts[].status": ["refused"],
            "receipts[].decided_by": ["alice"],
            "receipts[].reason": [AT_MOST],
            "receipts[].revision": [2],
        },
        says={"mcp": (f"refused receipt $receipt: {AT_MOST}",)},
        replaces=(
            "test_refusals_surfaces::test_refuse_commit_over_grpc (get)",
            "test_refusals_surfaces::test_the_async_client_refuses_and_rebuilds_the_errors (info)",
            "test_refusals_surfaces::test_refuse_over_http (get)",
            "test_refusals_surfaces::test_refuse_over_mcp (shown)",
        ),
    ),
    Case(
        "commit a new receipt after a refused one",
        (
            *REFUSED_RECEIPT,
            PUT_2,
            call("preview_commit", transaction_id="$tx"),
            call("approve_commit", transaction_id="$tx", receipt_id="$receipt", **ALICE),
            call("commit", transaction_id="$tx", receipt_id="$receipt"),
        ),
        call("get_transaction", transaction_id="$tx"),
        {"status": "COMMITTED", "receipts[].status": ["approved", "refused"]},
        replaces=("test_refusals_surfaces::test_refuse_over_mcp (a new receipt commits)",),
    ),
    Case(
        "approve a voided receipt",
        (*PREVIEWED, PUT_2),
        call("approve_commit", transaction_id="$tx", receipt_id="$receipt", **ALICE),
        "SNAPSHOT_MISMATCH",
        says={"*": ("a later change voided it",)},
        codes={"http": "409"},
        next={
            "http": {"operation": "POST /v1/transactions/$tx/preview"},
            "cli": {"instruction": ("Call agenttx tx preview $tx, review",)},
        },
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
        says={"*": ("a later change voided it",)},
        codes={"http": "409"},
        next={
            "http": {"operation": "POST /v1/transactions/$tx/preview"},
            "cli": {"instruction": ("Call agenttx tx preview $tx, review",)},
        },
        replaces=(
            "test_receipt_voided_surfaces::test_v1_json_shows_voided_and_refuses_its_approval_as_a_"
            "snapshot_mismatch (refuse)",
        ),
    ),
    Case(
        "a voided receipt in get_transaction",
        (*PREVIEWED, PUT_2),
        call("get_transaction", transaction_id="$tx"),
        {
            "status": "ACTIVE",
            "revision": 3,
            "receipts[].receipt_id": ["$receipt"],
            "receipts[].status": ["voided"],
            "receipts[].revision": [2],
        },
        replaces=(
            "test_receipt_voided_surfaces::test_v1_json_shows_voided_and_refuses_its_approval_as_a_"
            "snapshot_mismatch (the view)",
        ),
    ),
    Case(
        "an approved receipt voided in get_transaction",
        (*APPROVED, PUT_2),
        call("get_transaction", transaction_id="$tx"),
        {
            "revision": 3,
            "receipts[].receipt_id": ["$receipt"],
            "receipts[].status": ["voided"],
            "receipts[].revision": [2],
            "receipts[].decided_by": ["alice"],
        },
        replaces=("test_receipt_voided_surfaces::test_grpc_and_both_clients_show_voided",),
    ),
)

# Undo and redo, unknown outcomes, the audit chain and the outbox.
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
        says={"mcp": ("redo_step",)},
        replaces=(
            f"{US}::test_the_async_client_rebuilds_refusals_with_their_hint (undone)",
            f"{US}::test_mcp_undo_redo_and_dry_run_with_continuations (undo)",
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
        says={"*": ("no live step",)},
        details={"step_id": 0, "transaction_id": "$tx"},
        codes={"cli": "1"},
        next={"mcp": {"kind": "ChooseTool", "tools": ("run_step",)}},
        replaces=(
            f"{US}::test_the_async_client_rebuilds_refusals_with_their_hint (nothing)",
            f"{US}::test_cli_tx_undo_and_redo (again)",
            f"{US}::test_mcp_undo_redo_and_dry_run_with_continuations (nothing)",
        ),
    ),
    Case(
        "redo_step",
        (BEGIN, PUT_1, call("undo_step", transaction_id="$tx")),
        call("redo_step", transaction_id="$tx"),
        {"step_id": 1, "next_step_id": 2, "can_redo": False, "can_undo": True},
        replaces=(
            f"{US}::test_cli_tx_undo_and_redo (redo --json)",
            f"{US}::test_mcp_undo_redo_and_dry_run_with_continuations (redo)",
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
        codes={"http": "409", "cli": "1"},
        says={"*": ("no undone step",), "cli": ("send step 2 again",)},
        next={
            "http": {"operation": "POST /v1/transactions/$tx/steps"},
            "grpc": {"kind": "CallTool", "rpc": "ExecuteStep"},
            "mcp": {"kind": "CallTool", "tool": "run_step"},
        },
        own_call=True,
        replaces=(
            "test_next_calls_surfaces::test_a_refused_redo_names_each_surfaces_own_call",
            f"{US}::test_cli_tx_undo_and_redo (refused)",
            f"{US}::test_mcp_undo_redo_and_dry_run_with_continuations (twice)",
            "test_undo_surfaces::test_grpc_undo_redo_and_the_counters (refused redo)",
            "test_http_safety::test_undo_then_redo_over_http (refused redo)",
            "test_undo_surfaces::test_mcp_undo_over_a_running_server (refused redo)",
        ),
    ),
    Case(
        "undo an irreversible step",
        (BEGIN, step(1, "t.irreversible", {"to": "bob"})),
        call("undo_step", transaction_id="$tx"),
        "UNDO_REFUSED",
        says={"*": ("irreversible",)},
        details={"step_id": 1, "transaction_id": "$tx"},
        replaces=(f"{US}::test_the_async_client_rebuilds_refusals_with_their_hint (irreversible)",),
    ),
    Case(
        "redo after the undone step was sent again",
        (BEGIN, PUT_1, call("undo_step", transaction_id="$tx"), PUT_1),
        call("redo_step", transaction_id="$tx"),
        "REDO_REFUSED",
        says={"*": ("send step 2 again",)},
        details={"step_id": 1, "transaction_id": "$tx"},
        replaces=(
            f"{US}::test_the_async_client_rebuilds_refusals_with_their_hint (moved)",
            f"{US}::test_the_async_transaction_helper_undoes_redoes_and_dry_runs (redo gone)",
        ),
    ),
    Case(
        "the counters after an undo and a redo",
        (BEGIN, PUT_1, call("undo_step", transaction_id="$tx"), *UNDONE_AND_BACK),
        call("get_transaction", transaction_id="$tx"),
        {
            "revision_count": 1,
            "can_undo": True,
            "can_redo": False,
            "can_commit": True,
            "next_step_id": 2,
        },
        replaces=(
            f"{US}::test_the_async_client_rebuilds_refusals_with_their_hint (info)",
            f"{US}::test_mcp_undo_redo_and_dry_run_with_continuations (info)",
        ),
    ),
    # -- dry runs -------------------------------------------------------------------------------
    Case(
        "a dry run at full simulation",
        (BEGIN, PUT_1),
        dry(2, "t.simulated", {"amount": 3}),
        {
            "status": "SUCCESS",
            "next_step_id": 2,
            "transaction_status": "ACTIVE",
            "output": {"charged": 3, "simulated": True},  # the simulate handler's, not the tool's
        },
        only=report(
            "full_simulation",
            "allowed",
            declared="full_simulation",
            would_succeed=True,
            **{"changes.undo": ["t.simulated#undo"]},
        ),
        says={"mcp": ("Nothing was run",), "grpc": ("dry_run: true",)},  # the wire's flag
        replaces=(f"{US}::test_grpc_dry_run_fields_and_nothing_journaled (simulated)",),
    ),
    Case(
        "a dry run of a write",
        (BEGIN, PUT_1),
        dry(2, "kv.put", {"key": "k", "value": 6}),
        {"status": "SUCCESS", "next_step_id": 2},
        only=report(
            "full_simulation",
            **{"changes.writes": [{"key": "kv/k", "before": 1, "after": 6}]},
        ),
        replaces=(
            f"{US}::test_the_async_client_rebuilds_refusals_with_their_hint (dry run)",
            f"{US}::test_mcp_undo_redo_and_dry_run_with_continuations (dry run)",
            f"{US}::test_the_async_transaction_helper_undoes_redoes_and_dry_runs (preview)",
        ),
    ),
    Case(
        "a dry run that would fail its validation",
        (BEGIN, PUT_1),
        dry(2, "t.validated", {"amount": -5}),
        {"status": "FAILED", "next_step_id": 2, "transaction_status": "ACTIVE"},
        only=report("downstream_validation", would_succeed=False),
        says={"grpc": ("Hint: ",)},
        replaces=(f"{US}::test_grpc_dry_run_fields_and_nothing_journaled (would fail)",),
    ),
    Case(
        "a dry run that would fail its schema",
        (BEGIN, PUT_1),
        dry(2, "kv.put", {"key": 3}),
        {"status": "FAILED", "next_step_id": 2, "transaction_status": "ACTIVE"},
        only=report(would_succeed=False),
        replaces=(f"{US}::test_mcp_undo_redo_and_dry_run_with_continuations (would fail)",),
    ),
    Case(
        "a dry run of a read",
        (BEGIN, PUT_1),
        dry(2, "kv.get", {"key": "k"}),
        {"status": "SUCCESS", "next_step_id": 2},
        only=report(would_succeed=True),
        replaces=(f"{US}::test_mcp_dry_run_over_a_running_server",),
    ),
    Case(
        "a dry run journals nothing",
        # /v1 refuses both (``DIFFERS``), and journals nothing either.
        (BEGIN, PUT_1, *(Call("execute_step", d.inputs, anyhow=True) for d in DRY_RUNS)),
        call("get_transaction", transaction_id="$tx"),
        {"revision_count": 1, "next_step_id": 2, "steps[].step_id": [1], "can_redo": False},
        replaces=(f"{US}::test_grpc_dry_run_fields_and_nothing_journaled (nothing journaled)",),
    ),
    Case(
        "a real step says nothing of dry runs",
        (BEGIN, PUT_1),
        step(2, "kv.get", {"key": "k"}),
        {"status": "SUCCESS", "output": {"key": "k", "value": 1}},
        only={"service": {"dry_run": None}, "grpc": {"fidelity": "", "dry_run": None}},
        replaces=(f"{US}::test_grpc_dry_run_fields_and_nothing_journaled (a real step)",),
    ),
    # -- unknown outcomes -----------------------------------------------------------------------
    Case(
        "a rollback whose undo's outcome is unknown",
        UNKNOWN_UNDO[:2],
        ROLLBACK,
        {"transaction_status": "ROLLING_BACK", "rolled_back": False},
        says={"*": ("outcome unknown",), "mcp": ("never run again",)},
        replaces=(
            "test_undo_outcome_surfaces::test_http_v1_shows_it_and_settles_it_over_a_real_server",
            f"{UO}::test_the_cli_and_the_client_show_and_settle_an_unknown_undo (waiting)",
            f"{UO}::test_mcp_says_the_rollback_waits_and_reconcile_step_settles_it (waiting)",
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
        says={"mcp": ("reconcile_step",)},
        replaces=(
            "test_undo_outcome_surfaces::test_http_v1_shows_it_and_settles_it_over_a_real_server "
            "(the view)",
            f"{UO}::test_the_cli_and_the_client_show_and_settle_an_unknown_undo (the view)",
            f"{UO}::test_mcp_says_the_rollback_waits_and_reconcile_step_settles_it (the view)",
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
    # A provider call whose answer was lost (``psp``: a real provider on loopback), reconciled
    # by its handler or settled by an operator. Its waits are 0, so no case sleeps; the
    # wait's own refusals (not due yet, still unknown) need a fake clock, which a served
    # engine in another process cannot share: test_reconcile_clock.py.
    Case(
        "a step whose outcome is unknown",
        (BEGIN,),
        UNSURE,
        {
            "status": "OUTCOME_UNKNOWN",
            "next_step_id": 1,
            "transaction_status": "ACTIVE",
            "retry_after_ms": 0,
            "operation_provider": "psp",
        },
        next={
            "mcp": {
                "kind": "CallTool",
                "tool": "reconcile_step",
                "arguments": {"transaction_id": "$tx", "step_id": 1},
                "retry_after_ms": 0,
                "instruction": ("do not run it again",),
            }
        },
        replaces=(
            f"{RG}::test_reconcile_over_grpc_with_the_async_client (the reply)",
            f"{RM}::test_reconcile_step_follows_the_continuations (the step)",
            f"{RM}::test_reconcile_over_stdio_against_agenttx_mcp (the step)",
        ),
    ),
    Case(
        "a step again whose outcome is unknown",
        UNSURE_STEP,
        UNSURE,
        "OUTCOME_UNKNOWN_PENDING",
        next={"mcp": {"tool": "reconcile_step"}},
        replaces=(f"{RM}::test_reconcile_step_follows_the_continuations (again)",),
    ),
    Case(
        "commit with a step whose outcome is unknown",
        UNSURE_STEP,
        COMMIT,
        "OUTCOME_UNKNOWN_PENDING",
        details={"step_id": 1},
        replaces=(f"{RG}::test_reconcile_over_grpc_with_the_async_client (commit)",),
    ),
    Case(
        "a step whose outcome is unknown in get_transaction",
        UNSURE_STEP,
        call("get_transaction", transaction_id="$tx"),
        {
            "reconcile_state": "outcome_unknown",
            "outcome_unknown_step": 1,
            "requires_human": False,
            "steps[].step_id": [1],
        },
        says={"mcp": ("reconcile_step with step_id 1",)},
        replaces=(
            f"{RG}::test_reconcile_over_grpc_with_the_async_client (info)",
            f"{RM}::test_reconcile_step_follows_the_continuations (get_transaction)",
        ),
    ),
    Case(
        "reconcile a step the provider saw",
        UNSURE_STEP,
        call("reconcile_step", transaction_id="$tx", step_id=1),
        {
            "outcome": "happened",
            "step_id": 1,
            "next_step_id": 2,
            "transaction_status": "ACTIVE",
            "operation_provider": "psp",
            "output.amount": 9,
        },
        says={"mcp": ("run_step with step_id 2",)},
        replaces=(
            f"{RG}::test_reconcile_over_grpc_with_the_async_client (reconciled)",
            f"{RM}::test_reconcile_step_follows_the_continuations (done)",
            f"{RM}::test_reconcile_over_stdio_against_agenttx_mcp",
            f"{RC}::test_tx_reconcile_settles_a_step_the_provider_saw (--json)",
        ),
    ),
    Case(
        "commit a reconciled step",
        (*UNSURE_STEP, call("reconcile_step", transaction_id="$tx", step_id=1)),
        COMMIT,
        {"committed": True, "steps_committed": 1},
        replaces=(
            f"{RG}::test_reconcile_over_grpc_with_the_async_client (commit)",
            f"{RM}::test_reconcile_over_stdio_against_agenttx_mcp (commit)",
        ),
    ),
    Case(
        "reconcile a step whose tool has no handler",
        UNHANDLED_STEP,
        call("reconcile_step", transaction_id="$tx", step_id=1),
        "NO_RECONCILE_HANDLER",
        details={"tool": "pay.unhandled"},
        says={"cli": ("agenttx tx resolve $tx 1 happened|not-happened",)},
        next={"mcp": {"kind": "ResolveExternally", "instruction": ("agenttx tx resolve $tx 1",)}},
        replaces=(
            f"{RG}::test_resolve_over_grpc_with_the_sync_client (no handler)",
            f"{RM}::test_a_tool_without_a_handler_is_resolved_externally",
            f"{RC}::test_tx_resolve_is_the_operators_word_for_a_tool_without_a_handler (refused)",
        ),
    ),
    Case(
        "resolve a step as neither",
        UNHANDLED_STEP,
        call("resolve_step", transaction_id="$tx", step_id=1, outcome="perhaps"),
        "INVALID_ARGUMENT",
        codes={"cli": "2"},  # the command line's own choice of two
        replaces=(f"{RG}::test_resolve_over_grpc_with_the_sync_client (perhaps)",),
    ),
    Case(
        "resolve a step as not happened",
        UNHANDLED_STEP,
        call(
            "resolve_step",
            transaction_id="$tx",
            step_id=1,
            outcome="not_happened",
            reason="checked the ledger",
        ),
        {"outcome": "not_happened", "next_step_id": 1, "transaction_status": "ACTIVE"},
        replaces=(f"{RG}::test_resolve_over_grpc_with_the_sync_client (resolved)",),
    ),
    Case(
        "a step after one resolved as not happened",
        (
            *UNHANDLED_STEP,
            call("resolve_step", transaction_id="$tx", step_id=1, outcome="not_happened"),
        ),
        step(1, "pay.legacy", {"amount": 5}),  # the provider answers this time
        {"status": "SUCCESS", "next_step_id": 2},
        replaces=(f"{RG}::test_resolve_over_grpc_with_the_sync_client (the step again)",),
    ),
    Case(
        "resolve a step as happened, with its output",
        (*UNHANDLED_STEP, RESOLVED_HAPPENED),
        call("get_transaction", transaction_id="$tx"),
        {"outcome_unknown_step": 0, "steps[].output": [{"charge": "x"}], "next_step_id": 2},
        replaces=(
            f"{RC}::test_tx_resolve_is_the_operators_word_for_a_tool_without_a_handler (info)",
        ),
    ),
    Case(
        "reconcile a step whose tool cannot",
        UNASKED_UNDO,
        call("reconcile_step", transaction_id="$tx", step_id=1),
        "NO_RECONCILE_HANDLER",
        says={"*": ("no undo_reconcile handler",)},
        codes={"cli": "1"},
        replaces=(f"{UO}::test_the_cli_and_the_client_show_and_settle_an_unknown_undo (refused)",),
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
        RESOLVED_NOT_HAPPENED,
        {"outcome": "not_happened", "transaction_status": "ROLLED_BACK"},
        replaces=(
            "test_undo_outcome_surfaces::test_the_cli_and_the_client_show_and_settle_an_unknown_"
            "undo (resolve)",
        ),
    ),
    Case(
        "a resolved undo in get_transaction",
        (*UNASKED_UNDO, RESOLVED_NOT_HAPPENED),
        call("get_transaction", transaction_id="$tx"),
        # The undo did not take effect: rolled back, and a person must still see to it.
        {"status": "ROLLED_BACK", "requires_human": True},
        says={"*": ("did not take effect",)},
        replaces=(f"{UO}::test_the_cli_and_the_client_show_and_settle_an_unknown_undo (settled)",),
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
        says={"cli": (f"Error: NOT_FOUND: transaction `{NO_TX}` not found",)},
        codes={"cli": "1"},
        replaces=(
            "test_audit_surfaces::test_cli_verify_of_an_unknown_transaction_is_not_found_exit_1 "
            "(--server)",
        ),
    ),
    Case(
        "verify_audit of a chain with a record removed",
        (*AUDITED, behind_the_engine("DELETE FROM audit WHERE tx_id = ? AND seq = 2", "$tx")),
        call("verify_audit", transaction_id="$tx"),
        {
            "ok": False,
            "records": 3,
            "first_bad": 2,
            "reason": "record 2 is missing (found record 3 in its place): removed or reordered",
        },
        codes={"cli": str(BAD_CHAIN_EXIT)},
        replaces=("test_audit_surfaces::test_cli_verify_and_export_on_a_server (removed, --json)",),
    ),
    Case(
        "verify_audit of a chain with a record edited",
        (*AUDITED, behind_the_engine(EDIT_RECORD_2, "$tx")),
        call("verify_audit", transaction_id="$tx"),
        {
            "ok": False,
            "records": 4,
            "first_bad": 2,
            "reason": "record 2 was edited: its hash does not match it",
        },
        codes={"cli": str(BAD_CHAIN_EXIT)},
        replaces=("test_audit_surfaces::test_cli_verify_and_export_on_a_store (edited)",),
    ),
    Case(
        "verify_audit of a transaction whose records are gone",
        (*AUDITED, behind_the_engine("DELETE FROM audit WHERE tx_id = ?", "$tx")),
        call("verify_audit", transaction_id="$tx"),
        {"ok": False, "first_bad": 1, "reason": "the transaction has no audit records"},
        codes={"cli": str(BAD_CHAIN_EXIT)},
        replaces=(
            "test_audit_surfaces::test_cli_verify_of_an_unknown_transaction_is_not_found_exit_1 "
            "(no records: a bad chain)",
        ),
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

# Compensation: the plan, a compensating transaction, a rollback or an abort that waits for an
# approver, and the approver's refusal.
WHY = "refunded by hand already"
REFUSED = "not undone: compensation refused by alice: " + WHY
CHARGE_REFUND = (BEGIN, comp_step(1, "comp.charge"), comp_step(2, "comp.refund"))
CANNOT_UNDO = (
    BEGIN,
    comp_step(1, "comp.charge"),
    comp_step(2, "comp.launch"),
    comp_step(3, "comp.best"),
    COMMIT,
)
COMPENSATE = call("compensate", transaction_id="$tx", reason="refund")
WAITING_REFUSAL = (
    *CHARGE_REFUND,
    COMMIT,
    call("compensate", transaction_id="$tx", reason="chargeback"),
)
# Its last step is refused over MCP (``DIFFERS``), a FAILED reply elsewhere.
FATAL_WAITS = (
    BEGIN,
    comp_step(1, "comp.refund"),
    Call("execute_step", step(2, "comp.fatal").inputs, anyhow=True),
)


def refuse_compensation(tx: str = "$tx", reason: str = WHY, **who: Any) -> Call:
    return call("refuse_compensation", transaction_id=tx, reason=reason, **(who or ALICE))


def approve_compensation(tx: str = "$tx", **who: Any) -> Call:
    return call("approve_compensation", transaction_id=tx, **(who or ALICE))


BOB_APPROVER = {"principal": "bob", "roles": ["approver"]}
FINISHED = {"service": {"rolled_back": True}, "wire": {"finished": True}}
OWN_PRINCIPAL = {"*": ("own principal",)}

COMPENSATION: tuple[Case, ...] = (
    # -- the plan and a compensating transaction ------------------------------------------------
    Case(
        "compensation_plan",
        CANNOT_UNDO,
        call("compensation_plan", transaction_id="$tx"),
        {"actions[].step_id": [3, 2, 1], "actions[].verdict": ["run", "not_supported", "run"]},
        replaces=(
            "test_compensation_surfaces::test_compensate_over_grpc_and_the_async_client (plan)",
        ),
    ),
    Case(
        "compensation_plan with a step that waits for an approver",
        (*CHARGE_REFUND, COMMIT),
        call("compensation_plan", transaction_id="$tx"),
        {"actions[].step_id": [2, 1], "actions[].verdict": ["awaiting_approval", "run"]},
        undone=(),
        replaces=(
            "test_compensation_surfaces::test_mcp_tools_over_a_server_with_continuations (preview)",
            "test_compensation_surfaces::test_cli_compensate_preview_and_approve (nothing undone)",
        ),
    ),
    Case(
        "compensate",
        (BEGIN, comp_step(1, "comp.charge"), COMMIT),
        COMPENSATE,
        {"status": "compensated", "requires_human": False, "compensation_for": "$tx"},
        undone=(("comp.charge", 1),),
    ),
    Case(
        "compensate past a step that cannot be undone",
        CANNOT_UNDO,
        call("compensate", transaction_id="$tx", reason="customer refund"),
        {
            "status": "failed",  # step 2 cannot be undone: reported, not skipped
            "requires_human": True,
            "compensation_for": "$tx",
            "evidence[].step": [2],
            "evidence[].verdict": ["not_supported"],
        },
        undone=(("comp.best", 3), ("comp.charge", 1)),
        replaces=(
            "test_compensation_surfaces::test_compensate_over_grpc_and_the_async_client",
            "test_compensation_surfaces::test_mcp_embedded_refuses_a_partial_rollback_over_an_"
            "unsupported_step (compensate)",
        ),
    ),
    Case(
        "a failed compensation in get_transaction",
        (*CANNOT_UNDO, call("compensate", transaction_id="$tx")),
        call("get_transaction", transaction_id="$compensation"),
        {"compensation_for": "$tx", "status": "FAILED"},
        replaces=("test_compensation_surfaces::test_compensate_over_grpc_and_the_async_client",),
    ),
    Case(
        "verify_audit of a compensation",
        (*CANNOT_UNDO, call("compensate", transaction_id="$tx")),
        call("verify_audit", transaction_id="$compensation"),
        {"ok": True},
        replaces=("test_compensation_surfaces::test_compensate_over_grpc_and_the_async_client",),
    ),
    Case(
        "compensate an active transaction",
        (BEGIN, comp_step(1, "comp.charge")),
        COMPENSATE,
        "NOT_ACTIVE",
        next={"mcp": {"kind": "ChooseTool", "tools": ("rollback_transaction",)}},
        replaces=(
            "test_compensation_surfaces::test_mcp_tools_over_a_server_with_continuations "
            "(not committed)",
        ),
    ),
    Case(
        "compensate twice",
        (BEGIN, comp_step(1, "comp.charge"), COMMIT, call("compensate", transaction_id="$tx")),
        call("compensate", transaction_id="$tx"),
        "ALREADY_EXISTS",
        codes={"grpc": "ALREADY_EXISTS"},
        next={"mcp": {"tool": "get_transaction"}},
        replaces=(
            "test_compensation_surfaces::test_compensate_over_grpc_and_the_async_client "
            "(the second compensation's status code)",
            "test_compensation_surfaces::test_mcp_tools_over_a_server_with_continuations (again)",
        ),
    ),
    # -- a compensation that waits for an approver ----------------------------------------------
    Case(
        "a compensation waiting for an approver",
        WAITING_COMPENSATION[:-1],
        WAITING_COMPENSATION[-1],
        {"status": "awaiting_approval"},
        undone=(),
        says={"mcp": ("approve_compensation",)},
        replaces=(
            "test_compensation_surfaces::test_approval_over_grpc_refuses_the_wrong_principal",
            "test_compensation_surfaces::test_mcp_tools_over_a_server_with_continuations (started)",
        ),
    ),
    Case(
        "a compensation waiting in get_transaction",
        WAITING_COMPENSATION,
        call("get_transaction", transaction_id="$compensation"),
        {"compensation_approval_pending": True, "compensation_for": "$tx"},
        replaces=(
            "test_compensation_surfaces::test_approval_over_grpc_refuses_the_wrong_principal "
            "(pending)",
        ),
    ),
    Case(
        "approve_compensation",
        WAITING_COMPENSATION,
        approve_compensation("$compensation"),
        {"transaction_status": "COMPENSATED", "compensations_run": 1},
        undone=(("comp.refund", 1),),
        only=FINISHED,
        replaces=(
            "test_compensation_surfaces::test_approval_over_grpc_refuses_the_wrong_principal",
            "test_compensation_surfaces::test_mcp_tools_over_a_server_with_continuations (done)",
        ),
    ),
    Case(
        "approve a compensation as its own principal",
        WAITING_COMPENSATION,
        approve_compensation("$compensation", **BOB_APPROVER),
        "COMPENSATION_APPROVAL_REFUSED",
        undone=(),
        says=OWN_PRINCIPAL,
        codes={"grpc": "FAILED_PRECONDITION", "http": "409", "cli": "1"},
        next={"mcp": {"kind": "ResolveExternally"}},
        replaces=(
            "test_compensation_surfaces::test_approval_over_grpc_refuses_the_wrong_principal",
            "test_compensation_surfaces::test_mcp_tools_over_a_server_with_continuations (own)",
            "test_compensation_surfaces::test_cli_compensate_preview_and_approve (own principal)",
        ),
    ),
    Case(
        "approve a compensation without the approver role",
        WAITING_COMPENSATION,
        approve_compensation("$compensation", principal="carol", roles=["viewer"]),
        "COMPENSATION_APPROVAL_REFUSED",
        undone=(),
        codes={"grpc": "FAILED_PRECONDITION"},
        replaces=(
            "test_compensation_surfaces::test_approval_over_grpc_refuses_the_wrong_principal "
            "(carol)",
        ),
    ),
    # -- a rollback that waits for an approver --------------------------------------------------
    Case(
        "a rollback waiting for an approver",
        CHARGE_REFUND,
        ROLLBACK,
        {"transaction_status": "ROLLING_BACK", "compensation_approval_pending": True},
        undone=(),
        says={"mcp": ("approve_compensation",)},
        replaces=(
            "test_compensation_surfaces::test_a_waiting_rollback_over_grpc_and_the_sync_"
            "client (waiting)",
            "test_compensation_surfaces::test_mcp_a_step_on_a_rollback_waiting_for_approval_"
            "points_to_get_transaction (waiting)",
        ),
    ),
    Case(
        "a waiting rollback in get_transaction",
        WAITING_ROLLBACK,
        call("get_transaction", transaction_id="$tx"),
        {"status": "ROLLING_BACK", "compensation_approval_pending": True},
        replaces=(
            "test_compensation_surfaces::test_a_waiting_rollback_over_grpc_and_the_sync_client "
            "(info)",
        ),
    ),
    Case(
        "approve a waiting rollback",
        WAITING_ROLLBACK,
        approve_compensation(),
        {"transaction_status": "ROLLED_BACK"},
        undone=(("comp.refund", 2), ("comp.charge", 1)),
        replaces=(
            "test_compensation_surfaces::test_a_waiting_rollback_over_grpc_and_the_sync_client "
            "(done)",
        ),
    ),
    Case(
        "a step on a rollback waiting for an approver",
        WAITING_ROLLBACK,
        comp_step(3, "comp.charge"),
        "NOT_ACTIVE",
        undone=(),
        next={"mcp": {"tool": "get_transaction", "instruction": ("approve_compensation",)}},
        replaces=(
            "test_compensation_surfaces::test_mcp_a_step_on_a_rollback_waiting_for_approval_"
            "points_to_get_transaction",
        ),
    ),
    Case(
        "a partial rollback over a step that cannot be undone",
        (BEGIN, comp_step(1, "comp.charge"), comp_step(2, "comp.launch")),
        call("rollback", transaction_id="$tx", to_step=1),
        "COMPENSATION_REFUSED",
        undone=(),
        next={"mcp": {"kind": "ReviseRequest", "instruction": ("to_step 3",)}},
        replaces=(
            "test_compensation_surfaces::test_mcp_embedded_refuses_a_partial_rollback_over_an_"
            "unsupported_step (refused)",
        ),
    ),
    # -- an abort that waits for an approver ----------------------------------------------------
    Case(
        "a fatal step whose abort waits for an approver",
        FATAL_WAITS[:-1],
        step(2, "comp.fatal"),
        {"status": "FAILED", "strategy": "ABORT"},
        undone=(),
        says={"mcp": ("waits for an approver",)},
        next={
            "mcp": {
                "kind": "ResolveExternally",
                "instruction": ("approve_compensation", "refuse_compensation"),
            }
        },
        replaces=(
            "test_compensation_surfaces::test_mcp_a_step_whose_abort_waits_for_an_approver_says_so",
            "test_compensation_refusal_surfaces::test_mcp_embedded_refuses_the_abort_a_failed_"
            "step_waits_in (aborted)",
        ),
    ),
    Case(
        "approve the abort a fatal step waits in",
        FATAL_WAITS,
        approve_compensation(),
        {"transaction_status": "FAILED"},
        undone=(("comp.refund", 1),),
        replaces=(
            "test_compensation_surfaces::test_mcp_a_step_whose_abort_waits_for_an_approver_says_so "
            "(done)",
        ),
    ),
    Case(
        "refuse the abort a fatal step waits in",
        FATAL_WAITS,
        refuse_compensation(),
        {"transaction_status": "FAILED"},
        undone=(),
        replaces=(
            "test_compensation_refusal_surfaces::test_mcp_embedded_refuses_the_abort_a_failed_"
            "step_waits_in (done)",
        ),
    ),
    Case(
        "a refused abort in get_transaction",
        (*FATAL_WAITS, refuse_compensation()),
        call("get_transaction", transaction_id="$tx"),
        {"status": "FAILED", "requires_human": True},
        replaces=(
            "test_compensation_refusal_surfaces::test_mcp_embedded_refuses_the_abort_a_failed_"
            "step_waits_in (the view)",
        ),
    ),
    # -- refusing a compensation ----------------------------------------------------------------
    Case(
        "refuse a compensation without a reason",
        WAITING_ROLLBACK,
        refuse_compensation(reason=" "),
        "INVALID_ARGUMENT",
        undone=(),
        says={"*": ("reason",)},
        codes={"grpc": "INVALID_ARGUMENT", "http": "400", "cli": "1"},
        replaces=(
            "test_compensation_refusal_surfaces::test_refuse_compensation_over_grpc_with_its_"
            "limits (no reason)",
            "test_compensation_refusal_surfaces::test_the_async_client_refuses_a_compensating_"
            "transaction (blank reason)",
            "test_compensation_refusal_surfaces::test_mcp_embedded_refuses_the_abort_a_failed_"
            "step_waits_in (no reason)",
            "test_compensation_refusal_surfaces::test_http_refuse_compensation (no reason)",
        ),
    ),
    *(
        Case(
            f"refuse a compensation with a reason over the limit in {unit}",
            WAITING_ROLLBACK,
            refuse_compensation(reason=too_long),
            "INVALID_ARGUMENT",
            undone=(),
            says=says,
            codes={"grpc": "INVALID_ARGUMENT", "http": "400"},
            replaces=(
                "test_compensation_refusal_surfaces::test_refuse_compensation_over_grpc_with_its_"
                "limits (too long)",
                "test_compensation_refusal_surfaces::test_http_refuse_compensation (too long)",
            ),
        )
        for unit, too_long, says in (
            # /v1 refuses one over 4096 characters by its document, in the schema's words.
            ("characters", "x" * 5000, {"*": ("4096",), "grpc": ("over the limit of 4096",)}),
            ("bytes", "é" * 4000, {"*": ("over the limit of 4096",)}),
        )
    ),
    Case(
        "refuse a compensation as its own principal",
        WAITING_ROLLBACK,
        refuse_compensation(**BOB_APPROVER),
        "COMPENSATION_APPROVAL_REFUSED",
        undone=(),
        says=OWN_PRINCIPAL,
        codes={"grpc": "FAILED_PRECONDITION", "http": "409", "cli": "1"},
        next={"mcp": {"kind": "ResolveExternally", "instruction": ("refuse_compensation",)}},
        replaces=(
            "test_compensation_refusal_surfaces::test_refuse_compensation_over_grpc_with_its_"
            "limits (bob)",
            "test_compensation_refusal_surfaces::test_http_refuse_compensation (own)",
        ),
    ),
    Case(
        "refuse_compensation",
        WAITING_ROLLBACK,
        refuse_compensation(),
        {
            "transaction_status": "ROLLED_BACK",
            "revision": 9,
            "snapshot.revision": 9,
            "compensations_run": 1,
            "compensation_approval_pending": False,
            "compensation_errors": ["step 2 (comp.refund) " + REFUSED],
        },
        undone=(("comp.charge", 1),),
        only=FINISHED,
        replaces=(
            "test_compensation_refusal_surfaces::test_refuse_compensation_over_grpc_with_its_"
            "limits",
            "test_compensation_refusal_surfaces::test_the_sync_client_refuses_a_waiting_rollback",
            "test_compensation_refusal_surfaces::test_cli_refuse_compensation_as_json",
            "test_compensation_refusal_surfaces::test_http_refuse_compensation (ok)",
        ),
    ),
    Case(
        "a refused compensation in get_transaction",
        (*WAITING_ROLLBACK, refuse_compensation()),
        call("get_transaction", transaction_id="$tx"),
        {"status": "ROLLED_BACK", "requires_human": True, "compensation_approval_pending": False},
        replaces=(
            "test_compensation_refusal_surfaces::test_the_sync_client_refuses_a_waiting_rollback "
            "(the view)",
        ),
    ),
    Case(
        "refuse a refused compensation",
        (*WAITING_ROLLBACK, refuse_compensation()),
        refuse_compensation(),
        "COMPENSATION_APPROVAL_REFUSED",
        codes={"grpc": "FAILED_PRECONDITION", "http": "409"},
        replaces=(
            "test_compensation_refusal_surfaces::test_refuse_compensation_over_grpc_with_its_"
            "limits (again)",
            "test_compensation_refusal_surfaces::test_http_refuse_compensation (again)",
        ),
    ),
    Case(
        "refuse a compensating transaction as its own principal",
        WAITING_REFUSAL,
        refuse_compensation("$compensation", **BOB_APPROVER),
        "COMPENSATION_APPROVAL_REFUSED",
        undone=(),
        says=OWN_PRINCIPAL,
        next={"mcp": {"kind": "ResolveExternally", "instruction": ("refuse_compensation",)}},
        replaces=(
            "test_compensation_refusal_surfaces::test_the_async_client_refuses_a_compensating_"
            "transaction (own)",
            "test_compensation_refusal_surfaces::test_cli_refuse_compensation (own)",
            "test_compensation_refusal_surfaces::test_mcp_refuse_compensation_over_a_server (own)",
        ),
    ),
    Case(
        "refuse a compensating transaction",
        WAITING_REFUSAL,
        refuse_compensation("$compensation"),
        {
            "transaction_status": "FAILED",
            "compensation_errors": ["step 2 (comp.refund) " + REFUSED],
        },
        undone=(("comp.charge", 1),),
        only=FINISHED,
        says={"mcp": ("a person must settle",)},
        replaces=(
            "test_compensation_refusal_surfaces::test_the_async_client_refuses_a_compensating_"
            "transaction",
            "test_compensation_refusal_surfaces::test_cli_refuse_compensation (ok, as JSON)",
            "test_compensation_refusal_surfaces::test_mcp_refuse_compensation_over_a_server (done)",
        ),
    ),
    Case(
        "a refused compensating transaction in get_transaction",
        (*WAITING_REFUSAL, refuse_compensation("$compensation")),
        call("get_transaction", transaction_id="$compensation"),
        {"requires_human": True},
        replaces=(
            "test_compensation_refusal_surfaces::test_the_async_client_refuses_a_compensating_"
            "transaction (info)",
        ),
    ),
    *(
        Case(
            f"{verb} a refused compensating transaction",
            (*WAITING_REFUSAL, refuse_compensation("$compensation")),
            decide("$compensation"),
            "COMPENSATION_APPROVAL_REFUSED",
            says={"*": ("refused already",)},
            replaces=(
                "test_compensation_refusal_surfaces::test_the_async_client_refuses_a_"
                "compensating_transaction (approve after)",
                "test_compensation_refusal_surfaces::test_cli_refuse_compensation (again)",
                "test_compensation_refusal_surfaces::test_mcp_refuse_compensation_over_a_server "
                "(again)",
            ),
        )
        for verb, decide in (("approve", approve_compensation), ("refuse", refuse_compensation))
    ),
)

CASES = (*LIFECYCLE, *SAFETY, *COMPENSATION)

SURFACES = (
    "embedded",
    "client",
    "sync-client",
    "grpc",
    "http",
    "mcp-stdio",
    "mcp-http",
    "mcp-remote",
    "cli",
)
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
FAMILIES = {
    **dict.fromkeys(("embedded", "client", "sync-client"), ("service",)),
    **dict.fromkeys(("grpc", "http", "cli"), ("wire",)),
    **dict.fromkeys(MCP_SURFACES, ("wire", "mcp")),
}

SERVED = ("client", "sync-client", "grpc", "http", "mcp-http", "mcp-remote", "cli")
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
        (surface, case): {"reason": "TRANSACTION_ABORTED"}
        for surface in MCP_SURFACES
        for case in (
            "a fatal step aborts the transaction",
            "a fatal step whose abort waits for an approver",
        )
    },
    # /v1 has no dry run (docs/dry-run.md names the surfaces that do): a step sent with one is
    # refused, not run for real.
    **{
        ("http", case): {"reason": "INVALID_ARGUMENT"}
        for case in (
            "a dry run at full simulation",
            "a dry run of a write",
            "a dry run that would fail its validation",
            "a dry run that would fail its schema",
            "a dry run of a read",
        )
    },
    # MCP checks a step's tool name before the step runs (UNKNOWN_TOOL, with the closest names
    # to choose from, docs/mcp.md); elsewhere the step fails as unknown_tool and is undone.
    **{
        (surface, "a step of an unknown tool"): {"reason": "UNKNOWN_TOOL"}
        for surface in MCP_SURFACES
    },
    # MCP makes a step whose outcome is unknown a refused call too, whose continuation is
    # reconcile_step (docs/mcp.md): a model must not run it again.
    **{
        (surface, "a step whose outcome is unknown"): {"reason": "OUTCOME_UNKNOWN"}
        for surface in MCP_SURFACES
    },
}


def expected_on(case: Case, surface: str, engine: dict[str, Any]) -> dict[str, Any]:
    """The outcome ``surface`` must give: the engine's, or its documented difference."""
    differs = DIFFERS.get((surface, case.id))
    if differs is None:
        return engine
    if "reason" in differs:  # a refusal there: no reply fields (the undos run are the same)
        return {**engine, "ok": False, "reason": differs["reason"], "fields": {}}
    return {**engine, "fields": {**engine["fields"], **differs}}
