"""The engine's settings, validated once when the engine is built.

Every part reads the same frozen ``EngineConfig``; nothing changes it after construction, so a
value a part read once holds for the engine's life.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from agenttx.core.limits import MAX_REFERENCES, MAX_RESOLVED_ARGUMENTS_BYTES
from agenttx.errors import InvalidArgument
from agenttx.tools.contract import DEFAULT_TIMEOUT_S
from agenttx.types import RollbackPolicy

# Wall-clock seconds; tests pass a fake one so leases, the reaper and timestamps move on demand.
Clock = Callable[[], float]


@dataclass(frozen=True)
class EngineConfig:
    fs_root: Path
    step_timeout_s: float = DEFAULT_TIMEOUT_S
    tx_idle_timeout_secs: float = 900.0  # 0 turns the idle reaper off
    compensation_retries: int = 3
    compensation_backoff_s: float = 0.010  # 10 ms · 2^try, as the reference
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

    def __post_init__(self) -> None:
        if not 0 < self.step_timeout_s <= 86_400:
            raise InvalidArgument("step timeout must be in (0, 86400] seconds")
        if self.tx_idle_timeout_secs < 0:
            raise InvalidArgument("tx_idle_timeout_secs must be >= 0 (0 turns the reaper off)")
        if not 0 <= self.compensation_retries <= 100:
            raise InvalidArgument("compensation_retries must be 0..100")
        if not 1 <= self.max_constraints <= 4096:
            raise InvalidArgument("max_constraints must be 1..4096")
        if not 1024 <= self.max_resolved_arguments_bytes <= 1 << 30:
            raise InvalidArgument("max_resolved_arguments_bytes must be 1024..1073741824")
        if not 1 <= self.max_references <= 1_000_000:
            raise InvalidArgument("max_references must be 1..1000000")
