"""Several engines (replicas) on one PostgreSQL database: any replica takes any call; a call
for a transaction busy on another replica waits (woken by PostgreSQL, no polling) or times
out clearly; a replica that died mid-step is recovered by another; effects are claimed once;
the reaper runs everywhere without aborting twice."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import agenttx
from agenttx import StepStatus, TxStatus
from agenttx.core.commit import Committer
from agenttx.effects import Effect

pytestmark = pytest.mark.postgres


class Gate:
    """Fresh asyncio.Events per test (an Event belongs to the loop it first waited on):
    ``entered`` is set once ``slow.state`` runs (its replica holds the transaction), ``event``
    lets it finish."""

    event: asyncio.Event
    entered: asyncio.Event

    def reset(self) -> None:
        self.event = asyncio.Event()
        self.entered = asyncio.Event()

    def set(self) -> None:
        self.event.set()

    async def wait_entered(self) -> None:
        # A fixed sleep was too short on a busy machine: the other call then came first.
        await asyncio.wait_for(self.entered.wait(), 60)


gate = Gate()


@agenttx.tool(name="slow.state", effect="state")
async def slow_state(ctx: agenttx.ToolContext, key: str) -> str:
    gate.entered.set()
    await gate.event.wait()
    await ctx.state.put(key, "done")
    return key


@pytest.fixture
def database(pg_url: str) -> str:
    """A new PostgreSQL database for the test's replicas (``pg.pg_url``)."""
    return pg_url


@pytest.fixture
async def replicas(database: str, tmp_path: Path) -> AsyncIterator[list[agenttx.Engine]]:
    engines = [
        await agenttx.Engine.open(
            database,
            tools=[slow_state, note_with_undo],
            fs_root=tmp_path / "files",
            outbox_path=tmp_path / f"outbox-{i}.jsonl",
            background=False,
        )
        for i in range(3)
    ]
    gate.reset()
    try:
        yield engines
    finally:
        gate.set()
        for e in engines:
            await e.close()


async def test_any_replica_takes_any_call(replicas: list[agenttx.Engine]) -> None:
    a, b, c = replicas
    tx = (await a.begin()).transaction_id
    await b.execute_step(tx, 1, "kv.put", {"key": "x", "value": 1})
    await c.execute_step(tx, 2, "kv.put", {"key": "y", "value": 2})
    r = await a.execute_step(tx, 3, "kv.get", {"key": "x"})  # a's cached image was stale
    assert r.output == {"key": "x", "value": 1}
    await b.rollback(tx, to_step=3)
    await c.execute_step(tx, 3, "kv.get", {"key": "y"})
    assert (await a.commit(tx)).steps_committed == 3
    info = await b.get_transaction(tx)
    assert info.status is TxStatus.COMMITTED


@agenttx.tool(name="note.with_undo", effect="state")
async def note_with_undo(ctx: agenttx.ToolContext, key: str) -> str:
    await ctx.register_undo({"key": key})  # this tool's own undo, below
    await ctx.state.put(key, "noted")
    return key


@note_with_undo.undo
async def forget_note(ctx: agenttx.ToolContext, key: str) -> None:
    """Nothing outside to undo: the state write goes with the rewound step."""


def image(engine: agenttx.Engine, tx: str) -> dict[str, object]:
    """What a replica's cached image of ``tx`` holds (compared with a fresh load)."""
    rt = engine.images.cache[tx]
    return {
        "row": (rt.row.revision, rt.row.status, rt.row.next_step_id),
        "steps": sorted(rt.steps),
        "outputs": rt.outputs,
        "stacks": rt.stacks,
        "staged": rt.staged,
        "undo": [(u.id, u.step_id, u.handler) for u in rt.undo],
        "reads": rt.read_set,
        "edges": sorted((e.source, e.target, e.key) for e in rt.graph.edges()),
        "step_seq": rt.body.get("step_seq"),
    }


async def fresh_image(engine: agenttx.Engine, tx: str) -> dict[str, object]:
    engine.images.cache.pop(tx, None)
    await engine.get_transaction(tx)  # does not cache; the next call loads
    rt = await engine.images.get(tx)
    assert rt is engine.images.cache[tx]
    return image(engine, tx)


