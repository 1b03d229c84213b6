"""What a refusal tells its caller to do next, and the call it names in the caller's own
surface.

``NEXT_ON`` is the one statement of what a caller refused with each reason does next: a
``Next`` — one of seed 003's continuation kinds and the actions it names — per case of the
error (a ``NOT_ACTIVE`` transaction that ended is begun anew, one rolling back is looked at,
a busy one retried). The operation table's rows list their reasons with these cases
(``Row.errors``); ``api/continuations.py`` takes each continuation's named calls from them
and writes its sentence for the case's kind, and ``tests/surfaces/test_next_steps.py`` holds
the two to each other for every row on every surface.

An action is the operation to call next, by its row name in the operation table
(``execute_step``, ``preview_commit``). A ``Calls`` names each action for one surface; no
surface writes its own sentences, each only brings its column of names:

    action          MCP tool              CLI command               gRPC RPC
    begin           begin_transaction     agenttx tx begin          BeginTransaction
    execute_step    run_step              agenttx tx step TX        ExecuteStep
    commit          commit_transaction    agenttx tx commit TX      CommitTransaction
    rollback        rollback_transaction  agenttx tx rollback TX    RollbackTransaction
    get_transaction get_transaction       agenttx tx show TX        GetTransaction
    …               (every row a continuation may name: ``_ACTIONS``)

Derived columns, so a name is declared once: the gRPC column is each row's ``rpc`` and the
HTTP column its first route (``POST /v1/transactions/{transaction_id}/steps``), each built by
the adapter that imports the table (``grpc_calls`` in ``api/grpc/server.py``, ``http_calls``
in ``api/http/v1/errors.py``); the CLI column is read here from the commands' bindings
(``api/operations/cli_bindings.py``), which hold plain values only. The MCP column is
listed, as the tools' bindings come with the table; ``tests/surfaces/test_next_steps.py``
holds it to them. ``on(transaction_id)`` fills the transaction's id into the names that
carry it (an HTTP path, a CLI argument).

Of AgentTx this module imports only the CLI bindings: the CLI renders its continuations with
it, and the operation table (with protobuf) would cost a CLI error line a third of a second.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from agenttx.api.operations.cli_bindings import COMMANDS, CliCommand

# The actions a continuation may name: each an operation of the table, by its row name.
_ACTIONS: tuple[str, ...] = (
    "begin",
    "execute_step",
    "commit",
    "rollback",
    "get_transaction",
    "list_tools",
    "preview_commit",
    "approve_commit",
    "refuse_commit",
    "undo_step",
    "redo_step",
    "reconcile_step",
    "resolve_step",  # an operator's word on an outcome, never an agent's: no MCP tool
    "approve_compensation",
    "refuse_compensation",
)

ACTIONS: frozenset[str] = frozenset(_ACTIONS)

# The continuation kinds (seed 003): what the caller does next.
CALL = "CallTool"  # call one action
CHOOSE = "ChooseTool"  # call one of several actions
RETRY = "RetryRequest"  # send the same call again, corrected or later
REVISE = "ReviseRequest"  # fix the request
RESOLVE = "ResolveExternally"  # someone outside must act (an approver, the operator, the user)
KINDS = (CALL, CHOOSE, RETRY, REVISE, RESOLVE)


@dataclass(frozen=True)
class Next:
    """What a caller refused in one case of a reason does next."""

    kind: str  # one of ``KINDS``
    # The actions the continuation names (its ``tool``, or its ``tools`` to choose from): one
    # for CALL, several for CHOOSE, none for the other kinds.
    actions: tuple[str, ...] = ()
    when: str = ""  # the case of the error's fields it is for; "" for a reason with one case
    on: str = ""  # the one operation it holds for, replacing the case of the same ``when``


def _call(action: str, when: str = "", on: str = "") -> Next:
    return Next(CALL, (action,), when, on)


def _choose(*actions: str, when: str = "") -> Next:
    return Next(CHOOSE, actions, when)


def _kind(kind: str, when: str = "", on: str = "") -> Next:
    return Next(kind, (), when, on)


# reason (``agenttx.errors.ERROR_CODES``) → its cases, as ``continuations.refusal_of`` tells
# them apart. A reason missing here gets the last resort: RESOLVE, "AgentTx failed".
NEXT_ON: Mapping[str, tuple[Next, ...]] = MappingProxyType(
    {
        "INVALID_ARGUMENT": (_kind(REVISE),),
        "NOT_FOUND": (_call("begin"),),
        "PERMISSION_DENIED": (_kind(RESOLVE),),
        "UNAUTHENTICATED": (_kind(RESOLVE),),
        # A rollback may wait for an approver: look, do not retry forever.
        "NOT_ACTIVE": (
            _call("begin", "ended"),
            _call("get_transaction", "rolling back"),
            _kind(RETRY, "busy"),
        ),
        "OUTCOME_UNKNOWN_PENDING": (_call("reconcile_step"),),  # never the step again
        "ALREADY_EXISTS": (_kind(REVISE),),  # a new request_id, or the original request
        "STORE_FULL": (_kind(RESOLVE),),  # the operator frees space
        "POLICY_VIOLATION": (
            _choose("commit", "rollback", when="the step cap"),
            _kind(REVISE, "another rule"),
        ),
        "WRONG_STEP": (_kind(RETRY),),  # with the expected step id
        "STEP_LIMIT_REACHED": (_choose("commit", "undo_step", "rollback"),),
        "COMMIT_CONFLICT": (_call("begin"),),  # and redo the steps on the current values
        "REVISION_CONFLICT": (_kind(RETRY),),
        "DEADLINE_EXCEEDED": (_kind(RETRY),),
        "SNAPSHOT_MISMATCH": (_call("preview_commit"),),  # review the current change
        "APPROVAL_REQUIRED": (
            _call("preview_commit", "no receipt"),
            _kind(RESOLVE, "a receipt not approved yet"),  # an approver approves it
        ),
        "PLAN_REQUIRED": (_call("preview_commit", "no plan"),),
        "APPROVAL_REFUSED": (
            _kind(RESOLVE, "refused already"),
            _call("commit", "approved already"),
            _kind(RESOLVE, "approved already", on="refuse_commit"),  # decided once
            _kind(RESOLVE, "not an approver"),
        ),
        "RECEIPT_REFUSED": (
            _call("preview_commit", "refused by an approver"),
            _call("preview_commit", "unusable"),  # unknown, foreign, expired, used, stale
        ),
        "UNDO_REFUSED": (_choose("execute_step", "rollback"),),
        "REDO_REFUSED": (_call("execute_step"),),
        "RECONCILE_NOT_DUE": (_kind(RETRY),),  # after retry_after_ms
        "RECONCILE_IN_PROGRESS": (_call("get_transaction"),),
        "NO_RECONCILE_HANDLER": (_kind(RESOLVE),),  # an operator resolves the step
        "COMPENSATION_REFUSED": (_kind(REVISE),),  # roll back to a later step, or abort
        "COMPENSATION_APPROVAL_REFUSED": (_kind(RESOLVE),),  # another principal decides
        "TOO_MANY_SUBSCRIBERS": (_kind(RETRY),),
        "UNAVAILABLE": (_kind(RESOLVE),),  # start the server
    }
)
LAST_RESORT = _kind(RESOLVE)  # a refusal with no case above (FAILED_PRECONDITION …)


def cases(reason: str, operation: str = "") -> tuple[Next, ...]:
    """The cases of ``reason`` when ``operation`` (a row name) refuses it, ``on`` resolved:
    one case per ``when``."""
    found = NEXT_ON.get(reason, (LAST_RESORT,))
    own = {c.when for c in found if c.on == operation and c.on}
    return tuple(
        replace(c, on="")
        for c in found
        if (c.on == operation and c.on) or (not c.on and c.when not in own)
    )


def next_on(reason: str, when: str = "", operation: str = "") -> Next:
    """The one case ``when`` of ``reason`` on ``operation``."""
    for c in cases(reason, operation):
        if c.when == when:
            return c
    raise KeyError((reason, when))


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
        # ``calls.execute_step`` reads as the sentence needs it: "send the same {…} again".
        if action.startswith("_") or action not in _ACTIONS:
            raise AttributeError(action)
        name = self.names.get(action, "")
        if not name:
            # No such call on this surface (resolve over MCP): its CLI command, which the
            # sentences using it address to a person.
            name = CLI.names[action]
        return name.replace("{tx}", self.transaction_id or self.unknown)

    def follow(self, then: Next, instruction: str, **extra: Any) -> dict[str, Any]:
        """The continuation ``then``: its kind, the call (``key``) or calls (``key`` + s) it
        names, ``extra`` fields, and ``instruction``."""
        named: dict[str, Any] = {}
        if then.kind == CALL and then.actions:
            named = {self.key: getattr(self, then.actions[0])}
        elif then.kind == CHOOSE:
            named = {self.key + "s": [getattr(self, a) for a in then.actions]}
        return {"kind": then.kind, **named, **extra, "instruction": instruction}

    def call(self, action: str, instruction: str, **extra: Any) -> dict[str, Any]:
        """A CallTool continuation: call ``action`` next, as ``instruction`` says."""
        return self.follow(_call(action), instruction, **extra)

    def action_of(self, name: str) -> str:
        """The action this surface calls ``name`` (an MCP tool's, a CLI command's), or ""."""
        for action, own in self.names.items():
            if own and (own == name or own.split(" {tx}")[0] == name):
                return action
        return ""


def _command(c: CliCommand) -> str:
    """``agenttx tx step {tx}``: a binding as its command line begins."""
    words = ["agenttx", *([c.group] if c.group else []), c.name]
    if any(o.positional and o.name == "transaction_id" for o in c.options):
        words.append("{tx}")
    return " ".join(words)


# The CLI column, from the commands' bindings (light: plain values, no table, no protobuf).
CLI = Calls("cli", "command", {c.row: _command(c) for c in COMMANDS if c.row in _ACTIONS})


# The MCP column, listed: the tools' bindings come with the table (and protobuf), which a CLI
# error line must not load; ``tests/surfaces/test_next_steps.py`` holds it to the bindings.
MCP = Calls(
    "mcp",
    "tool",
    {
        "begin": "begin_transaction",
        "execute_step": "run_step",
        "commit": "commit_transaction",
        "rollback": "rollback_transaction",
        "get_transaction": "get_transaction",
        "list_tools": "list_tools",
        "preview_commit": "preview_commit",
        "approve_commit": "approve_commit",
        "refuse_commit": "refuse_commit",
        "undo_step": "undo_step",
        "redo_step": "redo_step",
        "reconcile_step": "reconcile_step",
        "approve_compensation": "approve_compensation",
        "refuse_compensation": "refuse_compensation",
    },
)


def grpc_calls(rpcs: Mapping[str, str]) -> Calls:
    """The gRPC column: ``rpcs``, each row's RPC by its name (the operation table)."""
    return Calls("grpc", "rpc", {a: rpcs[a] for a in _ACTIONS})


def http_calls(routes: Mapping[str, str], rpcs: Mapping[str, str]) -> Calls:
    """The HTTP column from ``routes``, each row's first ``METHOD /path`` by its name (the
    operation table); an action with no route keeps its RPC name (``rpcs``)."""
    names = {a: routes.get(a, rpcs[a]).replace("{transaction_id}", "{tx}") for a in _ACTIONS}
    return Calls("http", "operation", names, unknown="{transaction_id}")
