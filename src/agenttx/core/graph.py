"""The dependency graph of a transaction: which earlier step supplied each step's inputs.

The engine adds one node per step as it runs; when a step fails on a key, the controller asks
``root_cause`` which step produced the bad value and jumps back there. ``docs/references.md``
describes the rules for users.

Edges run from a producer step to a consumer step and carry a key:

- ``explicit``: a ``${steps.…}`` reference; key = ``Reference.key``.
- ``implicit``: a scalar input equal (type-aware: ``1 == 1.0``, ``1 != "1"``, ``True != 1``) to a
  scalar in the latest earlier output under a matching key — the same key, or the input key
  ends in ``_<key>`` (``user_id`` ← ``id``). Booleans, nulls, NaN, empty strings and the
  redaction mask ``***`` (a masked secret, ``core.masking``) never link.
  Key = the producer's output key. Values inside a referenced argument are not linked
  implicitly: the reference already says where they came from.
- ``state``: a read of a managed-state key links to the latest earlier step that wrote it;
  key = the state key.

Invariants:

- Every edge goes from a lower step id to a higher one: the graph is a DAG and every walk back
  terminates.
- Node ids are strictly increasing in insertion order; adding id ``k`` first drops every node
  ``>= k`` (a re-run after a rewind replaces the old attempt and all that followed it).
- ``_index[value][key]`` lists, ascending, the live successful steps whose output holds
  ``value`` under ``key`` (each step at most once), so the latest producer is the tail and
  ``drop_from`` only pops tails: O(size of what is dropped). ``_writers`` is the same for
  state keys.
- The graph is a pure function of its ordered ``add_step`` (and ``drop_from``) calls, so a
  restarted server rebuilds exactly the graph it had by adding the live steps again in order
  (``TxImages.load``); nothing of it is stored.
- The graph keeps the inputs and outputs it is given without copying; callers must not
  mutate them afterwards. A graph kept only for its edges (``drop_values``) keeps none: each
  node's values are freed as soon as its edges and index entries are made, so its edges (and
  those of steps added later) are the same, but it cannot answer ``root_cause``.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from agenttx.core.refs import Reference, find_references, lookup_path
from agenttx.redaction import MASK

__all__ = ["DependencyGraph", "Edge"]


@dataclass(frozen=True, slots=True)
class Edge:
    source: int  # producer step
    target: int  # consumer step; always > source
    key: str  # explicit: Reference.key; implicit: the producer's output key; state: the state key
    kind: str  # "explicit" | "implicit" | "state"


class _Missing:
    """The value a source supplied is unknown (the producer's output lacks the path)."""

    def __repr__(self) -> str:
        return "<missing>"


_MISSING: Any = _Missing()

_Path = tuple[str | int, ...]
# A scalar as an index key: strings and numbers get different tags so 1 != "1", while int
# and float share one so 1 == 1.0 (equal numbers hash alike in Python).
_Canon = tuple[str, Any]


def _canon(value: Any) -> _Canon | None:
    """The index key of a linkable scalar; None for values that never link."""
    kind = type(value)  # exact-type checks first: this runs for every scalar of every step
    if kind is str:
        # A masked secret equals every other one: linking them would invent edges.
        return ("s", value) if value and value != MASK else None
    if kind is int:
        return ("n", value)
    if kind is float:
        return ("n", value) if value == value else None  # NaN equals nothing
    if value is None or isinstance(value, bool):  # bool before int: it is an int subclass
        return None
    if isinstance(value, str):  # subclasses such as StrEnum
        return ("s", str(value)) if value and value != MASK else None
    if isinstance(value, int):
        return ("n", int(value))
    if isinstance(value, float):
        return ("n", float(value)) if value == value else None
    return None


def _traceable(value: Any) -> bool:
    """Whether a value carries enough information to follow through a pass-through step."""
    if isinstance(value, dict | list):
        return bool(value)
    return _canon(value) is not None


def _same(a: Any, b: Any) -> bool:
    """Type-aware JSON equality (``True != 1``, ``1 == 1.0``, ``1 != "1"``). Iterative."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if isinstance(x, bool) or isinstance(y, bool):
            if not (isinstance(x, bool) and isinstance(y, bool) and x == y):
                return False
        elif isinstance(x, int | float) and isinstance(y, int | float):
            if x != y:
                return False
        elif isinstance(x, dict) and isinstance(y, dict):
            if x.keys() != y.keys():
                return False
            stack.extend((x[k], y[k]) for k in x)
        elif isinstance(x, list) and isinstance(y, list):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
        elif type(x) is not type(y) or x != y:
            return False
    return True


def _contains(tree: Any, value: Any) -> bool:
    """Whether ``value`` occurs anywhere in ``tree`` (as a value, not a key)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if _same(node, value):
            return True
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def _keyed_scalars(tree: Any, skip: frozenset[_Path] = frozenset()) -> list[tuple[_Path, str, Any]]:
    """(path, key, value) for every scalar under a dict key. ``key`` is the dict key holding
    the value, or the nearest enclosing one for array items; scalars with no enclosing key are
    left out, and so are subtrees at paths in ``skip``. Order is fixed: a container's scalars
    in order, then its nested containers in order. Iterative."""
    found: list[tuple[_Path, str, Any]] = []
    stack: list[tuple[_Path, str | None, Any]] = [((), None, tree)]
    while stack:
        path, key, value = stack.pop()
        children: Any
        if isinstance(value, dict):
            children = value.items()
        elif isinstance(value, list):
            children = enumerate(value)
        else:
            continue
        nested: list[tuple[_Path, str | None, Any]] = []
        for name, child in children:
            child_path = (*path, name)
            if skip and child_path in skip:
                continue
            child_key = key if isinstance(name, int) else str(name)
            if isinstance(child, dict | list):
                nested.append((child_path, child_key, child))
            elif child_key is not None:
                found.append((child_path, child_key, child))
        stack.extend(reversed(nested))
    return found


def _output_scalars(tree: Any) -> list[tuple[str, Any]]:
    """(key, value) as ``_keyed_scalars`` finds them, without paths (outputs need none)."""
    found: list[tuple[str, Any]] = []
    stack: list[tuple[str | None, Any]] = [(None, tree)]
    while stack:
        key, value = stack.pop()
        if isinstance(value, dict):
            for name, child in value.items():
                child_key = name if isinstance(name, str) else str(name)
                if isinstance(child, dict | list):
                    stack.append((child_key, child))
                else:
                    found.append((child_key, child))
        elif isinstance(value, list):
            for child in value:
                if isinstance(child, dict | list):
                    stack.append((key, child))
                elif key is not None:
                    found.append((key, child))
    return found


def _dict_positions(tree: Any) -> Iterator[tuple[_Path, Any]]:
    """(path, value) for every value held under a dict key, at any depth."""
    stack: list[tuple[_Path, Any]] = [((), tree)]
    while stack:
        path, value = stack.pop()
        if path and isinstance(path[-1], str):
            yield path, value
        if isinstance(value, dict):
            stack.extend(((*path, k), v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend(((*path, i), v) for i, v in enumerate(value))


def _key_matches(path: _Path, key: str) -> bool:
    """``customer_id`` matches ``fields.customer_id``; so does ``fields.customer_id`` itself."""
    if path[-1] == key:
        return True
    dotted = ".".join(str(p) for p in path)
    return dotted == key or dotted.endswith("." + key)


def _key_candidates(input_key: str) -> list[str]:
    """Output keys an input key may come from: itself, then each ``_``-suffix (``a_b_id`` →
    ``a_b_id``, ``b_id``, ``id``); the exact key first so it wins a tie."""
    if "_" not in input_key:
        return [input_key]
    candidates = [input_key]
    for i, ch in enumerate(input_key):
        if ch == "_" and i + 1 < len(input_key):
            candidates.append(input_key[i + 1 :])
    return candidates


def _value_at(tree: Any, path: Sequence[str | int]) -> Any:
    try:
        return lookup_path(tree, path)
    except KeyError:
        return _MISSING


class _Source(NamedTuple):
    """Where one input of a step came from (a tuple: built for every linked input)."""

    arg_path: _Path  # position in the consumer's arguments
    producer: int
    value: Any  # what the producer supplied (_MISSING if unknown)
    input_value: Any  # what sits at arg_path (differs from value when interpolated)
    key: str
    kind: str


@dataclass(slots=True)
class _Node:
    step_id: int
    failed: bool  # true iff recorded as a failed attempt (``_add``): never a producer
    inputs: Any
    output: Any
    references: tuple[Reference, ...]
    state_reads: tuple[str, ...]
    state_writes: tuple[str, ...]
    sources: list[_Source] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    indexed: list[tuple[_Canon, str]] = field(default_factory=list)  # entries to undo on drop
    wrote: list[str] = field(default_factory=list)  # state keys registered in _writers


class DependencyGraph:
    """One node per step, edges from producers to consumers; see the module docstring."""

    __slots__ = ("_edges_only", "_index", "_nodes", "_order", "_writers")

    def __init__(self) -> None:
        self._nodes: dict[int, _Node] = {}
        self._order: list[int] = []  # node ids, strictly increasing
        self._index: dict[_Canon, dict[str, list[int]]] = {}
        self._writers: dict[str, list[int]] = {}
        # True iff drop_values was called: no node holds its inputs, output or sources.
        self._edges_only = False

    # --- building ------------------------------------------------------------------------

    def add_step(
        self,
        step_id: int,
        inputs: Any,
        output: Any,
        references: Sequence[Reference] = (),
        state_reads: Sequence[str] = (),
        state_writes: Sequence[str] = (),
    ) -> list[Edge]:
        """Record a successful step: ``inputs`` are its resolved arguments, ``references`` what
        ``resolve`` reported. Drops any node ``>= step_id`` first. Returns the new edges.
        Cost: O(size of inputs + output), independent of the number of earlier steps."""
        return self._add(
            step_id, inputs, output, references, state_reads, state_writes, failed=False
        )

    def _add(
        self,
        step_id: int,
        inputs: Any,
        output: Any,
        references: Sequence[Reference],
        state_reads: Sequence[str],
        state_writes: Sequence[str],
        *,
        failed: bool,
    ) -> list[Edge]:
        """Add a node; ``failed`` records a failed attempt instead (no output: it gets incoming
        edges like any step but is never a producer; the next ``add_step`` with its id, or
        ``drop_from``, removes it). The engine records only successes and describes a failing
        step to ``root_cause`` by keywords; tests record failed nodes through here."""
        self.drop_from(step_id)
        node = _Node(
            step_id=step_id,
            failed=failed,
            inputs=inputs,
            output=output,
            references=tuple(references),
            state_reads=tuple(state_reads),
            state_writes=tuple(state_writes),
        )
        node.sources = self._sources(step_id, inputs, node.references)
        seen: set[tuple[int, str, str]] = set()
        for source in node.sources:
            self._link(node, seen, source.producer, source.key, source.kind)
        # State: reads see what earlier steps wrote, so link before registering own writes.
        for state_key in node.state_reads:
            writers = self._writers.get(state_key)
            if writers:
                self._link(node, seen, writers[-1], state_key, "state")
        if not failed:
            self._index_output(node)
            for state_key in dict.fromkeys(node.state_writes):
                self._writers.setdefault(state_key, []).append(step_id)
                node.wrote.append(state_key)
        self._nodes[step_id] = node
        self._order.append(step_id)
        if self._edges_only:
            _forget(node)
        return list(node.edges)

    @staticmethod
    def _link(
        node: _Node, seen: set[tuple[int, str, str]], source: int, key: str, kind: str
    ) -> None:
        if (source, key, kind) not in seen:
            seen.add((source, key, kind))
            node.edges.append(Edge(source, node.step_id, key, kind))

    def _sources(self, step_id: int, inputs: Any, references: Sequence[Reference]) -> list[_Source]:
        """Where each input of ``step_id`` came from, among steps ``< step_id``."""
        sources: list[_Source] = []
        for ref in references:
            if ref.step_id >= step_id:  # not a valid producer; resolve would have refused it
                continue
            producer = self._nodes.get(ref.step_id)
            supplied = (
                _value_at(producer.output, ref.path)
                if producer is not None and not producer.failed
                else _MISSING
            )
            sources.append(
                _Source(
                    ref.arg_path,
                    ref.step_id,
                    supplied,
                    _value_at(inputs, ref.arg_path),
                    ref.key,
                    "explicit",
                )
            )
        skip = frozenset(ref.arg_path for ref in references) if references else frozenset()
        for path, input_key, value in _keyed_scalars(inputs, skip):
            canon = _canon(value)
            if canon is None:
                continue
            found = self._latest_producer(canon, input_key, step_id)
            if found is not None:
                producer_id, output_key = found
                sources.append(_Source(path, producer_id, value, value, output_key, "implicit"))
        return sources

    def _latest_producer(
        self, canon: _Canon, input_key: str, before: int
    ) -> tuple[int, str] | None:
        by_key = self._index.get(canon)
        if not by_key:
            return None
        best: tuple[int, str] | None = None
        for output_key in _key_candidates(input_key):
            producers = by_key.get(output_key)
            if not producers:
                continue
            if producers[-1] < before:
                latest = producers[-1]
            else:  # only when root_cause asks about a step that is not the newest
                i = bisect.bisect_left(producers, before)
                if i == 0:
                    continue
                latest = producers[i - 1]
            if best is None or latest > best[0]:
                best = (latest, output_key)
        return best

    def _latest_writer(self, state_key: str, before: int) -> int | None:
        writers = self._writers.get(state_key)
        if not writers:
            return None
        i = bisect.bisect_left(writers, before)
        return writers[i - 1] if i else None

    def _index_output(self, node: _Node) -> None:
        index = self._index
        indexed = node.indexed
        for output_key, value in _output_scalars(node.output):
            canon = _canon(value)
            if canon is None:
                continue
            by_key = index.get(canon)
            if by_key is None:
                index[canon] = {output_key: [node.step_id]}
            else:
                producers = by_key.get(output_key)
                if producers is None:
                    by_key[output_key] = [node.step_id]
                elif producers[-1] != node.step_id:  # a value repeated under one key: once
                    producers.append(node.step_id)
                else:
                    continue
            indexed.append((canon, output_key))

    def drop_values(self) -> None:
        """Keep only what the edges and later ``add_step`` calls need: free every node's
        inputs, output and sources, one node at a time, and those of nodes added from now on.
        For a graph kept to be extended and read for its edges (``core/graph_cache.py``): the
        parsed values are most of a graph's memory (~16 bytes per character of their
        JSON) and, being containers, what the cyclic collector walks on every pass. Edges stay
        exactly as they would be (they depend on references, the index and the state writers,
        never on a producer's value); ``root_cause``, which follows values back, refuses
        afterwards."""
        self._edges_only = True
        for step_id in self._order:
            _forget(self._nodes[step_id])

    def release(self) -> None:
        """Empty the graph, one node at a time. Freeing a graph rebuilt from a long history
        in one go is one cascade of deallocations that holds the interpreter throughout
        (~100 ms for 3 MB of values, every other thread waiting); node by node, each step's
        values are freed by themselves and other threads run in between."""
        while self._order:
            del self._nodes[self._order.pop()]
        self._index.clear()
        self._writers.clear()

    def drop_from(self, step_id: int) -> None:
        """Drop every node ``>= step_id`` with its edges and index entries (a rewind)."""
        while self._order and self._order[-1] >= step_id:
            node = self._nodes.pop(self._order.pop())
            # Newest nodes go first, so each of this node's entries is the tail of its list.
            for canon, output_key in node.indexed:
                by_key = self._index[canon]
                producers = by_key[output_key]
                producers.pop()
                if not producers:
                    del by_key[output_key]
                    if not by_key:
                        del self._index[canon]
            for state_key in node.wrote:
                writers = self._writers[state_key]
                writers.pop()
                if not writers:
                    del self._writers[state_key]

    # --- reading ---------------------------------------------------------------------------

    def nodes(self) -> list[int]:
        """Step ids, ascending."""
        return list(self._order)

    def edges(self) -> list[Edge]:
        """All edges, by consumer step, then explicit, implicit, state, in argument order."""
        return [edge for step_id in self._order for edge in self._nodes[step_id].edges]

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, step_id: object) -> bool:
        return step_id in self._nodes

    def root_cause(
        self,
        step_id: int,
        key: str,
        *,
        inputs: Any = None,
        references: Sequence[Reference] | None = None,
        state_reads: Sequence[str] | None = None,
    ) -> int | None:
        """The earliest step that produced the value step ``step_id`` failed on, or None.

        The failing step is described either by the node recorded for ``step_id``, or — when
        ``inputs`` is given — by these keywords: ``inputs`` with the ``references`` that
        ``resolve`` returned for them, or the arguments as the agent sent them with
        ``references`` left None (they are then found by a syntax scan). Resolved
        inputs without their references lose every explicit edge. ``state_reads`` (else the
        recorded ones) are the state keys the step read. Search order, first that finds
        something wins:

        1. inputs under ``key`` (at any depth; ``fields.customer_id`` also works) → the steps
           that supplied them;
        2. an input whose value is ``key`` (a ``KeyError`` names the value it looked up, not
           the argument that held it) → the steps that supplied it;
        3. a reference whose ``key`` is ``key`` → its step;
        4. a state read of ``key`` → its latest earlier writer.

        From each producer the walk continues back while the value passed through: the
        producer's own inputs (or a state key it read) supplied an equal value, possibly under
        another key. Of several chains, the earliest step wins: jumping there redoes them all.
        Only steps ``< step_id`` are ever returned.
        """
        self._check_values("root_cause")
        node = self._nodes.get(step_id)
        if inputs is not None:
            if references is None:
                references = find_references(inputs)
            sources = self._sources(step_id, inputs, references)
        elif node is not None:
            inputs, references, sources = node.inputs, node.references, node.sources
        else:
            return None
        if state_reads is not None:
            state_edges = [
                Edge(writer, step_id, state_key, "state")
                for state_key in state_reads
                if (writer := self._latest_writer(state_key, step_id)) is not None
            ]
        else:
            state_edges = [e for e in node.edges if e.kind == "state"] if node else []

        starts: list[tuple[int, Any]] = []  # (producer, the value it supplied)
        for path, _ in _dict_positions(inputs):
            if not _key_matches(path, key):
                continue
            for source in sources:
                held = source.arg_path
                if path[: len(held)] == held:  # the value is, or lies inside, what was supplied
                    starts.append((source.producer, _value_at(source.value, path[len(held) :])))
                elif held[: len(path)] == path:  # the supplied value lies inside this one
                    starts.append((source.producer, source.value))
        if not starts:
            for path, value in _dict_positions(inputs):
                if value != key:
                    continue
                for source in sources:
                    held = source.arg_path
                    if path[: len(held)] == held:
                        starts.append((source.producer, value))
        if not starts:
            for ref in references:
                if ref.key == key and ref.step_id < step_id:
                    producer = self._nodes.get(ref.step_id)
                    value = _value_at(producer.output, ref.path) if producer else _MISSING
                    starts.append((ref.step_id, value))
        if not starts:
            starts = [(e.source, _MISSING) for e in state_edges if e.key == key]
        if not starts:
            return None
        return self._walk_back(starts)

    def is_literal(
        self,
        step_id: int,
        key: str,
        *,
        inputs: Any,
        references: Sequence[Reference] | None = None,
        state_reads: Sequence[str] = (),
    ) -> bool:
        """Whether the value step ``step_id`` failed on is a literal of its own arguments:
        ``inputs`` hold ``key`` (at any depth, matched as in ``root_cause``) and no reference,
        implicit edge or read of state an earlier step wrote supplied it. With ``key`` empty
        (the hint named none) or a key the arguments do not hold (a ``KeyError`` on an
        argument's value, a name a downstream server reports): whether no input of the step
        came from an earlier step at all — then whatever the failure names came from the step
        itself or from outside the transaction, never from an earlier step.

        Conservative on purpose: a read of state an earlier step wrote makes nothing a literal
        (the earlier write may be why the value is not found). ``inputs`` and ``references``
        are as for ``root_cause``.
        """
        if references is None:
            references = find_references(inputs)
        sources = self._sources(step_id, inputs, references)
        if any(self._latest_writer(state_key, step_id) is not None for state_key in state_reads):
            return False
        paths = (
            [path for path, _ in _dict_positions(inputs) if _key_matches(path, key)] if key else []
        )
        if not paths:
            return not sources
        if any(ref.key == key for ref in references):
            return False
        for path in paths:
            for source in sources:
                held = source.arg_path
                if path[: len(held)] == held or held[: len(path)] == path:
                    return False
        return True

    def _check_values(self, asked: str) -> None:
        if self._edges_only:
            raise RuntimeError(
                f"{asked} follows the steps' values, and this graph dropped them (drop_values: "
                "a graph kept for its edges); ask a graph built with its values"
            )

    def _walk_back(self, starts: list[tuple[int, Any]]) -> int:
        earliest: int | None = None
        seen: set[tuple[int, int]] = set()  # (step, id of the hop) already followed
        stack = list(starts)
        while stack:
            producer, value = stack.pop()
            hops = self._passed_through(producer, value)
            if not hops:
                earliest = producer if earliest is None else min(earliest, producer)
                continue
            for hop_producer, hop_value, hop_id in hops:
                if (producer, hop_id) not in seen:
                    seen.add((producer, hop_id))
                    stack.append((hop_producer, hop_value))
        # Hops only go to lower step ids, so the first chain followed ends at a root.
        return earliest if earliest is not None else min(p for p, _ in starts)

    def _passed_through(self, step_id: int, value: Any) -> list[tuple[int, Any, int]]:
        """Earlier (producer, value, hop id) that handed ``value`` to ``step_id``; empty when
        ``step_id`` introduced it itself (or it is too uninformative to follow)."""
        node = self._nodes.get(step_id)
        if node is None or value is _MISSING or not _traceable(value):
            return []
        hops = [
            (source.producer, source.value, i)
            for i, source in enumerate(node.sources)
            if _same(source.value, value) or _same(source.input_value, value)
        ]
        if hops:
            return hops
        # A value read from managed state (kv.get after kv.put) passes through the writer.
        for i, edge in enumerate(node.edges):
            writer = self._nodes.get(edge.source)
            if (
                edge.kind == "state"
                and writer is not None
                and (_contains(writer.output, value) or _contains(writer.inputs, value))
            ):
                hops.append((edge.source, value, -1 - i))
        return hops


def _forget(node: _Node) -> None:
    """Free a node's values (``drop_values``); its edges, index entries and writes stay."""
    node.inputs = node.output = None
    node.sources = []
