"""Every error AgentTx raises, each with a stable ``reason``, and the one table that maps a
reason to its gRPC and HTTP status.

Two names per error: ``code`` is the family (for a refused call, the name of the gRPC status the
call fails with; shared by a family's members), ``reason`` is the error's own name, unique in
the tree (``google.rpc.ErrorInfo`` calls it so). Both are stable and wire-visible; messages are
for humans and may be reworded. ``fields`` names the attributes an error carries as data; the
gRPC adapter sends them beside the status (docs/api.md) and the client rebuilds the error from
them, never from the message.

    class                             reason             when
    AgentTxError                      AGENTTX_ERROR      the base (its code is INTERNAL)
    ├── a refused call: the RPC fails with the status named by ``code`` (table ERROR_CODES)
    │   ├── InvalidArgument           INVALID_ARGUMENT   request malformed or over a limit
    │   │   └── NameCollision         TOOL_NAME_COLLISION  (integrations) two tools, one model name
    │   ├── NotFound                  NOT_FOUND          no such transaction (or step, tool)
    │   ├── FailedPrecondition        FAILED_PRECONDITION
    │   │   ├── WrongStep             WRONG_STEP         the step id is not the one expected
    │   │   ├── NotActive             NOT_ACTIVE         the status does not allow the call
    │   │   ├── OutcomeUnknownPending OUTCOME_UNKNOWN_PENDING  a step must be reconciled first
    │   │   ├── ApprovalRequired      APPROVAL_REQUIRED  commit needs an approved receipt first
    │   │   ├── PlanRequired          PLAN_REQUIRED      commit needs a current preview's receipt
    │   │   ├── ReceiptRefused        RECEIPT_REFUSED    unknown, foreign, expired, refused receipt
    │   │   ├── ApprovalRefused       APPROVAL_REFUSED   same principal, no approver role, decided
    │   │   ├── PolicyViolation       POLICY_VIOLATION   the safety policy file forbids the call
    │   │   ├── UndoRefused           UNDO_REFUSED       the last step cannot be undone (a hint)
    │   │   ├── RedoRefused           REDO_REFUSED       no undone step can be redone now
    │   │   ├── StepLimitReached      STEP_LIMIT_REACHED the transaction holds --max-steps steps
    │   │   ├── ReconcileNotDue       RECONCILE_NOT_DUE  reconciled too early: wait retry_after_ms
    │   │   ├── ReconcileInProgress   RECONCILE_IN_PROGRESS  another reconcile of it is running
    │   │   ├── NoReconcileHandler    NO_RECONCILE_HANDLER  the tool cannot reconcile: resolve it
    │   │   ├── OperationIdConflict   OPERATION_ID_CONFLICT  a step's operation id is immutable
    │   │   ├── CompensationRefused   COMPENSATION_REFUSED  an undo its contract does not allow
    │   │   ├── CompensationApprovalRefused COMPENSATION_APPROVAL_REFUSED  not an approver
    │   │   └── StepsNotRedone        STEPS_NOT_REDONE   (client) a block ended owing rewound steps
    │   │       └── StepsOwed             STEPS_OWED         (integrations) so did an agent run
    │   ├── AlreadyExists             ALREADY_EXISTS     request_id reused with another payload
    │   ├── Aborted                   ABORTED
    │   │   ├── CommitConflict        COMMIT_CONFLICT    first committer won; the keys are named
    │   │   ├── RevisionConflict      REVISION_CONFLICT  another writer moved the transaction
    │   │   ├── SnapshotMismatch      SNAPSHOT_MISMATCH  the transaction moved since the snapshot
    │   │   │                                            the caller echoed: preview again
    │   │   └── TransactionAborted    TRANSACTION_ABORTED  (client) a step ended the transaction
    │   ├── DeadlineExceeded          DEADLINE_EXCEEDED  waited too long for a busy transaction
    │   ├── InternalError             INTERNAL           a bug or a store failure
    │   ├── StoreFull                 STORE_FULL         no room in the store (RESOURCE_EXHAUSTED)
    │   ├── TooManySubscribers        TOO_MANY_SUBSCRIBERS  a stream past the server's or the
    │   │                                                key's limit (RESOURCE_EXHAUSTED)
    │   ├── ServerUnavailable         UNAVAILABLE        the client found no server on any try
    │   ├── Unauthenticated           UNAUTHENTICATED    no API key, or one the server does not know
    │   └── PermissionDenied          PERMISSION_DENIED  the key's roles do not allow the call
    ├── StepFailure                   STEP_FAILED        raised while a step runs
    │   ├── ArgumentError             INVALID_TOOL_ARGUMENTS  arguments fail the tool's schema
    │   ├── UnresolvedReference       UNRESOLVED_REFERENCE    a ${steps.N.path} cannot resolve
    │   ├── ArgumentsRefused          ARGUMENTS_REFUSED  JSON outside the policy, or references
    │   │                                                expanding past a limit
    │   ├── SandboxError              SANDBOX_ESCAPE     a path leaves the fs root (PermissionError)
    │   ├── OutboundRefused           OUTBOUND_REFUSED   a webhook target the outbound guard refuses
    │   └── ToolSignal                TOOL_SIGNAL        raised by a tool to steer the engine
    │       ├── FatalToolError        FATAL_TOOL_ERROR   abort at once, no retry, no rewind
    │       └── UncertainOutcome      UNCERTAIN_OUTCOME  the outside call may have happened
    ├── StepError                     STEP_ERROR         (client) the reply of a failed step
    │   ├── RollbackTriggered         ROLLBACK_TRIGGERED rewound; the transaction is still open
    │   ├── TransactionAborted        (above: it is also an Aborted)
    │   └── OutcomeUnknown            OUTCOME_UNKNOWN    an outside call may or may not have run
    ├── StartupError                  STARTUP_FAILED     cannot start so (a setting, a store)
    └── PermanentDeliveryError        DELIVERY_REJECTED  a channel says retrying cannot help

Transient refusals (``transient = True``: RevisionConflict, DeadlineExceeded, InternalError,
StoreFull, TooManySubscribers, ServerUnavailable) say nothing final about the call: it changed
nothing, and the same call may succeed later (another writer is done, the busy transaction is
free, there is room again, a stream has closed, the server is back). A request id never keeps
one as its reply (``core.requests``): the same call with the same ``request_id`` runs again.

A step failure is not a protocol error: the engine turns it (and any other exception a tool
raises) into a failed step, data in an OK reply (status, hint, strategy); its text and
traceback are the raw error the hint cleaner reads. The client raises a ``StepError`` for such
a reply. The classes marked (client) live in ``agenttx.client`` because they carry a reply type
(``agenttx.types``, which imports this module); they take their codes from here. Driver errors
are re-raised as ``InternalError`` ``from exc`` at the store boundary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Literal, TypeVar

E = TypeVar("E", bound="AgentTxError")


class AgentTxError(Exception):
    """Base of every error AgentTx raises on purpose. ``code`` and ``reason`` are stable and
    wire-visible; ``fields`` names the attributes that carry the error's data."""

    code: str = "INTERNAL"  # not a ClassVar: an error rebuilt from an unknown status keeps it
    reason: ClassVar[str] = "AGENTTX_ERROR"
    # name -> type of each attribute that is data (sent on the wire, kept in a stored reply)
    fields: ClassVar[Mapping[str, type]] = MappingProxyType({})
    # True iff the refusal is not the call's outcome: the same call may succeed later, so a
    # request id never keeps it as its reply (the module docstring lists them).
    transient: ClassVar[bool] = False

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message

    def with_message(self, message: str) -> AgentTxError:
        """This error, saying ``message`` (a replayed outcome keeps its original words)."""
        self.message = message
        self.args = (message,)
        return self

    def details(self) -> dict[str, Any]:
        """The error's data: each of ``fields`` this instance has, by name."""
        return {name: getattr(self, name) for name in self.fields if hasattr(self, name)}

    @classmethod
    def rebuilt(cls: type[E], message: str, details: Mapping[str, Any]) -> E | None:
        """An instance saying ``message`` with the attributes in ``details``, or ``None`` if a
        field is missing or of the wrong type (the caller then falls back to the family)."""
        values: dict[str, Any] = {}
        for name, kind in cls.fields.items():
            value = details.get(name)
            if not _is(value, kind):
                return None
            values[name] = value
        # These classes build their message from their arguments; the words said the first
        # time (by the server, or before a replay) are kept instead.
        exc = cls.__new__(cls)
        AgentTxError.__init__(exc, message)
        for name, value in values.items():
            setattr(exc, name, value)
        return exc


