"""A live long transaction's graph is extended, not rebuilt, on each read (``core/graph_cache.py``).

The reader keeps the graph it last built for a few long transactions. A read whose live steps
are those plus steps appended after them adds only the new ones; a rewind, an undo or a
failure that changed the live steps drops the nodes after the steps still live and adds the
new ones; an entry evicted by other transactions rebuilds. Whichever way a
read got its edges, they are exactly what ``rebuild_graph`` gives from the rows at that point
(the graph is a pure function of the live steps): every read here is checked against one.
Both stores; reads that run at once (each on a worker thread) as well.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from typing import Any

import pytest

import agenttx
from agenttx.core import reads
from agenttx.core.graph import DependencyGraph
from agenttx.core.graph_cache import (
    GRAPH_CACHE_ENTRIES,
    GRAPH_CACHE_MAX_CHARS,
    GRAPH_CACHE_MIN_CHARS,
    BuiltGraph,
    GraphCache,
)
from agenttx.core.views import graph_rows, rebuild_graph
from agenttx.store.contract import StepRow
from agenttx.types import TransactionInfo

# One step's arguments and output are ~2 × 4 KB, so a history passes GRAPH_CACHE_MIN_CHARS
# (the size from which a graph is kept) after about 8 steps.
ITEMS = 60


def arguments(n: int, tag: str = "") -> dict[str, Any]:
    """Step n's kv.put: its own ids (implicit edges' producers), an id of step n-1 under
    ``user_id`` (an implicit edge from it), a reference to step n-1 (an explicit edge)."""
    value: dict[str, Any] = {
        "items": [{"id": f"item{tag}-{n}-{i}", "n": i} for i in range(ITEMS)],
        "note": "x" * 1500,
    }
    if n > 1:
        value["user_id"] = f"item{tag}-{n - 1}-3"
        value["after"] = f"${{steps.{n - 1}.key}}"
    return {"key": f"k{n}", "value": value}


class Rebuilds:
    """Counts the reader's full rebuilds (the real ``rebuild_graph`` runs)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = reads.rebuild_graph

        def counting(steps: Any) -> DependencyGraph:
            self.count += 1
            return real(steps)

        monkeypatch.setattr(reads, "rebuild_graph", counting)


def fresh_edges(steps: list[StepRow]) -> tuple[list[tuple[int, int, str]], list[str]]:
    graph = rebuild_graph(steps)
    edges = graph.edges()
    return [(e.source, e.target, e.key) for e in edges], [e.kind for e in edges]


async def read(engine: agenttx.Engine, tx: str) -> TransactionInfo:
    """A read as another process makes it: no image of the transaction, only the rows."""
    engine.images.cache.pop(tx, None)
    return await engine.get_transaction(tx)


async def check_read(engine: agenttx.Engine, tx: str) -> TransactionInfo:
    """Read, and assert the edges are a fresh rebuild's from the rows as they are now."""
    info = await read(engine, tx)
    steps = await engine.store.load_steps(tx, live_only=False)
    assert ([tuple(e) for e in info.edges], info.edge_kinds) == fresh_edges(steps)
    return info


async def put(engine: agenttx.Engine, tx: str, n: int, tag: str = "") -> None:
    result = await engine.execute_step(tx, n, "kv.put", arguments(n, tag))
    assert result.status.value == "SUCCESS", result.clean_hint


async def long_transaction(engine: agenttx.Engine, steps: int, tag: str = "") -> str:
    tx = (await engine.begin(agent_id="graph-cache")).transaction_id
    for n in range(1, steps + 1):
        await put(engine, tx, n, tag)
    return tx


