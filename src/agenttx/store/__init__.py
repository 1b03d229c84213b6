"""Durable storage behind the engine: the ``Store`` contract and its backends.

Backends are chosen by URL and imported lazily (``open_store``), so the SQLite path never
imports a PostgreSQL driver. Stores never import ``agenttx.core``: the engine computes what to
check and write, the store does it atomically.
"""

from agenttx.store.contract import (
    CommitOutcome,
    CommitPlan,
    OutboxRow,
    StagedEffect,
    StepRow,
    Store,
    StoredReply,
    TxRow,
    TxUpdate,
    UndoRow,
)
from agenttx.store.factory import open_store

__all__ = [
    "CommitOutcome",
    "CommitPlan",
    "OutboxRow",
    "StagedEffect",
    "StepRow",
    "Store",
    "StoredReply",
    "TxRow",
    "TxUpdate",
    "UndoRow",
    "open_store",
]
