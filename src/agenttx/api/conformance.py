"""What mypy checks (never run): the engine and the async client both satisfy
``TransactionService`` (``agenttx.service``), and so does the tracing wrapper of the engine;
a listed and a found transaction both give a ``TransactionSummary`` (``lookup_wire.summary``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agenttx.api.lookup_wire import Summarized
    from agenttx.api.tracing import TracedEngine
    from agenttx.client import AsyncAgentTxClient
    from agenttx.core.engine import Engine
    from agenttx.service import TransactionService
    from agenttx.types import FoundTransaction, TransactionInfo


def _conforms(engine: Engine, client: AsyncAgentTxClient, traced: TracedEngine) -> None:
    service: TransactionService = engine
    service = client
    service = traced
    del service


def _summarized(listed: TransactionInfo, found: FoundTransaction) -> None:
    shown: Summarized = listed
    shown = found
    del shown
