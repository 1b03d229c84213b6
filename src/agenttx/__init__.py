"""AgentTx: transactional tool calls for AI agents.

Users import from ``agenttx`` only; every other module is private. ``import agenttx`` loads
the bottom layer and nothing else: ``agenttx.errors`` and ``agenttx.types``, which need only the
standard library. Every other public name is imported the first time it is used (the module
``__getattr__`` below), so ``import agenttx.client`` — or ``from agenttx import AgentTxClient``
— never loads the engine, a store or a database driver.

Layers (imports only point down this list):

1. ``errors``, ``error_details``,       the error tree and its details on the wire, plain values,
   ``types``, ``jsontext``,              JSON text and the JSON acceptance policy, the
   ``jsonpolicy``, ``audit``,            audit chain and its key file, preview and approval
   ``audit_keys``,                       values, the
   ``receipts``, ``outbound``,           outbound guard (webhook targets), size-bounded file
   ``files``, ``numbers``, ``plural``,   reads, bounded whole numbers, a count and its noun,
   ``fieldcopy``, ``renamed``,           a value copied into a type of like-named fields,
   ``redaction``,                        the old names of renamed settings, the secrets
   ``logs``, ``service``,                masked in free text, log set-up (whose lines go
   ``settings``                          through that redaction), the ``TransactionService``
                                         contract the engine and the client both satisfy,
                                         every setting with its default, range and unit
                                         (``Settings``); import nothing else
2. ``wire``                              generated protobuf code (server and client share it)
3. ``tools``, ``store.contract``         the ``Tool`` and ``Store`` contracts, built-in tools;
   ``effects``                           the outbox dispatcher and its channels
4. ``store.factory``, ``store.*``        backends chosen by URL, imported lazily by the factory
5. ``core`` (``Engine``)                 the engine, composed of parts (map in ``core``); imports
                                         contracts only: no store backend or factory, no
                                         channel or dispatcher, no driver or adapter
6. ``app``                               the composition root: settings → store (by URL,
                                         through ``store.factory``), channels, tools,
                                         dispatcher → ``Engine``; ``Engine.open`` is its
                                         ``open_engine``, bound to the class when it loads
7. ``auth``                             API keys, TLS files, the loopback rule: for adapters
   ``api``, ``server``, ``cli``          adapters (gRPC, metrics, access log) over ``Engine``;
   ``gateway``                           downstream MCP servers' tools as AgentTx tools
   ``client``                            speaks the wire protocol only: ``wire``, ``types``,
                                         ``errors``, ``audit``, ``receipts``, ``plural``,
                                         ``fieldcopy``
8. ``integrations``                      agent frameworks' tool calls as steps: a neutral
                                         core and ``integrations.<framework>``, each an
                                         extra; over the service contract, the tool
                                         contract and the client's helpers, never the engine

The import rule, by package prefix (a prefix covers that module and every module under it).
``tests/repo/test_layering.py`` reads the table between the two ``--`` lines and checks it against
every module's imports — statically (module- and function-level, not ``TYPE_CHECKING`` blocks)
and by importing each package in a fresh interpreter. ``imports only`` limits a package's
imports from AgentTx; ``never imports`` forbids any module, ours or not. The adapters sit
side by side: gRPC (``api.grpc``), HTTP (``api.http``: ``/v1`` and the listener) and MCP
(``api.mcp``) never import each other, and the operation table they derive from
(``api.operations``) imports none of them.

    -- import rule --
    agenttx.errors    imports only   agenttx.errors agenttx.types
    agenttx.error_details  imports only   agenttx.errors agenttx.error_details
    agenttx.types     imports only   agenttx.errors agenttx.types
    agenttx.jsontext  imports only   agenttx.jsontext
    agenttx.files     imports only   agenttx.files
    agenttx.numbers   imports only   agenttx.errors agenttx.numbers
    agenttx.plural    imports only   agenttx.plural
    agenttx.fieldcopy  imports only   agenttx.fieldcopy
    agenttx.jsonpolicy  imports only   agenttx.jsonpolicy
    agenttx.audit     imports only   agenttx.audit agenttx.plural
    agenttx.audit_keys  imports only   agenttx.errors agenttx.audit agenttx.audit_keys
                                       agenttx.plural agenttx.files
    agenttx.receipts  imports only   agenttx.errors agenttx.types agenttx.receipts
    agenttx.service   imports only   agenttx.errors agenttx.types agenttx.receipts agenttx.audit
                                     agenttx.plural agenttx.service
    agenttx.outbound  imports only   agenttx.errors agenttx.outbound
    agenttx.renamed   imports only   agenttx.renamed
    agenttx.redaction  imports only   agenttx.redaction
    agenttx.logs      imports only   agenttx.logs agenttx.redaction
    agenttx.settings  imports only   agenttx.errors agenttx.types agenttx.numbers agenttx.logs
                                     agenttx.redaction agenttx.renamed agenttx.settings
    agenttx.wire      imports only   agenttx.wire
    agenttx.tools     never imports  agenttx.core agenttx.store agenttx.effects agenttx.app
                                     agenttx.api agenttx.server agenttx.cli agenttx.client
                                     agenttx.integrations
    agenttx.store     never imports  agenttx.core agenttx.app agenttx.api agenttx.server
                                     agenttx.cli agenttx.client agenttx.integrations
    agenttx.core      never imports  agenttx.app agenttx.effects
                                     agenttx.store.sql agenttx.store.sql_store agenttx.store.sqlite
                                     agenttx.store.sqlite_writer agenttx.store.postgres
                                     agenttx.store.postgres_target agenttx.api
                                     agenttx.server agenttx.cli agenttx.client psycopg
                                     psycopg_pool sqlite3 agenttx.integrations
    agenttx.auth      never imports  agenttx.core agenttx.app agenttx.store agenttx.tools
                                     agenttx.effects
                                     agenttx.api agenttx.server agenttx.cli agenttx.client
    agenttx.gateway   never imports  agenttx.core agenttx.app agenttx.store.sql
                                     agenttx.store.sql_store
                                     agenttx.store.sqlite agenttx.store.postgres agenttx.api
                                     agenttx.server agenttx.cli agenttx.client psycopg sqlite3
    agenttx.api       never imports  agenttx.integrations
    agenttx.api.operations  never imports  agenttx.api.grpc agenttx.api.http agenttx.api.mcp
                                     agenttx.api.dashboard agenttx.cli grpc starlette mcp
                                     mcp_types click
    agenttx.api.grpc  never imports  agenttx.api.http agenttx.api.mcp
    agenttx.api.http  never imports  agenttx.api.grpc agenttx.api.mcp
    agenttx.api.mcp   never imports  agenttx.api.grpc agenttx.api.http
    agenttx.client    never imports  agenttx.core agenttx.app agenttx.store agenttx.tools
                                     agenttx.effects
                                     agenttx.api agenttx.server agenttx.cli
                                     psycopg psycopg_pool sqlite3 agenttx.integrations
    agenttx.integrations  never imports  agenttx.core agenttx.app agenttx.store agenttx.effects
                                     agenttx.api agenttx.server agenttx.cli agenttx.gateway
                                     psycopg psycopg_pool sqlite3
    --
"""

