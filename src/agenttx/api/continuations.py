"""Refusals → what went wrong and exactly what to do next (seed 003's continuation kinds), the
same on every surface: MCP's ``{ok: false, error, continuation, diagnostics}``, HTTP's error
body, gRPC's ``agenttx-next`` trailing metadata, the CLI's ``next:`` line. Actions are named
here by their MCP tools:

    kind               when                                         tells the caller
    RetryRequest       wrong step id; a busy transaction; too many  the same call, corrected
                       event streams open                           (or later)
    CallTool           unknown or ended transaction; a commit       begin_transaction (what to
                       conflict; an aborted step                    redo, for a conflict)
                       a snapshot that moved; a receipt refused;    preview_commit (review the
                       a commit that needs a receipt first          current change again)
                       an approval that was given already           commit_transaction
                       an outside outcome is unknown                reconcile_step (after the
                                                                    time left, if too early)
                       another reconcile runs                       get_transaction
    ChooseTool         run_step names no AgentTx tool               the closest names
                       a step that cannot be undone or redone;      run_step, rollback (commit,
                       the step limit                               undo_step)
    ReviseRequest      an argument is malformed or over a limit;    what to fix
                       a request_id reused for another request
    ResolveExternally  a tool cannot reconcile itself; the server   who must act outside
                       is unreachable or broke; an approval only
                       another principal (an approver) can give;
                       no or a wrong API key, or one whose roles
                       do not allow the call; the store is full

The table above is data in ``api/next_calls.py`` (``NEXT_ON``: each reason's cases), which
the operation table's rows list (``Row.errors``): here a refusal's case is told apart by the
error's fields (and, for a few, the operation called), the calls it names are taken from it
(``_Guide.then``), and its sentence, written here for the case's kind, names them too
(``tests/surfaces/test_next_steps.py`` holds the two to each other). Each sentence names its next
calls through a ``Calls``: MCP tool names by default; the HTTP adapter passes its routes, the
CLI its commands, the gRPC adapter its RPCs, so every surface names only its own calls.

A ``Refusal`` is built here without a correlation id; the server gives it one and writes the
matching log line (``server.py``), so the id finds that line.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agenttx.api.next_calls import (
    CALL,
    CHOOSE,
    LAST_RESORT,
    MCP,
    RESOLVE,
    RETRY,
    REVISE,
    Calls,
    Next,
    next_on,
)
from agenttx.auth.http_auth import UNAUTHENTICATED_INSTRUCTION
from agenttx.errors import (
    AgentTxError,
    AlreadyExists,
    ApprovalRefused,
    ApprovalRequired,
    CommitConflict,
    CompensationApprovalRefused,
    CompensationRefused,
    DeadlineExceeded,
    InvalidArgument,
    NoReconcileHandler,
    NotActive,
    NotFound,
    OutcomeUnknownPending,
    PermissionDenied,
    PlanRequired,
    PolicyViolation,
    ReceiptRefused,
    ReconcileInProgress,
    ReconcileNotDue,
    RedoRefused,
    RevisionConflict,
    ServerUnavailable,
    SnapshotMismatch,
    StepLimitReached,
    StoreFull,
    TooManySubscribers,
    Unauthenticated,
    UndoRefused,
    WrongStep,
)
from agenttx.types import StepResult, StepStatus, TransactionInfo, TxStatus

_TERMINAL = frozenset(s.value for s in TxStatus if s.terminal)
# A step whose outcome is unknown: reconcile it (its reply's continuation, not a refusal's).
_RECONCILE = Next(CALL, ("reconcile_step",))


@dataclass
class Refusal:
    code: str  # a stable reason: an AgentTxError's, or one of the adapter's own
    message: str
    continuation: dict[str, Any]
    diagnostics: list[dict[str, str]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # more structuredContent fields


def call_tool(tool: str, instruction: str) -> dict[str, Any]:
    return {"kind": "CallTool", "tool": tool, "instruction": instruction}


def choose_tool(tools: Sequence[str], instruction: str) -> dict[str, Any]:
    return {"kind": "ChooseTool", "tools": list(tools), "instruction": instruction}


def retry(instruction: str) -> dict[str, Any]:
    return {"kind": "RetryRequest", "instruction": instruction}


def revise(instruction: str) -> dict[str, Any]:
    return {"kind": "ReviseRequest", "instruction": instruction}


def resolve_externally(instruction: str) -> dict[str, Any]:
    return {"kind": "ResolveExternally", "instruction": instruction}


def bad_request(message: str) -> Refusal:
    """An MCP tool argument the adapter cannot use (missing, wrong type)."""
    return Refusal(
        "INVALID_ARGUMENT", message, revise(f"Fix the call and send it again: {message}")
    )


def unknown_tool(name: str, known: Sequence[str]) -> Refusal:
    closest = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    # Nothing close: every name, so the model can still pick (list_tools explains them).
    choices = closest or list(known)
    return Refusal(
        "UNKNOWN_TOOL",
        f"there is no AgentTx tool {name!r}",
        choose_tool(
            choices,
            f"Call {MCP.execute_step} again, same step_id, with tool set to one of: "
            f"{', '.join(choices)} ({MCP.list_tools} shows their arguments). No step was run.",
        ),
    )


def refusal_of(
    exc: AgentTxError, operation: str, arguments: dict[str, Any], calls: Calls = MCP
) -> Refusal:
    """The refusal of ``exc`` as every surface gives it, its next calls named by ``calls``.
    ``operation`` is the row name of the operation called (``refuse_commit``; "" when not
    known): a few cases differ by it (``next_calls.NEXT_ON``)."""
    return _Guide(exc, operation, arguments, calls).refusal()


def refused(
    exc: AgentTxError, operation: str, arguments: dict[str, Any], calls: Calls = MCP
) -> Refusal:
    """The refusal of ``operation`` with ``arguments`` that the service refused (the same as
    ``refusal_of``)."""
    return refusal_of(exc, operation, arguments, calls)


@dataclass
class _Guide:
    """The continuation of one refusal: its kind and named calls are the case of
    ``next_calls.NEXT_ON`` the error's fields select (on ``operation``); the sentence, which
    quotes the fields and names the same calls, is written here."""

    exc: AgentTxError
    operation: str
    arguments: dict[str, Any]
    calls: Calls

    def then(
        self, n: Calls, kind: str, instruction: str, when: str = "", **extra: Any
    ) -> dict[str, Any]:
        """The continuation of case ``when`` of the error's reason: ``instruction``, a sentence
        of ``kind``, and the calls the case names, by ``n``. The case's own kind is the same
        (``tests/surfaces/test_next_steps.py``): the sentence is written for it."""
        case = next_on(self.exc.reason, when, self.operation)
        return n.follow(replace(case, kind=kind), instruction, **extra)

    def refusal(self) -> Refusal:
        exc = self.exc
        if isinstance(exc, CommitConflict):
            return commit_conflict(exc, None, self.calls)
        for ladder in (self._undo, self._reconcile, self._receipt, self._transaction):
            found = ladder()
            if found is not None:
                return found
        return self._service()

    @property
    def tx(self) -> str:
        given = str(self.arguments.get("transaction_id", ""))
        return given or str(getattr(self.exc, "transaction_id", ""))

    def _undo(self) -> Refusal | None:
        """An undo, redo or step-limit refusal. The engine's hint names no call: the
        continuation names the caller's."""
        exc, n = self.exc, self.calls.on(str(getattr(self.exc, "transaction_id", "")))
        if isinstance(exc, UndoRefused):
            return Refusal(
                exc.reason,
                exc.message,
                self.then(
                    n,
                    CHOOSE,
                    f"Nothing was undone: {exc.hint} ({n.execute_step} goes on, {n.rollback} "
                    "rolls back).",
                ),
            )
        if isinstance(exc, RedoRefused):
            return Refusal(
                exc.reason,
                exc.message,
                self.then(n, CALL, f"Nothing was redone: {exc.hint}, with {n.execute_step}."),
            )
        if isinstance(exc, StepLimitReached):
            return Refusal(
                exc.reason,
                exc.message,
                self.then(
                    n,
                    CHOOSE,
                    f"Transaction {exc.transaction_id} holds its maximum of {exc.limit} steps. "
                    f"Commit it ({n.commit}) and go on in a new transaction, or undo "
                    f"({n.undo_step}) or roll back ({n.rollback}) steps first.",
                ),
            )
        return None

    def _reconcile(self) -> Refusal | None:
        """A reconcile the engine refused, or a call refused while an outcome is unknown."""
        exc, n = self.exc, self.calls.on(str(getattr(self.exc, "transaction_id", "")))
        if isinstance(exc, ReconcileNotDue):
            return Refusal(
                exc.reason,
                exc.message,
                self.then(
                    n,
                    RETRY,
                    f"Too early: wait {exc.retry_after_ms} ms, then send the same "
                    f"{n.reconcile_step} again (transaction_id {exc.transaction_id}, step_id "
                    f"{exc.step_id}). Do not run the step again meanwhile.",
                    retry_after_ms=exc.retry_after_ms,
                ),
                extra={"retry_after_ms": exc.retry_after_ms},
            )
        if isinstance(exc, ReconcileInProgress):
            return Refusal(
                exc.reason,
                exc.message,
                self.then(
                    n,
                    CALL,
                    f"Another reconcile of step {exc.step_id} is running. Call "
                    f"{n.get_transaction} with transaction_id {exc.transaction_id} in a moment: "
                    "outcome_unknown_step is 0 once it settled.",
                ),
            )
        if isinstance(exc, NoReconcileHandler):
            return Refusal(
                exc.reason,
                exc.message,
                self.then(
                    n,
                    RESOLVE,
                    f"Tool {exc.tool} cannot check its own outcome. Ask the user (an operator) "
                    f"to check the outside system and run `agenttx tx resolve "
                    f"{exc.transaction_id} {exc.step_id} happened|not-happened`, then continue "
                    f"as {n.get_transaction} says; or {n.rollback} to abandon the "
                    "transaction. Do not run the step again.",
                ),
            )
        if isinstance(exc, OutcomeUnknownPending):
            return Refusal(
                exc.reason,
                exc.message,
                _reconcile(
                    exc.transaction_id,
                    exc.step_id,
                    0,
                    self.calls.on(self.tx),
                    next_on(exc.reason, "", self.operation),
                ),
            )
        return None

    def _receipt(self) -> Refusal | None:
        """Preview, receipts, approvals and the safety policy."""
        exc, n = self.exc, self.calls.on(self.tx)
        reason = exc.reason
        if isinstance(exc, SnapshotMismatch):
            return Refusal(
                reason,
                exc.message,
                self.then(
                    n,
                    CALL,
                    f"Transaction {exc.transaction_id} changed since the snapshot you sent "
                    f"(revision {exc.expected_revision}, now {exc.revision}); nothing was "
                    f"committed. Call {n.preview_commit}, review the current change (with the "
                    "user, if they approved the old one), then commit with its receipt_id and "
                    "revision.",
                ),
                extra={"revision": exc.revision},
            )
        if isinstance(exc, ReceiptRefused) and exc.why == "refused":
            return Refusal(
                reason,
                exc.message,
                self.then(
                    n,
                    CALL,
                    f"An approver refused receipt {exc.receipt_id}; nothing was committed and "
                    f"transaction {exc.transaction_id} is still open. The error says who "
                    "refused it and why: tell the user, change the transaction as the refusal "
                    f"asks ({n.execute_step}, {n.undo_step}), then call {n.preview_commit} for "
                    f"a new receipt and have it approved — or call {n.rollback} if the change "
                    "cannot be made acceptable. Do not send this receipt again.",
                    "refused by an approver",
                ),
            )
        if isinstance(exc, ReceiptRefused):
            receipt_id = str(self.arguments.get("receipt_id", "")) or exc.receipt_id
            return Refusal(
                reason,
                exc.message,
                self.then(
                    n,
                    CALL,
                    f"Receipt {receipt_id} cannot be used ({exc.why}). Call "
                    f"{n.preview_commit} for transaction {exc.transaction_id} to get a "
                    "current one.",
                    "unusable",
                ),
            )
        if isinstance(exc, PlanRequired):
            return Refusal(
                reason,
                exc.message,
                self.then(
                    n,
                    CALL,
                    f"Transaction {exc.transaction_id} commits only with a plan seen first "
                    f"({exc.tools}). Call {n.preview_commit}, show the change to the user, "
                    f"then {n.commit} with its receipt_id; no approver is needed. A step "
                    "after the preview makes its receipt stale: preview again.",
                    "no plan",
                ),
            )
        if isinstance(exc, ApprovalRequired) and not exc.receipt_id:
            return Refusal(
                reason,
                exc.message,
                self.then(
                    n,
                    CALL,
                    f"Transaction {exc.transaction_id} needs an approved receipt to commit. "
                    f"Call {n.preview_commit}, show the change to the user, and ask an approver "
                    f"(not you, not the transaction's principal) to call {n.approve_commit} "
                    f"with its receipt_id; then {n.commit} with that receipt_id.",
                    "no receipt",
                ),
            )
        if isinstance(exc, ApprovalRequired):
            return Refusal(
                reason,
                exc.message,
                self.then(
                    n,
                    RESOLVE,
                    f"Receipt {exc.receipt_id} is not approved yet. An approver — a principal "
                    f"other than the one who began transaction {exc.transaction_id}, holding "
                    f"the approver role — must call {n.approve_commit} with it; then send this "
                    f"{n.commit} again. Do not approve it yourself and do not run more steps "
                    "meanwhile (a step voids the receipt).",
                    "a receipt not approved yet",
                ),
            )
        if isinstance(exc, ApprovalRefused):
            return self._approval(exc, n)
        if isinstance(exc, PolicyViolation) and exc.rule == "max_steps":
            return Refusal(
                reason,
                exc.message,
                self.then(
                    n,
                    CHOOSE,
                    f"Transaction {self.tx} reached the policy's step cap. Commit what is "
                    f"done ({n.commit}), or roll back ({n.rollback}), and continue in a new "
                    "transaction.",
                    "the step cap",
                ),
            )
        if isinstance(exc, PolicyViolation):
            return Refusal(
                reason,
                exc.message,
                self.then(
                    n, REVISE, f"The safety policy refuses this call: {exc.message}", "another rule"
                ),
            )
        return None

    def _approval(self, exc: ApprovalRefused, n: Calls) -> Refusal:
        if exc.why == "already_refused":
            instruction = (
                f"Receipt {exc.receipt_id} was refused already; a refused receipt is never "
                "approved or used. Its transaction's agent must change the transaction and "
                "preview it again; decide on that new receipt."
            )
            kind, when = RESOLVE, "refused already"
        elif exc.why == "already_approved":
            when = "approved already"
            if self.operation == "refuse_commit":  # decided once: no cue to commit it
                kind = RESOLVE
                instruction = (
                    f"Receipt {exc.receipt_id} was approved already and a receipt is decided "
                    "once. To stop its commit, the transaction must change (a new step voids "
                    "the approval) or be rolled back; tell the user."
                )
            else:
                kind = CALL
                instruction = (
                    f"Receipt {exc.receipt_id} is approved already; commit with it: "
                    f"{n.commit} (transaction_id {exc.transaction_id}, receipt_id "
                    f"{exc.receipt_id})."
                )
        else:
            instruction = (
                "Only another principal holding the approver role can approve this commit. "
                f"Ask the user to have an approver call {n.approve_commit}."
            )
            kind, when = RESOLVE, "not an approver"
        return Refusal(exc.reason, exc.message, self.then(n, kind, instruction, when))

    def _transaction(self) -> Refusal | None:
        """A call on a transaction that is not there, not open, or not this caller's."""
        exc, n = self.exc, self.calls.on(self.tx)
        reason = exc.reason
        if isinstance(exc, WrongStep):
            return Refusal(
                reason,
                exc.message,
                self.then(
                    n,
                    RETRY,
                    f"Send the same {n.execute_step} again with step_id {exc.expected}: that "
                    f"is the next step of transaction {exc.transaction_id} (step {exc.got} is "
                    "not).",
                ),
            )
        if isinstance(exc, CompensationRefused):
            return Refusal(
                reason,
                exc.message,
                self.then(
                    n,
                    REVISE,
                    f"Step {exc.step_id} of transaction {exc.transaction_id} cannot be undone. "
                    f"Call {n.rollback} with to_step {exc.step_id + 1} or later, or "
                    "without to_step to abort (a person then settles that step).",
                ),
            )
        if isinstance(exc, NotActive) and exc.status in _TERMINAL:
            return Refusal(
                reason,
                exc.message,
                self.then(
                    n,
                    CALL,
                    f"Transaction {exc.transaction_id} is {exc.status} and takes no more "
                    f"calls. Start a new one with {n.begin} and run the task's steps there.",
                    "ended",
                ),
            )
        if isinstance(exc, NotActive) and exc.status == "ROLLING_BACK":
            # A rollback may be waiting for an approver (docs/compensation.md): retrying
            # would never end, so look first.
            return Refusal(
                reason,
                exc.message,
                self.then(
                    n,
                    CALL,
                    f"Transaction {exc.transaction_id} is rolling back. Call "
                    f"{n.get_transaction}: if compensation_approval_pending is true it waits "
                    "for an approver (ask the user to have another principal with the approver "
                    f"role call {n.approve_compensation} or {n.refuse_compensation}); "
                    "otherwise send the same call again in a moment.",
                    "rolling back",
                ),
            )
        if isinstance(exc, NotActive):
            return Refusal(
                reason,
                exc.message,
                self.then(
                    n,
                    RETRY,
                    f"Transaction {exc.transaction_id} is busy ({exc.status}); send the same "
                    "call again in a moment.",
                    "busy",
                ),
            )
        if isinstance(exc, NotFound):
            tx = self.tx
            return Refusal(
                reason,
                exc.message,
                self.then(
                    n,
                    CALL,
                    (f"There is no transaction {tx!r}." if tx else "There is no such transaction.")
                    + f" Start one with {n.begin} and use the transaction_id it returns, from "
                    "step_id 1.",
                ),
            )
        if isinstance(exc, CompensationApprovalRefused):
            refusing = self.operation == "refuse_compensation"
            verb = "refuse" if refusing else "approve"
            return Refusal(
                reason,
                exc.message,
                self.then(
                    n,
                    RESOLVE,
                    f"{exc.message}. Only a different principal holding the 'approver' role "
                    f"can {verb}, and only while the undo waits; ask the user to have one call "
                    f"{n.refuse_compensation if refusing else n.approve_compensation}.",
                ),
            )
        if isinstance(exc, PermissionDenied):
            return Refusal(
                reason,
                exc.message,
                self.then(
                    n,
                    RESOLVE,
                    "Your API key's principal and roles do not allow this call. Ask the user "
                    "to have it made by the transaction's owner or an admin of its tenant; do "
                    "not retry with the same key.",
                ),
            )
        return None

    def _service(self) -> Refusal:
        """A request to fix, a call to send again, or a fault of the service or its key."""
        exc, n = self.exc, self.calls.on(self.tx)
        reason = exc.reason
        if isinstance(exc, DeadlineExceeded | RevisionConflict):
            return Refusal(reason, exc.message, self.then(n, RETRY, "Send the same call again."))
        if isinstance(exc, InvalidArgument):
            return Refusal(
                reason,
                exc.message,
                self.then(n, REVISE, f"Fix the call and send it again: {exc.message}"),
            )
        if isinstance(exc, AlreadyExists):
            return Refusal(
                reason,
                exc.message,
                self.then(
                    n,
                    REVISE,
                    "That request_id was used for a different request. Send this request with "
                    "a new request_id, or send the original request unchanged to get its reply.",
                ),
            )
        if isinstance(exc, Unauthenticated):
            return Refusal(reason, exc.message, self.then(n, RESOLVE, UNAUTHENTICATED_INSTRUCTION))
        if isinstance(exc, StoreFull):
            return Refusal(
                reason,
                exc.message,
                self.then(
                    n,
                    RESOLVE,
                    "The AgentTx store has no room left. Tell the user: the operator must free "
                    "space; then send the same call again.",
                ),
            )
        if isinstance(exc, TooManySubscribers):
            return Refusal(
                reason,
                exc.message,
                self.then(
                    n,
                    RETRY,
                    f"Open the stream again in {-(-exc.retry_after_ms // 1000)} s"
                    + (", or close one of this key's streams first." if exc.per_key else "."),
                ),
            )
        if isinstance(exc, ServerUnavailable):
            return Refusal(
                reason,
                exc.message,
                self.then(
                    n,
                    RESOLVE,
                    "The AgentTx server cannot be reached. Ask the user to start `agenttx "
                    "serve` (or fix --server), then send the same call again.",
                ),
            )
        return Refusal(
            reason,
            exc.message or reason,
            n.follow(
                LAST_RESORT,
                "AgentTx failed to handle the call. Tell the user, quoting the correlationId, "
                "and do not retry blindly.",
            ),
        )


