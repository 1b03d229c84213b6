"""Several processes on one SQLite data directory: two ``agenttx serve`` (each an embedded
engine, as each ``agenttx mcp`` is) on the same store, sandbox and outbox. Every call sees the
other process's steps first, so no answer carries a stale step instruction, no transaction
loses a step, and two calls racing on one transaction from two processes are one after the
other: the loser is told the step that is next, never a revision conflict.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from agenttx.wire import agenttx_pb2 as pb
from server_process import ServerProcess, start_server

Code = grpc.StatusCode


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Any, Any, ServerProcess, ServerProcess, Path]]:
    """Two servers on one store, sandbox and outbox; yields their stubs, processes, root."""
    shared = tmp_path / "shared"
    shared.mkdir()
    common = (
        "--store",
        f"sqlite:///{shared}/agenttx.db",
        "--fs-root",
        str(shared / "files"),
        "--outbox-path",
        str(shared / "outbox.jsonl"),
    )
    first = start_server(tmp_path / "a", *common)
    with first.killed_on_error():
        second = start_server(tmp_path / "b", *common)
    channels = [first.channel(), second.channel()]
    try:
        yield first.stub(channels[0]), second.stub(channels[1]), first, second, shared
    finally:
        for channel in channels:
            channel.close()
        for server in (first, second):
            server.terminate()


def step(stub: Any, tx: str, step_id: int, tool: str, args: Any, **kw: Any) -> Any:
    return stub.ExecuteStep(
        pb.ExecuteStepRequest(
            transaction_id=tx,
            step_id=step_id,
            tool_name=tool,
            arguments_json=json.dumps(args),
            **kw,
        )
    )


def view(stub: Any, tx: str) -> tuple[str, int, list[str], list[tuple[int, str]]]:
    got = stub.GetTransaction(pb.GetTransactionRequest(transaction_id=tx))
    return (
        got.status,
        got.next_step_id,
        list(got.constraints),
        [(c.step_id, c.tool_name) for c in got.context],
    )


def test_two_servers_interleave_the_steps_of_one_transaction(pair: Any) -> None:
    a, b, _, second, shared = pair
    tx = a.BeginTransaction(pb.BeginTransactionRequest(agent_id="interleaved")).transaction_id
    r = step(a, tx, 1, "kv.put", {"key": "k1", "value": 1})
    assert r.next_step_id == 2
    # B sees A's step: it expects step 2, and the transaction reads its own write.
    r = step(b, tx, 2, "kv.get", {"key": "k1"})
    assert (r.status, json.loads(r.output_json)["value"], r.next_step_id) == (
        pb.STEP_STATUS_SUCCESS,
        1,
        3,
    )
    # A failure on A rewinds; B answers from the rewound transaction.
    r = step(a, tx, 3, "record.insert", {"table": "orders", "id": "o1", "references": {"c": "x"}})
    failed_next = r.next_step_id
    assert r.status == pb.STEP_STATUS_ROLLBACK_TRIGGERED
    assert failed_next <= 3
    assert view(a, tx) == view(b, tx)
    wrong = failed_next + 1
    with pytest.raises(grpc.RpcError) as refused:
        step(b, tx, wrong, "kv.put", {"key": "k2", "value": 2})
    assert refused.value.code() == Code.FAILED_PRECONDITION
    assert f"expects step {failed_next}" in (refused.value.details() or "")

    n = failed_next
    assert step(b, tx, n, "kv.put", {"key": "k2", "value": 2}).next_step_id == n + 1
    args = {"path": "notes/x.txt", "contents": "from A"}
    assert step(a, tx, n + 1, "fs.write", args).next_step_id == n + 2
    # B rewinds A's file write: the undo recorded by A runs in B.
    rolled = b.RollbackTransaction(pb.RollbackTransactionRequest(transaction_id=tx, to_step=n + 1))
    assert rolled.rolled_back
    assert rolled.next_step_id == n + 1
    assert not (shared / "files" / "notes" / "x.txt").exists()
    args = {"path": "notes/x.txt", "contents": "again"}
    assert step(a, tx, n + 1, "fs.write", args).next_step_id == n + 2
    assert step(a, tx, n + 2, "effect.stage", {"channel": "email", "idempotency_key": "e1"})
    commit = b.CommitTransaction(pb.CommitTransactionRequest(transaction_id=tx))
    assert commit.committed
    assert commit.steps_committed == n + 2
    assert view(a, tx)[0] == "COMMITTED"

    check = a.BeginTransaction(pb.BeginTransactionRequest()).transaction_id
    got = json.loads(step(a, check, 1, "kv.get", {"key": "k2"}).output_json)
    assert got["value"] == 2
    assert (shared / "files" / "notes" / "x.txt").read_text() == "again"
    lines = (shared / "outbox.jsonl").read_text().splitlines()
    assert [json.loads(line)["idempotency_key"] for line in lines] == ["e1"]
    # The second server said it shares the store with another process.
    assert any("sharing" in rec.get("msg", "") for rec in second.log_records())


def test_the_same_step_sent_to_both_servers_at_once_runs_once(pair: Any) -> None:
    a, b, *_ = pair
    for round_ in range(8):
        tx = a.BeginTransaction(pb.BeginTransactionRequest()).transaction_id
        barrier = threading.Barrier(2)
        outcomes: list[Any] = [None, None]

        def send(
            i: int,
            stub: Any,
            tx: str = tx,
            barrier: threading.Barrier = barrier,
            outcomes: list[Any] = outcomes,
            key: str = f"r{round_}",
        ) -> None:
            barrier.wait()
            try:
                outcomes[i] = step(stub, tx, 1, "kv.put", {"key": key, "value": i})
            except grpc.RpcError as exc:
                outcomes[i] = exc

        threads = [threading.Thread(target=send, args=(i, s)) for i, s in enumerate((a, b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        won = [o for o in outcomes if not isinstance(o, grpc.RpcError)]
        lost = [o for o in outcomes if isinstance(o, grpc.RpcError)]
        assert len(won) == 1, outcomes
        assert len(lost) == 1, outcomes
        assert lost[0].code() == Code.FAILED_PRECONDITION, lost[0].details()
        assert "expects step 2" in lost[0].details()
        assert view(a, tx)[1] == view(b, tx)[1] == 2


def test_many_transactions_spread_over_both_servers_lose_nothing(pair: Any) -> None:
    a, b, *_ = pair
    errors: list[str] = []

    def agent(n: int) -> None:
        rng = random.Random(n)
        stubs = (a, b)
        try:
            for t in range(3):
                tx = rng.choice(stubs).BeginTransaction(pb.BeginTransactionRequest()).transaction_id
                for s in range(1, 9):
                    r = step(rng.choice(stubs), tx, s, "kv.put", {"key": f"a{n}/{s}", "value": t})
                    assert r.next_step_id == s + 1, r
                c = rng.choice(stubs).CommitTransaction(
                    pb.CommitTransactionRequest(transaction_id=tx)
                )
                assert c.committed
                assert c.steps_committed == 8
        except Exception as exc:  # collected: an assertion in a thread would vanish
            errors.append(f"agent {n}: {exc!r}")

    threads = [threading.Thread(target=agent, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    check = b.BeginTransaction(pb.BeginTransactionRequest()).transaction_id
    for n in range(4):
        got = json.loads(step(b, check, n + 1, "kv.get", {"key": f"a{n}/8"}).output_json)
        assert got["value"] == 2


# --------------------------------------------------------------------------- alone, then shared


async def test_a_store_alone_takes_no_locks_until_a_second_one_opens(tmp_path: Path) -> None:
    """Alone on its file a store holds nothing per call; a second store's open makes the first
    one shared within a watcher tick, even while the first is idle, and from then on both
    see each other's steps (two engines in one process: the locks are per open file)."""
    import time

    import agenttx

    url = f"sqlite:///{tmp_path}/agenttx.db"
    first = await agenttx.Engine.open(url, background=False)
    try:
        locks: Any = first.store._locks  # type: ignore[attr-defined]
        assert locks.alone
        assert first.store.opened_alone
        tx = (await first.begin()).transaction_id
        await first.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1})
        assert locks._held == {}  # no transaction byte was taken
        started = time.monotonic()
        second = await agenttx.Engine.open(url, background=False)
        try:
            assert time.monotonic() - started < 2.0
            assert not second.store.opened_alone
            assert not locks.alone
            r = await second.execute_step(tx, 2, "kv.get", {"key": "a"})
            assert r.output["value"] == 1
            assert r.next_step_id == 3
            r = await first.execute_step(tx, 3, "kv.put", {"key": "b", "value": 2})
            assert r.next_step_id == 4  # the first engine saw the second's step
            with pytest.raises(agenttx.WrongStep, match="expects step 4"):
                await second.execute_step(tx, 3, "kv.put", {"key": "c"})
            assert (await second.commit(tx)).committed
        finally:
            await second.close()
    finally:
        await first.close()
