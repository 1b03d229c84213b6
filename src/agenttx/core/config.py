"""The engine's settings, validated once when the engine is built.

Every part reads the same frozen ``EngineConfig``; nothing changes it after construction, so a
value a part read once holds for the engine's life.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from agenttx.audit import AuditKey, AuditKeys
from agenttx.core.limits import MAX_REFERENCES, MAX_RESOLVED_ARGUMENTS_BYTES
from agenttx.core.masking import Redactor
from agenttx.errors import InvalidArgument
from agenttx.tools.contract import DEFAULT_TIMEOUT_S
from agenttx.types import RollbackPolicy

# Wall-clock seconds; tests pass a fake one so leases, the reaper and timestamps move on demand.
Clock = Callable[[], float]


@dataclass(frozen=True)
class EngineConfig:
    fs_root: Path
    step_timeout_s: float = DEFAULT_TIMEOUT_S
    tx_idle_timeout_s: float = 900.0  # 0 turns the idle reaper off
    compensation_retries: int = 3
    compensation_backoff_s: float = 0.010  # 10 ms · 2^try, as the reference
    # How long a commit keeps the undo record of a supported/best_effort step whose tool
    # declares no compensation window, for ``Engine.compensate`` (``docs/compensation.md``).
    compensation_keep_s: float = 86_400.0
    max_constraints: int = 32
    default_policy: RollbackPolicy = field(default_factory=RollbackPolicy)
    tenant: str = "default"
    owner: str = ""  # this process, for step leases: "host:pid:random" (``leases.py``)
    lock_timeout_s: float = 60.0  # how long a call waits for a transaction busy elsewhere
    # A step's arguments once its references are resolved: UTF-8 bytes of their JSON, and how
    # many references they may hold (``refs.ResolveLimits``; enforced while resolving).
    max_resolved_arguments_bytes: int = MAX_RESOLVED_ARGUMENTS_BYTES
    max_references: int = MAX_REFERENCES
    # True iff every event is appended to its transaction's audit chain (``docs/audit.md``);
    # off only to measure what the chain costs (``benchmarks/audit.py``).
    audit_chain: bool = True
    # The audit keys (``--audit-key FILE``): None, or records are keyed with the ring's
    # signing key and verified with any of its keys by id (``docs/audit.md``, keyed chains).
    audit_keys: AuditKeys | None = None
    # How long a preview's receipt can be approved and committed with (``docs/safety.md``).
    receipt_ttl_s: float = 900.0
    # The most live steps one transaction may hold (``--max-steps``): step n > max_steps is
    # refused with ``StepLimitReached``; GetTransaction's ``max_revisions``.
    max_steps: int = 100_000
    # Days ended transactions, delivered effects and stored replies are kept, and days an
    # audit chain is kept after its newest record (``core.retention``); 0 keeps forever.
    retention_days: float = 30.0
    audit_retention_days: float = 365.0
    # Days a dead letter (a dead outbox row) is kept after its last attempt, once its
    # transaction has ended; 0 keeps them forever, and so does ``retention_days = 0``.
    dead_letter_retention_days: float = 90.0
    # Extra field-name regexes whose values are masked like ``password`` (``core.masking``).
    redact_fields: tuple[str, ...] = ()

    @property
    def audit_key(self) -> AuditKey | None:
        """The key new records are keyed with; None: they are plain SHA-256."""
        return self.audit_keys.signer if self.audit_keys is not None else None

    def files_for(self, tenant: str) -> Path:
        """The fs sandbox of ``tenant``: ``fs_root`` for the engine's own tenant, a directory of
        its own beside it (``<fs_root>.tenants/<tenant>``) for any other, so no tenant's
        sandbox holds another's (tenant names are a safe alphabet: ``agenttx.types``)."""
        if tenant == self.tenant:
            return self.fs_root
        return self.fs_root.with_name(self.fs_root.name + ".tenants") / tenant

    def __post_init__(self) -> None:
        if not 0 < self.step_timeout_s <= 86_400:
            raise InvalidArgument("step timeout must be in (0, 86400] seconds")
        if self.tx_idle_timeout_s < 0:
            raise InvalidArgument("tx_idle_timeout_s must be >= 0 (0 turns the reaper off)")
        if not 0 <= self.compensation_retries <= 100:
            raise InvalidArgument("compensation_retries must be 0..100")
        if not 0 <= self.compensation_keep_s <= 366 * 86_400:
            raise InvalidArgument("compensation_keep_s must be 0..31622400 seconds (a year)")
        if not 1 <= self.max_constraints <= 4096:
            raise InvalidArgument("max_constraints must be 1..4096")
        if not 1024 <= self.max_resolved_arguments_bytes <= 1 << 30:
            raise InvalidArgument("max_resolved_arguments_bytes must be 1024..1073741824")
        if not 1 <= self.max_references <= 1_000_000:
            raise InvalidArgument("max_references must be 1..1000000")
        if not 1 <= self.receipt_ttl_s <= 7 * 86_400:
            raise InvalidArgument("receipt_ttl_s must be 1..604800 seconds")
        if not 1 <= self.max_steps <= 1_000_000:
            raise InvalidArgument("max_steps must be 1..1000000")
        Redactor(self.redact_fields)  # a bad --redact-field pattern is refused here, named
        if not all(
            0 <= days <= 36_500
            for days in (
                self.retention_days,
                self.audit_retention_days,
                self.dead_letter_retention_days,
            )
        ):
            raise InvalidArgument("retention days must be 0..36500 (0 keeps forever)")
        if self.retention_days and 0 < self.audit_retention_days < self.retention_days:
            raise InvalidArgument(
                f"audit_retention_days (--audit-retention-days, {self.audit_retention_days:g}) "
                f"must be at least retention_days (--retention-days, {self.retention_days:g}): "
                "an audit chain outlives its transaction"
            )