def _is(value: Any, kind: type) -> bool:
    # A field's type as the wire can carry it: a bool is not an int, and every list field holds
    # strings (keys, error texts).
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is list:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    return isinstance(value, kind)


def _fields(**kinds: type) -> Mapping[str, type]:
    return MappingProxyType(kinds)


# ---------------------------------------------------------------------------- refused calls


class InvalidArgument(AgentTxError):
    code = reason = "INVALID_ARGUMENT"


class NotFound(AgentTxError):
    code = reason = "NOT_FOUND"


class FailedPrecondition(AgentTxError):
    code = reason = "FAILED_PRECONDITION"


class WrongStep(FailedPrecondition):
    """The request's step id is not ``expected`` (the transaction's ``next_step_id``)."""

    reason = "WRONG_STEP"
    fields = _fields(transaction_id=str, expected=int, got=int)

    def __init__(self, transaction_id: str, got: int, expected: int) -> None:
        super().__init__(
            f"transaction {transaction_id} expects step {expected}, got step {got}; "
            f"send step_id={expected}"
        )
        self.transaction_id = transaction_id
        self.expected = expected
        self.got = got


class NotActive(FailedPrecondition):
    """The transaction's status does not allow the call (e.g. a step after commit)."""

    reason = "NOT_ACTIVE"
    fields = _fields(transaction_id=str, status=str, action=str)

    def __init__(self, transaction_id: str, status: str, action: str) -> None:
        super().__init__(f"transaction {transaction_id} is {status}; cannot {action}")
        self.transaction_id = transaction_id
        self.status = status
        self.action = action


