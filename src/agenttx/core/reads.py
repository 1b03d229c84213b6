"""Reads: a transaction's public view, its stream of state changes, and listings.

Reads never change a transaction and never take its lock: they see the store's committed
rows (plus, for the graph's edges, a cached image only if it is current with them).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from agenttx.core.events import EventBus, TxEvent, event_for
from agenttx.core.images import TxImages
from agenttx.core.limits import check_transaction_id
from agenttx.core.offload import INLINE_JSON_CHARS, by_size
from agenttx.core.views import rebuild_graph, transaction_info
from agenttx.errors import InvalidArgument, NotFound, clip
from agenttx.store.contract import StepRow, Store, TxRow
from agenttx.types import TransactionInfo, TransactionPage, TxStatus


def _view(
    row: TxRow, steps: list[StepRow], edges: list[tuple[int, int, str]] | None
) -> TransactionInfo:
    if edges is None:
        edges = [(e.source, e.target, e.key) for e in rebuild_graph(steps).edges()]
    return transaction_info(row, steps, edges)


class TransactionReader:
    def __init__(self, store: Store, images: TxImages, events: EventBus) -> None:
        self.store = store
        self.images = images  # only looked at: a current image saves rebuilding the graph
        self.events = events  # where watch subscribes

    async def get_transaction(
        self, transaction_id: str, *, history: bool = True
    ) -> TransactionInfo:
        check_transaction_id(transaction_id)
        row = await self.store.get_transaction(transaction_id)
        if row is None:
            raise NotFound(f"transaction `{clip(transaction_id)}` not found")
        steps = await self.store.load_steps(transaction_id, live_only=not history)
        rt = self.images.cache.get(transaction_id)
        # A current cached image has the graph already (its edges are read here, on the loop,
        # where steps change it); otherwise it is rebuilt from the rows.
        graph = rt.graph if rt is not None and rt.row.revision == row.revision else None
        edges = None if graph is None else [(e.source, e.target, e.key) for e in graph.edges()]
        # Parsing every stored argument and output is the CPU-heavy part of a read: a long
        # history is built on a worker thread, from the rows only.
        size = sum(len(s.arguments_json) + len(s.output_json) for s in steps)
        return await by_size(size, INLINE_JSON_CHARS, _view, row, steps, edges)

    async def watch(self, transaction_id: str, after_revision: int = 0) -> AsyncIterator[TxEvent]:
        """The transaction's state changes, newest revision first if it is past
        ``after_revision``, then one event per durable change, until it ends."""
        check_transaction_id(transaction_id)
        # Subscribe first, then read the row: a change between the two is not missed.
        queue = self.events.open_queue(transaction_id)
        try:
            row = await self.store.get_transaction(transaction_id)
            if row is None:
                raise NotFound(f"transaction `{clip(transaction_id)}` not found")
            last = after_revision
            if row.revision > last:
                last = row.revision
                yield event_for(
                    row.id, row.revision, TxStatus(row.status), row.next_step_id, row.updated_at
                )
            if TxStatus(row.status).terminal:
                return
            while True:
                event = await queue.get()
                if event.revision > last:
                    last = event.revision
                    yield event
                    if event.status.terminal:
                        return
        finally:
            self.events.close_queue(transaction_id, queue)

    async def list_transactions(
        self,
        *,
        statuses: Sequence[str] = (),
        agent_id: str | None = None,
        limit: int = 100,
        after_id: str = "",
    ) -> list[TransactionInfo]:
        rows = await self.store.list_transactions(
            statuses=statuses, agent_id=agent_id, limit=limit, after_id=after_id
        )
        return [transaction_info(r, [], []) for r in rows]

    async def list_transactions_page(
        self,
        *,
        statuses: Sequence[str] = (),
        agent_id: str | None = None,
        label: str | None = None,
        page_size: int = 50,
        page_token: str = "",
    ) -> TransactionPage:
        """One page of transactions, oldest first; ``page_token`` continues a listing."""
        if not 1 <= page_size <= 500:
            raise InvalidArgument("page_size must be 1..500")
        unknown = [s for s in statuses if s not in TxStatus.__members__]
        if unknown:
            raise InvalidArgument(
                f"unknown status {unknown[0]!r}; use one of {', '.join(TxStatus.__members__)}"
            )
        found: list[TransactionInfo] = []
        after = page_token
        while len(found) < page_size:
            rows = await self.store.list_transactions(
                statuses=statuses, agent_id=agent_id, limit=page_size, after_id=after
            )
            if not rows:
                return TransactionPage(found, "")
            for row in rows:
                after = row.id
                if label is None or label in row.body.get("labels", ()):
                    found.append(transaction_info(row, [], []))
                    if len(found) == page_size:
                        break
            if len(rows) < page_size and len(found) < page_size:
                return TransactionPage(found, "")
        return TransactionPage(found, after)
