"""Faults reported as what they are, over real gRPC: a full disk (a real tmpfs mounted for the
test) under the store, the fs sandbox and the outbox; a torn last line in the JSON-lines
outbox. Each test states what the user sees and that nothing was lost.

The tmpfs needs root and a kernel that lets this process mount; where it does not, the tests
are skipped with the reason shown (``pytest -rs``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

import agenttx
from agenttx.error_details import REASON_KEY
from agenttx.wire import agenttx_pb2 as pb
from agenttx.wire import agenttx_pb2_grpc as pb_grpc
from server_process import serving, start_server

Code = grpc.StatusCode


# --------------------------------------------------------------------------- a small real disk


@contextlib.contextmanager
def small_disk(path: Path, size: str = "4m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` for the block; skips the test if mounting is
    not permitted here."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        reason = f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode})"
        if os.environ.get("CI") == "true":  # CI's machine can mount: the fault tests must run
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(disk: Path, leave: int = 0) -> Path:
    """Fill ``disk`` with a filler file, to the last byte or to ``leave`` bytes short of it;
    returns it (unlink to free)."""
    spare = disk / "spare"
    spare.write_bytes(b"\0" * leave)  # held while filling, then given back
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for size in (64 << 10, 4096, 512, 1):  # big pieces first, then what is left
            with contextlib.suppress(OSError):
                while os.write(fd, b"\0" * size):
                    pass
    finally:
        os.close(fd)
    spare.unlink()
    return filler


@contextlib.asynccontextmanager
async def stub_for(engine: agenttx.Engine) -> AsyncIterator[Any]:
    async with serving(engine) as target, grpc.aio.insecure_channel(target) as channel:
        yield pb_grpc.AgentTxServiceStub(channel)  # type: ignore[no-untyped-call]


def step_request(tx: str, step_id: int, tool: str, args: Any, **kw: Any) -> Any:
    return pb.ExecuteStepRequest(
        transaction_id=tx, step_id=step_id, tool_name=tool, arguments_json=json.dumps(args), **kw
    )


# --------------------------------------------------------------------------- the store's disk


async def test_a_full_store_is_resource_exhausted_reads_work_and_space_brings_it_back(
    tmp_path: Path,
) -> None:
    with small_disk(tmp_path / "disk") as disk:
        engine = await agenttx.Engine.open(f"sqlite:///{disk}/agenttx.db", background=False)
        try:
            async with stub_for(engine) as stub:
                tx = (await stub.BeginTransaction(pb.BeginTransactionRequest())).transaction_id
                await stub.ExecuteStep(step_request(tx, 1, "kv.put", {"key": "a", "value": 1}))
                filler = fill(disk)
                big = {"key": "b", "value": "x" * 300_000}
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await stub.ExecuteStep(step_request(tx, 2, "kv.put", big, request_id="r-2"))
                err = refused.value
                assert err.code() == Code.RESOURCE_EXHAUSTED
                assert dict(err.trailing_metadata() or ())[REASON_KEY] == "STORE_FULL"
                assert "full" in (err.details() or "")
                assert "free disk space" in err.details()

                # Reads keep working, and say what is durable: step 2 did not happen.
                got = await stub.GetTransaction(pb.GetTransactionRequest(transaction_id=tx))
                assert (got.status, got.next_step_id) == ("ACTIVE", 2)
                listed = await stub.ListTransactions(pb.ListTransactionsRequest())
                assert [t.transaction_id for t in listed.transactions] == [tx]
                # A commit on the full disk is refused the same way, and changes nothing.
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await stub.ExecuteStep(step_request(tx, 2, "kv.put", big, request_id="r-2"))
                assert refused.value.code() == Code.RESOURCE_EXHAUSTED

                # Room again: the very same call (same request id) goes through.
                filler.unlink()
                done = await stub.ExecuteStep(step_request(tx, 2, "kv.put", big, request_id="r-2"))
                assert (done.status, done.next_step_id) == (pb.STEP_STATUS_SUCCESS, 3)
                commit = await stub.CommitTransaction(
                    pb.CommitTransactionRequest(transaction_id=tx)
                )
                assert commit.committed
                assert commit.steps_committed == 2
        finally:
            await engine.close()
        reopened = await agenttx.Engine.open(f"sqlite:///{disk}/agenttx.db", background=False)
        try:
            check = (await reopened.begin()).transaction_id
            r = await reopened.execute_step(check, 1, "kv.get", {"key": "b"})
            assert r.output["value"] == "x" * 300_000
        finally:
            await reopened.close()


async def test_a_store_full_refusal_is_not_kept_as_the_request_ids_reply(tmp_path: Path) -> None:
    """The disk is nearly full: the small write that would keep the refusal as the request's
    reply fits, the step does not. Once space is freed the same call with the same
    request_id succeeds (it was refused with STORE_FULL for good), and its reply, a definite
    one, is then kept: a retry replays it."""
    with small_disk(tmp_path / "disk") as disk:
        url = f"sqlite:///{disk}/agenttx.db"
        engine = await agenttx.Engine.open(url, background=False)
        try:
            tx = (await engine.begin()).transaction_id
            await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1})
            filler = fill(disk, leave=96 << 10)
            big = {"key": "b", "value": "x" * 400_000}
            for _ in range(2):
                with pytest.raises(agenttx.StoreFull, match="free disk space"):
                    await engine.execute_step(tx, 2, "kv.put", big, request_id="r-2")
            assert await engine.store.get_request("default", "r-2") is None

            filler.unlink()
            done = await engine.execute_step(tx, 2, "kv.put", big, request_id="r-2")
            assert (done.status, done.next_step_id) == (agenttx.StepStatus.SUCCESS, 3)
            assert await engine.execute_step(tx, 2, "kv.put", big, request_id="r-2") == done
            assert (await engine.get_transaction(tx)).next_step_id == 3  # it ran once
        finally:
            await engine.close()


async def test_a_full_store_under_an_outside_step_is_finished_at_the_next_call(
    tmp_path: Path,
) -> None:
    """fs.write made its step durable as RUNNING, wrote the file, then the step's last write
    hit the full disk: the next call (after room returns) settles that step at once — an
    idempotent tool's step is undone and may be sent again — instead of waiting out a lease."""
    with small_disk(tmp_path / "disk") as disk:
        engine = await agenttx.Engine.open(
            f"sqlite:///{disk}/agenttx.db", fs_root=tmp_path / "files", background=False
        )
        try:
            tx = (await engine.begin()).transaction_id
            store: Any = engine.store
            original = store.finish_step
            calls = 0

            async def finish_step_on_a_full_disk(*args: Any, **kwargs: Any) -> int:
                nonlocal calls
                calls += 1
                if calls == 1:
                    filler = fill(disk)  # the disk fills while the tool runs
                    try:
                        return int(await original(*args, **kwargs))
                    finally:
                        filler.unlink()
                return int(await original(*args, **kwargs))

            store.finish_step = finish_step_on_a_full_disk
            args = {"path": "a.txt", "contents": "y" * 400_000}
            with pytest.raises(agenttx.StoreFull):
                await engine.execute_step(tx, 1, "fs.write", args)
            store.finish_step = original
            r = await engine.execute_step(tx, 1, "fs.write", args)
            assert r.status is agenttx.StepStatus.SUCCESS, r.clean_hint
            info = await engine.get_transaction(tx)
            assert info.status is agenttx.TxStatus.ACTIVE
            assert not info.requires_human
            await engine.commit(tx)
            assert (tmp_path / "files" / "a.txt").read_text() == "y" * 400_000
        finally:
            await engine.close()