from __future__ import annotations

import importlib
import inspect
import typing
from typing import TYPE_CHECKING, Any

from agenttx.errors import (
    Aborted,
    AgentTxError,
    AlreadyExists,
    ApprovalRefused,
    ApprovalRequired,
    CommitConflict,
    CompensationApprovalRefused,
    CompensationRefused,
    DeadlineExceeded,
    FailedPrecondition,
    FatalToolError,
    InternalError,
    InvalidArgument,
    NoReconcileHandler,
    NotActive,
    NotFound,
    OperationIdConflict,
    OutboundRefused,
    OutcomeUnknownPending,
    PermissionDenied,
    PlanRequired,
    PolicyViolation,
    ReceiptRefused,
    ReconcileInProgress,
    ReconcileNotDue,
    RedoRefused,
    RevisionConflict,
    SnapshotMismatch,
    StepFailure,
    StepLimitReached,
    StoreFull,
    TooManySubscribers,
    Unauthenticated,
    UncertainOutcome,
    UndoRefused,
    WrongStep,
)
from agenttx.types import (
    BeginResult,
    Caller,
    CommitResult,
    CompensationAction,
    CompensationPlan,
    CompensationResult,
    ContextEntry,
    DryRunReport,
    EffectClass,
    EffectInfo,
    EffectPage,
    Ending,
    Fidelity,
    FoundTransaction,
    Isolation,
    ReconcileResult,
    Role,
    RollbackPolicy,
    RollbackResult,
    Snapshot,
    StepResult,
    StepStatus,
    StepView,
    Strategy,
    TerminalResult,
    TransactionInfo,
    TxStatus,
    UndoResult,
)

