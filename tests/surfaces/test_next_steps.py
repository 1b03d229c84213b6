"""Each row of the operation table lists the reasons it may refuse with and what the caller
does next in each case (``Row.errors``, from ``api/next_calls.py``'s ``NEXT_ON``); the
continuation every surface gives for such a refusal is exactly that — its kind, the call or
calls it names in the surface's own words, and a sentence naming them — over MCP, gRPC, the
CLI and HTTP. The listed columns of next calls (MCP tools, CLI commands) are the real ones,
and docs/api.md's table of next steps is ``NEXT_ON`` as it is."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from mcp import Client

from agenttx import errors
from agenttx.api.continuations import Refusal
from agenttx.api.grpc.server import GRPC
from agenttx.api.http.v1.errors import HTTP_CALLS
from agenttx.api.mcp.effect_tools import add_effect_tools
from agenttx.api.mcp.served import embedded
from agenttx.api.mcp.server import AgentTxMCP
from agenttx.api.next_calls import (
    ACTIONS,
    CALL,
    CHOOSE,
    CLI,
    KINDS,
    LAST_RESORT,
    MCP,
    NEXT_ON,
    Calls,
    Next,
    cases,
)
from agenttx.api.operations import ROWS, Row
from agenttx.api.public_errors import guidance, public_error
from agenttx.cli import main

DOCS = Path(__file__).resolve().parents[2] / "docs" / "api.md"
TX = "tx_1"

# One refusal of each case of each reason, as the engine (or the client, for UNAVAILABLE)
# raises it: (reason, when) → the error.
SAMPLES: dict[tuple[str, str], errors.AgentTxError] = {
    ("INVALID_ARGUMENT", ""): errors.InvalidArgument("step_id must be >= 1"),
    ("NOT_FOUND", ""): errors.NotFound(f"transaction `{TX}` not found"),
    ("PERMISSION_DENIED", ""): errors.PermissionDenied("it belongs to another principal"),
    ("UNAUTHENTICATED", ""): errors.Unauthenticated("unknown API key"),
    ("NOT_ACTIVE", "ended"): errors.NotActive(TX, "COMMITTED", "execute a step"),
    ("NOT_ACTIVE", "rolling back"): errors.NotActive(TX, "ROLLING_BACK", "commit"),
    ("NOT_ACTIVE", "busy"): errors.NotActive(TX, "COMMITTING", "execute a step"),
    ("OUTCOME_UNKNOWN_PENDING", ""): errors.OutcomeUnknownPending(TX, 3),
    ("ALREADY_EXISTS", ""): errors.AlreadyExists("request_id 'r' was used", request_id="r"),
    ("STORE_FULL", ""): errors.StoreFull("the store is full"),
    ("POLICY_VIOLATION", "the step cap"): errors.PolicyViolation("past the cap", rule="max_steps"),
    ("POLICY_VIOLATION", "another rule"): errors.PolicyViolation("no mail", rule="deny_tools"),
    ("WRONG_STEP", ""): errors.WrongStep(TX, 5, 2),
    ("STEP_LIMIT_REACHED", ""): errors.StepLimitReached(TX, 10_000),
    ("COMMIT_CONFLICT", ""): errors.CommitConflict(TX, ["kv/a"], "write", []),
    ("REVISION_CONFLICT", ""): errors.RevisionConflict(f"transaction {TX} changed"),
    ("DEADLINE_EXCEEDED", ""): errors.DeadlineExceeded(f"transaction {TX} is busy"),
    ("SNAPSHOT_MISMATCH", ""): errors.SnapshotMismatch(TX, 3, 5, "a later change voided it"),
    ("APPROVAL_REQUIRED", "no receipt"): errors.ApprovalRequired(TX, "", "mode"),
    ("APPROVAL_REQUIRED", "a receipt not approved yet"): errors.ApprovalRequired(
        TX, "rcpt_1", "not approved"
    ),
    ("PLAN_REQUIRED", "no plan"): errors.PlanRequired(TX, "plan.migrate"),
    ("APPROVAL_REFUSED", "refused already"): errors.ApprovalRefused(
        TX, "rcpt_1", "already_refused", "refused by carol"
    ),
    ("APPROVAL_REFUSED", "approved already"): errors.ApprovalRefused(
        TX, "rcpt_1", "already_approved", "approved by carol"
    ),
    ("APPROVAL_REFUSED", "not an approver"): errors.ApprovalRefused(
        TX, "rcpt_1", "same_principal", "bob began the transaction"
    ),
    ("RECEIPT_REFUSED", "refused by an approver"): errors.ReceiptRefused(
        TX, "rcpt_1", "refused", "carol: too much"
    ),
    ("RECEIPT_REFUSED", "unusable"): errors.ReceiptRefused(TX, "rcpt_1", "expired", "3 s ago"),
    ("UNDO_REFUSED", ""): errors.UndoRefused(TX, 2, "step 2 (t.send) is irreversible"),
    ("REDO_REFUSED", ""): errors.RedoRefused(TX, 0, "no undone step to redo; send step 3 again"),
    ("RECONCILE_NOT_DUE", ""): errors.ReconcileNotDue(TX, 3, 1500),
    ("RECONCILE_IN_PROGRESS", ""): errors.ReconcileInProgress(TX, 3),
    ("NO_RECONCILE_HANDLER", ""): errors.NoReconcileHandler(TX, 3, "pay.legacy"),
    ("COMPENSATION_REFUSED", ""): errors.CompensationRefused(TX, 2, "pay.launch"),
    ("COMPENSATION_APPROVAL_REFUSED", ""): errors.CompensationApprovalRefused(
        TX, "bob does not hold the 'approver' role"
    ),
    ("TOO_MANY_SUBSCRIBERS", ""): errors.TooManySubscribers(100, True, 5000),
    ("UNAVAILABLE", ""): errors.ServerUnavailable("connection refused", 3),
    ("FAILED_PRECONDITION", ""): errors.FailedPrecondition("illegal transition"),
}

SURFACES: dict[str, Calls] = {"mcp": MCP, "grpc": GRPC, "cli": CLI, "http": HTTP_CALLS}


def _guided(exc: errors.AgentTxError, operation: str, calls: Calls) -> Refusal:
    e = public_error(exc, logging.getLogger("agenttx.test"), "a test")  # as a surface does
    assert not e.internal, exc
    return guidance(e, operation, {"transaction_id": TX}, calls)


def _declared() -> list[Any]:
    return [
        pytest.param(row, reason, case, id=f"{row.name}-{reason}-{case.when or '-'}")
        for row in ROWS
        for reason, found in row.errors.items()
        for case in found
    ]


@pytest.mark.parametrize(("row", "reason", "case"), _declared())
def test_each_surface_gives_the_next_step_the_row_declares(
    row: Row, reason: str, case: Next
) -> None:
    for surface in SURFACES:
        _gives(SAMPLES[reason, case.when], row.name, case, surface)


# The reasons no row lists (an event stream's, the client's) and every case off any row.
@pytest.mark.parametrize(
    ("reason", "case"),
    [pytest.param(r, c, id=f"{r}-{c.when or '-'}") for r in NEXT_ON for c in cases(r)],
)
def test_each_case_is_the_next_step_given_when_the_operation_is_not_known(
    reason: str, case: Next
) -> None:
    for surface in SURFACES:
        _gives(SAMPLES[reason, case.when], "", case, surface)


def _gives(exc: errors.AgentTxError, operation: str, case: Next, surface: str) -> None:
    """The continuation of ``exc`` refusing ``operation`` on ``surface`` is ``case``."""
    # The column as the surface passes it; the names it gives carry the transaction's id.
    cont = _guided(exc, operation, SURFACES[surface]).continuation
    calls = SURFACES[surface].on(TX)
    assert cont["kind"] == case.kind, (surface, operation, exc.reason, case)
    named = {k: v for k, v in cont.items() if k in (calls.key, calls.key + "s")}
    names = [getattr(calls, a) for a in case.actions]
    if case.kind == CALL:
        assert named == {calls.key: names[0]}
    elif case.kind == CHOOSE:
        assert named == {calls.key + "s": names}
    else:
        assert named == {}
    # The sentence names the same calls, so a row changed alone is caught here too.
    for name in names:
        assert name in cont["instruction"], (surface, name, cont["instruction"])


def test_every_case_has_a_sample_and_every_sample_a_case() -> None:
    declared = {(r, c.when) for r, found in NEXT_ON.items() for c in found}
    assert set(SAMPLES) == declared | {("FAILED_PRECONDITION", "")}
    for (reason, _), exc in SAMPLES.items():
        assert exc.reason == reason


def test_the_cases_are_well_formed_and_name_rows() -> None:
    names = {row.name for row in ROWS}
    assert names >= ACTIONS  # every action is one row's operation
    for reason, found in NEXT_ON.items():
        assert reason in errors.ERROR_CODES, reason
        for c in found:
            assert c.kind in KINDS
            assert len(c.actions) == {CALL: 1, CHOOSE: len(c.actions) or -1}.get(c.kind, 0)
            assert set(c.actions) <= ACTIONS
            assert not c.on or c.on in names
        whens = [c.when for c in cases(reason)]
        assert len(whens) == len(set(whens)), reason
        assert (whens == [""]) or "" not in whens, reason  # one case, or every case named
    # A reason no case is written for takes the last resort, and says so in the table.
    for row in ROWS:
        for reason, found in row.errors.items():
            # The shared cases (on this row's operation): none written on a row alone,
            # which the continuations would not follow.
            assert found in (cases(reason), cases(reason, row.name)), (row.name, reason)
            if reason not in NEXT_ON:
                assert found == (LAST_RESORT,), (row.name, reason)


def test_refusing_an_approved_receipt_is_no_call_to_commit_on_any_surface() -> None:
    exc = SAMPLES["APPROVAL_REFUSED", "approved already"]
    for calls in SURFACES.values():
        refusing = _guided(exc, "refuse_commit", calls).continuation
        approving = _guided(exc, "approve_commit", calls).continuation
        assert refusing["kind"] == "ResolveExternally", calls.surface
        assert approving[calls.key] == calls.on(TX).commit, calls.surface


def test_the_derived_columns_are_the_rows() -> None:
    by_name = {row.name: row for row in ROWS}
    for action in ACTIONS:
        row = by_name[action]
        assert GRPC.names[action] == row.rpc
        route = row.http[0] if row.http else None
        expected = f"{route.method} {route.path}" if route else row.rpc
        assert HTTP_CALLS.names[action] == expected.replace("{transaction_id}", "{tx}")


async def test_the_mcp_column_names_real_tools(engine: Any) -> None:
    mcp = AgentTxMCP(embedded(engine))
    add_effect_tools(mcp)  # every MCP tool AgentTx has
    async with Client(mcp.server) as c:
        tools = {t.name for t in (await c.list_tools()).tools}
    listed = {a: name for a, name in MCP.names.items() if name}
    assert set(listed.values()) <= tools, set(listed.values()) - tools
    assert len(set(listed.values())) == len(listed)
    # The actions with no tool have none (an operator's word: resolve_step); the rest are
    # the tools of the rows' bindings.
    assert ACTIONS - set(MCP.names) == {"resolve_step"}
    assert "resolve_step" not in tools
    assert MCP.names == {r.name: r.mcp.name for r in ROWS if r.mcp and r.name in ACTIONS}
    for action, name in listed.items():
        assert MCP.action_of(name) == action


def _command(path: str) -> click.Command:
    """``agenttx tx step`` → its click command, through the real tree (lazy groups too)."""
    words = path.split()
    assert words[0] == "agenttx", path
    command: click.Command = main
    ctx = click.Context(main, info_name="agenttx")
    for word in words[1:]:
        assert isinstance(command, click.Group), path
        found = command.get_command(ctx, word)
        assert found is not None, f"no command {path!r}"
        command, ctx = found, click.Context(found, parent=ctx, info_name=word)
    return command


@pytest.mark.parametrize("action", sorted(ACTIONS))
def test_the_cli_column_names_real_commands(action: str) -> None:
    written = CLI.names[action]
    path, _, rest = written.partition(" {tx}")
    command = _command(path)
    params = [p for p in command.params if isinstance(p, click.Argument)]
    if written.endswith("{tx}"):
        # The transaction's id is the command's first argument.
        assert params, written
        assert params[0].name == "transaction_id", written
    else:
        assert not rest
        assert all(p.name != "transaction_id" for p in params), written
    assert CLI.action_of(path) == action


def test_the_cli_finds_the_operation_of_the_running_command() -> None:
    from agenttx.cli.common import _command_path

    tx_group = _command("agenttx tx")
    refuse = _command("agenttx tx refuse")
    root = click.Context(main, info_name="python -m agenttx")
    group = click.Context(tx_group, parent=root, info_name="tx")
    with click.Context(refuse, parent=group, info_name="refuse"):
        assert CLI.action_of(_command_path()) == "refuse_commit"
    assert _command_path() == ""


def _docs_table() -> list[str]:
    text = DOCS.read_text()
    header = "| reason | what the caller does next (calls by their MCP names) |"
    return text[text.index(header) :].split("\n\n", 1)[0].splitlines()[2:]


def docs_rows() -> list[str]:
    """docs/api.md's table of next steps, as ``NEXT_ON`` says: a reason's cases in its row."""
    rows = []
    for reason, found in NEXT_ON.items():
        said = []
        for c in found:
            calls = ", ".join(f"`{MCP.names[a] or CLI.names[a]}`" for a in c.actions)
            when = c.when + (f" (on `{c.on}`)" if c.on else "")
            said.append((f"{when}: " if when else "") + c.kind + (f" {calls}" if calls else ""))
        rows.append(f"| `{reason}` | {'; '.join(said)} |")
    return [*rows, f"| any other | {LAST_RESORT.kind} |"]


def test_the_docs_table_of_next_steps_is_next_on() -> None:
    assert _docs_table() == docs_rows(), "\n" + "\n".join(docs_rows())


def test_the_cli_renders_a_continuation_without_loading_the_table() -> None:
    # A refused command's next: line imports the guidance and the commands' bindings (the CLI
    # column); the operation table would cost it a third of a second (pydantic bodies, the
    # engine's modules).
    probe = (
        "import sys; from agenttx.api.public_errors import guidance; "
        "from agenttx.api.next_calls import CLI; "
        "print(sorted(m for m in sys.modules if m.startswith('agenttx.api.operations')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = "['agenttx.api.operations', 'agenttx.api.operations.cli_bindings']"
    assert out.stdout.strip() == loaded, out.stdout