class OutcomeUnknownPending(FailedPrecondition):
    """A step's outside effect has an unknown outcome; reconcile it before going on."""

    reason = "OUTCOME_UNKNOWN_PENDING"
    fields = _fields(transaction_id=str, step_id=int)

    def __init__(self, transaction_id: str, step_id: int) -> None:
        super().__init__(
            f"transaction {transaction_id}: step {step_id} has an unknown outcome; reconcile "
            "it (or, for a tool without a reconcile handler, an operator resolves it) or roll "
            "back before the next step or the commit"
        )
        self.transaction_id = transaction_id
        self.step_id = step_id


class ReconcileNotDue(FailedPrecondition):
    """A step was reconciled before its earliest reconcile time; ``retry_after_ms`` is the
    time left."""

    reason = "RECONCILE_NOT_DUE"
    fields = _fields(transaction_id=str, step_id=int, retry_after_ms=int)

    def __init__(self, transaction_id: str, step_id: int, retry_after_ms: int) -> None:
        super().__init__(
            f"transaction {transaction_id}: step {step_id} may be reconciled in "
            f"{retry_after_ms} ms; reconcile it again then"
        )
        self.transaction_id = transaction_id
        self.step_id = step_id
        self.retry_after_ms = retry_after_ms


class ReconcileInProgress(FailedPrecondition):
    """Another reconcile (or operator resolution) of the step is running."""

    reason = "RECONCILE_IN_PROGRESS"
    fields = _fields(transaction_id=str, step_id=int)

    def __init__(self, transaction_id: str, step_id: int) -> None:
        super().__init__(
            f"transaction {transaction_id}: step {step_id} is being reconciled by another "
            "call; read the transaction when it ends instead of reconciling again"
        )
        self.transaction_id = transaction_id
        self.step_id = step_id


class NoReconcileHandler(FailedPrecondition):
    """The step's tool has no ``@tool.reconcile`` handler: an operator settles it."""

    reason = "NO_RECONCILE_HANDLER"
    fields = _fields(transaction_id=str, step_id=int, tool=str)

    def __init__(self, transaction_id: str, step_id: int, tool: str, *, undo: bool = False) -> None:
        # ``undo``: the unknown outcome is the undo's (``@tool.undo_reconcile``), not the step's.
        if undo:
            message = (
                f"transaction {transaction_id}: tool '{clip(tool)}' has no undo_reconcile "
                f"handler for the undo of step {step_id}; an operator checks the outside system "
                f"and runs `agenttx tx resolve {transaction_id} {step_id} happened|not-happened` "
                "(resolve_step: happened = the undo took effect)"
            )
        else:
            message = (
                f"transaction {transaction_id}: tool '{clip(tool)}' of step {step_id} has no "
                "reconcile handler; an operator checks the outside system and runs `agenttx tx "
                f"resolve {transaction_id} {step_id} happened|not-happened` (resolve_step), or "
                "the transaction is rolled back"
            )
        super().__init__(message)
        self.transaction_id = transaction_id
        self.step_id = step_id
        self.tool = tool


