"""The AgentTx client SDK: ``agenttx.v1.AgentTxService`` over gRPC, sync and async.

    from agenttx.client import AgentTxClient, RollbackTriggered

    with AgentTxClient("127.0.0.1:50051") as client:
        with client.transaction(agent_id="billing") as tx:   # commits on a clean exit
            tx.step("kv.put", {"key": "invoice/1", "value": "draft"})

It speaks the wire protocol only: it imports the generated protobuf code, the result types of
``agenttx.types`` and the errors of ``agenttx.errors``, never the engine or a store (a
test checks this). ``docs/api.md`` describes the protocol and the client.
"""

from agenttx.client._async import AsyncAgentTxClient, AsyncTransaction
from agenttx.client._errors import (
    OutcomeUnknown,
    RollbackTriggered,
    ServerUnavailable,
    StepError,
    StepsNotRedone,
    TransactionAborted,
    error_from_status,
)
from agenttx.client._loop import AgentTurn, StepCall
from agenttx.client._sync import AgentTxClient, Transaction
from agenttx.client._wire import (
    DEFAULT_TARGET,
    RetryPolicy,
    StepPage,
    ToolInfo,
    TransactionEvent,
    TransactionListPage,
    TransactionSummary,
)

__all__ = [
    "DEFAULT_TARGET",
    "AgentTurn",
    "AgentTxClient",
    "AsyncAgentTxClient",
    "AsyncTransaction",
    "OutcomeUnknown",
    "RetryPolicy",
    "RollbackTriggered",
    "ServerUnavailable",
    "StepCall",
    "StepError",
    "StepPage",
    "StepsNotRedone",
    "ToolInfo",
    "Transaction",
    "TransactionAborted",
    "TransactionEvent",
    "TransactionListPage",
    "TransactionSummary",
    "error_from_status",
]
