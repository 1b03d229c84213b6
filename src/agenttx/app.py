"""The composition root: settings → store, channels, tool registry, dispatcher → ``Engine``.

``open_engine`` is ``agenttx.Engine.open``: importing this module binds it to the class (and
``agenttx.Engine`` is loaded from here), so ``Engine.open(url, ...)`` keeps working while the
core builds nothing concrete — it imports contracts only (``agenttx/__init__.py``'s rule table,
``tests/repo/test_core_layering.py``). This module picks the store backend by URL (through
``store.factory``), the effect channels and the outbound guard (``effects``), the built-in and
user tools (``tools``), and the settings every part reads (``EngineConfig``: the
``agenttx.settings.Settings`` it was given, plus what is resolved here); the engine is
then recovered and its background loops started. Adapters (``server``, the CLI) call it too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agenttx.audit import AuditKeys
from agenttx.core.config import Clock, EngineConfig
from agenttx.core.controller import RollbackController
from agenttx.core.engine import Engine
from agenttx.core.hints import HintCleaner
from agenttx.core.leases import LIVE_OWNERS, new_owner
from agenttx.core.safety import SafetyPolicy, load_safety_policy
from agenttx.core.tool_policy import ALLOW_ALL, ToolPolicy
from agenttx.effects.channels import Channel, JsonlChannel
from agenttx.effects.dispatcher import OutboxDispatcher
from agenttx.effects.standard import outbound_guard, standard_channels
from agenttx.errors import AgentTxError, InvalidArgument, StartupError
from agenttx.settings import Settings
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
    settings: Settings | None = None,
    *,
    tools: Iterable[Tool] = (),
    tool_modules: Iterable[str] = (),
    channels: Mapping[str, Channel] | None = None,
    smtp: SmtpSettings | None = None,
    webhook_secret: str | bytes | None = None,
    undo_handlers: Mapping[str, Callable[..., Any]] | None = None,
    policy: RollbackPolicy | None = None,
    clock: Clock = time.time,
    background: bool = True,
    audit_keys: AuditKeys | None = None,
    store: Store | None = None,
    safety_policy: SafetyPolicy | str | Path | None = None,
    tool_policy: ToolPolicy = ALLOW_ALL,
    **overrides: Any,
) -> Engine:
    """Open an engine on ``url`` with ``settings`` (``agenttx.settings.Settings``: every
    tunable, its default, range and unit), each of ``overrides`` replacing one of them by name
    (``Engine.open(url, max_steps=500)``); an unknown name is a ``TypeError`` naming the
    closest ones, an old one (``agenttx.renamed``) still works with a ``FutureWarning``.

    The keyword-only arguments are the parts no setting can say: tool objects, channels,
    a fake ``clock`` … Relative paths default next to the SQLite file: ``files/`` for the
    fs sandbox and ``outbox.jsonl`` for effects on channels without a dispatcher.
    ``safety_policy``: a policy file's path (TOML, ``docs/safety.md``; a bad one raises
    ``StartupError`` before the store is opened) or a loaded ``SafetyPolicy``; without it the
    settings' file, if any. A store that cannot be opened raises ``StartupError`` too: where,
    why, and what to do.

    ``email.send`` mails go over SMTP with ``smtp`` (else to the outbox file);
    ``webhook.post`` requests over HTTP, to targets the outbound guard allows
    (the ``webhook_allow`` setting: ``HOST[:PORT]`` entries), signed with ``webhook_secret``
    if given (docs/effects.md). ``channels`` replaces any of these by name.

    ``audit_keys`` (``agenttx.audit_keys.read_audit_keys`` reads a key file): every audit
    record is then keyed with its signing key, and chains are verified with its keys
    (docs/audit.md, "Keyed chains")."""
    settings = Settings.of(overrides, "Engine.open", settings)
    if safety_policy is None:
        safety_policy = settings.safety_policy
    if safety_policy is not None and not isinstance(safety_policy, SafetyPolicy):
        safety_policy = load_safety_policy(safety_policy)

    try:
        guard = outbound_guard(settings.webhook_allow)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None
    # Backends are reached only through the factory, which imports them lazily. A store
    # that cannot be opened (a URL no backend takes, a server that refuses, a file that
    # cannot be written, a newer schema) stops the start, in the store's own words.
    try:
        store = store or open_store(url, sync_writes=settings.sync_writes)
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
    fs_root = settings.fs_root if settings.fs_root is not None else base / "files"
    config = EngineConfig(
        **{**settings.values(), "fs_root": fs_root},
        default_policy=policy or settings.policy,
        owner=new_owner(),
        audit_keys=audit_keys,
    )
    outbox = settings.outbox_path if settings.outbox_path is not None else base / "outbox.jsonl"
    dispatcher = OutboxDispatcher(
        store,
        {
            **standard_channels(guard, smtp=smtp, webhook_secret=webhook_secret, clock=clock),
            **(channels or {}),
        },
        default=JsonlChannel(outbox),
        clock=clock,
        lease_secs=settings.dispatch_lease_s,
        max_attempts=settings.dispatch_max_attempts,
        backoff_base_s=settings.dispatch_backoff_s,
        audit_key=config.signing_key,
    )
    engine = Engine(
        store,
        registry,
        config,
        dispatcher,
        cleaner=HintCleaner(settings.hint_rules),
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
