"""The in-memory image of one open transaction, and the scope one step attempt runs in.

``TxRuntime`` caches what the store holds for a transaction so a step costs one store write,
not a reload. It is valid only while ``row.revision`` matches the store: every durable change
is a compare-and-set on that revision, so a stale image is caught at the next write and
reloaded, never silently trusted.

The write set keeps, per key, a stack of ``(step_id, value_json, base_version)``: the top
is what the transaction reads, the bottom's base version the committed version the key had
when the transaction first wrote it; rewinding to step n pops the entries of steps ≥ n —
O(changes undone). The keys each step wrote are its row's (``detail["w"]``).

An image stays in memory for as long as its transaction is open (idle ones too), so it holds
each fact once: no second index of what the step rows already say, no empty structure made
before it is needed (the graph is made by the first step that joins it), ``__slots__``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from agenttx.audit import EMPTY, ChainHead
from agenttx.core.controller import ControllerState
from agenttx.core.graph import DependencyGraph
from agenttx.core.limits import MAX_STATE_VALUE_BYTES, check_state_key
from agenttx.core.offload import INLINE_JSON_CHARS, by_size
from agenttx.core.refs import Reference
from agenttx.errors import InvalidArgument
from agenttx.jsontext import compact
from agenttx.store.contract import StagedEffect, StepRow, Store, TxRow, UndoRow
from agenttx.tools.context import ProgressSink
from agenttx.types import Isolation, RollbackPolicy, TxStatus

log = logging.getLogger("agenttx.engine")

# A progress message longer than this many UTF-8 bytes is cut (at a character boundary): it is
# one line for a person watching, and it travels in every notification.
MAX_PROGRESS_MESSAGE_BYTES = 1024

# One write of a step: (key, value_json or None for a delete, base_version). base_version is
# the committed version of the key when the transaction first wrote it (read-committed
# validation compares against it).
Write = tuple[str, str | None, int]
# One entry of a key's stack: (step_id, value_json or None for a delete, base_version).
StackEntry = tuple[int, str | None, int]
# The arguments of DependencyGraph.add_step for one step, queued until the graph is needed.
GraphStep = tuple[int, Any, Any, Sequence[Reference], Sequence[str], Sequence[str]]


_STEP_IDS = re.compile(r"\$\{steps\.([0-9]{1,18})")  # the steps a text's references name


@dataclass(eq=False, slots=True)
class TxRuntime:
    row: TxRow
    policy: RollbackPolicy
    isolation: Isolation
    ctl: ControllerState
    steps: dict[int, StepRow] = field(default_factory=dict)  # live attempts by step id
    outputs: dict[int, Any] = field(default_factory=dict)  # parsed outputs of live steps
    # key → its stack, oldest first; a key is here iff a live step wrote it
    stacks: dict[str, list[StackEntry]] = field(default_factory=dict)
    undo: list[UndoRow] = field(default_factory=list)  # not yet compensated, oldest first
    staged: list[StagedEffect] = field(default_factory=list)
    # The dependency graph is built lazily: steps queue here and join the graph only when
    # someone looks (a failure's root-cause search, get_transaction); most transactions never
    # fail, so the hot path does not pay for it. None until a step first joins it.
    _graph: DependencyGraph | None = None
    _graph_pending: list[GraphStep] = field(default_factory=list)
    _graph_pending_chars: int = 0  # stored text behind the queued steps: what joining costs
    # Committed keys read by ANY attempt (failed and rewound ones too): the agent may have
    # acted on what it saw, so serializable validation checks them all; never shrinks.
    read_set: dict[str, int] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # The newest record of the transaction's audit chain as the store holds it: advanced only
    # after a write that appended records is durable (``TxImages.applied``/``appended``).
    audit_head: ChainHead = EMPTY
    # Successful state-only step rows, oldest first, durable but not in the chain yet: their
    # records are built and chained by the next write that carries records (``TxImages.chain``,
    # at most ``AUDIT_BATCH`` of them). Emptied only once that write is durable; a load
    # rebuilds it from the store (the successful steps after ``audit_seq``).
    audit_pending: list[StepRow] = field(default_factory=list)
    # The row's watermark as the store holds it: every step row with seq <= it has its
    # records in the chain (``TxRow.audit_seq``).
    audit_seq: int = 0

    @property
    def graph(self) -> DependencyGraph:
        """The graph with every queued step joined, here and now (tests, small graphs)."""
        return self._join_pending()

    @property
    def built_graph(self) -> DependencyGraph | None:
        """The graph if no step waits to join it, else None: a reader outside the
        transaction's lock never joins steps (that can take long, and a writer may be joining
        them on a worker thread); it rebuilds from the rows instead."""
        if self._graph_pending:
            return None
        if self._graph is None:
            self._graph = DependencyGraph()
        return self._graph

    async def joined_graph(self) -> DependencyGraph:
        """The graph with every queued step joined; the caller holds the transaction's lock.
        Joining indexes every scalar of the steps' inputs and outputs: a large queue joins on a
        worker thread, and the queue is emptied only once it is done (``built_graph``)."""
        return await by_size(self._graph_pending_chars, INLINE_JSON_CHARS, self._join_pending)

    def _join_pending(self) -> DependencyGraph:
        graph = self._graph
        if graph is None:
            graph = self._graph = DependencyGraph()
        if self._graph_pending:
            for step in self._graph_pending:
                graph.add_step(*step)
            # Emptied last: until then a reader sees steps waiting (``built_graph``).
            self._graph_pending, self._graph_pending_chars = [], 0
        return graph

    def add_to_graph(
        self,
        step_id: int,
        inputs: Any,
        output: Any,
        references: Sequence[Reference] = (),
        state_reads: Sequence[str] = (),
        state_writes: Sequence[str] = (),
        *,
        chars: int = 0,
    ) -> None:
        """Queue a step for the graph; ``chars``: the size of its stored inputs and output.
        Empty sequences are queued as the one empty tuple (held until the graph is built)."""
        self._graph_pending.append(
            (step_id, inputs, output, references or (), state_reads or (), state_writes or ())
        )
        self._graph_pending_chars += chars

    def expansion_weight(self, arguments_json: str) -> int:
        """How many characters of outputs resolving these arguments may touch: the JSON text
        of every output they reference (with the arguments' own size, what decides whether
        resolving runs off the loop, for a step and a dry run alike)."""
        weight = 0
        for step in set(_STEP_IDS.findall(arguments_json)):
            row = self.steps.get(int(step))
            if row is not None:
                weight += len(row.output_json)
        return weight

    @property
    def transaction_id(self) -> str:
        return self.row.id

    @property
    def body(self) -> dict[str, Any]:
        return self.row.body

    @property
    def read_version(self) -> int | None:
        """The committed version reads see: the begin snapshot, or the newest (None)."""
        return None if self.isolation is Isolation.READ_COMMITTED else self.row.snapshot

    def apply_writes(self, step_id: int, writes: Sequence[Write]) -> None:
        """Push a live step's writes (its row's ``detail["w"]``, which ``drop_from`` pops)."""
        stacks = self.stacks
        for key, value_json, base_version in writes:
            stack = stacks.get(key)
            if stack is None:
                stacks[key] = [(step_id, value_json, base_version)]
            else:
                stack.append((step_id, value_json, base_version))

    def base_version(self, key: str) -> int | None:
        """The committed version ``key`` had when the transaction first wrote it (among the
        live steps), None if no live step wrote it."""
        stack = self.stacks.get(key)
        return stack[0][2] if stack else None

    def drop_from(self, target: int) -> None:
        """Forget everything of steps ≥ target (after the store did the same)."""
        for step_id in sorted((s for s in self.steps if s >= target), reverse=True):
            # The keys a step pushed are its row's writes: popped newest first.
            for w in reversed(self.steps.pop(step_id).detail.get("w", ())):
                stack = self.stacks[w[0]]
                stack.pop()
                if not stack:
                    del self.stacks[w[0]]
            self.outputs.pop(step_id, None)
        # Failed and unknown undo records stay: evidence, never run again.
        self.undo = [
            u for u in self.undo if u.step_id < target or u.status in ("failed", "outcome_unknown")
        ]
        self.staged = [e for e in self.staged if e.step_id < target]
        self._graph_pending = [g for g in self._graph_pending if g[0] < target]
        if self._graph is not None:
            self._graph.drop_from(max(target, 1))

    def final_writes(self) -> dict[str, str | None]:
        return {key: stack[-1][1] for key, stack in self.stacks.items()}

    def note_reads(self, reads: list[list[Any]]) -> None:
        for key, version in reads:
            self.read_set.setdefault(key, int(version))


# What the body of every new transaction holds alike, made once and shared by the bodies: an
# open transaction's image stays in memory as long as it is open, idle or not. Sharing is
# safe because a body is copy-on-write: a change builds a new dict or list and never edits
# one in place (tests/core/test_image_memory.py runs the engine's paths and checks that
# these stay as they were).
FRESH_CONTROLLER: Final[dict[str, Any]] = ControllerState().to_dict()
NO_ITEMS: Final[list[Any]] = []
NO_FIELDS: Final[dict[str, Any]] = {}


@functools.lru_cache(maxsize=64)
def policy_body(policy: RollbackPolicy) -> dict[str, Any]:
    """``policy.to_dict()``, one dict per distinct policy (nearly every transaction has the
    engine's default one), shared as the values above are."""
    return policy.to_dict()


def first_row(
    transaction_id: str,
    *,
    tenant: str,
    agent_id: str,
    status: TxStatus,
    next_step_id: int,
    isolation: str,
    policy: RollbackPolicy,
    metadata: dict[str, Any],
    labels: Sequence[str],
    now: float,
    **fields: Any,
) -> TxRow:
    """Revision 1 of a new transaction, a begun one or a compensating one: one place sets
    the counters and lists every part later reads from ``body`` to zero, so a new body key
    cannot be missing from one kind. ``fields`` are the kind's own keys (mode, principal,
    the compensation …), after the common ones."""
    body: dict[str, Any] = {
        "metadata": metadata or NO_FIELDS,
        "policy": policy_body(policy),
        "controller": FRESH_CONTROLLER,
        "constraints": NO_ITEMS,
        "epoch": 0,
        "step_seq": 0,
        "requires_human": False,
        "abort_reason": "",
        "compensation_errors": NO_ITEMS,
        "outcome_unknown_step": 0,
        "labels": list(labels) if labels else NO_ITEMS,
        **fields,
    }
    return TxRow(
        id=transaction_id,
        tenant=tenant,
        agent_id=agent_id,
        status=status.value,
        revision=1,
        next_step_id=next_step_id,
        snapshot=0,
        isolation=isolation,
        body=body,
        created_at=now,
        updated_at=now,
        last_activity_at=now,
    )


class StepRun:
    """``StepScope`` for one attempt: buffers writes and staged effects until the step ends,
    so a failed attempt leaves nothing behind but its (durable) undo records."""

    def __init__(
        self,
        rt: TxRuntime,
        store: Store,
        step_id: int,
        attempt_key: str,
        fs_root: Path,
        tool_name: str,
        now: float,
    ) -> None:
        self.rt = rt
        self.store = store
        self.transaction_id = rt.transaction_id
        self.step_id = step_id
        self.idempotency_key = attempt_key
        self.fs_root = fs_root
        self.tool_name = tool_name
        self.now = now
        self.writes: dict[str, str | None] = {}  # this attempt's writes, last one wins
        self.reads: dict[str, tuple[str | None, int]] = {}  # committed reads: value, version
        self.state_reads: list[str] = []  # keys read that earlier steps wrote (graph edges)
        self.staged: list[StagedEffect] = []
        self.undo_ids: list[int] = []
        # Where report_progress goes; None (the caller asked for none): progress is dropped.
        self.progress: ProgressSink | None = None
        # The attempt's durable RUNNING row: set iff the tool has an outside effect (only
        # such a step may checkpoint a provider operation on it).
        self.running: StepRow | None = None
        # Writes a checkpoint onto ``running`` (``reconcile.checkpoint``); set by the pipeline.
        self.checkpointer: Callable[[StepRun, str, str, Any], Awaitable[None]] | None = None

    async def _lookup(self, key: str) -> str | None:
        check_state_key(key)
        if key in self.writes:
            return self.writes[key]
        stack = self.rt.stacks.get(key)
        if stack:
            if key not in self.state_reads:
                self.state_reads.append(key)
            return stack[-1][1]
        if key not in self.reads:
            value, version = await self.store.read_state(
                self.rt.row.tenant, key, self.rt.read_version
            )
            self.reads[key] = (value, version)
        return self.reads[key][0]

    async def state_get(self, key: str) -> Any:
        raw = await self._lookup(key)
        return None if raw is None else json.loads(raw)

    async def state_exists(self, key: str) -> bool:
        return await self._lookup(key) is not None

    def state_put(self, key: str, value: Any) -> None:
        check_state_key(key)
        try:
            raw = compact(value)
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(f"state value for {key!r} is not JSON: {exc}") from None
        if len(raw) > MAX_STATE_VALUE_BYTES:
            raise InvalidArgument(f"state value for {key!r} exceeds {MAX_STATE_VALUE_BYTES} bytes")
        self.writes[key] = raw

    async def state_delete(self, key: str) -> bool:
        existed = await self._lookup(key) is not None
        if existed:
            self.writes[key] = None
        return existed

    async def register_undo(self, handler: str | None, args: dict[str, Any]) -> None:
        name = handler or f"{self.tool_name}#undo"
        try:
            args_json = compact(args)
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(f"undo arguments are not JSON: {exc}") from None
        row = UndoRow(
            id=0,
            tx_id=self.rt.transaction_id,
            step_id=self.step_id,
            handler=name,
            args_json=args_json,
            idempotency_key=f"{self.idempotency_key}:undo:{len(self.undo_ids) + 1}",
            status="pending",
            attempts=0,
            last_error="",
            created_at=self.now,
        )
        row.id = await self.store.append_undo(row)
        self.undo_ids.append(row.id)
        self.rt.undo.append(row)

    def stage_effect(self, channel: str, payload: Any, idempotency_key: str | None) -> str:
        if not isinstance(channel, str) or not channel:
            raise InvalidArgument("effect channel must be a non-empty string")
        key = idempotency_key or f"{self.idempotency_key}:effect:{len(self.staged) + 1}"
        try:
            payload_json = compact(payload)
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(f"effect payload is not JSON: {exc}") from None
        self.staged.append(StagedEffect(self.step_id, channel, payload_json, key))
        return key

    async def report_progress(self, done: float, total: float | None, message: str | None) -> None:
        if not _finite(done) or (total is not None and not _finite(total)):
            raise InvalidArgument(
                f"progress must be finite numbers, got done={done!r} total={total!r}"
            )
        if self.progress is None:
            return
        if message is not None:
            message = str(message)
            raw = message.encode("utf-8", "replace")
            if len(raw) > MAX_PROGRESS_MESSAGE_BYTES:
                message = raw[:MAX_PROGRESS_MESSAGE_BYTES].decode("utf-8", "ignore")
        try:
            await self.progress(float(done), None if total is None else float(total), message)
        except Exception:  # a caller that went away must not fail the tool that reports
            log.debug("progress of step %s not delivered", self.step_id, exc_info=True)

    async def checkpoint_operation(self, provider: str, operation_id: str, cursor: Any) -> None:
        if self.checkpointer is None or self.running is None:
            raise InvalidArgument(
                f"checkpoint_operation: tool '{self.tool_name}' has no outside effect; only a "
                "compensatable or irreversible tool's call can have an unknown outcome"
            )
        await self.checkpointer(self, provider, operation_id, cursor)

    def committed_reads(self) -> list[list[Any]]:
        return [[k, v[1]] for k, v in self.reads.items()]


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