if TYPE_CHECKING:  # what __getattr__ loads on first use, spelled out for type checkers
    from agenttx.app import Engine
    from agenttx.audit import AuditKey, AuditKeys, AuditKind, AuditRecord, AuditVerification
    from agenttx.audit_keys import read_audit_keys
    from agenttx.client import (
        AgentTurn,
        AgentTxClient,
        AsyncAgentTxClient,
        OutcomeUnknown,
        RetryPolicy,
        RollbackTriggered,
        ServerUnavailable,
        StepCall,
        StepError,
        StepsNotRedone,
        TransactionAborted,
    )
    from agenttx.core.controller import RollbackController
    from agenttx.core.hints import Hint, HintCleaner, clean_hint
    from agenttx.core.safety import SafetyPolicy
    from agenttx.effects.channels import Channel, Effect, JsonlChannel, PermanentDeliveryError
    from agenttx.effects.smtp import SmtpSettings
    from agenttx.receipts import Approval, ChangeSet, Mode, Preview, Refusal
    from agenttx.service import TransactionService
    from agenttx.settings import Settings
    from agenttx.tools.context import SyncToolContext, ToolContext
    from agenttx.tools.contract import Tool, tool
    from agenttx.tools.reconcile import ReconcileContext, Reconciled

__version__ = "0.1.0"

# Public name -> the module that defines it, imported on first use. Keep in step with the
# TYPE_CHECKING block above (tests/repo/test_layering.py checks both name the same things).
_LAZY: dict[str, str] = {
    "AgentTurn": "agenttx.client",
    "AgentTxClient": "agenttx.client",
    "AsyncAgentTxClient": "agenttx.client",
    "AuditKey": "agenttx.audit",
    "AuditKeys": "agenttx.audit",
    "AuditKind": "agenttx.audit",
    "AuditRecord": "agenttx.audit",
    "AuditVerification": "agenttx.audit",
    "OutcomeUnknown": "agenttx.client",
    "RetryPolicy": "agenttx.client",
    "RollbackTriggered": "agenttx.client",
    "ServerUnavailable": "agenttx.client",
    "StepCall": "agenttx.client",
    "StepError": "agenttx.client",
    "StepsNotRedone": "agenttx.client",
    "TransactionAborted": "agenttx.client",
    "RollbackController": "agenttx.core.controller",
    "Hint": "agenttx.core.hints",
    "HintCleaner": "agenttx.core.hints",
    "clean_hint": "agenttx.core.hints",
    "Channel": "agenttx.effects.channels",
    "Effect": "agenttx.effects.channels",
    "JsonlChannel": "agenttx.effects.channels",
    "PermanentDeliveryError": "agenttx.effects.channels",
    "SmtpSettings": "agenttx.effects.smtp",
    "Engine": "agenttx.app",  # the class is core's; agenttx.app binds Engine.open to it
    "SafetyPolicy": "agenttx.core.safety",
    "Approval": "agenttx.receipts",
    "ChangeSet": "agenttx.receipts",
    "Mode": "agenttx.receipts",
    "Preview": "agenttx.receipts",
    "Refusal": "agenttx.receipts",
    "TransactionService": "agenttx.service",
    "Settings": "agenttx.settings",
    "SyncToolContext": "agenttx.tools.context",
    "ToolContext": "agenttx.tools.context",
    "Tool": "agenttx.tools.contract",
    "tool": "agenttx.tools.contract",
    "ReconcileContext": "agenttx.tools.reconcile",
    "Reconciled": "agenttx.tools.reconcile",
    "read_audit_keys": "agenttx.audit_keys",
}

