"""What the MCP tools call: ``TransactionService`` (``agenttx.service``), and the little beyond
it that is the MCP adapter's own.

Every operation goes through the contract (``Served.service``): the engine in this process
(``Engine``, or ``TracedEngine`` in front of it when traces are exported) acting for the
session's or the request's caller, or a running ``agenttx serve`` through
``AsyncAgentTxClient`` (``agenttx mcp --server``). Both give the same result types and raise
the same errors, so the tools have one code path. Beside it:

- ``live``: the embedded engine's hold on a running step, its progress relayed to the caller
  and its cancel. None over ``--server``: the gRPC protocol has neither (a step cancelled
  there still runs to its end on the server).
- ``listings``: the reads whose shapes differ between the engine and the client (the tools,
  a page of transactions, a bounded read of one, a page of effects), in one shape.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

from google.protobuf.message import Message

from agenttx.api import effects_wire
from agenttx.api.operations import CallContext, Row
from agenttx.api.operations.replies import ALL_STRATEGIES
from agenttx.service import TransactionService
from agenttx.tools.context import ProgressSink
from agenttx.types import Caller, EffectPage, StepResult, TransactionInfo, TransactionPage

if TYPE_CHECKING:
    from agenttx.client import AsyncAgentTxClient


class LiveSteps(Protocol):
    """A step run by the engine in this process: ``progress`` gets its tool's
    ``report_progress`` calls, and ``cancel_step`` stops it (False iff it is not running
    here)."""

    async def execute_step(
        self,
        transaction_id: str,
        step_id: int,
        tool_name: str,
        arguments: Any = ...,
        raw_context: str = ...,
        *,
        request_id: str = ...,
        dry_run: bool = ...,
        progress: ProgressSink | None = ...,
    ) -> StepResult: ...

    def cancel_step(self, transaction_id: str, step_id: int) -> bool: ...


class LocalEngine(LiveSteps, TransactionService, Protocol):
    """The engine in this process as the tools call it once it acts for a caller
    (``embedded``): the contract, a live step, and the engine's own listings. ``Engine`` and
    ``TracedEngine`` satisfy it (mypy, ``agenttx.api.conformance``), each call taking the
    ``caller`` it is made for besides (``tests/surfaces/test_mcp_served.py``)."""

    async def get_transaction(
        self, transaction_id: str, *, recent: int | None = ...
    ) -> TransactionInfo: ...

    async def list_transactions_page(
        self,
        *,
        statuses: Sequence[str] = ...,
        agent_id: str | None = ...,
        page_size: int = ...,
        page_token: str = ...,
    ) -> TransactionPage: ...

    async def list_effects(
        self,
        *,
        statuses: Sequence[str] = ...,
        transaction_id: str = ...,
        after_id: int = ...,
        limit: int = ...,
    ) -> EffectPage: ...

    def list_tools(self) -> list[dict[str, Any]]: ...


class Listings(Protocol):
    """The reads the two sides shape differently, in the wire's shape."""

    async def tools(self) -> list[dict[str, Any]]:
        """Every AgentTx tool as ``ListTools`` describes it."""
        ...

    async def transactions(
        self, statuses: Sequence[str], agent_id: str, page_size: int, page_token: str
    ) -> tuple[list[dict[str, Any]], str]:
        """A page of ``TransactionSummary`` fields, and the token of the next one."""
        ...

    async def transaction(self, transaction_id: str, recent: int) -> TransactionInfo:
        """The newest ``recent`` attempts and no edges (``earlier_steps_omitted`` counts the
        rest)."""
        ...

    async def effects(
        self, statuses: Sequence[str], transaction_id: str, after_id: int, page_size: int
    ) -> EffectPage:
        """A page of the outbox; ``page_size`` 0: the default."""
        ...


@dataclasses.dataclass(frozen=True, slots=True)
class Served:
    """What one MCP call is served by."""

    service: TransactionService  # every operation, made for ``caller``
    listings: Listings
    live: LiveSteps | None  # set iff the engine runs in this process
    # Who the calls act for (``core.access`` scopes by it): the session's local user or an
    # HTTP request's key owner; None: the process's own user, or over ``--server`` the key
    # the client presents.
    caller: Caller | None = None
    # The engine before it was bound to ``caller``, to serve another caller (``as_caller``).
    engine: LocalEngine | None = None

    async def send(self, row: Row, request: Message) -> Message:
        """Run ``row`` on ``request`` for ``caller`` (a row's MCP tool, ``rows.py``): the
        engine in this process before it was bound, told the caller as gRPC and HTTP tell it;
        over ``--server`` the client's one generic call of the row's RPC."""
        if self.engine is None:
            client = cast("AsyncAgentTxClient", self.service)
            return await client.call(row.rpc, request)
        # MCP reads names (every strategy) and has no message limit, as HTTP.
        return await row.run(self.engine, request, CallContext(self.caller, ALL_STRATEGIES, None))

    def as_caller(self, caller: Caller) -> Served:
        """The same service acting for ``caller`` (an authenticated HTTP request's). Over
        ``--server`` it is this one: a stdio request carries no key, and the server knows
        this process by the client's."""
        return self if self.engine is None else embedded(self.engine, caller)