def commit_conflict(
    exc: CommitConflict, info: TransactionInfo | None, calls: Calls = MCP
) -> Refusal:
    """A commit lost to another transaction: begin again and redo the steps, named."""
    keys = ", ".join(exc.keys) or "its keys"
    redo = ""
    if info is not None:
        steps = [
            f"{s.step_id} {s.tool_name}"
            for s in info.steps
            if s.live and s.status == StepStatus.SUCCESS.value
        ]
        if steps:
            redo = f" Redo its steps in order: {'; '.join(steps)}."
    return Refusal(
        exc.reason,
        exc.message,
        calls.follow(
            replace(next_on(exc.reason), kind=CALL),
            f"Another transaction changed {keys} first, so transaction {exc.transaction_id} "
            f"was aborted and undone. Begin a new transaction ({calls.begin}) and do "
            f"the task again on the current values.{redo}",
        ),
        diagnostics=[
            {"id": "compensation_error", "severity": "Warning", "message": e}
            for e in exc.compensation_errors
        ],
        extra={"keys": list(exc.keys)},
    )


def aborted(r: StepResult, tool: str, reply: dict[str, Any]) -> Refusal:
    """A step that ended its transaction (status FAILED)."""
    diagnostics = [{"id": "hint", "severity": "Error", "message": r.clean_hint}]
    diagnostics += [
        {"id": "compensation_error", "severity": "Warning", "message": e}
        for e in r.compensation_errors
    ]
    constraints = "".join(f"\n- {c}" for c in r.constraints)
    if r.transaction_status is TxStatus.ROLLING_BACK:
        # The abort waits for an approver of an undo (docs/compensation.md): not undone yet.
        return Refusal(
            "TRANSACTION_ABORTED",
            f"step {r.step_id} ({tool}) failed and transaction {r.transaction_id} is being "
            f"aborted: {r.abort_reason}. {r.clean_hint} An undo action waits for an approver, "
            "so not everything is undone yet.",
            resolve_externally(
                f"Ask the user to have another principal with the approver role call "
                f"{MCP.approve_compensation} (or {MCP.refuse_compensation}) with transaction_id "
                f"{r.transaction_id}; then start a new transaction with {MCP.begin} if "
                "the task goes on."
            ),
            diagnostics,
            {"reply": reply},
        )
    return Refusal(
        "TRANSACTION_ABORTED",
        f"step {r.step_id} ({tool}) failed and transaction {r.transaction_id} was aborted: "
        f"{r.abort_reason}. {r.clean_hint} Everything was undone and nothing was sent.",
        MCP.call(
            "begin",
            f"Start a new transaction with {MCP.begin} and plan the task again, keeping "
            f"to the constraints learned:{constraints or ' (none)'}",
        ),
        diagnostics,
        {"reply": reply},
    )