__all__ = [
    "Aborted",
    "AgentTurn",
    "AgentTxClient",
    "AgentTxError",
    "AlreadyExists",
    "Approval",
    "ApprovalRefused",
    "ApprovalRequired",
    "AsyncAgentTxClient",
    "AuditKey",
    "AuditKeys",
    "AuditKind",
    "AuditRecord",
    "AuditVerification",
    "BeginResult",
    "Caller",
    "ChangeSet",
    "Channel",
    "CommitConflict",
    "CommitResult",
    "CompensationAction",
    "CompensationApprovalRefused",
    "CompensationPlan",
    "CompensationRefused",
    "CompensationResult",
    "ContextEntry",
    "DeadlineExceeded",
    "DryRunReport",
    "Effect",
    "EffectClass",
    "EffectInfo",
    "EffectPage",
    "Ending",
    "Engine",
    "FailedPrecondition",
    "FatalToolError",
    "Fidelity",
    "FoundTransaction",
    "Hint",
    "HintCleaner",
    "InternalError",
    "InvalidArgument",
    "Isolation",
    "JsonlChannel",
    "Mode",
    "NoReconcileHandler",
    "NotActive",
    "NotFound",
    "OperationIdConflict",
    "OutboundRefused",
    "OutcomeUnknown",
    "OutcomeUnknownPending",
    "PermanentDeliveryError",
    "PermissionDenied",
    "PlanRequired",
    "PolicyViolation",
    "Preview",
    "ReceiptRefused",
    "ReconcileContext",
    "ReconcileInProgress",
    "ReconcileNotDue",
    "ReconcileResult",
    "Reconciled",
    "RedoRefused",
    "Refusal",
    "RetryPolicy",
    "RevisionConflict",
    "Role",
    "RollbackController",
    "RollbackPolicy",
    "RollbackResult",
    "RollbackTriggered",
    "SafetyPolicy",
    "ServerUnavailable",
    "Settings",
    "SmtpSettings",
    "Snapshot",
    "SnapshotMismatch",
    "StepCall",
    "StepError",
    "StepFailure",
    "StepLimitReached",
    "StepResult",
    "StepStatus",
    "StepView",
    "StepsNotRedone",
    "StoreFull",
    "Strategy",
    "SyncToolContext",
    "TerminalResult",
    "TooManySubscribers",
    "Tool",
    "ToolContext",
    "TransactionAborted",
    "TransactionInfo",
    "TransactionService",
    "TxStatus",
    "Unauthenticated",
    "UncertainOutcome",
    "UndoRefused",
    "UndoResult",
    "WrongStep",
    "__version__",
    "clean_hint",
    "read_audit_keys",
    "tool",
]


def _publish(value: Any) -> None:
    """Show an exported class or function as ``agenttx.X`` (reprs, tracebacks, docs), as httpx
    does. A class annotated in a ``from __future__ import annotations`` module keeps strings that
    ``typing.get_type_hints`` and pydantic resolve in the namespace of ``__module__``, so they
    are resolved in the defining module first; one that cannot be resolved keeps its module."""
    if not (isinstance(value, type) or callable(value)) or value.__module__ == __name__:
        return
    if isinstance(value, type):
        own = inspect.get_annotations(value)  # this class's own, as written
        if any(isinstance(hint, str) for hint in own.values()):
            try:
                resolved = typing.get_type_hints(value, include_extras=True)
            except Exception:  # an annotation only a type checker can see
                return
            value.__annotations__ = {name: resolved[name] for name in own}
    value.__module__ = __name__


if not TYPE_CHECKING:  # hidden from type checkers, so `agenttx.Typo` stays a type error

    def __getattr__(name: str) -> Any:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        _publish(value)
        globals()[name] = value  # later lookups find it directly, without this hook
        return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


for _name in __all__:
    if _name not in _LAZY and not _name.startswith("__"):
        _publish(globals()[_name])
del _name