class OperationIdConflict(FailedPrecondition):
    """``checkpoint_operation`` with another id than the one the step already holds. Raised
    inside the tool (its step fails), never as a call's refusal: not in ``ERROR_CODES``."""

    reason = "OPERATION_ID_CONFLICT"
    fields = _fields(transaction_id=str, step_id=int)

    def __init__(self, transaction_id: str, step_id: int, held: str, got: str) -> None:
        super().__init__(
            f"transaction {transaction_id}: step {step_id} already checkpointed provider "
            f"operation {clip(held)!r}; it is immutable, {clip(got)!r} is refused (checkpoint "
            "the same id again, or only update its cursor)"
        )
        self.transaction_id = transaction_id
        self.step_id = step_id


class ApprovalRequired(FailedPrecondition):
    """The commit needs a receipt approved by another principal holding ``approver`` (the
    transaction's mode, or the safety policy, says so); ``receipt_id`` is the one the call
    named ("" if none). Preview, have it approved, then commit with it."""

    reason = "APPROVAL_REQUIRED"
    fields = _fields(transaction_id=str, receipt_id=str, why=str)

    def __init__(self, transaction_id: str, receipt_id: str, why: str) -> None:
        super().__init__(f"transaction {transaction_id} needs approval before commit: {why}")
        self.transaction_id = transaction_id
        self.receipt_id = receipt_id
        self.why = why


class PlanRequired(FailedPrecondition):
    """The transaction has a step of a tool that requires a plan before commit (``tools``,
    comma-separated): the commit must name the receipt of a current preview. No approver is
    needed; preview, then commit with the preview's receipt."""

    reason = "PLAN_REQUIRED"
    fields = _fields(transaction_id=str, tools=str)

    def __init__(self, transaction_id: str, tools: str) -> None:
        super().__init__(
            f"transaction {transaction_id} commits only with a plan seen first: {tools} "
            "require a plan before commit. Preview the commit, then commit with the "
            "preview's receipt_id (no approver is needed)"
        )
        self.transaction_id = transaction_id
        self.tools = tools


class ReceiptRefused(FailedPrecondition):
    """The receipt cannot be used: ``why`` is ``unknown`` (no such receipt), ``foreign`` (it
    belongs to another transaction), ``expired``, or ``refused`` (an approver refused it: the
    message names who and why). Preview again for a fresh one — after a refusal, once the
    transaction has changed as the refusal asks (or roll it back)."""

    reason = "RECEIPT_REFUSED"
    fields = _fields(transaction_id=str, receipt_id=str, why=str)

    def __init__(self, transaction_id: str, receipt_id: str, why: str, detail: str = "") -> None:
        then = (
            "change the transaction as the refusal asks (steps, undo) and preview it again "
            "for a new receipt, or roll the transaction back"
            if why == "refused"
            else "preview the transaction again for a current receipt"
        )
        super().__init__(
            f"receipt {clip(receipt_id)} cannot be used for transaction {transaction_id}: "
            f"{detail or why}; {then}"
        )
        self.transaction_id = transaction_id
        self.receipt_id = receipt_id
        self.why = why


class ApprovalRefused(FailedPrecondition):
    """An approval — or a refusal (``refuse_commit``) — that does not count: ``why`` is
    ``same_principal`` (the transaction's own principal), ``not_approver`` (no ``approver``
    role), ``no_principal``, ``already_approved`` (a receipt is decided once; a second
    approval, a replay, or a refusal after the approval is refused) or ``already_refused`` (an
    approval or a second refusal of a refused receipt). ``decision`` in the constructor only
    words the message ("approval", "refusal")."""

    reason = "APPROVAL_REFUSED"
    fields = _fields(transaction_id=str, receipt_id=str, why=str)

    def __init__(
        self,
        transaction_id: str,
        receipt_id: str,
        why: str,
        detail: str,
        *,
        decision: str = "approval",
    ) -> None:
        super().__init__(f"{decision} of receipt {clip(receipt_id)} refused: {detail}")
        self.transaction_id = transaction_id
        self.receipt_id = receipt_id
        self.why = why


class PolicyViolation(FailedPrecondition):
    """The safety policy file (``--policy``) forbids the call; ``rule`` names the rule
    (``forbid_irreversible``, ``max_steps``, ``modes``), the message what is allowed."""

    reason = "POLICY_VIOLATION"
    fields = _fields(rule=str)

    def __init__(self, message: str, *, rule: str) -> None:
        super().__init__(message)
        self.rule = rule