def outcome_unknown(r: StepResult, tool: str, reply: dict[str, Any]) -> Refusal:
    return Refusal(
        "OUTCOME_UNKNOWN",
        f"step {r.step_id} ({tool}): {r.clean_hint}",
        _reconcile(r.transaction_id, r.step_id, r.retry_after_ms),
        [{"id": "hint", "severity": "Error", "message": r.clean_hint}],
        {"reply": reply},
    )


def _reconcile(
    transaction_id: str,
    step_id: int,
    after_ms: int,
    calls: Calls = MCP,
    case: Next = _RECONCILE,
) -> dict[str, Any]:
    """The continuation of an unknown outcome: reconcile the step, never run it again;
    ``case``: a refusal's (``OUTCOME_UNKNOWN_PENDING``), or a step's own reply's."""
    n = calls.on(transaction_id)
    wait = f"Wait {after_ms} ms, then call" if after_ms > 0 else "Call"
    instruction = (
        f"The outside call of step {step_id} in transaction {transaction_id} may or may not "
        f"have happened; do not run it again. {wait} {n.reconcile_step} with transaction_id "
        f"{transaction_id} and step_id {step_id}: it asks the outside system and settles "
        f"the step. {n.rollback} (no to_step) instead abandons the transaction and "
        "runs its undo actions."
    )
    extra: dict[str, Any] = {
        "arguments": {"transaction_id": transaction_id, "step_id": step_id},
        "retry_after_ms": after_ms,
    }
    return n.follow(replace(case, kind=CALL), instruction, **extra)
