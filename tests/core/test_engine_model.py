"""The engine against a small model of what it promises, in random order (issue 30.15).

A hypothesis state machine begins transactions, puts and gets keys, undoes the last step,
rewinds to an earlier step, rolls back, commits, restarts the engine and crashes it, on one
SQLite file, and after every call checks that what a user can observe agrees with the model:

- a put succeeds and moves ``next_step_id`` on by one; a get returns the transaction's own
  latest write of the key, else the value committed when the transaction began (snapshot);
- an undo or a rewind to step *k* drops the writes of the steps from there on, and the agent
  resumes at the step that was undone;
- a commit publishes every live write at once, unless another transaction committed one of the
  same keys after this one began: then it is ``CommitConflict`` and nothing is published;
- a rollback publishes nothing; an open transaction survives a restart and a crash as it was
  (durable resume), with the same next step and the same reads.

A *crash* stops the engine the way a killed process stops: its background loops end and its
store connection closes, and nothing a graceful close does (the close hooks, the dispatcher's
drain) runs; every call before it returned, so the store holds exactly what was acknowledged.
Kills in the middle of a call are the crash harness's work (``tests/e2e/test_crash.py``).

Bounded in CI: ``AGENTTX_MODEL_EXAMPLES`` (default 12) runs of up to ``AGENTTX_MODEL_STEPS``
(default 30) calls each; raise both for a longer search (docs/testing.md).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
)

import agenttx
from agenttx import StepStatus
from agenttx.core.leases import LIVE_OWNERS

T = TypeVar("T")
KEYS = ("a", "b", "c")
EXAMPLES = int(os.environ.get("AGENTTX_MODEL_EXAMPLES", "12"))
STEPS = int(os.environ.get("AGENTTX_MODEL_STEPS", "30"))


@dataclass
class OpenTx:
    """The model of one open transaction."""

    tx_id: str
    began_at: int  # the commit sequence it began after (its snapshot)
    snapshot: dict[str, int]  # the committed values it reads
    steps: list[tuple[str, int | None]] = field(default_factory=list)  # (key, value put) or get

    @property
    def next_step_id(self) -> int:
        return len(self.steps) + 1

    def reads(self, key: str) -> int | None:
        for k, value in reversed(self.steps):
            if k == key and value is not None:
                return value
        return self.snapshot.get(key)

    def writes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for key, value in self.steps:
            if value is not None:
                out[key] = value
        return out


class EngineModel(RuleBasedStateMachine):
    open_txs = Bundle("open_txs")

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="agenttx-model-"))
        self.loop = asyncio.new_event_loop()
        self.committed: dict[str, int] = {}
        self.committed_seq: dict[str, int] = {}  # key -> the commit sequence that last wrote it
        self.seq = 0
        self.txs: dict[str, OpenTx] = {}
        self.engine = self.run(self._open())

    # ------------------------------------------------------------------ plumbing

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    async def _open(self) -> agenttx.Engine:
        return await agenttx.Engine.open(
            f"sqlite:///{self.dir / 'agenttx.db'}",
            fs_root=self.dir / "files",
            outbox_path=self.dir / "outbox.jsonl",
        )

    async def _crash(self) -> None:
        engine = self.engine
        LIVE_OWNERS.discard(engine.config.owner)
        await engine.background.stop()
        await engine.store.close()

    def teardown(self) -> None:
        try:
            self.run(self.engine.close())
        finally:
            self.loop.close()

    # ------------------------------------------------------------------ rules

    @precondition(lambda self: len(self.txs) < 3)
    @rule(target=open_txs)
    def begin(self) -> str:
        r = self.run(self.engine.begin(agent_id="model"))
        assert r.next_step_id == 1
        self.txs[r.transaction_id] = OpenTx(r.transaction_id, self.seq, dict(self.committed))
        return r.transaction_id

    @rule(tx=open_txs, key=st.sampled_from(KEYS), value=st.integers(0, 99))
    def put(self, tx: str, key: str, value: int) -> None:
        if tx not in self.txs:
            return
        model = self.txs[tx]
        r = self.run(
            self.engine.execute_step(tx, model.next_step_id, "kv.put", {"key": key, "value": value})
        )
        assert r.status is StepStatus.SUCCESS, r.clean_hint
        model.steps.append((key, value))
        assert r.next_step_id == model.next_step_id

    @rule(tx=open_txs, key=st.sampled_from(KEYS))
    def get(self, tx: str, key: str) -> None:
        model = self.txs.get(tx)
        if model is None or model.reads(key) is None:
            return  # a missing key is a failed step with a hint: not what this model checks
        r = self.run(self.engine.execute_step(tx, model.next_step_id, "kv.get", {"key": key}))
        assert r.status is StepStatus.SUCCESS, r.clean_hint
        assert r.output["value"] == model.reads(key), (key, r.output, model)
        model.steps.append((key, None))

    @rule(tx=open_txs)
    def undo(self, tx: str) -> None:
        model = self.txs.get(tx)
        if model is None or not model.steps:
            return
        u = self.run(self.engine.undo_step(tx))
        model.steps.pop()
        assert u.step_id == model.next_step_id
        assert u.next_step_id == model.next_step_id

    @rule(tx=open_txs, data=st.data())
    def rewind(self, tx: str, data: st.DataObject) -> None:
        model = self.txs.get(tx)
        if model is None or not model.steps:
            return
        to_step = data.draw(st.integers(1, len(model.steps)), label="to_step")
        r = self.run(self.engine.rollback(tx, to_step=to_step))
        del model.steps[to_step - 1 :]
        assert r.next_step_id == to_step

    @rule(tx=consumes(open_txs))
    def rollback(self, tx: str) -> None:
        if self.txs.pop(tx, None) is None:
            return
        r = self.run(self.engine.rollback(tx))
        assert r.rolled_back

    @rule(tx=consumes(open_txs))
    def commit(self, tx: str) -> None:
        model = self.txs.pop(tx, None)
        if model is None:
            return
        writes = model.writes()
        conflicts = [k for k in writes if self.committed_seq.get(k, 0) > model.began_at]
        if conflicts:
            with pytest.raises(agenttx.CommitConflict) as refused:
                self.run(self.engine.commit(tx))
            keys = {key.rsplit("/", 1)[-1] for key in refused.value.keys}
            assert keys, refused.value
            assert keys <= set(writes), refused.value
            return
        c = self.run(self.engine.commit(tx))
        assert c.committed
        assert c.steps_committed == len(model.steps)
        if writes:
            self.seq += 1
            for key, value in writes.items():
                self.committed[key] = value
                self.committed_seq[key] = self.seq

    @rule()
    def restart(self) -> None:
        self.run(self.engine.close())
        self.engine = self.run(self._open())

    @rule()
    def crash(self) -> None:
        self.run(self._crash())
        self.engine = self.run(self._open())

    # ------------------------------------------------------------------ what a user sees

    @invariant()
    def open_transactions_are_where_the_model_says(self) -> None:
        for tx, model in self.txs.items():
            view = self.run(self.engine.get_transaction(tx))
            assert view.status.value == "ACTIVE", (tx, view.status)
            assert view.next_step_id == model.next_step_id, (tx, view.next_step_id, model)

    @invariant()
    def committed_values_are_the_models(self) -> None:
        reader = self.run(self.engine.begin(agent_id="model-reader")).transaction_id
        try:
            step = 1
            for key in KEYS:
                r = self.run(self.engine.execute_step(reader, step, "kv.get", {"key": key}))
                if key in self.committed:
                    assert r.status is StepStatus.SUCCESS, r.clean_hint
                    assert r.output["value"] == self.committed[key], (key, r.output)
                    step += 1
                else:
                    assert r.status is not StepStatus.SUCCESS, (key, r.output)
                    # A missing key fails the step (a retry in place or a rewind); the reader
                    # carries on from where the engine says.
                    step = r.next_step_id
        finally:
            self.run(self.engine.rollback(reader))


EngineModel.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

pytestmark = pytest.mark.stores("sqlite")
test_the_engine_agrees_with_its_model = EngineModel.TestCase