# --------------------------------------------------------------------------- the sandbox's disk


def temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.endswith(".agenttx-tmp")]


async def test_fs_write_on_a_full_disk_is_a_disk_full_step_failure_and_undoes_cleanly(
    tmp_path: Path,
) -> None:
    with small_disk(tmp_path / "files") as root:
        engine = await agenttx.Engine.open(
            f"sqlite:///{tmp_path}/agenttx.db", fs_root=root, background=False
        )
        try:
            async with stub_for(engine) as stub:
                first = (await stub.BeginTransaction(pb.BeginTransactionRequest())).transaction_id
                await stub.ExecuteStep(
                    step_request(first, 1, "fs.write", {"path": "notes/a.txt", "contents": "old"})
                )
                await stub.CommitTransaction(pb.CommitTransactionRequest(transaction_id=first))
                filler = fill(root)

                tx = (await stub.BeginTransaction(pb.BeginTransactionRequest())).transaction_id
                for path in ("notes/a.txt", "notes/new.txt"):
                    reply = await stub.ExecuteStep(
                        step_request(tx, 1, "fs.write", {"path": path, "contents": "n" * 300_000})
                    )
                    assert reply.status == pb.STEP_STATUS_ROLLBACK_TRIGGERED
                    assert "disk is full" in reply.clean_hint
                    assert path in reply.clean_hint
                    assert reply.next_step_id == 1  # the same step, once there is room
                    assert temp_files(root) == []
                assert (root / "notes" / "a.txt").read_text() == "old"
                assert not (root / "notes" / "new.txt").exists()
                info = await engine.get_transaction(tx)
                assert info.status is agenttx.TxStatus.ACTIVE
                assert not info.requires_human  # the undo had nothing to do: not a failure

                filler.unlink()
                reply = await stub.ExecuteStep(
                    step_request(tx, 1, "fs.write", {"path": "notes/a.txt", "contents": "new"})
                )
                assert reply.status == pb.STEP_STATUS_SUCCESS
                rolled = await stub.RollbackTransaction(
                    pb.RollbackTransactionRequest(transaction_id=tx)
                )
                assert rolled.rolled_back
                assert not rolled.compensation_errors
                assert (root / "notes" / "a.txt").read_text() == "old"
                assert temp_files(root) == []
        finally:
            await engine.close()


# --------------------------------------------------------------------------- the outbox's disk