async def test_reads_after_each_new_step_extend_the_kept_graph(
    engine: agenttx.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    rebuilds = Rebuilds(monkeypatch)
    tx = (await engine.begin(agent_id="graph-cache")).transaction_id
    extended = 0
    for n in range(1, 51):
        if n % 7 == 0:  # a read of managed state: a state edge from the step that wrote it
            got = await engine.execute_step(tx, n, "kv.get", {"key": f"k{n - 2}"})
            assert got.status.value == "SUCCESS", got.clean_hint
        else:
            await put(engine, tx, n)
        kept = tx in engine.reader.graphs
        before = rebuilds.count
        info = await check_read(engine, tx)
        if kept:  # a graph was kept: the new step is added to it, nothing is rebuilt
            assert rebuilds.count == before
            extended += 1
        else:
            assert rebuilds.count == before + 1
        # Kept from the read at which the history is long enough to be worth its room.
        assert (tx in engine.reader.graphs) == (info.history_chars >= GRAPH_CACHE_MIN_CHARS)
    assert set(info.edge_kinds) == {"explicit", "implicit", "state"}
    assert extended >= 35  # all but the first ~11 reads (a short history is not kept)
    # The same revision again: the edges kept for it, nothing built or extended.
    before = rebuilds.count
    again = await read(engine, tx)
    assert again.edges == info.edges
    assert rebuilds.count == before


async def test_a_rollback_to_an_earlier_step_cuts_the_graph_back_then_extends_it(
    engine: agenttx.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    tx = await long_transaction(engine, 20)
    rebuilds = Rebuilds(monkeypatch)
    await check_read(engine, tx)
    assert rebuilds.count == 1
    assert tx in engine.reader.graphs
    await engine.rollback(tx, to_step=12)
    await check_read(engine, tx)  # steps 12.. are gone: their nodes dropped, nothing rebuilt
    assert rebuilds.count == 1
    for n in range(12, 25):  # the same step ids again, with other values
        await put(engine, tx, n, tag="b")
        info = await check_read(engine, tx)
    assert rebuilds.count == 1
    assert (12, 13, "id") in [tuple(e) for e in info.edges]  # step 13's user_id: itemb-12-3
    # An undo is a rewind too.
    await engine.undo_step(tx)
    await check_read(engine, tx)
    assert rebuilds.count == 1


async def test_a_failed_attempt_cuts_the_graph_back_only_if_it_changed_the_live_steps(
    engine: agenttx.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    tx = await long_transaction(engine, 15)
    rebuilds = Rebuilds(monkeypatch)
    await check_read(engine, tx)
    assert rebuilds.count == 1
    # Unparsable arguments, then a key never written: failed attempts the agent is told to
    # retry; the live steps are as they were, so the kept graph serves as it is.
    bad = await engine.execute_step(tx, 16, "kv.put", '{"key": "k", "value": [1, 2')
    assert bad.strategy.name == "RETRY"
    await check_read(engine, tx)
    assert rebuilds.count == 1
    strategies = []
    for _ in range(5):  # the same step failing again and again: then a backtrack
        failed = await engine.execute_step(tx, 16, "kv.get", {"key": "never-written"})
        assert failed.status.value != "SUCCESS"
        strategies.append(failed.strategy.name)
        await check_read(engine, tx)
        if failed.strategy.name != "RETRY":
            break
        assert rebuilds.count == 1
    # The backtrack undid step 15: the graph is cut back to steps 1..14, not rebuilt.
    assert strategies[-1] == "LOCAL_BACKTRACK"
    assert failed.rollback_to_step == 15
    assert rebuilds.count == 1
    rows = await engine.store.load_steps(tx, live_only=False)
    assert sum(s.status == "FAILED" for s in rows) == len(strategies) + 1
    # Then the steps go on and are added to the graph.
    for n in range(15, 21):
        await put(engine, tx, n, tag="c")
        await check_read(engine, tx)
    assert rebuilds.count == 1


async def test_other_transactions_evict_the_least_recently_read_graph(
    engine: agenttx.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    released: list[int] = []
    real_release = DependencyGraph.release

    def release(self: DependencyGraph) -> None:
        released.append(len(self))
        real_release(self)

    monkeypatch.setattr(DependencyGraph, "release", release)
    txs = [await long_transaction(engine, 14, tag=str(i)) for i in range(GRAPH_CACHE_ENTRIES + 1)]
    rebuilds = Rebuilds(monkeypatch)
    for tx in txs[:-1]:
        await check_read(engine, tx)
    assert len(engine.reader.graphs) == GRAPH_CACHE_ENTRIES
    assert released == []
    await check_read(engine, txs[-1])  # one more: the first read is the least recent
    assert txs[0] not in engine.reader.graphs
    assert all(tx in engine.reader.graphs for tx in txs[1:])
    assert released == [14]  # the evicted graph, emptied node by node
    assert rebuilds.count == GRAPH_CACHE_ENTRIES + 1
    # The evicted transaction's next step: its graph is rebuilt and kept again, pushing out
    # the least recently read (txs[1]) ...
    await put(engine, txs[0], 15, tag="0")
    await check_read(engine, txs[0])
    assert rebuilds.count == GRAPH_CACHE_ENTRIES + 2
    assert txs[0] in engine.reader.graphs
    assert txs[1] not in engine.reader.graphs
    assert released == [14, 14]
    # ... while a kept one is extended.
    await put(engine, txs[2], 15, tag="2")
    await check_read(engine, txs[2])
    assert rebuilds.count == GRAPH_CACHE_ENTRIES + 2
    assert len(engine.reader.graphs) == GRAPH_CACHE_ENTRIES


async def test_a_short_transaction_keeps_no_graph(engine: agenttx.Engine) -> None:
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "user", "value": {"id": 7}})
    await engine.execute_step(tx, 2, "kv.put", {"key": "copy", "value": "${steps.1.value}"})
    info = await check_read(engine, tx)
    assert (1, 2, "value") in [tuple(e) for e in info.edges]
    assert tx not in engine.reader.graphs  # rebuilding it costs less than the room it takes


class Overlaps:
    """Watches the reads' views (``reads._view``, on worker threads here) as they run: how
    many ran at once, and whether a graph was ever extended, or read, while another thread
    extended it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.extending: set[int] = set()  # ids of the graphs being extended right now
        self.clashes = 0
        view, extend, edges = reads._view, BuiltGraph.extend, DependencyGraph.edges

        def watched_view(*args: Any) -> Any:
            with self.lock:
                self.running += 1
                self.most = max(self.most, self.running)
            try:
                time.sleep(0.01)  # widen the window in which another read's view runs
                return view(*args)
            finally:
                with self.lock:
                    self.running -= 1

        def watched_extend(entry: BuiltGraph, rows: Any, revision: int) -> bool:
            with self.lock:
                self.clashes += id(entry.graph) in self.extending
                self.extending.add(id(entry.graph))
            try:
                return extend(entry, rows, revision)
            finally:
                with self.lock:
                    self.extending.discard(id(entry.graph))

        def watched_edges(graph: DependencyGraph) -> Any:
            with self.lock:
                self.clashes += id(graph) in self.extending
            return edges(graph)

        monkeypatch.setattr(reads, "_view", watched_view)
        monkeypatch.setattr(BuiltGraph, "extend", watched_extend)
        monkeypatch.setattr(DependencyGraph, "edges", watched_edges)


async def test_reads_at_once_each_get_the_edges_of_the_steps_they_read(
    engine: agenttx.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    tx = await long_transaction(engine, 12)
    await check_read(engine, tx)
    overlaps = Overlaps(monkeypatch)
    for n in range(13, 25):
        engine.images.cache.pop(tx, None)
        # Reads of one transaction at once, while a step is appended: each read's view is on a
        # worker thread; one of them has the kept graph, the others rebuild.
        done = await asyncio.gather(
            engine.get_transaction(tx),
            put(engine, tx, n),
            engine.get_transaction(tx),
            engine.get_transaction(tx),
            engine.get_transaction(tx, history=False),
        )
        final = await engine.store.load_steps(tx, live_only=False)
        for info in (d for d in done if d is not None):
            newest = max(s.step_id for s in info.steps if s.live)
            expected = fresh_edges([s for s in final if s.step_id <= newest])
            assert ([tuple(e) for e in info.edges], info.edge_kinds) == expected
        assert tx in engine.reader.graphs
    assert overlaps.most >= 2  # views did run at once
    assert overlaps.clashes == 0
    # What is kept afterwards still extends to exactly the rebuilt graph.
    await put(engine, tx, 25)
    await check_read(engine, tx)


def _graph_of(revision: int, chars: int) -> BuiltGraph:
    return BuiltGraph(DependencyGraph(), [], chars, revision)


def test_of_two_graphs_put_back_for_one_transaction_the_newer_revision_stays() -> None:
    cache = GraphCache()
    old, new = _graph_of(5, GRAPH_CACHE_MIN_CHARS), _graph_of(7, GRAPH_CACHE_MIN_CHARS)
    assert cache.put("t", new) == []
    assert cache.put("t", old) == [old]  # a read that began earlier came back later
    assert cache.take("t") is new
    assert cache.take("t") is None
    assert cache.put("t", old) == []
    assert cache.put("t", new) == [old]
    small = _graph_of(9, GRAPH_CACHE_MIN_CHARS - 1)
    assert cache.put("t", small) == [small]
    assert cache.take("t") is new


def test_the_kept_graphs_stay_within_their_size_in_all() -> None:
    cache = GraphCache()
    half = _graph_of(1, GRAPH_CACHE_MAX_CHARS // 2 + 1)
    other = _graph_of(1, GRAPH_CACHE_MAX_CHARS // 2 + 1)
    assert cache.put("a", half) == []
    assert cache.put("b", other) == [half]  # both would pass the size: the older goes
    assert "a" not in cache
    assert "b" in cache
    huge = _graph_of(1, GRAPH_CACHE_MAX_CHARS + 1)
    assert cache.put("c", huge) == [huge]  # alone over it: rebuilt on every read, as before
    assert len(cache) == 1
    # Taking one out frees its room: a graph that fits with the others is kept beside them.
    assert cache.take("b") is other
    small = [_graph_of(1, GRAPH_CACHE_MIN_CHARS) for _ in range(GRAPH_CACHE_ENTRIES + 1)]
    dropped = [d for i, g in enumerate(small) for d in cache.put(f"s{i}", g)]
    assert dropped == [small[0]]  # past the count: the least recently read
    assert len(cache) == GRAPH_CACHE_ENTRIES


async def test_the_graph_of_a_transaction_that_ended_is_not_kept(
    engine: agenttx.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    tx = await long_transaction(engine, 14)
    await check_read(engine, tx)
    assert tx in engine.reader.graphs
    rebuilds = Rebuilds(monkeypatch)
    await engine.commit(tx)
    info = await check_read(engine, tx)  # the kept graph serves this read, then is freed
    assert info.status.value == "COMMITTED"
    assert rebuilds.count == 0
    assert tx not in engine.reader.graphs
    again = await read(engine, tx)  # the same revision: its edges are still kept
    assert again.edges == info.edges
    assert rebuilds.count == 0


def _random_row(rng: random.Random, seq: int, step_id: int, status: str) -> StepRow:
    """An attempt whose values share a small pool, so implicit, explicit and state edges
    abound (the rows as the store holds them: texts and the detail)."""
    pool = ["c-1", "c-2", "o-7", 3, 4.0, "x"]
    keys = ["id", "user_id", "order_id", "name", "total"]
    arguments = {rng.choice(keys): rng.choice(pool) for _ in range(rng.randint(1, 4))}
    output = {rng.choice(keys): rng.choice(pool) for _ in range(rng.randint(0, 4))}
    refs = []
    if step_id > 1 and rng.random() < 0.4:
        producer = rng.randint(1, step_id - 1)
        refs.append([producer, [rng.choice(keys)], ["ref"]])
        arguments["ref"] = rng.choice(pool)
    detail: dict[str, Any] = {
        "refs": refs,
        "state_reads": rng.sample(["kv/a", "kv/b"], rng.randint(0, 1)),
        "w": [[k, "1", 0] for k in rng.sample(["kv/a", "kv/b"], rng.randint(0, 1))],
    }
    return StepRow(
        tx_id="t", seq=seq, step_id=step_id, attempt=1, epoch=0, tool="kv.put",
        effect="state", status=status, live=status == "SUCCESS",
        arguments_json=json.dumps(arguments),
        output_json=json.dumps(output) if status == "SUCCESS" else "",
        raw_context="", detail=detail, started_at=0.0, finished_at=0.0,
    )  # fmt: skip


@pytest.mark.parametrize("values", ["kept", "dropped"])
@pytest.mark.parametrize("seed", range(6))
def test_an_extended_graph_is_the_rebuilt_graph_through_random_histories(
    seed: int, values: str
) -> None:
    """Appends, failed attempts and rewinds at random, read now and then; at each read, the
    graph the reader's path gives (extend the kept entry, else rebuild and keep) has a fresh
    rebuild's edges and nodes, and with its values kept, its root causes; with them dropped
    (as the reader keeps it: ``drop_values``) it refuses to look for a root cause."""
    rng = random.Random(seed)
    rows: list[StepRow] = []
    kept: BuiltGraph | None = None
    extended = rebuilt = 0
    for revision in range(1, 200):
        next_id = 1 + max((s.step_id for s in rows if s.live), default=0)
        roll = rng.random()
        if roll < 0.1 and next_id > 2:  # a rewind: step `to` and later no longer live
            to = rng.randint(1, next_id - 1)
            for s in rows:
                if s.step_id >= to:
                    s.live = False
        elif roll < 0.2:
            rows.append(_random_row(rng, len(rows) + 1, next_id, "FAILED"))
        else:
            rows.append(_random_row(rng, len(rows) + 1, next_id, "SUCCESS"))
        if rng.random() < 0.5:
            continue  # no read of this revision: the next read sees several changes at once
        live = graph_rows(rows)
        if kept is not None and kept.extend(live, revision):
            extended += 1
        else:
            graph = rebuild_graph(live)
            if values == "dropped":
                graph.drop_values()
            kept = BuiltGraph.of(graph, live, revision)
            rebuilt += 1
        fresh = rebuild_graph(rows)
        assert kept.graph.edges() == fresh.edges()
        assert kept.graph.nodes() == fresh.nodes()
        if values == "dropped":
            if live:
                with pytest.raises(RuntimeError, match="dropped them"):
                    kept.graph.root_cause(live[-1].step_id, "id")
            continue
        for s in live:
            for key in ("id", "user_id", "order_id", "name", "total", "kv/a", "ref"):
                assert kept.graph.root_cause(s.step_id, key) == fresh.root_cause(s.step_id, key)
    assert extended > rebuilt > 1
