"""The dependency graphs a reader keeps, so a live long transaction's graph is extended by its
new steps on the next read instead of rebuilt from every step, and cut back to what a rewind
kept.

The graph is a pure function of the live successful steps added in step order
(``core/graph.py``, ``views.graph_rows``). An entry records what its graph was built from: the
``(step_id, seq)`` of each of those steps, in the order added. A later read whose steps begin
with exactly those, in that order, gets the same graph as a rebuild by adding only the rest
(``add_step`` costs the size of the new step, not of the history). A read whose steps share
only a first run of them (a rewind, an undo, a failure that changed the live steps) drops the
nodes after that run (``DependencyGraph.drop_from``, what the transaction's own image does on
a rewind) and adds the rest; one that shares not even the first is rebuilt by the caller.

Why ``(step_id, seq)`` identifies a row: ``seq`` is the attempt's row (``StepRow``), and a
successful live attempt's row is final. What changes a row later (a rewind or an undo marks it
not live; a RUNNING or unknown outcome becomes final) either takes it out of the live
successful steps or brings it in, so the list of keys changes whenever the graph would.

Memory is why the cache is small. A kept graph holds its edges and its index of output values,
not the parsed values themselves (``DependencyGraph.drop_values``: with them, 300 steps of
10 KB values, 7.8 M characters, held 122 MB, and the ~750k containers made every pass of the
cyclic collector 140 ms long). Without them it is ~3 bytes per character of the steps' JSON
(that history: 24 MB), up to ~30 for long arrays of distinct numbers (each one indexed). The
cache keeps ``GRAPH_CACHE_ENTRIES`` graphs of at most ``GRAPH_CACHE_MAX_CHARS`` characters in
all; a larger history is rebuilt on each read, as before. Only graphs of at least
``GRAPH_CACHE_MIN_CHARS`` are kept: a smaller one rebuilds in about a millisecond, and keeping
it would push out the long ones the cache is for.

Concurrency: entries are taken out and put back only on the event loop, between awaits, so the
mapping needs no lock; an entry taken out belongs to the one read that took it until it puts it
back, so a graph is never extended by two threads at once, nor read while being extended. A
second read of the same transaction meanwhile finds no entry and rebuilds (as before this
cache); of two entries put back for one transaction, the one read at the newer revision stays.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from agenttx.core.graph import DependencyGraph
from agenttx.core.offload import INLINE_JSON_CHARS
from agenttx.core.views import graph_step
from agenttx.store.contract import StepRow

__all__ = [
    "GRAPH_CACHE_ENTRIES",
    "GRAPH_CACHE_MAX_CHARS",
    "GRAPH_CACHE_MIN_CHARS",
    "BuiltGraph",
    "GraphCache",
]

# Transactions whose graph is kept (least recently read evicted): a few dashboards or
# `agenttx tx watch` following live long transactions; each holds its edges and value index.
GRAPH_CACHE_ENTRIES = 4
# The kept graphs' characters of arguments and outputs in all: ~25 MB held at the ~3 bytes
# a character measured on the benchmark's values, ~250 MB at the ~30 of arrays of distinct
# numbers; a history alone larger than this is rebuilt on every read (the benchmark's 300
# steps, 7.8 M characters, fit).
GRAPH_CACHE_MAX_CHARS = 8 << 20
# A graph of fewer characters of arguments and outputs is not kept: it rebuilds in about a
# millisecond (the size below which a read's work stays on the event loop).
GRAPH_CACHE_MIN_CHARS = INLINE_JSON_CHARS

StepKey = tuple[int, int]  # (step_id, seq) of a live successful step


def _key(s: StepRow) -> StepKey:
    return (s.step_id, s.seq)


def _chars(rows: Sequence[StepRow]) -> int:
    return sum(len(s.arguments_json) + len(s.output_json) for s in rows)


@dataclass(slots=True)
class BuiltGraph:
    """A graph with what it was built from. Owned by one read at a time (module docstring)."""

    graph: DependencyGraph  # rebuild_graph of the rows named by built_from, values dropped
    built_from: list[StepKey]  # the rows added, in the order added (graph_rows' order)
    chars: int  # their arguments' and outputs' characters: what the graph holds, roughly
    revision: int  # the transaction's revision at the read that last built or extended it

    @classmethod
    def of(cls, graph: DependencyGraph, rows: Sequence[StepRow], revision: int) -> BuiltGraph:
        """The entry of ``graph``, just built from ``rows`` (``graph_rows``' list)."""
        return cls(graph, [_key(s) for s in rows], _chars(rows), revision)

    def extend(self, rows: Sequence[StepRow], revision: int) -> bool:
        """Bring the graph to ``rows`` (``graph_rows``' list at ``revision``): keep the longest
        run of the rows it was built from that ``rows`` begin with, drop the nodes after it (a
        rewind: ``DependencyGraph.drop_from``, as the transaction's own image does), and add
        the rest. False, the graph untouched, when not even the first row is shared (then a
        rebuild costs the same). Runs where the read runs (a worker thread for a long
        history)."""
        keys = [_key(s) for s in rows]
        shared = 0
        for mine, theirs in zip(self.built_from, keys, strict=False):
            if mine != theirs:
                break
            shared += 1
        if shared == 0 and self.built_from:
            return False
        if shared < len(self.built_from):
            # Rows are in step order, so the nodes of the rows not shared are those from the
            # first such row's step on.
            self.graph.drop_from(self.built_from[shared][0])
            del self.built_from[shared:]
            self.chars = _chars(rows[:shared])
        new = rows[shared:]
        for s in new:
            self.graph.add_step(*graph_step(s))
        self.built_from.extend(keys[shared:])
        self.chars += _chars(new)
        self.revision = revision
        return True


class GraphCache:
    """A few transactions' ``BuiltGraph``, least recently read first. Event loop only."""

    def __init__(self) -> None:
        self._entries: OrderedDict[str, BuiltGraph] = OrderedDict()  # <= GRAPH_CACHE_ENTRIES
        self._chars = 0  # sum of the entries' chars, <= GRAPH_CACHE_MAX_CHARS

    def take(self, transaction_id: str) -> BuiltGraph | None:
        """The transaction's entry, taken out: the caller owns it until ``put``."""
        return self._remove(transaction_id) if transaction_id in self._entries else None

    def _remove(self, transaction_id: str) -> BuiltGraph:
        entry = self._entries.pop(transaction_id)
        self._chars -= entry.chars
        return entry

    def put(self, transaction_id: str, entry: BuiltGraph) -> list[BuiltGraph]:
        """Keep ``entry`` as the transaction's graph, most recently read. Returns the entries
        no longer kept — ``entry`` itself if it is too small or too large, or older than one
        another read put back meanwhile; the one it replaces; the least recently read past
        the limits — for the caller to release (off the loop: ``DependencyGraph.release``)."""
        if not GRAPH_CACHE_MIN_CHARS <= entry.chars <= GRAPH_CACHE_MAX_CHARS:
            return [entry]
        held = self._entries.get(transaction_id)
        if held is not None and held.revision >= entry.revision:
            return [entry]
        dropped = [self._remove(transaction_id)] if held is not None else []
        self._entries[transaction_id] = entry
        self._chars += entry.chars
        while len(self._entries) > GRAPH_CACHE_ENTRIES or self._chars > GRAPH_CACHE_MAX_CHARS:
            # Never the entry just put: it is the most recent, and alone it fits.
            dropped.append(self._remove(next(iter(self._entries))))
        return dropped

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, transaction_id: object) -> bool:
        return transaction_id in self._entries
