"""The composition root: settings → store, channels, tool registry, dispatcher → ``Engine``.

``open_engine`` is ``agenttx.Engine.open``: importing this module binds it to the class (and
``agenttx.Engine`` is loaded from here), so ``Engine.open(url, ...)`` keeps working while the
core builds nothing concrete — it imports contracts only (``agenttx/__init__.py``'s rule table,
``tests/test_core_layering.py``). This module picks the store backend by URL (through
``store.factory``), the effect channels and the outbound guard (``effects``), the built-in and
user tools (``tools``), and the settings every part reads (``EngineConfig``); the engine is
then recovered and its background loops started. Adapters (``server``, the CLI) call it too.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agenttx.audit import AuditKeys
from agenttx.core.config import Clock, EngineConfig
from agenttx.core.controller import RollbackController
from agenttx.core.engine import Engine
from agenttx.core.hints import HintCleaner
from agenttx.core.leases import LIVE_OWNERS, new_owner
from agenttx.core.limits import MAX_REFERENCES, MAX_RESOLVED_ARGUMENTS_BYTES
from agenttx.core.safety import SafetyPolicy, load_safety_policy
from agenttx.core.tool_policy import ALLOW_ALL, ToolPolicy
from agenttx.effects.channels import Channel, JsonlChannel
from agenttx.effects.dispatcher import OutboxDispatcher
from agenttx.effects.standard import outbound_guard, standard_channels
from agenttx.errors import AgentTxError, InvalidArgument, StartupError
from agenttx.renamed import renamed
from agenttx.store.contract import Store
from agenttx.store.factory import open_store
from agenttx.tools.builtin import BUILTIN_TOOLS, outbound_tools
from agenttx.tools.builtin.fs import RESTORE_HANDLER, restore_file
from agenttx.tools.contract import Tool
from agenttx.tools.registry import ToolRegistry, load_tools
from agenttx.types import RollbackPolicy

if TYPE_CHECKING:
    from agenttx.effects.smtp import SmtpSettings

__all__ = ["DEFAULT_URL", "Engine", "open_engine"]

log = logging.getLogger("agenttx.engine")

DEFAULT_URL = "sqlite:///agenttx-data/agenttx.db"


async def open_engine(
    url: str = DEFAULT_URL,
    *,
    fs_root: str | Path | None = None,
    outbox_path: str | Path | None = None,
    tools: Iterable[Tool] = (),
    tool_modules: Iterable[str] = (),
    channels: Mapping[str, Channel] | None = None,
    smtp: SmtpSettings | None = None,
    webhook_allow: Sequence[str] = (),
    webhook_secret: str | bytes | None = None,
    undo_handlers: Mapping[str, Callable[..., Any]] | None = None,
    policy: RollbackPolicy | None = None,
    sync_writes: bool = False,
    step_timeout_s: float = 30.0,
    tx_idle_timeout_s: float = 900.0,
    compensation_retries: int = 3,
    compensation_keep_s: float = 86_400.0,
    max_constraints: int = 32,
    max_resolved_arguments_bytes: int = MAX_RESOLVED_ARGUMENTS_BYTES,
    max_references: int = MAX_REFERENCES,
    hint_rule_files: Sequence[str | Path] = (),
    tenant: str = "default",
    clock: Clock = time.time,
    background: bool = True,
    audit_chain: bool = True,
    audit_keys: AuditKeys | None = None,
    dispatch_lease_s: float = 30.0,
    dispatch_max_attempts: int = 8,
    dispatch_backoff_s: float = 0.5,
    store: Store | None = None,
    safety_policy: SafetyPolicy | str | Path | None = None,
    receipt_ttl_s: float = 900.0,
    max_steps: int = 100_000,
    tool_policy: ToolPolicy = ALLOW_ALL,
    retention_days: float = 30.0,
    audit_retention_days: float = 365.0,
    dead_letter_retention_days: float = 90.0,
    redact_fields: Sequence[str] = (),
    **old_names: Any,
) -> Engine:
    """Open an engine. Relative paths default next to the SQLite file: ``files/`` for the
    fs sandbox and ``outbox.jsonl`` for effects on channels without a dispatcher.
    ``safety_policy``: a policy file's path (TOML, ``docs/safety.md``; a bad one raises
    ``StartupError`` before the store is opened) or a loaded ``SafetyPolicy``. A store
    that cannot be opened raises ``StartupError`` too: where, why, and what to do.

    ``email.send`` mails go over SMTP with ``smtp`` (else to the outbox file);
    ``webhook.post`` requests over HTTP, to targets the outbound guard allows
    (``webhook_allow``: ``HOST[:PORT]`` entries), signed with ``webhook_secret`` if given
    (docs/effects.md). ``channels`` replaces any of these by name.

    ``audit_keys`` (``agenttx.audit_keys.read_audit_keys`` reads a key file): every audit
    record is then keyed with its signing key, and chains are verified with its keys
    (docs/audit.md, "Keyed chains").

    ``tx_idle_timeout_secs`` and ``dispatch_lease_secs``, the old names of
    ``tx_idle_timeout_s`` and ``dispatch_lease_s``, still work, with a ``FutureWarning``
    (``agenttx.renamed``); any other unknown keyword is a ``TypeError``."""
    given = dict(old_names)
    for r in renamed("Engine.open"):
        if r.old in given:
            warnings.warn(
                f"Engine.open({r.old}=...) is deprecated; use {r.new}=... instead",
                FutureWarning,
                stacklevel=2,
            )
            value = r.converted(given.pop(r.old))
            if r.new == "tx_idle_timeout_s":
                tx_idle_timeout_s = value
            else:
                dispatch_lease_s = value
    if given:
        raise TypeError(f"Engine.open() got an unexpected keyword argument {next(iter(given))!r}")
    if safety_policy is not None and not isinstance(safety_policy, SafetyPolicy):
        safety_policy = load_safety_policy(safety_policy)

    try:
        guard = outbound_guard(webhook_allow)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None
    # Backends are reached only through the factory, which imports them lazily. A store
    # that cannot be opened (a URL no backend takes, a server that refuses, a file that
    # cannot be written, a newer schema) stops the start, in the store's own words.
    try:
        store = store or open_store(url, sync_writes=sync_writes)
        await store.open()
    except AgentTxError as exc:
        raise StartupError(exc.message) from exc
    base = Path(url.removeprefix("sqlite:///")).parent if url.startswith("sqlite") else Path()
    registry = ToolRegistry((*BUILTIN_TOOLS, *outbound_tools(guard)))
    registry.register_undo(RESTORE_HANDLER, restore_file)
    for t in tools:
        registry.register(t)
    for spec in tool_modules:
        for t in load_tools(spec):
            registry.register(t)
    for name, handler in (undo_handlers or {}).items():
        registry.register_undo(name, handler)
    config = EngineConfig(
        fs_root=Path(fs_root) if fs_root is not None else base / "files",
        step_timeout_s=step_timeout_s,
        tx_idle_timeout_s=tx_idle_timeout_s,
        compensation_retries=compensation_retries,
        compensation_keep_s=compensation_keep_s,
        max_constraints=max_constraints,
        max_resolved_arguments_bytes=max_resolved_arguments_bytes,
        max_references=max_references,
        default_policy=policy or RollbackPolicy(),
        tenant=tenant,
        owner=new_owner(),
        audit_chain=audit_chain,
        audit_keys=audit_keys,
        receipt_ttl_s=receipt_ttl_s,
        max_steps=max_steps,
        retention_days=retention_days,
        audit_retention_days=audit_retention_days,
        dead_letter_retention_days=dead_letter_retention_days,
        redact_fields=tuple(redact_fields),
    )
    outbox = Path(outbox_path) if outbox_path is not None else base / "outbox.jsonl"
    dispatcher = OutboxDispatcher(
        store,
        {
            **standard_channels(guard, smtp=smtp, webhook_secret=webhook_secret, clock=clock),
            **(channels or {}),
        },
        default=JsonlChannel(outbox),
        clock=clock,
        lease_secs=dispatch_lease_s,
        max_attempts=dispatch_max_attempts,
        backoff_base_s=dispatch_backoff_s,
        audit_key=config.audit_key,
    )
    engine = Engine(
        store,
        registry,
        config,
        dispatcher,
        cleaner=HintCleaner(hint_rule_files),
        controller=RollbackController(),
        clock=clock,
        safety=safety_policy,
        tool_policy=tool_policy,
    )
    LIVE_OWNERS.add(config.owner)
    if not store.shared and store.opened_alone:
        # This process alone serves the store: effects a dead predecessor had claimed
        # (mid-delivery, or committed and not yet sent) go out now, not after the lease.
        await store.release_claims(now=clock())
    elif not store.shared:
        # Another live process has the file open (a second server, several MCP
        # processes): its claims are its own; calls coordinate per transaction.
        log.info("another process has %s open; sharing it", store.url)
    await engine.recover()
    if background:
        engine.start_background()
    return engine


# The public entry: ``await agenttx.Engine.open(url, ...)``. A staticmethod, so the class and an
# instance both call the function itself (the engine it returns is always an ``Engine``).
Engine.open = staticmethod(open_engine)
