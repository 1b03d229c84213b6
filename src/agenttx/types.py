"""Plain value types shared by the engine, the stores and the adapters.

Enum values are the wire names of the reference protocol (``REFERENCE.md``); ``wire`` numbers
are the proto enum numbers, so adapters translate without tables of their own.
"""

from __future__ import annotations

import enum
import math
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

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset({TxStatus.COMMITTED, TxStatus.ROLLED_BACK, TxStatus.FAILED})


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


class Isolation(enum.StrEnum):
    SNAPSHOT = "snapshot"  # reads at the begin snapshot; first committer wins on write-write
    SERIALIZABLE = "serializable"  # snapshot + the read set is validated at commit
    READ_COMMITTED = "read_committed"  # reference behaviour: latest committed, write-write only


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
        if not 0 <= self.max_local_depth <= 16:
            raise InvalidArgument(
                f"policy.max_local_depth must be 0..16, got {self.max_local_depth}"
            )
        if not 0 <= self.max_global_resets <= 16:
            raise InvalidArgument(
                f"policy.max_global_resets must be 0..16, got {self.max_global_resets}"
            )
        f = self.replay_budget_factor
        if not (isinstance(f, int | float) and math.isfinite(f) and 0.1 <= f <= 1000):
            raise InvalidArgument(f"policy.replay_budget_factor must be 0.1..1000, got {f}")
        r = self.max_step_retries
        if r is not None and not (isinstance(r, int) and 0 <= r <= 32):
            raise InvalidArgument(f"policy.max_step_retries must be 0..32, got {r}")

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
class BeginResult:
    transaction_id: str
    next_step_id: int
    transaction_status: TxStatus = TxStatus.ACTIVE
    revision: int = 1


@dataclass(slots=True)
class StepResult:
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


@dataclass(frozen=True, slots=True)
class CommitResult:
    transaction_id: str
    committed: bool
    steps_committed: int
    effects_dispatched: int
    dispatch_errors: list[str]
    effects_queued: int = 0
    transaction_status: TxStatus = TxStatus.COMMITTED
    revision: int = 0


@dataclass(frozen=True, slots=True)
class RollbackResult:
    transaction_id: str
    rolled_back: bool
    next_step_id: int
    compensations_run: int
    compensation_errors: list[str]
    transaction_status: TxStatus = TxStatus.ACTIVE
    revision: int = 0


@dataclass(frozen=True, slots=True)
class ContextEntry:
    step_id: int
    tool_name: str
    raw_context: str


@dataclass(frozen=True, slots=True)
class StepView:
    """One attempt of a step as history shows it (live steps and undone ones)."""

    step_id: int
    attempt: int  # 1 for the first run of this step id, grows on each re-run
    tool_name: str
    status: str  # SUCCESS, FAILED, OUTCOME_UNKNOWN, RUNNING
    live: bool  # true iff the step is part of the transaction's current state
    arguments: Any
    output: Any
    clean_hint: str
    error_category: str
    epoch: int
    started_at: float
    finished_at: float
    reference_category: str = ""  # the reference's name for error_category, as in StepResult


@dataclass(frozen=True, slots=True)
class TransactionInfo:
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


@dataclass(frozen=True, slots=True)
class TransactionPage:
    transactions: list[TransactionInfo]
    next_page_token: str  # empty when this is the last page
