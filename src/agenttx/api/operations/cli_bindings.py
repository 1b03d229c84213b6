"""What a row is as an ``agenttx <group> <name>`` command (``CliCommand``, ``CliOption``), and
each bound row's command: its group, name, help, arguments and options, declared once here and
made into a click command by ``cli/rows.py``. A row names its binding (``cli=cli.BEGIN`` in
table.py).

Kept apart from the table, and importing nothing but plain values, because every ``agenttx``
run reads it: a group lists its commands from here (``--help``) and builds the one it runs,
while the table imports the engine's reply builders (half a second). So a binding says its
options' kinds itself (a flag, repeatable, a number, choices) instead of reading them from the
request's descriptor; ``tests/repo/test_cli_bindings.py`` holds each to its row's request.

What a command does beyond sending its request and printing the reply's fields (a listing
read page by page, a table for a person, a next command to run) is its action in the CLI,
keyed by the row's name (``cli/actions.py``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from agenttx.numbers import EFFECT_ID, EXPECTED_REVISION, STEP_ID, TO_STEP, WholeNumber
from agenttx.receipts import Mode
from agenttx.types import Isolation, TxStatus


@dataclass(frozen=True)
class CliOption:
    """One argument or option of a row's command: ``--receipt-id`` for the request's
    ``receipt_id``. Text unless it says otherwise; what it says must agree with the request
    field of its name (a flag for a bool, repeatable for a list, a number for an integer)."""

    # The request field it fills, or, for one the CLI alone reads (``--limit`` of a listing
    # read page by page), the action's keyword.
    name: str
    help: str = ""  # an argument has none (click shows arguments by name only)
    flag: str = ""  # "": ``--`` and the name with dashes; else its own (``--status``)
    positional: bool = False  # an argument (TRANSACTION_ID), in the order given
    required: bool | None = None  # None: an argument is unless it has a default, an option not
    default: Any = None  # None: none (an option then reads None, a repeatable one ())
    show_default: bool = False
    multiple: bool = False  # repeatable: a list field
    is_flag: bool = False  # a bool field
    choices: tuple[str, ...] = ()  # one of these (a case-insensitive match iff not case_sensitive)
    case_sensitive: bool = True
    number: WholeNumber | None = None  # a whole number read by ``agenttx.numbers``
    between: tuple[int, int] | None = None  # a whole number in this closed range (click's)
    at_least: float | None = None  # a number of at least this
    path: bool = False  # a file's path (never a directory), read as a ``Path``
    exists: bool = False  # with ``path``: the file must exist
    short: str = ""  # a one-letter spelling too (``-q``)
    envvar: str = ""  # read from this environment variable when not given, shown in --help


@dataclass(frozen=True)
class CliCommand:
    """A row as an ``agenttx <group> <name>`` command (``cli/rows.py``), with ``--server``,
    ``--json`` and ``--timeout`` after its options (``SHARED``), unless its options place
    ``SERVER`` (and whichever of the others it takes) themselves. Without an action the
    options fill the row's request, sent through the client's ``call``; ``--json`` prints the
    reply's fields, otherwise they are printed as rows (``cli/output.py``). Two options of
    one oneof given together are a usage error."""

    row: str  # the row's name: the one its ``cli`` is, and its action's key
    group: str  # an existing command group: tx, effects, audit; "" for ``agenttx`` itself
    name: str
    help: str  # for a person: the first line is the group's listing of it
    options: tuple[CliOption, ...] = field(default_factory=tuple)
    # The ``agenttx.renamed`` rows (by ``where``) whose old flags still work here, hidden.
    renamed: str = ""


# The options every command that talks to a server has (``cli/common.py``).
SERVER = CliOption(
    "server",
    "Address of a running `agenttx serve`.",
    envvar="AGENTTX_SERVER",
    default="127.0.0.1:50051",
    show_default=True,
)
JSON = CliOption("as_json", "Print JSON, not a table.", flag="--json", is_flag=True)
TIMEOUT = CliOption("timeout", "Seconds.", at_least=0.1, default=10.0, show_default=True)
SHARED = (SERVER, JSON, TIMEOUT)

# ``agenttx audit``'s: a store read directly, and the keys to check its keyed records with.
STORE = CliOption(
    "store_url",
    "Work on this store directly (sqlite:///path.db, postgresql://…), not on a server.",
    flag="--store",
    envvar="AGENTTX_STORE",
)
AUDIT_KEY = CliOption(
    "audit_key_file",
    "With --store: the audit key file (TOML [[key]] tables) to check keyed records with; a "
    "server verifies with its own --audit-key.",
    flag="--audit-key",
    envvar="AGENTTX_AUDIT_KEY",
    path=True,
)

_TX = CliOption("transaction_id", positional=True)
_STEP = CliOption("step_id", positional=True, number=STEP_ID)


def _decider_roles(act: str) -> CliOption:
    """``--role`` of one who decides a receipt: ``act`` (approval, refusing) needs the
    ``approver`` role, so that is what an operator holds unless they say otherwise."""
    return CliOption(
        "roles",
        f"Roles held (repeatable); {act} needs `approver`.",
        flag="--role",
        multiple=True,
        default=("approver",),
        show_default=True,
    )


def _statuses(choices: tuple[str, ...]) -> CliOption:
    """``--status`` of a listing (transactions, effects): any of ``choices``, repeatable."""
    return CliOption(
        "statuses",
        "Only these statuses (repeatable).",
        flag="--status",
        multiple=True,
        choices=choices,
        case_sensitive=False,
    )


BEGIN = CliCommand(
    "begin",
    "tx",
    "begin",
    "Begin a transaction; prints its id and the first step to send.",
    (
        CliOption("agent", "Who runs the transaction (its agent id, an agent's name).", default=""),
        CliOption(
            "mode",
            "How it may commit (docs/safety.md); approval_required needs --principal.",
            choices=tuple(m.value for m in Mode),
            default=Mode.TRANSACTIONAL.value,
            show_default=True,
        ),
        CliOption(
            "principal",
            "Who acts (an approver must be someone else); needed with approval_required.",
            default="",
        ),
        CliOption(
            "isolation",
            "Isolation level (default: the server's, snapshot).",
            choices=tuple(i.value for i in Isolation),
        ),
        CliOption("labels", "A label for `tx list` (repeatable).", flag="--label", multiple=True),
    ),
    renamed="tx begin",
)

STEP = CliCommand(
    "execute_step",
    "tx",
    "step",
    "Send step STEP_ID (the transaction's next step) calling TOOL with ARGUMENTS_JSON, a JSON\n"
    "object (default {}; - reads it from standard input). Exits 0 if the step succeeded (with\n"
    "--dry-run: would succeed), 3 if not.",
    (
        _TX,
        _STEP,
        CliOption("tool", positional=True),
        CliOption("arguments_json", positional=True, default=""),
        CliOption(
            "raw_context",
            "The reasoning behind the step, kept in the transaction's context log.",
            default="",
        ),
        CliOption(
            "request_id",
            "Send the same id again to get the stored reply instead of running the step twice.",
            default="",
        ),
        CliOption(
            "dry_run",
            "Say what the step would do and change, journaling nothing (docs/dry-run.md).",
            is_flag=True,
        ),
    ),
)

COMMIT = CliCommand(
    "commit",
    "tx",
    "commit",
    "Commit a transaction: publish its writes and release its staged effects.",
    (
        _TX,
        CliOption(
            "receipt_id",
            "A preview's receipt (`agenttx tx preview`): commit exactly that change.",
            default="",
        ),
        CliOption(
            "expected_revision",
            "The revision your decision was based on: refused if the transaction moved since.",
            number=EXPECTED_REVISION,
        ),
        CliOption(
            "request_id",
            "Send the same id again to get the stored reply instead of committing twice.",
            default="",
        ),
    ),
)

ROLLBACK = CliCommand(
    "rollback",
    "tx",
    "rollback",
    "Abort a transaction, or rewind it to a step with --to-step.",
    (
        _TX,
        CliOption(
            "to_step",
            "Rewind to before this step and keep the transaction open (default: abort it).",
            number=dataclasses.replace(TO_STEP, low=1),
        ),
        CliOption("reason", default="rolled back from the agenttx CLI", show_default=True),
    ),
)

SHOW = CliCommand(
    "get_transaction",
    "tx",
    "show",
    "One transaction: status, policy, constraints and every step attempt (a history too\n"
    "large for one reply is read page by page: the client's ``get_transaction``).",
    (_TX,),
)

LIST = CliCommand(
    "list_transactions",
    "tx",
    "list",
    "Transactions, oldest first.",
    (
        _statuses(tuple(s.value for s in TxStatus)),
        CliOption("agent", "Only this agent id."),
        CliOption("label", "Only transactions carrying this label."),
        CliOption("limit", between=(1, 100_000), default=50, show_default=True),
    ),
)

TOOLS = CliCommand(
    "list_tools", "", "tools", "The tools a running server offers, with effect class and schemas."
)

PREVIEW = CliCommand(
    "preview_commit",
    "tx",
    "preview",
    "The exact change a commit would make now, and a receipt bound to it.",
    (_TX,),
)

APPROVE = CliCommand(
    "approve_commit",
    "tx",
    "approve",
    "Approve a preview's receipt, once: its commit may then run, for that exact change.",
    (
        _TX,
        CliOption("receipt_id", positional=True),
        CliOption("principal", "Who approves (not who began the transaction).", required=True),
        _decider_roles("approval"),
    ),
)

REFUSE = CliCommand(
    "refuse_commit",
    "tx",
    "refuse",
    "Refuse a preview's receipt, once, saying why: the transaction stays open, and a commit\n"
    "with the receipt is refused with your reason.",
    (
        _TX,
        CliOption("receipt_id", positional=True),
        CliOption("principal", "Who refuses (not who began the transaction).", required=True),
        CliOption(
            "reason",
            "Why, and what would make the change acceptable (at most 4096 bytes).",
            required=True,
        ),
        _decider_roles("refusing"),
    ),
)

UNDO = CliCommand(
    "undo_step",
    "tx",
    "undo",
    "Undo the last live step of a transaction (docs/undo.md).",
    (_TX,),
)

REDO = CliCommand(
    "redo_step",
    "tx",
    "redo",
    "Re-apply the step the last undo undid, exactly (docs/undo.md).",
    (_TX,),
)

RECONCILE = CliCommand(
    "reconcile_step",
    "tx",
    "reconcile",
    "Ask the tool's reconcile handler whether step STEP_ID's outside call happened.",
    (_TX, _STEP),
)

RESOLVE = CliCommand(
    "resolve_step",
    "tx",
    "resolve",
    "Settle step STEP_ID's unknown outcome after checking the outside system yourself.",
    (
        _TX,
        _STEP,
        CliOption("outcome", positional=True, choices=("happened", "not-happened")),
        CliOption(
            "output_json",
            "With happened: the step's output as JSON (what later ${steps.N…} references read).",
            flag="--output",
            default="",
        ),
        CliOption("reason", default="resolved from the agenttx CLI", show_default=True),
    ),
)

COMPENSATE = CliCommand(
    "compensate",
    "tx",
    "compensate",
    "Undo a committed transaction's kept undo actions in a new compensating transaction.\n\n"
    "Steps past their compensation window or whose tool declares rollback_not_supported are\n"
    "listed, never silently skipped; the compensation then ends FAILED, needing a human.",
    (
        _TX,
        CliOption("reason", "Why (kept in the compensation's audit chain).", default=""),
        CliOption("principal", "Who asks (an approver must be someone else).", default=""),
        CliOption("preview", "Start nothing: show what would run.", is_flag=True),
    ),
)

APPROVE_COMPENSATION = CliCommand(
    "approve_compensation",
    "tx",
    "approve-compensation",
    "Approve the undo a rollback or compensating transaction waits for.",
    (
        _TX,
        CliOption("principal", "The approver (not the transaction's own).", required=True),
        CliOption("roles", "A role the approver holds (approver).", flag="--role", multiple=True),
    ),
)

REFUSE_COMPENSATION = CliCommand(
    "refuse_compensation",
    "tx",
    "refuse-compensation",
    "Refuse the undo a rollback or compensating transaction waits for, saying why.\n\n"
    "The refused undo actions never run; every other one does, and the transaction ends\n"
    "needing a human, each refused step listed as not undone with your reason.",
    (
        _TX,
        CliOption(
            "reason",
            "Why the undo must not run (at most 4096 bytes; the person who settles it reads it).",
            required=True,
        ),
        CliOption("principal", "The refuser (not the transaction's own).", required=True),
        CliOption("roles", "A role the refuser holds (approver).", flag="--role", multiple=True),
    ),
)

# The outbox's statuses (``effects/`` and ListEffectsRequest.statuses).
EFFECT_STATUSES = ("pending", "delivering", "delivered", "dead")

EFFECTS = CliCommand(
    "list_effects",
    "effects",
    "list",
    "Effects, oldest first, each with its status, attempts and last error.",
    (
        CliOption("dead", "Only dead letters (same as --status dead).", is_flag=True),
        _statuses(EFFECT_STATUSES),
        CliOption("transaction_id", "Only this transaction's effects.", flag="--tx", default=""),
        CliOption("limit", between=(1, 100_000), default=100, show_default=True),
    ),
)

RETRY_EFFECT = CliCommand(
    "retry_effect",
    "effects",
    "retry",
    "Requeue dead effect EFFECT_ID and try it once now; prints how that went.",
    (CliOption("effect_id", positional=True, number=EFFECT_ID),),
)

AUDIT_VERIFY = CliCommand(
    "verify_audit",
    "audit",
    "verify",
    "Check a transaction's audit chain (or, with --all, every one); exit 3 if one is bad, 4\n"
    "if none is but keyed records could not be checked (give --audit-key).",
    (
        CliOption("transaction_id", positional=True, required=False),
        CliOption("check_all", "Check every chain of the store.", flag="--all", is_flag=True),
        STORE,
        SERVER,
        CliOption("as_json", "Print one JSON object per chain.", flag="--json", is_flag=True),
        CliOption("quiet", "Print only the chains that are bad.", short="-q", is_flag=True),
        CliOption(
            "anchor_file",
            "Also hold each chain to its head in this file (`agenttx audit anchor` wrote it); "
            "with --all, a chain it names that the store lacks is bad.",
            flag="--anchor",
            path=True,
            exists=True,
        ),
        AUDIT_KEY,
        TIMEOUT,
    ),
)

AUDIT_EXPORT = CliCommand(
    "audit_records",
    "audit",
    "export",
    "Write a transaction's audit chain as JSON lines, oldest record first.",
    (
        _TX,
        STORE,
        SERVER,
        CliOption(
            "output", "Write to this file instead of standard output.", short="-o", path=True
        ),
        TIMEOUT,
    ),
)

FIND = CliCommand(
    "find_transaction",
    "tx",
    "find",
    "The transaction a receipt id or a request id names: its state, how it ended, its newest "
    "receipts.",
    (
        CliOption("receipt_id", "A receipt id `tx preview` printed."),
        CliOption("request_id", "The request id one of its calls was sent with."),
    ),
)

# Every binding, as the CLI reads them (each is one row's ``cli``; tests/repo checks both ways).
COMMANDS: tuple[CliCommand, ...] = (
    BEGIN,
    STEP,
    COMMIT,
    ROLLBACK,
    SHOW,
    LIST,
    TOOLS,
    PREVIEW,
    APPROVE,
    REFUSE,
    UNDO,
    REDO,
    RECONCILE,
    RESOLVE,
    COMPENSATE,
    APPROVE_COMPENSATION,
    REFUSE_COMPENSATION,
    EFFECTS,
    RETRY_EFFECT,
    AUDIT_VERIFY,
    AUDIT_EXPORT,
    FIND,
)
