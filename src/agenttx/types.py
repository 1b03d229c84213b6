"""Plain value types shared by the engine, the stores and the adapters.

Enum values are the wire names of the reference protocol (``REFERENCE.md``); ``wire`` numbers
are the proto enum numbers, so adapters translate without tables of their own.
"""

from __future__ import annotations

import enum
import functools
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agenttx.errors import InvalidArgument


class TxStatus(enum.StrEnum):
    ACTIVE = "ACTIVE"  # accepts steps, commits and rollbacks
    EXECUTING = "EXECUTING"  # a step with an outside effect is running; others wait
    ROLLING_BACK = "ROLLING_BACK"  # a rewind or abort is running (durable: resumes after a crash)
    COMMITTING = "COMMITTING"  # commit validation and publication are running
    COMMITTED = "COMMITTED"  # terminal: writes published, staged effects queued for release
    ROLLED_BACK = "ROLLED_BACK"  # terminal: aborted on request or by the idle reaper
    FAILED = "FAILED"  # terminal: aborted by the controller or by a commit conflict
    # A compensating transaction (``Engine.compensate``) running its undo actions, or waiting
    # for an approver when a step's contract asks for one (durable: resumes after a crash).
    COMPENSATING = "COMPENSATING"
    COMPENSATED = "COMPENSATED"  # terminal: every undo action of the compensation ran

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset(
    {TxStatus.COMMITTED, TxStatus.ROLLED_BACK, TxStatus.FAILED, TxStatus.COMPENSATED}
)


class StepStatus(enum.StrEnum):
    SUCCESS = "SUCCESS"  # the tool ran; its output is stored; next_step_id = step + 1
    ROLLBACK_TRIGGERED = "ROLLBACK_TRIGGERED"  # it failed; state was rewound; continue there
    FAILED = "FAILED"  # it failed and the transaction was aborted
    OUTCOME_UNKNOWN = "OUTCOME_UNKNOWN"  # an outside call may or may not have happened

    @property
    def wire(self) -> int:
        return _STEP_WIRE[self]


_STEP_WIRE = {
    StepStatus.SUCCESS: 1,
    StepStatus.ROLLBACK_TRIGGERED: 2,
    StepStatus.FAILED: 3,
    StepStatus.OUTCOME_UNKNOWN: 4,
}


class Strategy(enum.StrEnum):
    UNSPECIFIED = "UNSPECIFIED"
    NONE = "NONE"  # no rollback happened
    LOCAL_BACKTRACK = "LOCAL_BACKTRACK"  # rewound a few steps before the failing one
    DEPENDENCY_JUMP = "DEPENDENCY_JUMP"  # rewound to the step that produced the bad value
    GLOBAL_RESET = "GLOBAL_RESET"  # rewound to the initial state, new epoch
    MANUAL = "MANUAL"  # rewound because the caller asked
    ABORT = "ABORT"  # the transaction ended
    RETRY = "RETRY"  # the failing step's own effects undone; send the same step again

    @property
    def wire(self) -> int:
        return _STRATEGY_WIRE[self]


_STRATEGY_WIRE = {s: i for i, s in enumerate(Strategy)}

# The request metadata entry through which a client says which of our strategies beyond the
# reference's it can name: a comma-separated list of lowercase names (today only ``retry``).
# A client built from the reference's proto sends none; its enum stops at ABORT, so it is sent
# LOCAL_BACKTRACK in place of RETRY, with the same rollback_to_step and next_step_id.
ACCEPT_STRATEGIES_METADATA = "agenttx-accept-strategies"
# What a client that names none of our strategies is sent in their place.
REFERENCE_FALLBACK = {Strategy.RETRY: Strategy.LOCAL_BACKTRACK}


class EffectClass(enum.StrEnum):
    READ = "read"  # runs at the step; nothing to undo
    STATE = "state"  # writes AgentTx-managed state only; undone by dropping the step's writes
    COMPENSATABLE = "compensatable"  # touches an outside system; undone by its registered undo
    STAGED = "staged"  # only stages effects, released after a durable commit
    IRREVERSIBLE = "irreversible"  # touches an outside system for good

    @property
    def outside(self) -> bool:
        """True iff running the tool may change something AgentTx cannot simply drop."""
        return self in (EffectClass.COMPENSATABLE, EffectClass.IRREVERSIBLE)