class UndoRefused(FailedPrecondition):
    """``undo_step`` cannot undo the last live step (none, irreversible, outcome unknown …);
    ``hint`` says what to do instead. ``step_id`` is the step concerned, 0 if none."""

    reason = "UNDO_REFUSED"
    fields = _fields(transaction_id=str, step_id=int, hint=str)

    def __init__(self, transaction_id: str, step_id: int, hint: str) -> None:
        super().__init__(f"transaction {transaction_id}: cannot undo: {hint}")
        self.transaction_id = transaction_id
        self.step_id = step_id
        self.hint = hint


class RedoRefused(FailedPrecondition):
    """``redo_step`` has nothing it may re-apply exactly (nothing undone, or something ran
    since the undo); ``hint`` says what to do instead. ``step_id``: the step, 0 if none."""

    reason = "REDO_REFUSED"
    fields = _fields(transaction_id=str, step_id=int, hint=str)

    def __init__(self, transaction_id: str, step_id: int, hint: str) -> None:
        super().__init__(f"transaction {transaction_id}: cannot redo: {hint}")
        self.transaction_id = transaction_id
        self.step_id = step_id
        self.hint = hint


class StepLimitReached(FailedPrecondition):
    """The transaction already holds ``limit`` live steps (the engine's ``max_steps``)."""

    reason = "STEP_LIMIT_REACHED"
    fields = _fields(transaction_id=str, limit=int)

    def __init__(self, transaction_id: str, limit: int) -> None:
        super().__init__(
            f"transaction {transaction_id} holds {limit} steps, the most one transaction may "
            "(--max-steps); commit it and continue in a new transaction, or undo or roll back "
            "steps first"
        )
        self.transaction_id = transaction_id
        self.limit = limit


class AlreadyExists(AgentTxError):
    """A ``request_id`` already used for another request (``request_id`` is "" if unknown)."""

    code = reason = "ALREADY_EXISTS"
    fields = _fields(request_id=str)

    def __init__(self, message: str = "", *, request_id: str = "") -> None:
        super().__init__(message)
        self.request_id = request_id


class Aborted(AgentTxError):
    code = reason = "ABORTED"


class CommitConflict(Aborted):
    """Commit validation failed: another transaction committed these keys first.

    By the time this is raised the transaction is ``FAILED`` and its compensations have run.
    """

    reason = "COMMIT_CONFLICT"
    fields = _fields(transaction_id=str, keys=list, kind=str, compensation_errors=list)

    def __init__(
        self,
        transaction_id: str,
        keys: Sequence[str],
        kind: str = "write",
        compensation_errors: Sequence[str] = (),
    ) -> None:
        shown = ", ".join(keys[:10]) + (f" (+{len(keys) - 10} more)" if len(keys) > 10 else "")
        super().__init__(
            f"transaction {transaction_id} aborted: {kind}-{'write' if kind == 'write' else 'set'} "
            f"conflict on {shown}; another transaction committed first. Begin a new transaction"
        )
        self.transaction_id = transaction_id
        self.keys = list(keys)
        self.kind = kind
        self.compensation_errors = list(compensation_errors)


class CompensationRefused(FailedPrecondition):
    """A partial rollback would have to undo a step whose tool declares
    ``rollback_not_supported``; nothing was changed (``docs/compensation.md``)."""

    reason = "COMPENSATION_REFUSED"
    fields = _fields(transaction_id=str, step_id=int)

    def __init__(self, transaction_id: str, step_id: int, tool: str = "") -> None:
        super().__init__(
            f"transaction {transaction_id}: step {step_id} ({tool}) cannot be rolled back: its "
            f"tool declares rollback_not_supported; roll back to step {step_id + 1} or later, "
            "or abort the transaction (which marks it as needing a human)"
        )
        self.transaction_id = transaction_id
        self.step_id = step_id


class CompensationApprovalRefused(FailedPrecondition):
    """``approve_compensation`` or ``refuse_compensation`` by someone who may not decide it:
    no ``approver`` role, the transaction's own principal, nothing waits for an approval, or
    it was decided (approved or refused) already. ``decision`` in the constructor only words
    the message ("approval", "refusal")."""

    reason = "COMPENSATION_APPROVAL_REFUSED"
    fields = _fields(transaction_id=str)

    def __init__(self, transaction_id: str, why: str, *, decision: str = "approval") -> None:
        super().__init__(f"transaction {transaction_id}: compensation {decision} refused: {why}")
        self.transaction_id = transaction_id


