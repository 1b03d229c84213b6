"""Reads: a transaction's public view, its stream of state changes, and listings.

Reads never change a transaction and never take its lock: they see the store's committed
rows (plus, for the graph's edges, a cached image only if it is current with them). A
receipt's ``expired`` and ``voided`` statuses are not stored: the view computes them from the
engine's clock and the transaction's row (``receipt_status``).

A view's edges come from, first that has them: the current cached image's built graph; the
edges kept for this exact revision (``EDGE_CACHE_ENTRIES``); the graph this reader kept for
the transaction, extended by the steps appended since (``graph_cache``); a graph rebuilt from
every live step (``rebuild_graph``), which is then kept in its place.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from agenttx.core.access import Action, owner_of, permits
from agenttx.core.config import Clock
from agenttx.core.events import EventBus, TxEvent, event_for
from agenttx.core.graph import Edge
from agenttx.core.graph_cache import BuiltGraph, GraphCache
from agenttx.core.images import TxImages
from agenttx.core.limits import check_transaction_id
from agenttx.core.offload import INLINE_JSON_CHARS, bulk_allocation, by_size, long_history
from agenttx.core.revisions import RevisionRules, live_steps
from agenttx.core.safety import SafetyPolicy
from agenttx.core.views import graph_rows, rebuild_graph, transaction_info
from agenttx.errors import InvalidArgument, NotFound, clip
from agenttx.receipts import Mode, ReceiptStatus
from agenttx.store.contract import ReceiptRow, StepRow, Store, TxRow
from agenttx.types import (
    Caller,
    ReceiptView,
    TransactionInfo,
    TransactionPage,
    TxStatus,
    check_tenant,
)

# The newest receipts a transaction's view lists, with their decisions.
VIEW_RECEIPTS = 20


def _view(
    row: TxRow,
    steps: list[StepRow],
    edges: list[Edge] | None,
    kept: BuiltGraph | None,
    rules: RevisionRules | None,
    recent: int | None = None,
) -> tuple[TransactionInfo, list[Edge], BuiltGraph | None]:
    """The view, its edges, and the graph they came from when it was built or extended here
    (``kept``, the reader's graph of this transaction, taken out of its cache: extended when
    the live steps begin with those it was built from, else released and rebuilt)."""
    built: BuiltGraph | None = None
    with bulk_allocation():  # a long history: parsed values and graph nodes, no cycles
        if recent is not None:
            edges = []  # a bounded view shows none: rebuilding the graph parses every live step
        elif edges is None:
            rows = graph_rows(steps)
            if kept is not None and kept.extend(rows, row.revision):
                built = kept
            else:
                if kept is not None:
                    kept.graph.release()  # the old graph, freed node by node (in the pause)
                graph = rebuild_graph(rows)
                # Kept for its edges only: its values freed here, node by node, in the pause
                # (kept, they would hold most of its memory, walked by every collection).
                graph.drop_values()
                built = BuiltGraph.of(graph, rows, row.revision)
            edges = built.graph.edges()
        counters = rules.counters(row, live_steps(steps)) if rules is not None else None
        info = transaction_info(
            row,
            steps,
            [(e.source, e.target, e.key) for e in edges],
            counters,
            [e.kind for e in edges],
            recent,
        )
    return info, edges, built


def _of_revision(row: TxRow, steps: list[StepRow]) -> bool:
    """Whether ``steps`` are those of ``row``'s revision, as far as the row tells: its live
    steps are exactly 1 .. ``next_step_id - 1``, or it has ended (its steps change no more;
    its ``next_step_id`` is 0). The row and the steps are two reads, and a step or a rewind
    that lands between them leaves the steps of a later revision."""
    if TxStatus(row.status).terminal:
        return True
    live = live_steps(steps)
    return len(live) == row.next_step_id - 1 and all(
        s.step_id == n for n, s in enumerate(live, start=1)
    )


def commit_receipt(row: TxRow) -> str | None:
    """The receipt the transaction's commit named: "" if it named none or the transaction was
    not committed; None if it is being committed now, or was committed by a version that did
    not record it (its receipts then keep their stored status). A committed transaction stays
    COMMITTED when compensated (the compensation is a transaction of its own)."""
    status = TxStatus(row.status)
    if status is TxStatus.COMMITTING:
        return None
    if status is not TxStatus.COMMITTED:
        return ""
    used = row.body.get("commit_receipt_id")
    return None if used is None else str(used)


def receipt_status(r: ReceiptRow, now: float, row: TxRow) -> str:
    """The status a read shows of receipt ``r`` of transaction ``row``: the stored one, or,
    for an issued or approved receipt that is not the one the commit used (``commit_receipt``;
    unknown: every receipt keeps its stored status):

    - ``expired`` once ``now`` reached its ``expires_at`` — the same instant from which
      ``Approvals`` refuses to approve, refuse or commit with it;
    - else ``voided`` once the transaction moved past it (``voided``).

    Expiry comes first because it is what a decision says first: ``Approvals._receipt``
    refuses an expired receipt before ``_still_current`` compares its revision, so a receipt
    both stale and expired is refused ``expired`` on approve, refuse and commit alike, and a
    read names the same reason. A refused receipt stays ``refused``: that decision is the
    one worth showing."""
    used = commit_receipt(row)
    if r.status == ReceiptStatus.REFUSED.value or used is None or used == r.id:
        return r.status
    if now >= r.expires_at:
        return ReceiptStatus.EXPIRED.value
    if voided(r, row, used):
        return ReceiptStatus.VOIDED.value
    return r.status


def voided(r: ReceiptRow, row: TxRow, used: str) -> bool:
    """Whether the transaction moved past receipt ``r``, which its commit did not use
    (``used``: the receipt it did use, "" for none or not committed): a durable change since
    the preview (the revision grows with each one, and a preview changes none), or an end
    that left it unused — rolled back, failed, or committed with another receipt. A commit
    that named no receipt published the change its last previews showed: those, made at the
    revision it committed (one below its final one; a committed row never changes again),
    keep their status, and only older ones are voided.

    "Past" is ``<``, not ``!=``: the receipts are read after the row, so a step and a preview
    landing between the two reads give a receipt newer than ``row`` — current, not voided."""
    status = TxStatus(row.status)
    if status is TxStatus.COMMITTED:
        return bool(used) or r.revision < row.revision - 1
    return status.terminal or r.revision < row.revision


def receipt_view(r: ReceiptRow, now: float, row: TxRow) -> ReceiptView:
    return ReceiptView(
        receipt_id=r.id,
        status=receipt_status(r, now, row),
        revision=r.revision,
        change_hash=r.change_hash,
        created_at=r.created_at,
        expires_at=r.expires_at,
        decided_by=r.approved_by,
        decided_at=r.approved_at,
        reason=r.refusal_reason,
    )


# Rebuilt graphs' edges kept per (transaction, revision): the graph is a pure function of the
# live steps at a revision, and rebuilding a long history's implicit edges takes a second, so
# a page that reads the same revision again (a dashboard redrawing) pays it once.
EDGE_CACHE_ENTRIES = 64


class TransactionReader:
    def __init__(
        self,
        store: Store,
        images: TxImages,
        events: EventBus,
        rules: RevisionRules | None = None,
        clock: Clock = time.time,
        safety: SafetyPolicy | None = None,
    ) -> None:
        self.store = store
        self.images = images  # only looked at: a current image saves rebuilding the graph
        self.events = events  # where watch subscribes
        self.rules = rules  # the revision counters (none: left at their defaults)
        self.clock = clock  # the engine's: when a receipt a view lists has expired
        # The policy file's approval rules: why a view's commit would need approval.
        self.safety = safety or SafetyPolicy()
        self._edges: dict[tuple[str, int], list[Edge]] = {}  # EDGE_CACHE_ENTRIES, oldest first
        # The graphs of a few long transactions, extended on their next read (event loop only).
        self.graphs = GraphCache()

    async def get_transaction(
        self, transaction_id: str, *, history: bool = True, recent: int | None = None
    ) -> TransactionInfo:
        """``recent``: a bounded view, the newest ``recent`` attempts and no edges
        (``TransactionInfo.earlier_steps_omitted``); None: every attempt and the edges."""
        check_transaction_id(transaction_id)
        if recent is not None and recent < 0:
            raise InvalidArgument(f"recent must be 0 or more, got {recent}")
        row = await self.store.get_transaction(transaction_id)
        if row is None:
            raise NotFound(f"transaction `{clip(transaction_id)}` not found")
        steps = await self.store.load_steps(
            transaction_id, live_only=not history, large=long_history(row.next_step_id, row.body)
        )
        receipts = await self.store.list_receipts(transaction_id, limit=VIEW_RECEIPTS)
        # Edges kept for a revision (a current image's, the edges cache's) are those of the
        # steps read only if the steps are that revision's (``_of_revision``).
        of_row = _of_revision(row, steps)
        rt = self.images.cache.get(transaction_id) if of_row else None
        # A current cached image with its graph built has the edges already (read here, on
        # the loop, where steps change it); otherwise the graph is rebuilt from the rows, with
        # the rest of the view (on a worker thread when the history is long).
        graph = rt.built_graph if rt is not None and rt.row.revision == row.revision else None
        edges = None if graph is None else graph.edges()
        key = (transaction_id, row.revision)
        if edges is None and of_row:
            edges = self._edges.get(key)
        # The kept graph is taken out while this read extends it (off the loop): no other
        # read sees it until it is put back below, so it is never extended or read twice at
        # once. A read that fails drops it (it may be half extended); the next one rebuilds.
        kept = self.graphs.take(transaction_id) if edges is None and recent is None else None
        # Parsing every stored argument and output is the CPU-heavy part of a read: a long
        # history is built on a worker thread, from the rows only.
        shown = steps if recent is None else steps[len(steps) - min(recent, len(steps)) :]
        size = sum(len(s.arguments_json) + len(s.output_json) for s in shown)
        info, found, built = await by_size(
            size, INLINE_JSON_CHARS, _view, row, steps, edges, kept, self.rules, recent
        )
        if built is not None:  # built or extended from every live step
            # An ended transaction gets no more steps: its graph is not kept (its edges are,
            # for its revision), so the graph of a transaction followed to its end is freed.
            ended = TxStatus(row.status).terminal
            for dropped in [built] if ended else self.graphs.put(transaction_id, built):
                # Freed node by node, a long one on a worker thread (DependencyGraph.release).
                await by_size(dropped.chars, INLINE_JSON_CHARS, dropped.graph.release)
        if edges is None and of_row and history and recent is None:
            self._edges[key] = found
            while len(self._edges) > EDGE_CACHE_ENTRIES:
                del self._edges[next(iter(self._edges))]
        if receipts:
            now = self.clock()
            info = dataclasses.replace(info, receipts=[receipt_view(r, now, row) for r in receipts])
        if not TxStatus(row.status).terminal:  # an ended one commits no more
            reasons = self.safety.commit_approval_reasons(
                Mode(str(row.body.get("mode", Mode.TRANSACTIONAL.value))),
                row.tenant,
                [(s.tool, s.effect) for s in steps if s.live],
            )
            if reasons:
                info = dataclasses.replace(info, approval_reasons=reasons)
        return info

    async def watch(
        self, transaction_id: str, after_revision: int = 0, opened: asyncio.Event | None = None
    ) -> AsyncGenerator[TxEvent, None]:
        """The transaction's state changes, newest revision first if it is past
        ``after_revision``, then one event per durable change, until it ends. ``opened`` is
        set once the transaction is found and watched (a stream may then answer before its
        first event, which waits for a change when ``after_revision`` is the current one)."""
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
            # Set only for a stream that will wait: an ended transaction with nothing left to
            # send ends its stream at once (the 204 an EventSource stops at), not after an
            # answer that it then reconnects to.
            if opened is not None:
                opened.set()
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
        caller: Caller | None = None,
    ) -> list[TransactionInfo]:
        rows = await self.store.list_transactions(
            statuses=statuses,
            agent_id=agent_id,
            tenant=caller.tenant if caller is not None else None,
            limit=limit,
            after_id=after_id,
        )
        return [
            transaction_info(r, [], [], self._counters(r))
            for r in rows
            if caller is None or permits(caller, r, Action.READ)
        ]

    async def _check_cursor(self, caller: Caller, page_token: str) -> None:
        """A cursor naming another tenant's transaction is refused like one naming none, so
        a listing cannot be used to learn that an id exists."""
        check_transaction_id(page_token)
        row = await self.store.get_transaction(page_token)
        if row is None or row.tenant != caller.tenant:
            raise InvalidArgument(
                f"cannot continue the listing after {clip(page_token)!r}: no such transaction "
                "(use the next_page_token of the previous page, or none for the first)"
            )

    def _counters(self, row: TxRow) -> dict[str, Any] | None:
        # A listing reads no steps: the counters come from the row alone.
        return self.rules.counters(row, None) if self.rules is not None else None

    async def list_transactions_page(
        self,
        *,
        statuses: Sequence[str] = (),
        agent_id: str | None = None,
        label: str | None = None,
        page_size: int = 50,
        page_token: str = "",
        caller: Caller | None = None,
        principal: str | None = None,
        newest_first: bool = False,
        created_after: float | None = None,
        created_before: float | None = None,
        tenant: str | None = None,
    ) -> TransactionPage:
        """One page of transactions, oldest first (``newest_first``: newest first), created
        in [``created_after``, ``created_before``) when given; ``page_token`` continues a
        listing (in the order it began with)."""
        if not 1 <= page_size <= 500:
            raise InvalidArgument("page_size must be 1..500")
        for name, bound in (("created_after", created_after), ("created_before", created_before)):
            if bound is not None and not math.isfinite(bound):
                raise InvalidArgument(f"{name} must be a finite time in unix seconds")
        unknown = [s for s in statuses if s not in TxStatus.__members__]
        if unknown:
            raise InvalidArgument(
                f"unknown status {unknown[0]!r}; use one of {', '.join(TxStatus.__members__)}"
            )
        if caller is not None and page_token:
            await self._check_cursor(caller, page_token)
        if tenant is not None:
            check_tenant(tenant)  # a name of 1..63 safe characters: refused, named, otherwise
        if caller is not None:
            if tenant is not None and tenant != caller.tenant:
                return TransactionPage([], "")  # a key sees one tenant: another has none
            tenant = caller.tenant
        found: list[TransactionInfo] = []
        after = page_token
        while len(found) < page_size:
            # The tenant is a column (filtered in SQL); the owner is in the body, checked
            # here like the label.
            rows = await self.store.list_transactions(
                statuses=statuses,
                agent_id=agent_id,
                tenant=tenant,
                limit=page_size,
                after_id=after,
                newest_first=newest_first,
                created_after=created_after,
                created_before=created_before,
            )
            if not rows:
                return TransactionPage(found, "")
            for row in rows:
                after = row.id
                if (
                    (label is None or label in row.body.get("labels", ()))
                    and (principal is None or owner_of(row) == principal)
                    and (caller is None or permits(caller, row, Action.READ))
                ):
                    found.append(transaction_info(row, [], [], self._counters(row)))
                    if len(found) == page_size:
                        break
            if len(rows) < page_size and len(found) < page_size:
                return TransactionPage(found, "")
        return TransactionPage(found, after)