def embedded(engine: LocalEngine, caller: Caller | None = None) -> Served:
    """The engine in this process (``agenttx mcp``, ``agenttx serve --http-addr``) acting for
    ``caller`` (None: the local operator, as embedded use)."""
    bound = cast(LocalEngine, _ActingFor(engine, caller))
    return Served(bound, _EngineListings(bound), bound, caller, engine)


def remote(client: AsyncAgentTxClient) -> Served:
    """A running AgentTx reached over gRPC (``agenttx mcp --server HOST:PORT``). The client
    sends a request id with each mutating call, so a step whose reply was lost is retried
    safely."""
    return Served(client, _ClientListings(client), None)


class _ActingFor:
    """``engine``'s calls, each made for ``caller``: bound once, so no call of a tool can
    forget whom it acts for. Only the names of ``LocalEngine`` (``list_tools``, the same for
    every caller, as it is)."""

    __slots__ = ("_caller", "_engine")

    def __init__(self, engine: LocalEngine, caller: Caller | None) -> None:
        self._engine = engine
        self._caller = caller

    def __getattr__(self, name: str) -> Any:
        if name == "list_tools":
            return self._engine.list_tools
        if name not in _SCOPED:
            raise AttributeError(name)
        return functools.partial(getattr(self._engine, name), caller=self._caller)


# Every call of ``LocalEngine`` that takes the caller it acts for.
_SCOPED = frozenset(
    name
    for cls in LocalEngine.__mro__
    if cls not in (Protocol, object)
    for name in vars(cls)
    if not name.startswith("_") and name != "list_tools"
)


class _EngineListings:
    def __init__(self, engine: LocalEngine) -> None:
        self.engine = engine  # bound to its caller (``embedded``)

    async def tools(self) -> list[dict[str, Any]]:
        return self.engine.list_tools()

    async def transactions(
        self, statuses: Sequence[str], agent_id: str, page_size: int, page_token: str
    ) -> tuple[list[dict[str, Any]], str]:
        page = await self.engine.list_transactions_page(
            statuses=statuses, agent_id=agent_id or None, page_size=page_size, page_token=page_token
        )
        return [_summary(t) for t in page.transactions], page.next_page_token

    async def transaction(self, transaction_id: str, recent: int) -> TransactionInfo:
        return await self.engine.get_transaction(transaction_id, recent=recent)

    async def effects(
        self, statuses: Sequence[str], transaction_id: str, after_id: int, page_size: int
    ) -> EffectPage:
        return await self.engine.list_effects(
            statuses=statuses,
            transaction_id=transaction_id,
            after_id=after_id,
            limit=effects_wire.effects_per_page(page_size),
        )


class _ClientListings:
    def __init__(self, client: AsyncAgentTxClient) -> None:
        self.client = client

    async def tools(self) -> list[dict[str, Any]]:
        return [
            {
                "name": t.name,
                "description": t.description,
                "effect": t.effect,
                "timeout_s": t.timeout_s,
                "idempotent": t.idempotent,
                "compensation": t.compensation,
                "dry_run": t.dry_run,
                "dry_run_reached": t.dry_run_reached,
                "undoable": t.undoable,
                "reconcilable": t.reconcilable,
                "input_schema": t.input_schema,
                "output_schema": t.output_schema,
                "examples": t.examples,
                **({"server": t.server} if t.server else {}),
            }
            for t in await self.client.list_tools()
        ]

    async def transactions(
        self, statuses: Sequence[str], agent_id: str, page_size: int, page_token: str
    ) -> tuple[list[dict[str, Any]], str]:
        page = await self.client.list_transactions(
            statuses=statuses, agent_id=agent_id, page_size=page_size, page_token=page_token
        )
        return [_summary(t) for t in page.transactions], page.next_page_token

    async def transaction(self, transaction_id: str, recent: int) -> TransactionInfo:
        # GetTransaction has no bound: the whole reply, bounded here as the engine would.
        info = await self.client.get_transaction(transaction_id)
        omitted = max(0, len(info.steps) - recent)
        return dataclasses.replace(
            info, steps=info.steps[omitted:], edges=[], edge_kinds=[], earlier_steps_omitted=omitted
        )

    async def effects(
        self, statuses: Sequence[str], transaction_id: str, after_id: int, page_size: int
    ) -> EffectPage:
        return await self.client.list_effects(
            statuses=statuses, transaction_id=transaction_id, after_id=after_id, page_size=page_size
        )


def _summary(t: Any) -> dict[str, Any]:
    """The fields of the wire's ``TransactionSummary`` of a listed transaction (the engine's
    ``TransactionInfo`` or the client's summary: both have them)."""
    return {
        "transaction_id": t.transaction_id,
        "status": t.status.value,
        "agent_id": t.agent_id,
        "next_step_id": t.next_step_id,
        "revision": t.revision,
        "labels": list(t.labels),
        "created_at": t.created_at,
        "updated_at": t.updated_at,
        "abort_reason": t.abort_reason,
    }