class RevisionConflict(Aborted):
    """A compare-and-set on the transaction's revision lost: someone else changed it."""

    reason = "REVISION_CONFLICT"
    transient = True


class SnapshotMismatch(Aborted):
    """The transaction is no longer at the snapshot the caller echoed (``expected_revision``,
    or the receipt's revision and change hash): a step, rewind or outside change moved it.
    Nothing was done and the transaction stays open: preview again and decide on the current
    change. ABORTED, as gRPC prescribes for a failed test-and-set the caller redoes from its
    read (``docs/safety.md``)."""

    reason = "SNAPSHOT_MISMATCH"
    fields = _fields(transaction_id=str, expected_revision=int, revision=int)

    def __init__(
        self, transaction_id: str, expected_revision: int, revision: int, what: str = ""
    ) -> None:
        super().__init__(
            f"transaction {transaction_id} moved since the snapshot (expected revision "
            f"{expected_revision}, now {revision}{'; ' + what if what else ''}); preview it "
            "again and review the current change before committing"
        )
        self.transaction_id = transaction_id
        self.expected_revision = expected_revision
        self.revision = revision


class DeadlineExceeded(AgentTxError):
    code = reason = "DEADLINE_EXCEEDED"
    transient = True


class InternalError(AgentTxError):
    code = reason = "INTERNAL"
    transient = True


class StoreFull(AgentTxError):
    """The store ran out of room (its disk, or the database's): the call wrote nothing, reads
    still work, and the same call succeeds once there is space again. Its code is gRPC's
    RESOURCE_EXHAUSTED; the reason tells it from gRPC's own use of that status (a message over
    the size limit), which has no family class and stays a plain ``AgentTxError``."""

    code = "RESOURCE_EXHAUSTED"
    reason = "STORE_FULL"
    transient = True


class TooManySubscribers(AgentTxError):
    """An event stream (gRPC ``WatchTransaction``, an HTTP event stream, MCP's ``GET /mcp``)
    refused before anything is watched: ``limit`` streams are open, the server's total or, when
    ``per_key``, the caller's API key's share. ``retry_after_ms``: when to try again (a slot
    frees as soon as any stream closes). RESOURCE_EXHAUSTED on gRPC; HTTP answers 503 with
    ``Retry-After``."""

    code = "RESOURCE_EXHAUSTED"
    reason = "TOO_MANY_SUBSCRIBERS"
    transient = True
    fields = _fields(limit=int, per_key=bool, retry_after_ms=int)

    def __init__(self, limit: int, per_key: bool, retry_after_ms: int) -> None:
        if per_key:
            text = (
                f"this API key has {limit} event streams open, its limit; close one (one "
                "/v1/events stream shows every transaction the key may read) or"
            )
        else:
            text = f"{limit} event streams are open, the server's limit;"
        super().__init__(f"{text} try again in {retry_after_ms // 1000} s")
        self.limit = limit
        self.per_key = per_key
        self.retry_after_ms = retry_after_ms


class ServerUnavailable(AgentTxError, ConnectionError):
    """The server could not be reached (gRPC UNAVAILABLE) on any attempt. Every attempt
    carried the same request_id, so calling again with that id is safe."""

    code = reason = "UNAVAILABLE"
    transient = True
    fields = _fields(attempts=int)

    def __init__(self, message: str, attempts: int) -> None:
        super().__init__(message)
        self.attempts = attempts


class Unauthenticated(AgentTxError):
    """The call carried no API key, or one the server does not know (``docs/security.md``).
    The message never repeats the key."""

    code = reason = "UNAUTHENTICATED"


class PermissionDenied(AgentTxError):
    """The caller's key is valid but its roles do not allow the call (another principal's
    transaction without ``admin``, an approval without ``approver``). A transaction of another
    tenant is ``NotFound`` instead: its existence is not revealed."""

    code = reason = "PERMISSION_DENIED"


# ---------------------------------------------------------------------------- step failures


class StepFailure(AgentTxError):
    """Raised while a step runs. The step fails (data in an OK reply); the call does not."""

    code = reason = "STEP_FAILED"


class ArgumentError(StepFailure):
    """Arguments failed the tool's schema; the message is the validator's, for the hint."""

    reason = "INVALID_TOOL_ARGUMENTS"