class Fidelity(enum.StrEnum):
    """How far a dry run of a tool's step goes (each level includes the ones before it);
    a tool declares the highest it supports (``docs/dry-run.md``)."""

    SCHEMA_ONLY = "schema_only"  # the arguments are resolved and checked against the schema
    POLICY_AND_SCHEMA = "policy_and_schema"  # + the policy's decision (allowed, approval …)
    DOWNSTREAM_VALIDATION = "downstream_validation"  # + the tool's ``validate`` handler runs
    FULL_SIMULATION = "full_simulation"  # + its ``simulate`` handler (or a kept-nothing run)

    @property
    def rank(self) -> int:
        return _FIDELITY_RANK[self]


_FIDELITY_RANK = {f: i for i, f in enumerate(Fidelity)}


# The key marking a staged step's output (the gateway's staged calls): the real output exists
# only after commit, so a reference into it is a step failure that says so (``core.refs``).
STAGED_OUTPUT_KEY = "io.agenttx/staged"


class Isolation(enum.StrEnum):
    SNAPSHOT = "snapshot"  # reads at the begin snapshot; first committer wins on write-write
    SERIALIZABLE = "serializable"  # snapshot + the read set is validated at commit
    READ_COMMITTED = "read_committed"  # reference behaviour: latest committed, write-write only


# The policy's ranges (the reference's; max_step_retries ours), stated once: the HTTP API's
# body model and its OpenAPI document read them too.
MAX_POLICY_DEPTH = 16  # max_local_depth and max_global_resets: 0..16
MAX_STEP_RETRIES = 32
REPLAY_FACTOR_RANGE = (0.1, 1000.0)


