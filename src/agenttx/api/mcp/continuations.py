"""Failures → ``{ok: false, error, continuation, diagnostics}``: what went wrong and exactly
what to do next (seed 003's continuation kinds).

    kind               when                                         tells the model
    RetryRequest       wrong step id; a busy transaction            the same call, corrected
    CallTool           unknown or ended transaction; a commit       begin_transaction (what to
                       conflict; an aborted step                    redo, for a conflict)
    ChooseTool         run_step names no AgentTx tool               the closest names
    ReviseRequest      an argument is malformed or over a limit     what to fix
    ResolveExternally  an outside outcome is unknown; the server    who must act outside
                       is unreachable or broke

A ``Refusal`` is built here without a correlation id; the server gives it one and writes the
matching log line (``server.py``), so the id finds that line.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agenttx.errors import (
    AgentTxError,
    CommitConflict,
    DeadlineExceeded,
    InvalidArgument,
    NotActive,
    NotFound,
    OutcomeUnknownPending,
    RevisionConflict,
    ServerUnavailable,
    WrongStep,
)
from agenttx.types import StepResult, StepStatus, TransactionInfo, TxStatus

_TERMINAL = frozenset(s.value for s in TxStatus if s.terminal)


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
            f"Call run_step again, same step_id, with tool set to one of: {', '.join(choices)} "
            "(list_tools shows their arguments). No step was run.",
        ),
    )


def refused(exc: AgentTxError, tool: str, arguments: dict[str, Any]) -> Refusal:
    """The refusal of MCP tool ``tool`` called with ``arguments`` that the service refused."""
    tx = str(arguments.get("transaction_id", ""))
    reason = exc.reason
    if isinstance(exc, WrongStep):
        return Refusal(
            reason,
            exc.message,
            retry(
                f"Send the same run_step again with step_id {exc.expected}: that is the next "
                f"step of transaction {exc.transaction_id} (step {exc.got} is not)."
            ),
        )
    if isinstance(exc, OutcomeUnknownPending):
        return Refusal(reason, exc.message, _settle_outside(exc.transaction_id, exc.step_id))
    if isinstance(exc, NotActive):
        if exc.status in _TERMINAL:
            return Refusal(
                reason,
                exc.message,
                call_tool(
                    "begin_transaction",
                    f"Transaction {exc.transaction_id} is {exc.status} and takes no more calls. "
                    "Start a new one with begin_transaction and run the task's steps there.",
                ),
            )
        return Refusal(
            reason,
            exc.message,
            retry(
                f"Transaction {exc.transaction_id} is busy ({exc.status}); send the same call "
                "again in a moment."
            ),
        )
    if isinstance(exc, NotFound):
        return Refusal(
            reason,
            exc.message,
            call_tool(
                "begin_transaction",
                f"There is no transaction {tx!r}. Start one with begin_transaction and use the "
                "transaction_id it returns, from step_id 1.",
            ),
        )
    if isinstance(exc, DeadlineExceeded | RevisionConflict):
        return Refusal(reason, exc.message, retry("Send the same call again."))
    if isinstance(exc, InvalidArgument):
        return Refusal(
            reason, exc.message, revise(f"Fix the call and send it again: {exc.message}")
        )
    if isinstance(exc, ServerUnavailable):
        return Refusal(
            reason,
            exc.message,
            resolve_externally(
                "The AgentTx server cannot be reached. Ask the user to start `agenttx serve` "
                "(or fix --server), then send the same call again."
            ),
        )
    return Refusal(
        reason,
        exc.message or reason,
        resolve_externally(
            "AgentTx failed to handle the call. Tell the user, quoting the correlationId, and "
            "do not retry blindly."
        ),
    )


def commit_conflict(exc: CommitConflict, info: TransactionInfo | None) -> Refusal:
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
        call_tool(
            "begin_transaction",
            f"Another transaction changed {keys} first, so transaction {exc.transaction_id} "
            f"was aborted and undone. Begin a new transaction and do the task again on the "
            f"current values.{redo}",
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
    return Refusal(
        "TRANSACTION_ABORTED",
        f"step {r.step_id} ({tool}) failed and transaction {r.transaction_id} was aborted: "
        f"{r.abort_reason}. {r.clean_hint} Everything was undone and nothing was sent.",
        call_tool(
            "begin_transaction",
            "Start a new transaction with begin_transaction and plan the task again, keeping "
            f"to the constraints learned:{constraints or ' (none)'}",
        ),
        diagnostics,
        {"reply": reply},
    )


def outcome_unknown(r: StepResult, tool: str, reply: dict[str, Any]) -> Refusal:
    return Refusal(
        "OUTCOME_UNKNOWN",
        f"step {r.step_id} ({tool}): {r.clean_hint}",
        _settle_outside(r.transaction_id, r.step_id),
        [{"id": "hint", "severity": "Error", "message": r.clean_hint}],
        {"reply": reply},
    )


def _settle_outside(transaction_id: str, step_id: int) -> dict[str, Any]:
    # No reconcile tool yet (the safety issue adds one): a person checks the outside system.
    return resolve_externally(
        f"The outside call of step {step_id} in transaction {transaction_id} may or may not "
        "have happened, and the transaction is blocked until that is settled. Ask the user to "
        "check the outside system and settle the step; do not run it again meanwhile. "
        "rollback_transaction (no to_step) abandons the transaction and runs its undo actions."
    )