class ArgumentsRefused(StepFailure):
    """Arguments the engine does not take: JSON outside the acceptance policy
    (``agenttx.jsonpolicy``: depth, integer digits, finite numbers, valid UTF-8), or references
    that would expand them past a limit. ``limit`` names the rule or the limit
    (``max_resolved_arguments_bytes``, ``max_references``, ``json_depth``, …); the message says
    what to send instead."""

    reason = "ARGUMENTS_REFUSED"
    fields = _fields(limit=str)

    def __init__(self, message: str, *, limit: str) -> None:
        super().__init__(message)
        self.limit = limit

    def __reduce__(self) -> tuple[Any, ...]:
        return (_unpickle_refused, (self.message, self.limit))


def _unpickle_refused(message: str, limit: str) -> ArgumentsRefused:
    return ArgumentsRefused(message, limit=limit)


UnresolvedKind = Literal["unavailable_step", "missing_key", "bad_syntax", "staged_output"]


class UnresolvedReference(StepFailure):
    """A reference that cannot be resolved; the step fails with this message as its error.

    ``kind`` is ``unavailable_step`` (the step is the current one, a later one, or has not
    completed), ``missing_key`` (the output has no such key or index) or ``bad_syntax``.
    ``step_id`` is the referenced step (0 for ``bad_syntax``: no earlier step is at fault).
    ``available_keys`` lists, sorted, the object keys that do exist where the lookup stopped
    (empty when it stopped at an array or a scalar; the message then says what it found).
    """

    reason = "UNRESOLVED_REFERENCE"
    fields = _fields(reference=str, step_id=int, key=str, kind=str, available_keys=list)

    def __init__(
        self,
        message: str,
        *,
        reference: str,
        step_id: int,
        key: str,
        kind: UnresolvedKind,
        available_keys: Sequence[str] = (),
    ) -> None:
        super().__init__(message)
        self.reference = reference
        self.step_id = step_id
        self.key = key
        self.kind: UnresolvedKind = kind
        self.available_keys = list(available_keys)

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only fields: the default Exception pickling would call cls(message) only.
        return (_unpickle_unresolved, (self.message, self.details()))


def _unpickle_unresolved(message: str, details: dict[str, Any]) -> UnresolvedReference:
    return UnresolvedReference(message, **details)


class SandboxError(StepFailure, PermissionError):
    """A path that leaves the sandbox root (``..``, absolute, through or naming a symlink).
    Also a ``PermissionError``, as the OS would say for a path it refuses."""

    reason = "SANDBOX_ESCAPE"


class OutboundRefused(StepFailure, PermissionError):
    """A webhook target the outbound guard refuses (a loopback, private, link-local,
    multicast or metadata address not allow-listed; ``agenttx.outbound``). At the step it
    fails the step; at delivery it dead-letters the effect."""

    reason = "OUTBOUND_REFUSED"


class ToolSignal(StepFailure):
    """Base of the exceptions a tool raises to tell the engine something specific."""

    reason = "TOOL_SIGNAL"


class FatalToolError(ToolSignal):
    """The failure cannot be fixed by retrying or rewinding: abort the transaction now."""

    reason = "FATAL_TOOL_ERROR"


class UncertainOutcome(ToolSignal):
    """The outside call may or may not have taken effect (e.g. a timeout after sending).

    ``operation_id`` is the provider's id for the call, if known (``provider`` names the
    outside system), kept on the step for reconciliation unless the step already checkpointed
    one (``ToolContext.checkpoint_operation``, which wins: it is immutable).
    ``retry_after_ms`` is the earliest reconcile time (default 5 s). Any tool runtime may
    raise it (a gateway's downstream call that timed out): the step becomes OUTCOME_UNKNOWN.
    """

    reason = "UNCERTAIN_OUTCOME"

    def __init__(
        self,
        message: str,
        operation_id: str | None = None,
        *,
        provider: str = "",
        retry_after_ms: int | None = None,
    ) -> None:
        super().__init__(message)
        self.operation_id = operation_id
        self.provider = provider
        self.retry_after_ms = retry_after_ms


# ---------------------------------------------------------------------------- outside a call


class StartupError(AgentTxError):
    """A setting the server cannot start with, or a store ``Engine.open`` cannot open; the
    message names it, says why and what to do."""

    code = reason = "STARTUP_FAILED"


class PermanentDeliveryError(AgentTxError):
    """Raised by a channel when retrying cannot help: the effect goes to dead letters now."""

    code = reason = "DELIVERY_REJECTED"