@dataclass(frozen=True, slots=True)
class RollbackPolicy:
    """Per-transaction controller policy; ranges are the reference's."""

    max_local_depth: int = 2
    max_global_resets: int = 1
    replay_budget_factor: float = 2.0
    # RETRYs of one step in a row before its failure counts as persistent (0 turns retries
    # off); None derives it from the depth, max(max_local_depth, 1) + 1 (3 by default). Ours.
    max_step_retries: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.max_local_depth <= MAX_POLICY_DEPTH:
            raise InvalidArgument(
                f"policy.max_local_depth must be 0..{MAX_POLICY_DEPTH}, got {self.max_local_depth}"
            )
        if not 0 <= self.max_global_resets <= MAX_POLICY_DEPTH:
            raise InvalidArgument(
                f"policy.max_global_resets must be 0..{MAX_POLICY_DEPTH}, "
                f"got {self.max_global_resets}"
            )
        f = self.replay_budget_factor
        low, high = REPLAY_FACTOR_RANGE
        if not (isinstance(f, int | float) and math.isfinite(f) and low <= f <= high):
            raise InvalidArgument(f"policy.replay_budget_factor must be 0.1..1000, got {f}")
        r = self.max_step_retries
        if r is not None and not (isinstance(r, int) and 0 <= r <= MAX_STEP_RETRIES):
            raise InvalidArgument(f"policy.max_step_retries must be 0..{MAX_STEP_RETRIES}, got {r}")

    def replay_budget(self, furthest_step: int) -> int:
        """``max(1, ⌈c·N·⌈log₂(N+1)⌉⌉)`` replayed steps allowed per epoch."""
        n = max(furthest_step, 0)
        return max(1, math.ceil(self.replay_budget_factor * n * math.ceil(math.log2(n + 1))))

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_local_depth": self.max_local_depth,
            "max_global_resets": self.max_global_resets,
            "replay_budget_factor": self.replay_budget_factor,
            "max_step_retries": self.max_step_retries,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> RollbackPolicy:
        d = d or {}
        return cls(
            max_local_depth=int(d.get("max_local_depth", 2)),
            max_global_resets=int(d.get("max_global_resets", 1)),
            replay_budget_factor=float(d.get("replay_budget_factor", 2.0)),
            max_step_retries=(
                None if d.get("max_step_retries") is None else int(d["max_step_retries"])
            ),
        )


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a reply showing a transaction's state carries for the caller to echo: the
    transaction and its revision (which grows by one with every durable change). A commit
    with ``expected_revision`` refuses a transaction that moved since (``SnapshotMismatch``)."""

    transaction_id: str
    revision: int


class HasSnapshot:
    """The ``snapshot`` property of every result that names a transaction and its revision
    (``BeginResult``, ``StepResult``, ``Preview``, …): the pair to echo, read from the
    result's own two fields. No state of its own (empty ``__slots__``), so a slotted frozen
    dataclass stays slotted."""

    __slots__ = ()
    transaction_id: str
    revision: int

    @property
    def snapshot(self) -> Snapshot:
        return Snapshot(self.transaction_id, self.revision)


@dataclass(frozen=True, slots=True)
class BeginResult(HasSnapshot):
    transaction_id: str
    next_step_id: int
    transaction_status: TxStatus = TxStatus.ACTIVE
    revision: int = 1
    # How the transaction may commit (``agenttx.receipts.Mode``'s value), as the engine
    # settled it; a reply stored before the field existed replays the default.
    mode: str = "transactional"


@dataclass(slots=True)
class StepResult(HasSnapshot):
    """What one ``execute_step`` returns. A tool failure is data here, never an exception."""

    transaction_id: str
    step_id: int
    status: StepStatus
    output: Any = None
    output_json: str = ""
    clean_hint: str = ""
    strategy: Strategy = Strategy.NONE
    rollback_to_step: int = 0
    next_step_id: int = 0
    constraints: list[str] = field(default_factory=list)
    context_reset: bool = False
    error_category: str = ""
    rollback_latency_ms: float = 0.0
    abort_reason: str = ""
    compensation_errors: list[str] = field(default_factory=list)
    transaction_status: TxStatus = TxStatus.ACTIVE
    revision: int = 0
    hint_key: str = ""  # the key the hint names, if any (used for root-cause tracing)
    # The reference server's name for error_category (wire field 9); "" iff error_category is.
    reference_category: str = ""
    # Set iff the call was a dry run: nothing was journaled and next_step_id did not move.
    dry_run: DryRunReport | None = None
    # OUTCOME_UNKNOWN only: ms until reconcile_step is allowed, and the provider operation
    # the step checkpointed (both "" if none): what reconciling will ask about.
    retry_after_ms: int = 0
    operation_provider: str = ""
    operation_id: str = ""


@dataclass(frozen=True, slots=True)
class DryRunReport:
    """What a dry run of a step found (``execute_step(..., dry_run=True)``)."""

    declared: Fidelity  # the fidelity the tool declares
    fidelity: Fidelity  # the level the dry run reached: declared, or lower if a check failed
    # or the tool lacks the handler its level needs (``notes`` says which)
    would_succeed: bool  # true iff every check it reached passed (the step's status says so)
    policy: str  # "allowed", "needs_approval", "forbidden", or "" below policy_and_schema
    # What the step would change, as far as the reached level can tell: ``writes`` (key,
    # before, after), ``effects`` (channel, idempotency key, payload), ``undo`` (handlers it
    # would register); empty below full_simulation unless the validate handler said
    changes: dict[str, Any] = field(default_factory=dict)
    output: Any = None  # the simulated output (full_simulation), else None
    notes: list[str] = field(default_factory=list)  # why a level was not reached, …


@dataclass(frozen=True, slots=True)
class CommitResult(HasSnapshot):
    transaction_id: str
    committed: bool
    steps_committed: int
    effects_dispatched: int
    dispatch_errors: list[str]
    effects_queued: int = 0
    transaction_status: TxStatus = TxStatus.COMMITTED
    revision: int = 0


@dataclass(frozen=True, slots=True)
class UndoResult(HasSnapshot):
    """What ``undo_step`` and ``redo_step`` return: the step moved, and where to go on."""

    transaction_id: str
    step_id: int  # the step undone (or redone)
    next_step_id: int  # the step to send next: step_id after an undo, step_id + 1 after a redo
    transaction_status: TxStatus
    revision: int
    compensations_run: int = 0  # undo handlers run (an undone compensatable step)
    compensation_errors: list[str] = field(default_factory=list)
    effects_dropped: int = 0  # staged effects of the undone step, dropped unsent
    can_undo: bool = False  # as GetTransaction would say right after this call
    can_redo: bool = False


@dataclass(frozen=True, slots=True)
class RollbackResult(HasSnapshot):
    transaction_id: str
    rolled_back: bool
    next_step_id: int
    compensations_run: int
    compensation_errors: list[str]
    transaction_status: TxStatus = TxStatus.ACTIVE
    revision: int = 0
    # True iff the rollback waits (ROLLING_BACK) for ``approve_compensation``: a step's
    # contract asks for an approver before its undo runs.
    compensation_approval_pending: bool = False


@dataclass(frozen=True, slots=True)
class ContextEntry:
    step_id: int
    tool_name: str
    raw_context: str


@dataclass(frozen=True)  # not slots: ``arguments``/``output`` keep their parse in __dict__
class StepView:
    """One attempt of a step as history shows it (live steps and undone ones).

    The arguments and the output are held as JSON text, as stored and as the wire carries
    them; ``arguments`` and ``output`` are their values, parsed on first use. A long history
    is mostly these texts: a reply passes them on without building a million values and
    encoding them again (``docs/json-policy.md``)."""

    step_id: int
    attempt: int  # 1 for the first run of this step id, grows on each re-run
    tool_name: str
    status: str  # SUCCESS, FAILED, OUTCOME_UNKNOWN, RUNNING
    live: bool  # true iff the step is part of the transaction's current state
    # JSON text, "" for none. Arguments a failed attempt sent that are not JSON (truncated,
    # a lone surrogate escape, too deep) are shown as a JSON string of the text sent.
    arguments_json: str
    output_json: str
    clean_hint: str
    error_category: str
    epoch: int
    started_at: float
    finished_at: float
    reference_category: str = ""  # the reference's name for error_category, as in StepResult
    operation_provider: str = ""  # the provider operation the attempt checkpointed, if any
    operation_id: str = ""
    # Of a failed attempt (else empty / 0): what the controller did and why. Over gRPC they
    # come with GetTransaction (its `decisions`), not with ListSteps pages, so they are not
    # part of an attempt's equality: a page's attempt equals the engine's.
    strategy: str = field(default="", compare=False)  # a Strategy value
    # the step it rewound to (0: none, a reset or an abort)
    rollback_to_step: int = field(default=0, compare=False)
    # the earlier step found to have produced the bad value (0: none)
    root_cause_step: int = field(default=0, compare=False)
    hint_key: str = field(default="", compare=False)  # the key the hint names

    @functools.cached_property
    def arguments(self) -> Any:
        """The arguments as a value (None for none), parsed from ``arguments_json`` once."""
        return _value(self.arguments_json)

    @functools.cached_property
    def output(self) -> Any:
        """The output as a value (None for none), parsed from ``output_json`` once."""
        return _value(self.output_json)


def _value(text: str) -> Any:
    return json.loads(text) if text else None


@dataclass(frozen=True, slots=True)
class ReceiptView:
    """One preview receipt of a transaction and its decision, as its view lists it: ``status``
    is ``issued``, ``approved``, ``refused``, ``expired`` or ``voided``
    (``agenttx.receipts.ReceiptStatus``; the last two are computed when read, for a receipt no
    commit used — ``expired``: past ``expires_at`` by the server's clock; ``voided``: not
    expired, but its transaction moved past ``revision`` or ended without it)."""

    receipt_id: str
    status: str
    revision: int  # the transaction's revision it was made at
    change_hash: str
    created_at: float
    expires_at: float
    # The approver or the refuser ("" while issued, and for a receipt that expired undecided).
    decided_by: str = ""
    decided_at: float = 0.0  # unix s (0 while undecided)
    reason: str = ""  # why it was refused ("" unless refused)


@dataclass(frozen=True, slots=True)
class TransactionInfo(HasSnapshot):
    transaction_id: str
    status: TxStatus
    next_step_id: int
    constraints: list[str]
    global_resets: int
    context: list[ContextEntry]
    agent_id: str
    metadata: dict[str, str]
    isolation: Isolation
    policy: RollbackPolicy
    revision: int
    epoch: int
    requires_human: bool
    abort_reason: str
    compensation_errors: list[str]
    outcome_unknown_step: int  # 0 unless a step awaits reconciliation
    created_at: float
    updated_at: float
    steps: list[StepView] = field(default_factory=list)
    edges: list[tuple[int, int, str]] = field(default_factory=list)  # (from, to, key)
    labels: list[str] = field(default_factory=list)
    # Characters of stored text (arguments, outputs, reasoning) behind this view: what turning
    # it into a reply costs, so a reader can build a large one off the event loop.
    history_chars: int = 0
    # How it may commit (``agenttx.receipts.Mode`` value) and who began it ("" if unsaid).
    mode: str = "transactional"
    principal: str = ""
    # The revision counters (``docs/undo.md`` defines each): live steps, the cap, what is left
    # under it, and what the transaction allows right now. Computed from the row and its live
    # steps; a listing (no steps read) leaves can_undo false.
    revision_count: int = 0
    max_revisions: int = 0
    remaining_revisions: int = 0
    can_undo: bool = False
    can_redo: bool = False
    can_commit: bool = False
    can_rollback: bool = False
    # While outcome_unknown_step is set: "outcome_unknown" (waiting to be reconciled) or
    # "reconciling" (a reconcile holds a live lease on it); "" otherwise.
    reconcile_state: str = ""
    reconcile_after: float = 0.0  # unix s: the earliest reconcile time (0 if none pending)
    operation_provider: str = ""  # the pending step's checkpointed provider operation
    operation_id: str = ""
    # Compensation (``docs/compensation.md``): the committed transaction a compensating one
    # undoes ("" for any other), and true iff a rollback or compensation waits for an approver.
    compensation_for: str = ""
    compensation_approval_pending: bool = False
    tenant: str = ""  # its tenant (docs/security.md)
    # edge_kinds[i] is edges[i]'s kind: explicit, implicit or state (empty if not read)
    edge_kinds: list[str] = field(default_factory=list)
    # Its newest preview receipts (at most 20), newest first, with their approvals and
    # refusals; read by get_transaction only (a listing leaves it empty).
    receipts: list[ReceiptView] = field(default_factory=list)
    # Why a commit now would need an approved receipt (the mode, the policy file's approval
    # rules, as a preview says); empty iff it would not, or the transaction has ended.
    approval_reasons: list[str] = field(default_factory=list)
    # A bounded read (``get_transaction(recent=N)``): how many older attempts come before
    # ``steps[0]`` and were left out; its ``edges`` are not read (empty). 0: the whole history.
    earlier_steps_omitted: int = 0


class Ending(enum.StrEnum):
    """How a transaction ended, as a lookup reports it (``Engine.find_transaction``)."""

    OPEN = "open"  # not ended: ACTIVE, EXECUTING, ROLLING_BACK, COMMITTING or COMPENSATING
    COMMITTED = "committed"  # COMMITTED: its writes published, its effects released
    ROLLED_BACK = "rolled_back"  # ROLLED_BACK: aborted on request or by the idle reaper
    # FAILED: aborted by the rollback controller or a commit conflict, or a compensation that
    # left undo actions not run (``abort_reason``, ``compensation_errors`` say which)
    ABORTED = "aborted"
    COMPENSATED = "compensated"  # COMPENSATED: every undo action of the compensation ran

    @classmethod
    def of(cls, status: TxStatus) -> Ending:
        return _ENDINGS.get(status, cls.OPEN)


_ENDINGS = {
    TxStatus.COMMITTED: Ending.COMMITTED,
    TxStatus.ROLLED_BACK: Ending.ROLLED_BACK,
    TxStatus.FAILED: Ending.ABORTED,
    TxStatus.COMPENSATED: Ending.COMPENSATED,
}


@dataclass(frozen=True, slots=True)
class TerminalResult:
    """How a transaction ended, and when: ``ending`` ``open`` (and the rest empty) until it
    has. A terminal status never changes again."""

    ending: Ending
    ended_at: float = 0.0  # unix s; 0 while open
    reason: str = ""  # why it was rolled back or aborted ("" if committed or compensated)
    # The preview receipt its commit named ("" if it named none, or it was not committed).
    commit_receipt_id: str = ""


def check_lookup_key(receipt_id: str, request_id: str) -> None:
    """Refuse unless exactly one of ``find_transaction``'s two keys is given: the engine and
    the client (whose request holds one of them only) say it in the same words."""
    if bool(receipt_id) == bool(request_id):
        given = "both were given" if receipt_id else "neither was given"
        raise InvalidArgument(
            "give exactly one of receipt_id (a preview's receipt) and request_id (the "
            f"request_id a call was sent with); {given}"
        )


@dataclass(frozen=True, slots=True)
class FoundTransaction(HasSnapshot):
    """What ``find_transaction`` returns: the transaction a receipt id or a request id names,
    its state (for its steps, ``get_transaction(transaction_id)``), how it ended, and its
    receipts. Exactly one of ``receipt_id`` and ``request_id`` is set: the key it was found
    by."""

    transaction_id: str
    status: TxStatus
    revision: int
    next_step_id: int
    agent_id: str
    principal: str  # who began it ("" if unsaid)
    tenant: str
    labels: list[str]
    created_at: float
    updated_at: float
    compensation_for: str  # the committed transaction a compensating one undoes ("" if none)
    result: TerminalResult
    # Its newest receipts (at most 20) newest first, and after them the one ``receipt_id``
    # names if it is older; each with the status a view shows (``ReceiptView``).
    receipts: list[ReceiptView] = field(default_factory=list)
    receipt_id: str = ""  # the receipt it was found by
    request_id: str = ""  # the request it was found by
    # With ``request_id``: the call that id was sent with (begin, execute_step, commit,
    # rollback, undo_step, redo_step); the transaction is the one that call made or named.
    request_method: str = ""

    @property
    def abort_reason(self) -> str:
        """Why it was rolled back or aborted, as a listing names it (``result.reason``)."""
        return self.result.reason


@dataclass(frozen=True, slots=True)
class ReconcileResult(HasSnapshot):
    """What ``reconcile_step`` and ``resolve_step`` return: how the unknown outcome settled.

    ``outcome`` "happened": the step succeeded with ``output`` (its undo kept);
    "not_happened": it failed and ``next_step_id`` is it again (send it again or another);
    "unknown": still pending, reconcile again in ``retry_after_ms``."""

    transaction_id: str
    step_id: int
    outcome: str  # happened, not_happened, unknown
    next_step_id: int
    transaction_status: TxStatus
    revision: int
    retry_after_ms: int = 0  # unknown only
    output: Any = None  # happened only
    output_json: str = ""
    clean_hint: str = ""  # what to do next, one line
    operation_provider: str = ""
    operation_id: str = ""


@dataclass(frozen=True, slots=True)
class TransactionPage:
    transactions: list[TransactionInfo]
    next_page_token: str  # empty when this is the last page


# -- compensation contracts (``docs/compensation.md``) -----------------------------------------


@dataclass(frozen=True, slots=True)
class CompensationAction:
    """One step of a transaction as a compensation (or a rollback) would treat it."""

    step_id: int
    tool: str
    contract: (
        str  # the tool's compensation contract: supported, best_effort, rollback_not_supported
    )
    handler: str  # the undo handler that would run ("" when there is none)
    undo_id: int  # its undo record (0 when there is none)
    # run: the undo would run; awaiting_approval: it runs once an approver approves;
    # past_window: its compensation window ended, it is not run; not_supported: the tool's
    # contract is rollback_not_supported, nothing can undo it; refused: an approver refused
    # the undo it waited for (``refuse_compensation``), it is not run; done / failed: already
    # ran.
    verdict: str
    expires_at: float  # end of its compensation window (0: none)
    reason: str  # why it is not run, in words ("" when it runs)
    needs_approval: bool = False


@dataclass(frozen=True, slots=True)
class CompensationPlan:
    """What ``Engine.compensate`` would do to a committed transaction, newest step first: the
    actions it would run and, reported beside them, the steps it cannot undo."""

    transaction_id: str
    actions: list[CompensationAction]
    needs_approval: bool  # true iff an action's contract asks for an approver first

    @property
    def runnable(self) -> list[CompensationAction]:
        return [a for a in self.actions if a.verdict in ("run", "awaiting_approval")]

    @property
    def reported(self) -> list[CompensationAction]:
        """Steps the compensation cannot undo (past their window, not supported, refused)."""
        return [a for a in self.actions if a.verdict in ("past_window", "not_supported", "refused")]


@dataclass(frozen=True, slots=True)
class CompensationResult:
    """The compensating transaction ``Engine.compensate`` started, as it stands."""

    transaction_id: str  # the compensating transaction's own id
    compensation_for: str  # the committed transaction it compensates
    # running, awaiting_approval, compensated, or failed (an undo failed or a step could not
    # be undone; ``evidence`` says which and why)
    status: str
    reason: str
    actions: list[CompensationAction]
    evidence: list[dict[str, Any]]
    requires_human: bool
    revision: int


@dataclass(frozen=True, slots=True)
class EffectInfo:
    """One effect in the outbox, as ``list_effects`` and ``retry_effect`` show it."""

    effect_id: int
    transaction_id: str
    step_id: int
    channel: str  # email.send, webhook.post, or a user channel
    idempotency_key: str
    status: str  # pending, delivering, delivered, dead
    attempts: int  # delivery attempts so far (a retry of a dead effect starts again at 0)
    last_error: str  # the last failed attempt's error; "" if none failed
    created_at: float  # when the commit queued it (unix seconds)
    next_attempt_at: float  # when a pending effect is due; a dead one's last attempt
    delivered_at: float  # 0 unless delivered
    payload_json: str  # what was staged (the mail, the request), as JSON


@dataclass(frozen=True, slots=True)
class EffectPage:
    effects: list[EffectInfo]
    next_after_id: int  # pass as after_id for the next page; 0 when this was the last


# ---------------------------------------------------------------------------- callers
# Who makes a call: a server resolves an API key to a ``Caller`` (``agenttx.auth``) and hands it
# to the engine with every call, which scopes the call to the caller's tenant and, for the
# ``agent`` role, to the caller's own transactions (``agenttx.core.access``). Embedded use
# passes no caller. Tenant names become a directory name (the tenant's fs sandbox), so they
# are a short safe alphabet; principals are free text, bounded.

DEFAULT_TENANT = "default"
LOCAL_PRINCIPAL = "local"
MAX_PRINCIPAL_BYTES = 256

# A tenant name (fullmatch); the HTTP API's OpenAPI document states the same pattern.
TENANT_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}"
_TENANT = re.compile(TENANT_PATTERN)


class Role(enum.StrEnum):
    AGENT = "agent"  # begins transactions and acts on its own ones only
    APPROVER = "approver"  # reads every transaction of its tenant and approves commits there
    ADMIN = "admin"  # everything in its tenant, other principals' transactions included


@dataclass(frozen=True, slots=True)
class Caller:
    """The authenticated identity of one call. ``roles`` is never empty."""

    principal: str
    tenant: str
    roles: frozenset[Role]
    # True for the process's own user (``local_caller``: embedded use, ``agenttx mcp`` on
    # stdio): like the embedded API, a call may then name the principal and roles it acts as
    # (begin, approve), so one local session can play agent and approver. A key's caller never
    # does: it is always its key's principal with its key's roles.
    delegates: bool = False

    def has(self, role: Role) -> bool:
        return role in self.roles

    def acting_as(self, principal: str, roles: Sequence[str] = ()) -> tuple[str, list[str]]:
        """Who a call made by this caller acts as: the named principal and roles when it may
        delegate and names one, else its own."""
        if self.delegates and principal:
            return principal, list(roles)
        return self.principal, sorted(self.roles)

    def __repr__(self) -> str:  # never a secret in it: a key is resolved before this exists
        roles = ",".join(sorted(self.roles))
        return f"Caller({self.principal!r}@{self.tenant!r} [{roles}])"


def check_tenant(tenant: str) -> str:
    if not _TENANT.fullmatch(tenant):
        raise InvalidArgument(
            f"tenant {tenant[:80]!r} is not a tenant name: use 1..63 characters of letters, "
            "digits, '_', '.' and '-', starting with a letter or digit"
        )
    return tenant


def check_principal(principal: str) -> str:
    size = len(principal.encode("utf-8", "surrogatepass"))
    if not 0 < size <= MAX_PRINCIPAL_BYTES or any(ord(c) < 32 for c in principal):
        raise InvalidArgument(
            f"principal must be 1..{MAX_PRINCIPAL_BYTES} bytes of printable text, got {size} bytes"
        )
    return principal


def parse_roles(names: object) -> frozenset[Role]:
    """A list of role names → the roles; unknown names are refused, naming the allowed ones."""
    if not isinstance(names, list | tuple) or not names:
        raise InvalidArgument("roles must be a non-empty list of agent, approver, admin")
    roles: set[Role] = set()
    for name in names:
        try:
            roles.add(Role(name))
        except ValueError:
            allowed = ", ".join(r.value for r in Role)
            raise InvalidArgument(f"unknown role {str(name)[:40]!r}; use {allowed}") from None
    return frozenset(roles)


def local_caller(tenant: str = DEFAULT_TENANT, principal: str = LOCAL_PRINCIPAL) -> Caller:
    """The caller of embedded use and of ``agenttx mcp`` on stdio: the process's own user,
    admin of its tenant."""
    return Caller(check_principal(principal), check_tenant(tenant), frozenset(Role), delegates=True)


LOCAL_CALLER = local_caller()