async def test_a_stale_replica_catches_up_on_appended_steps_only(
    replicas: list[agenttx.Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, c = replicas
    tx = (await a.begin()).transaction_id
    await a.execute_step(tx, 1, "kv.put", {"key": "x", "value": 1})
    loads: list[int] = []
    original = a.store.load_steps

    async def spy(
        tx_id: str, *, live_only: bool, after_seq: int = 0, large: bool = False
    ) -> list[object]:
        loads.append(after_seq)
        return await original(tx_id, live_only=live_only, after_seq=after_seq, large=large)  # type: ignore[return-value]

    monkeypatch.setattr(a.store, "load_steps", spy)
    # b appends steps that reference, read and stage: a reads only those rows.
    await b.execute_step(tx, 2, "kv.put", {"key": "y", "value": "${steps.1.value}"})
    await b.execute_step(tx, 3, "effect.stage", {"channel": "mail", "payload": {"to": "x"}})
    r = await a.execute_step(tx, 4, "kv.get", {"key": "y"})
    assert r.output == {"key": "y", "value": 1}
    assert loads == [1]  # only the steps after the cached seq
    assert image(a, tx) == await fresh_image(c, tx)

    # A step that left an undo record, a failure and a rewind: a reloads the whole image.
    await b.execute_step(tx, 5, "note.with_undo", {"key": "n"})
    loads.clear()
    r6 = await a.execute_step(tx, 6, "kv.put", {"key": "n", "value": 6})
    assert r6.status is StepStatus.SUCCESS
    assert loads == [4, 0]  # the new rows say "undo": then the whole image
    assert image(a, tx) == await fresh_image(c, tx)
    failed = await b.execute_step(tx, 7, "kv.get", {"key": "${steps.6.missing}"})
    assert failed.status is StepStatus.ROLLBACK_TRIGGERED
    await b.rollback(tx, to_step=3)
    await b.execute_step(tx, 3, "kv.put", {"key": "z", "value": 3})
    await b.execute_step(tx, 4, "kv.put", {"key": "w", "value": 4})
    loads.clear()
    r = await a.execute_step(tx, 5, "kv.get", {"key": "z"})
    assert r.output == {"key": "z", "value": 3}
    assert loads == [0]  # the body changed (the failure): a full reload
    assert image(a, tx) == await fresh_image(c, tx)


async def test_a_call_busy_on_another_replica_waits_then_proceeds(
    replicas: list[agenttx.Engine],
) -> None:
    a, b, _ = replicas
    tx = (await a.begin()).transaction_id
    first = asyncio.create_task(a.execute_step(tx, 1, "slow.state", {"key": "k"}))
    await gate.wait_entered()  # a holds the transaction inside its step
    second = asyncio.create_task(b.execute_step(tx, 2, "kv.put", {"key": "z"}))
    await asyncio.sleep(0.3)
    assert not second.done()  # waiting inside PostgreSQL for a's call to end
    gate.set()
    assert (await first).status is StepStatus.SUCCESS
    assert (await asyncio.wait_for(second, 10)).status is StepStatus.SUCCESS


async def test_a_state_step_on_a_stale_image_waits_then_loses_to_the_call_holding_it(
    replicas: list[agenttx.Engine],
) -> None:
    """A state-only step runs on the cached image without the session lock; its write takes
    the lock in its own round trip. Here b's image expects step 1 while a holds the
    transaction inside step 1: b's write waits for a's call, then its compare-and-set loses,
    and the call, run again under the lock, is refused as any concurrent call would be."""
    a, b, _ = replicas
    tx = (await a.begin()).transaction_id
    await b.get_transaction(tx)
    await b.images.get(tx)  # b caches the image at step 1
    first = asyncio.create_task(a.execute_step(tx, 1, "slow.state", {"key": "k"}))
    await gate.wait_entered()  # a holds the transaction inside its step
    second = asyncio.create_task(b.execute_step(tx, 1, "kv.put", {"key": "z", "value": 1}))
    await asyncio.sleep(0.3)
    assert not second.done()  # b's write waits inside PostgreSQL for a's call to end
    gate.set()
    assert (await first).status is StepStatus.SUCCESS
    with pytest.raises(agenttx.WrongStep):
        await asyncio.wait_for(second, 10)
    info = await a.get_transaction(tx)
    assert [s.tool_name for s in info.steps] == ["slow.state"]  # b wrote nothing
    assert image(b, tx) == await fresh_image(a, tx)  # b caught up under the lock
    ok = await b.execute_step(tx, 2, "kv.put", {"key": "z", "value": 2})
    assert ok.status is StepStatus.SUCCESS


async def test_waiting_too_long_is_a_clear_error(
    database: str, replicas: list[agenttx.Engine], tmp_path: Path
) -> None:
    a = replicas[0]
    impatient = await agenttx.Engine.open(
        database, fs_root=tmp_path / "f2", background=False, tools=[slow_state]
    )
    object.__setattr__(impatient.config, "lock_timeout_s", 0.3)
    try:
        tx = (await a.begin()).transaction_id
        task = asyncio.create_task(a.execute_step(tx, 1, "slow.state", {"key": "k"}))
        await gate.wait_entered()  # a holds the transaction inside its step
        started = time.monotonic()
        with pytest.raises(agenttx.DeadlineExceeded, match="busy with another call"):
            await impatient.execute_step(tx, 1, "kv.put", {"key": "k"})
        assert time.monotonic() - started < 5
        gate.set()
        await task
    finally:
        await impatient.close()


async def test_outbox_rows_are_claimed_by_one_replica_each(
    replicas: list[agenttx.Engine],
) -> None:
    seen: list[str] = []

    class Sink:
        async def deliver(self, effect: Effect) -> None:
            seen.append(effect.idempotency_key)

    for e in replicas:
        e.dispatcher.channels["email"] = Sink()
    writer = replicas[0]
    # Queue effects without delivering at commit: the core commit (no inline release).
    for i in range(30):
        tx = (await writer.begin()).transaction_id
        await writer.execute_step(
            tx, 1, "effect.stage", {"channel": "email", "idempotency_key": f"e{i}"}
        )
        await Committer(writer.images, writer.rewinder, writer.store, None, writer.clock).commit(tx)
    aborted = (await writer.begin()).transaction_id
    await writer.execute_step(
        aborted, 1, "effect.stage", {"channel": "email", "idempotency_key": "x"}
    )
    await writer.rollback(aborted)
    await asyncio.gather(*(e.dispatcher.run_once(limit=7) for e in replicas for _ in range(3)))
    for e in replicas:
        await e.dispatcher.run_once()
    assert sorted(seen) == sorted(f"e{i}" for i in range(30))  # each once, none aborted


async def test_reaper_on_every_replica_aborts_once(database: str, tmp_path: Path) -> None:
    clock = [1_000_000.0]
    engines = [
        await agenttx.Engine.open(
            database,
            fs_root=tmp_path / "files",
            background=False,
            tx_idle_timeout_s=60,
            clock=lambda: clock[0],
        )
        for _ in range(3)
    ]
    try:
        tx = (await engines[0].begin()).transaction_id
        await engines[0].execute_step(tx, 1, "fs.write", {"path": "r.txt", "contents": "x"})
        clock[0] += 120
        reaped = await asyncio.gather(*(e.reap_idle() for e in engines))
        assert sum(reaped) == 1
        info = await engines[1].get_transaction(tx)
        assert info.status is TxStatus.ROLLED_BACK
        assert not (tmp_path / "files" / "r.txt").exists()
    finally:
        for e in engines:
            await e.close()


WORKER = textwrap.dedent(
    """
    import asyncio, sys
    import agenttx

    @agenttx.tool(name="pay.send", effect="irreversible")
    async def send(ctx, amount: int) -> dict:
        print("IN_TOOL", flush=True)
        await asyncio.sleep(60)
        return {"sent": amount}

    async def main(url, tx):
        engine = await agenttx.Engine.open(url, tools=[send], fs_root=sys.argv[3])
        await engine.execute_step(tx, 1, "pay.send", {"amount": 5})

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


async def test_a_dead_replicas_outside_step_becomes_outcome_unknown(
    database: str, tmp_path: Path
) -> None:
    survivor = await agenttx.Engine.open(database, fs_root=tmp_path / "files", background=False)
    try:
        tx = (await survivor.begin()).transaction_id
        script = tmp_path / "worker.py"
        script.write_text(WORKER)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        proc = subprocess.Popen(  # noqa: ASYNC220 - a child to SIGKILL, read on a thread
            [sys.executable, str(script), database, tx, str(tmp_path / "files")],
            stdout=subprocess.PIPE,
            env=env,
        )
        assert proc.stdout is not None
        line = await asyncio.get_running_loop().run_in_executor(None, proc.stdout.readline)
        assert line.strip() == b"IN_TOOL"
        assert (await survivor.get_transaction(tx)).status is TxStatus.EXECUTING
        # While the other replica lives, its step is left alone.
        assert (await survivor.recover())["interrupted_steps"] == 0
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        # Its session died with it, and with the session its lock: recovery takes over as
        # soon as PostgreSQL has ended that backend (a deadline, not 50 tries: on a busy
        # machine the server notices the closed socket later).
        deadline = time.monotonic() + 60
        while not (await survivor.recover())["interrupted_steps"]:
            assert time.monotonic() < deadline, "recovery never took over the dead step"
            await asyncio.sleep(0.1)
        info = await survivor.get_transaction(tx)
        assert info.status is TxStatus.ACTIVE
        assert info.outcome_unknown_step == 1
    finally:
        await survivor.close()


async def test_more_calls_in_flight_than_pool_connections(database: str, tmp_path: Path) -> None:
    # Each call holds its transaction's lock on a connection of its own; with 2 query
    # connections, 8 concurrent calls must still finish (not wait for each other's pool slot).
    engine = await agenttx.Engine.open(
        database + "?pool_size=2", fs_root=tmp_path / "files", background=False
    )
    try:
        txs = [(await engine.begin()).transaction_id for _ in range(8)]
        results = await asyncio.wait_for(
            asyncio.gather(
                *(engine.execute_step(tx, 1, "kv.put", {"key": tx, "value": 1}) for tx in txs)
            ),
            30,
        )
        assert all(r.status is StepStatus.SUCCESS for r in results)
    finally:
        await engine.close()
