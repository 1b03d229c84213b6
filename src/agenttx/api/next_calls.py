"""What a refusal tells its caller to call next, named in the caller's own surface.

A continuation (``api/continuations.py``) names an abstract next action — run the step
again, commit, preview, reconcile step N — through a ``Calls``: one name per action for one
surface. No surface writes its own sentences; each only brings its column of names:

    action      MCP tool              CLI command               gRPC RPC
    begin       begin_transaction     agenttx tx begin          BeginTransaction
    step        run_step              agenttx tx step TX        ExecuteStep
    commit      commit_transaction    agenttx tx commit TX      CommitTransaction
    rollback    rollback_transaction  agenttx tx rollback TX    RollbackTransaction
    get         get_transaction       agenttx tx show TX        GetTransaction
    …           (the table below, ``_ACTIONS``)

The HTTP column is derived from the HTTP operations table (each operation names its RPC:
``POST /v1/transactions/{transaction_id}/steps`` is ``ExecuteStep``), built by
``api/http/v1/errors.py``; so a route is declared once. ``on(transaction_id)`` fills the
transaction's id into the names that carry it (an HTTP path, a CLI argument).

This module imports nothing internal: the CLI renders its continuations with it too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

# action → (gRPC RPC, MCP tool or "" when MCP has none, CLI command). ``{tx}`` stands for the
# transaction's id in a CLI command.
_ACTIONS: dict[str, tuple[str, str, str]] = {
    "begin": ("BeginTransaction", "begin_transaction", "agenttx tx begin"),
    "step": ("ExecuteStep", "run_step", "agenttx tx step {tx}"),
    "commit": ("CommitTransaction", "commit_transaction", "agenttx tx commit {tx}"),
    "rollback": ("RollbackTransaction", "rollback_transaction", "agenttx tx rollback {tx}"),
    "get": ("GetTransaction", "get_transaction", "agenttx tx show {tx}"),
    "list_tools": ("ListTools", "list_tools", "agenttx tools list"),
    "preview": ("PreviewCommit", "preview_commit", "agenttx tx preview {tx}"),
    "approve": ("ApproveCommit", "approve_commit", "agenttx tx approve {tx}"),
    "refuse": ("RefuseCommit", "refuse_commit", "agenttx tx refuse {tx}"),
    "undo": ("UndoStep", "undo_step", "agenttx tx undo {tx}"),
    "redo": ("RedoStep", "redo_step", "agenttx tx redo {tx}"),
    "reconcile": ("ReconcileStep", "reconcile_step", "agenttx tx reconcile {tx}"),
    # An operator's word on an outcome: never an agent's, so no MCP tool (docs/reconcile.md).
    "resolve": ("ResolveStep", "", "agenttx tx resolve {tx}"),
    "approve_compensation": (
        "ApproveCompensation",
        "approve_compensation",
        "agenttx tx approve-compensation {tx}",
    ),
    "refuse_compensation": (
        "RefuseCompensation",
        "refuse_compensation",
        "agenttx tx refuse-compensation {tx}",
    ),
}

# The RPC of each action, for the surfaces whose names derive from RPCs (HTTP).
RPC_OF_ACTION: Mapping[str, str] = {a: row[0] for a, row in _ACTIONS.items()}


@dataclass(frozen=True)
class Calls:
    """One surface's name for every next action. ``key`` is the continuation field that names
    the call (``tool`` over MCP, ``operation`` over HTTP, ``command`` in the CLI, ``rpc`` over
    gRPC); ``names`` maps each action to it, ``{tx}`` standing for ``transaction_id``."""

    surface: str
    key: str
    names: Mapping[str, str]
    transaction_id: str = ""  # filled into each ``{tx}``; "" writes ``unknown`` there
    unknown: str = "TX"  # what stands for a transaction id not known

    def on(self, transaction_id: str) -> Calls:
        """These names, about transaction ``transaction_id``."""
        return replace(self, transaction_id=transaction_id) if transaction_id else self

    def __getattr__(self, action: str) -> str:
        # ``calls.step`` reads as the sentence needs it: "send the same {calls.step} again".
        if action.startswith("_") or action not in _ACTIONS:
            raise AttributeError(action)
        name = self.names.get(action, "")
        if not name:
            # No such call on this surface (resolve over MCP): its CLI command, which the
            # sentences using it address to a person.
            name = CLI.names[action]
        return name.replace("{tx}", self.transaction_id or self.unknown)

    def call(self, action: str, instruction: str, **extra: Any) -> dict[str, Any]:
        """A CallTool continuation: call ``action`` next, as ``instruction`` says."""
        name = getattr(self, action)
        return {"kind": "CallTool", self.key: name, **extra, "instruction": instruction}

    def choose(self, actions: Sequence[str], instruction: str) -> dict[str, Any]:
        """A ChooseTool continuation: one of ``actions`` next."""
        return {
            "kind": "ChooseTool",
            self.key + "s": [getattr(self, a) for a in actions],
            "instruction": instruction,
        }


MCP = Calls("mcp", "tool", {a: row[1] for a, row in _ACTIONS.items()})
CLI = Calls("cli", "command", {a: row[2] for a, row in _ACTIONS.items()})
GRPC = Calls("grpc", "rpc", dict(RPC_OF_ACTION))


def http_calls(routes: Mapping[str, str]) -> Calls:
    """The HTTP column from ``routes``, each RPC's ``METHOD /path`` (the operations table);
    an action with no route keeps its RPC name."""
    names = {
        a: routes.get(rpc, rpc).replace("{transaction_id}", "{tx}")
        for a, rpc in RPC_OF_ACTION.items()
    }
    return Calls("http", "operation", names, unknown="{transaction_id}")
