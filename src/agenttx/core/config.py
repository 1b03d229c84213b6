"""The engine's settings, validated once when the engine is built.

``EngineConfig`` is ``agenttx.settings.Settings`` — every tunable with its default, range and
unit, checked when it is built — plus what the composition root (``agenttx.app``) resolved:
the fs root, the default policy, this process's owner id, the audit keys (the settings only the
server reads ride along unread). Every part reads the
same frozen one; nothing changes it after construction, so a value a part read once holds for
the engine's life.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from agenttx.audit import AuditKey, AuditKeys
from agenttx.core.masking import Redactor
from agenttx.settings import Settings
from agenttx.types import RollbackPolicy

# Wall-clock seconds; tests pass a fake one so leases, the reaper and timestamps move on demand.
Clock = Callable[[], float]


@dataclass(frozen=True, kw_only=True)
class EngineConfig(Settings):
    fs_root: Path  # resolved: the settings' fs_root, or ``files/`` beside the SQLite file
    default_policy: RollbackPolicy = field(default_factory=RollbackPolicy)
    owner: str = ""  # this process, for step leases: "host:pid:random" (``leases.py``)
    # The audit keys (``--audit-key FILE``): None, or records are keyed with the ring's
    # signing key and verified with any of its keys by id (``docs/audit.md``, keyed chains).
    audit_keys: AuditKeys | None = None
    compensation_backoff_s: float = 0.010  # 10 ms · 2^try, as the reference
    lock_timeout_s: float = 60.0  # how long a call waits for a transaction busy elsewhere

    @property
    def signing_key(self) -> AuditKey | None:
        """The key new records are keyed with (of ``audit_keys``, not the settings'
        ``audit_key`` file); None: they are plain SHA-256."""
        return self.audit_keys.signer if self.audit_keys is not None else None

    def files_for(self, tenant: str) -> Path:
        """The fs sandbox of ``tenant``: ``fs_root`` for the engine's own tenant, a directory of
        its own beside it (``<fs_root>.tenants/<tenant>``) for any other, so no tenant's
        sandbox holds another's (tenant names are a safe alphabet: ``agenttx.types``)."""
        if tenant == self.tenant:
            return self.fs_root
        return self.fs_root.with_name(self.fs_root.name + ".tenants") / tenant

    def __post_init__(self) -> None:
        super().__post_init__()
        Redactor(self.redact_fields)  # a bad --redact-field pattern is refused here, named
