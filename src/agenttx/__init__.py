"""AgentTx: transactional tool calls for AI agents.

Layering (imports only point down this list):

1. ``errors``, ``types``                 plain values and the error hierarchy; import nothing
2. ``store.contract``, ``tools.*``       the ``Store`` and ``Tool`` contracts, built-in tools
3. ``core``                              the engine: states, references, graph, controller,
                                         hints, runtime; never a concrete store or adapter
4. ``store.sqlite`` …, ``effects``       backends chosen by URL, the outbox dispatcher
5. ``embedded`` (``Engine``)             composition: open a store, wire tools and dispatcher
6. ``api.*``, ``server``, ``cli``        adapters (gRPC, metrics, logs) over ``Engine``
   ``client``                            speaks the wire protocol only: imports the generated
                                         protobuf code (``wire``), ``types`` and ``errors``

Users import from ``agenttx`` only; every other module is private.
"""

from agenttx.client import (
    AgentTxClient,
    AsyncAgentTxClient,
    OutcomeUnknown,
    RetryPolicy,
    RollbackTriggered,
    ServerUnavailable,
    TransactionAborted,
)
from agenttx.core.controller import RollbackController
from agenttx.core.hints import Hint, HintCleaner, clean_hint
from agenttx.effects.channels import Channel, Effect, JsonlChannel, PermanentDeliveryError
from agenttx.embedded import Engine
from agenttx.errors import (
    Aborted,
    AgentTxError,
    AlreadyExists,
    CommitConflict,
    DeadlineExceeded,
    FailedPrecondition,
    FatalToolError,
    InternalError,
    InvalidArgument,
    NotActive,
    NotFound,
    OutcomeUnknownPending,
    RevisionConflict,
    UncertainOutcome,
    WrongStep,
)
from agenttx.tools.context import SyncToolContext, ToolContext
from agenttx.tools.contract import Tool, tool
from agenttx.types import (
    BeginResult,
    CommitResult,
    ContextEntry,
    EffectClass,
    Isolation,
    RollbackPolicy,
    RollbackResult,
    StepResult,
    StepStatus,
    StepView,
    Strategy,
    TransactionInfo,
    TxStatus,
)

__version__ = "0.1.0"

__all__ = [
    "Aborted",
    "AgentTxClient",
    "AgentTxError",
    "AlreadyExists",
    "AsyncAgentTxClient",
    "BeginResult",
    "Channel",
    "CommitConflict",
    "CommitResult",
    "ContextEntry",
    "DeadlineExceeded",
    "Effect",
    "EffectClass",
    "Engine",
    "FailedPrecondition",
    "FatalToolError",
    "Hint",
    "HintCleaner",
    "InternalError",
    "InvalidArgument",
    "Isolation",
    "JsonlChannel",
    "NotActive",
    "NotFound",
    "OutcomeUnknown",
    "OutcomeUnknownPending",
    "PermanentDeliveryError",
    "RetryPolicy",
    "RevisionConflict",
    "RollbackController",
    "RollbackPolicy",
    "RollbackResult",
    "RollbackTriggered",
    "ServerUnavailable",
    "StepResult",
    "StepStatus",
    "StepView",
    "Strategy",
    "SyncToolContext",
    "Tool",
    "ToolContext",
    "TransactionAborted",
    "TransactionInfo",
    "TxStatus",
    "UncertainOutcome",
    "WrongStep",
    "__version__",
    "clean_hint",
    "tool",
]