async def test_an_outbox_on_a_full_disk_keeps_its_effects_until_there_is_room(
    tmp_path: Path,
) -> None:
    with small_disk(tmp_path / "out") as out:
        outbox = out / "outbox.jsonl"
        engine = await agenttx.Engine.open(
            f"sqlite:///{tmp_path}/agenttx.db",
            outbox_path=outbox,
            background=False,
            dispatch_max_attempts=2,
            dispatch_backoff_s=0.0,
        )
        try:
            tx = (await engine.begin()).transaction_id
            await engine.execute_step(
                tx,
                1,
                "effect.stage",
                {"channel": "email", "payload": {"body": "z" * 2000}, "idempotency_key": "k-1"},
            )
            filler = fill(out)
            committed = await engine.commit(tx)
            assert committed.committed
            assert committed.effects_dispatched == 0
            assert any("No space left" in e for e in committed.dispatch_errors)
            for _ in range(4):  # past max_attempts: a full disk never makes a dead letter
                await engine.dispatcher.run_once()
            rows = await engine.store.list_outbox(tx_id=tx)
            assert [r.status for r in rows] == ["pending"]
            assert rows[0].attempts >= 3
            assert not outbox.exists() or outbox.read_bytes() == b""  # no half line left

            filler.unlink()
            assert await engine.dispatcher.run_once() == 1
            lines = outbox.read_text().splitlines()
            assert [json.loads(line)["idempotency_key"] for line in lines] == ["k-1"]
            assert [r.status for r in await engine.store.list_outbox(tx_id=tx)] == ["delivered"]
        finally:
            await engine.close()


# --------------------------------------------------------------------------- a torn outbox line


def _wait_for(predicate: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_an_effect_after_a_torn_outbox_line_reaches_consumers(tmp_path: Path) -> None:
    """A crash mid-append left half a line; the server's next effect starts a line of its
    own, so a consumer reading line by line gets it (and skips only the fragment)."""
    data = tmp_path / "data"
    data.mkdir()
    outbox = data / "outbox.jsonl"
    whole = json.dumps({"tx_id": "tx_old", "idempotency_key": "old-1", "payload": {}})
    outbox.write_text(whole + "\n" + '{"tx_id":"tx_dead","committed_at_ms":17,"step_id":1,"ch')
    server = start_server(data)
    try:
        with server.channel() as channel:
            stub = server.stub(channel)
            for key in ("new-1", "new-2"):
                tx = stub.BeginTransaction(pb.BeginTransactionRequest()).transaction_id
                stub.ExecuteStep(
                    step_request(
                        tx, 1, "effect.stage", {"channel": "email", "idempotency_key": key}
                    )
                )
                reply = stub.CommitTransaction(pb.CommitTransactionRequest(transaction_id=tx))
                assert reply.committed
                assert reply.effects_dispatched == 1
    finally:
        assert server.terminate() == 0
    lines = outbox.read_text().splitlines()
    assert lines[0] == whole
    assert lines[1].startswith('{"tx_id":"tx_dead"')
    delivered = [json.loads(line)["idempotency_key"] for line in lines[2:]]
    assert delivered == ["new-1", "new-2"]
    assert outbox.read_text().endswith("\n")


async def test_two_channels_on_one_file_write_each_key_once_and_read_each_other(
    tmp_path: Path,
) -> None:
    """Two processes' channels on one outbox (several engines on one data directory)."""
    path = tmp_path / "outbox.jsonl"
    one, two = agenttx.JsonlChannel(path), agenttx.JsonlChannel(path)

    def effect(key: str) -> agenttx.Effect:
        return agenttx.Effect(1, "tx", 1, "email", {"k": key}, key, 1, 0.0)

    await one.deliver(effect("a"))
    await two.deliver(effect("a"))  # the other's line is read before deciding
    await two.deliver(effect("b"))
    await asyncio.gather(*(c.deliver(effect(f"c{i}")) for i in range(20) for c in (one, two)))
    keys = [json.loads(line)["idempotency_key"] for line in path.read_text().splitlines()]
    assert sorted(keys) == sorted(["a", "b", *(f"c{i}" for i in range(20))])


# --------------------------------------------------------------------------- reads before size


async def test_fs_read_of_a_huge_file_or_a_fifo_is_refused_without_reading_it(
    tmp_path: Path,
) -> None:
    root = tmp_path / "files"
    root.mkdir()
    (root / "huge.bin").touch()
    os.truncate(root / "huge.bin", 1 << 30)  # 1 GiB, sparse: reading it would take seconds
    os.mkfifo(root / "pipe")
    engine = await agenttx.Engine.open(
        f"sqlite:///{tmp_path}/agenttx.db", fs_root=root, background=False
    )
    try:
        async with stub_for(engine) as stub:
            for path, says in (("huge.bin", "over the"), ("pipe", "not a regular file")):
                tx = (await stub.BeginTransaction(pb.BeginTransactionRequest())).transaction_id
                started = time.perf_counter()
                reply = await stub.ExecuteStep(step_request(tx, 1, "fs.read", {"path": path}))
                assert time.perf_counter() - started < 1.0
                assert reply.status == pb.STEP_STATUS_ROLLBACK_TRIGGERED
                assert says in reply.clean_hint, reply.clean_hint
                assert path in reply.clean_hint, reply.clean_hint
    finally:
        await engine.close()