# ---------------------------------------------------------------------------- messages


def clip(text: str, limit: int = 64) -> str:
    """``text`` as a message echoes what a caller sent: whole up to ``limit`` characters,
    else its start, an ellipsis and its full size — a 10 KB id never comes back in full."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text.encode('utf-8', 'surrogatepass'))} bytes)"


# ---------------------------------------------------------------------------- the table


@dataclass(frozen=True, slots=True)
class ErrorCode:
    """How every adapter and the client map one error: by its ``reason``."""

    reason: str
    error: type[AgentTxError]
    grpc_status: str  # the grpc.StatusCode name the call fails with (== error.code)
    http_status: int  # the HTTP status an HTTP adapter answers with


def _row(error: type[AgentTxError], http_status: int) -> ErrorCode:
    return ErrorCode(error.reason, error, error.code, http_status)


# Every error a call can be refused with. HTTP statuses follow google.rpc.Code's mapping, except
# FAILED_PRECONDITION: 409, since a wrong step or an ended transaction conflicts with the
# transaction's current state (the request itself is well-formed).
ERROR_CODES: Mapping[str, ErrorCode] = MappingProxyType(
    {
        row.reason: row
        for row in (
            _row(InvalidArgument, 400),
            _row(NotFound, 404),
            _row(FailedPrecondition, 409),
            _row(WrongStep, 409),
            _row(NotActive, 409),
            _row(OutcomeUnknownPending, 409),
            _row(ApprovalRequired, 409),
            _row(PlanRequired, 409),
            _row(ReceiptRefused, 409),
            _row(ApprovalRefused, 409),
            _row(PolicyViolation, 409),
            _row(UndoRefused, 409),
            _row(RedoRefused, 409),
            _row(StepLimitReached, 409),
            _row(ReconcileNotDue, 409),
            _row(ReconcileInProgress, 409),
            _row(NoReconcileHandler, 409),
            _row(CompensationRefused, 409),
            _row(CompensationApprovalRefused, 409),
            _row(AlreadyExists, 409),
            _row(Aborted, 409),
            _row(CommitConflict, 409),
            _row(RevisionConflict, 409),
            _row(SnapshotMismatch, 409),
            _row(DeadlineExceeded, 504),
            _row(InternalError, 500),
            _row(StoreFull, 507),
            # 503, not google.rpc's 429: the server (or the key's share of it) is busy, not
            # the caller over a rate; Retry-After says when a slot may be free.
            _row(TooManySubscribers, 503),
            _row(ServerUnavailable, 503),
            _row(Unauthenticated, 401),
            _row(PermissionDenied, 403),
        )
    }
)

# The family class of each status a client may meet: ours, and those gRPC or a proxy make up.
# UNAVAILABLE has none: the client retries it and then raises ServerUnavailable itself.
_FAMILIES: Mapping[str, type[AgentTxError]] = MappingProxyType(
    {
        **{
            row.grpc_status: row.error
            for row in ERROR_CODES.values()
            if row.reason == row.error.code and row.error is not ServerUnavailable
        },
        "OUT_OF_RANGE": InvalidArgument,
        "UNKNOWN": InternalError,
        "DATA_LOSS": InternalError,
    }
)


def error_code(exc: AgentTxError) -> ErrorCode:
    """The table row of ``exc``: its own, else its nearest ancestor's, else INTERNAL's (an
    error that is not a refusal, e.g. a step failure that escaped, is a bug)."""
    for cls in type(exc).__mro__:
        row = ERROR_CODES.get(getattr(cls, "reason", ""))
        if row is not None and row.error is cls:
            return row
    return ERROR_CODES[InternalError.reason]


def error_from_wire(
    status: str, message: str, reason: str = "", details: Mapping[str, Any] | None = None
) -> AgentTxError:
    """The error a refused call stands for: the class of ``reason`` with its ``details`` when
    both agree with ``status``; else the family of ``status``; an unknown status keeps its
    name as ``code`` (e.g. RESOURCE_EXHAUSTED without the reason STORE_FULL). Never raises."""
    row = ERROR_CODES.get(reason)
    if row is not None and row.grpc_status == status:
        exc = row.error.rebuilt(message, details or {})
        if exc is not None:
            return exc
    family = _FAMILIES.get(status)
    if family is None:
        unknown = AgentTxError(message or status)
        unknown.code = status  # an unexpected status keeps its name
        return unknown
    return family(message)
