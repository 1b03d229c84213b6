"""Request idempotency costs no write of its own: a call's stored reply goes in with the call's
own durable write, and its lookup with the transaction's load.

Counted for real: SQLite commits by the store's writer (``SqliteStore.commits``, each one fsync
with ``sync_writes``) and by ``strace`` on ``agenttx serve --sync-writes``; PostgreSQL round
trips by a TCP relay between the store and the server, which counts the requests each
connection's client ends and then waits on (``RoundTripRelay``). The guarantees stay: a
request id taken by another request while a call ran rolls the call's write back and refuses
it, and an outside step holds its id from before the outside call.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import signal
import sqlite3
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

import agenttx
from agenttx.client import AgentTxClient, AsyncAgentTxClient
from agenttx.store.contract import StoredReply
from agenttx.store.sqlite import SqliteStore
from server_process import serving, start_server

STEPS = 10


def stored_methods(db: Path) -> dict[str, int]:
    """Stored replies per method, read from the SQLite file itself."""
    with contextlib.closing(sqlite3.connect(db)) as c:
        rows = c.execute("SELECT method, count(*) FROM requests GROUP BY method").fetchall()
    return {str(m): int(n) for m, n in rows}


# ----------------------------------------------------------------- SQLite: commits


@pytest.mark.stores("sqlite")
async def test_a_ten_step_run_through_our_client_is_twelve_durable_writes(tmp_path: Path) -> None:
    db = tmp_path / "agenttx.db"
    # No background loops: the dispatcher's polls would be writes of their own, not the run's.
    engine = await agenttx.Engine.open(
        f"sqlite:///{db}",
        sync_writes=True,
        background=False,
        fs_root=tmp_path / "files",
        outbox_path=tmp_path / "outbox.jsonl",
    )
    try:
        store = engine.store
        assert isinstance(store, SqliteStore)
        async with serving(engine) as target, AsyncAgentTxClient(target, timeout=30) as client:
            start = store.commits
            per_call: list[int] = []
            async with client.transaction(agent_id="counted") as tx:
                per_call.append(store.commits - start)  # the begin
                for i in range(STEPS):
                    before = store.commits
                    await tx.step("kv.put", {"key": f"k{i}", "value": i})
                    per_call.append(store.commits - before)
                before = store.commits
            per_call.append(store.commits - before)  # the commit, on leaving the block
            assert per_call == [1] * (STEPS + 2)
            assert store.commits - start == STEPS + 2
    finally:
        await engine.close()
    # Every call carried a request id and its reply is stored: folded in, not dropped.
    assert stored_methods(db) == {"begin": 1, "execute_step": STEPS, "commit": 1}


@pytest.mark.stores("sqlite")
async def test_a_retry_replays_without_writing_anything(tmp_path: Path) -> None:
    engine = await agenttx.Engine.open(
        f"sqlite:///{tmp_path / 'agenttx.db'}", background=False, fs_root=tmp_path / "files"
    )
    try:
        store = engine.store
        assert isinstance(store, SqliteStore)
        async with serving(engine) as target, AsyncAgentTxClient(target, timeout=30) as client:
            tx = (await client.begin(request_id="b")).transaction_id
            first = await client.execute_step(
                tx, 1, "kv.put", {"key": "a", "value": 1}, request_id="s"
            )
            before = store.commits
            again = await client.execute_step(
                tx, 1, "kv.put", {"key": "a", "value": 1}, request_id="s"
            )
            assert (await client.begin(request_id="b")).transaction_id == tx
            assert store.commits == before  # two lookups, both reads
            assert again == first
    finally:
        await engine.close()


def _fsyncs(trace: str) -> int:
    return len(re.findall(r"\b(?:fsync|fdatasync)\(", trace))


def _traced_by(pid: int, tracer: int) -> bool:
    """Every thread of process ``pid`` is traced by ``tracer`` (its TracerPid)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        return bool(tasks) and all(
            f"TracerPid:\t{tracer}\n" in (task / "status").read_text() for task in tasks
        )
    except FileNotFoundError:  # a thread ended while we looked: look again
        return False


@pytest.mark.stores("sqlite")
@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_agenttx_serve_sync_writes_fsyncs_twelve_times_for_a_ten_step_run(
    tmp_path: Path,
) -> None:
    server = start_server(tmp_path / "data", "--sync-writes")
    try:
        with server.killed_on_error(), AgentTxClient(server.address, timeout=30) as client:
            with client.transaction(agent_id="warm-up") as tx:  # first-use costs, not counted
                tx.step("kv.put", {"key": "warm", "value": 0})
            trace_path = tmp_path / "fsync.trace"
            tracer = subprocess.Popen(
                ["strace", "-f", "-qq", "-e", "trace=fsync,fdatasync", "-o", str(trace_path),
                 "-p", str(server.proc.pid)],
                stderr=subprocess.PIPE,
            )  # fmt: skip
            try:
                # strace attaches to every thread of the server: wait until it has (a fixed
                # 1 s could end first on a busy machine, and the first fsyncs went unseen).
                deadline = time.monotonic() + 60
                while tracer.poll() is None and not _traced_by(server.proc.pid, tracer.pid):
                    assert time.monotonic() < deadline, "strace never attached"
                    time.sleep(0.02)
                if tracer.poll() is not None:
                    err = tracer.stderr.read().decode() if tracer.stderr else ""
                    pytest.skip(f"strace cannot attach here: {err.strip()}")
                time.sleep(1.0)  # an fsync nobody asked for while we wait would show here
                idle = _fsyncs(trace_path.read_text())
                with client.transaction(agent_id="traced") as tx:
                    for i in range(STEPS):
                        tx.step("kv.put", {"key": f"k{i}", "value": i})
                time.sleep(0.3)  # strace writes each call as it returns
            finally:
                tracer.send_signal(signal.SIGINT)
                tracer.wait(10)
        assert idle == 0
        assert _fsyncs(trace_path.read_text()) == STEPS + 2
    finally:
        server.terminate()
    assert stored_methods(tmp_path / "data" / "agenttx.db")["execute_step"] == STEPS + 1


# ----------------------------------------------------------------- PostgreSQL: round trips


class FrontendMessages:
    """The client half of the PostgreSQL wire protocol, cut into messages as it passes, to
    count the requests the client ends: ``Sync`` (extended protocol — psycopg sends one per
    statement, and one per pipeline, however many statements it holds) and ``Query``
    (simple protocol). After each, the client waits for the server's ``ReadyForQuery``: one
    round trip each."""

    # SSLRequest, GSSENCRequest: answered by one byte (the relayed URL asks for no TLS).
    _SSL_OR_GSS = frozenset({80877103, 80877104})

    def __init__(self) -> None:
        self.buffer = b""
        self.started = False  # the untyped start-up message has gone by
        self.requests = 0

    def feed(self, chunk: bytes) -> None:
        self.buffer += chunk
        while True:
            if not self.started:
                if len(self.buffer) < 8:
                    return
                size = int.from_bytes(self.buffer[:4], "big")
                code = int.from_bytes(self.buffer[4:8], "big")
                if len(self.buffer) < size:
                    return
                self.buffer = self.buffer[size:]
                self.started = code not in self._SSL_OR_GSS
                continue
            if len(self.buffer) < 5:
                return
            size = int.from_bytes(self.buffer[1:5], "big")
            if len(self.buffer) < 1 + size:
                return
            kind, self.buffer = self.buffer[:1], self.buffer[1 + size :]
            if kind in (b"S", b"Q"):
                self.requests += 1


class RoundTripRelay:
    """A TCP relay between a store and PostgreSQL that counts round trips on the wire: the
    requests every connection's client ends with ``Sync`` or ``Query`` (``FrontendMessages``).
    On the wire, not in the driver, so nothing the driver does is missed; by protocol message,
    not by timing, so the count does not depend on how the bytes were split."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self._connections: list[FrontendMessages] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def round_trips(self) -> int:
        return sum(c.requests for c in self._connections)

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()

    async def _relay(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        s_reader, s_writer = await asyncio.open_connection(*self.upstream)
        messages = FrontendMessages()
        self._connections.append(messages)

        async def pump(
            src: asyncio.StreamReader, dst: asyncio.StreamWriter, seen: FrontendMessages | None
        ) -> None:
            try:
                while chunk := await src.read(65536):
                    if seen is not None:
                        seen.feed(chunk)
                    dst.write(chunk)
                    await dst.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        for coro in (pump(c_reader, s_writer, messages), pump(s_reader, c_writer, None)):
            task = asyncio.create_task(coro)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)


@contextlib.asynccontextmanager
async def relayed(url: str) -> AsyncIterator[tuple[str, RoundTripRelay]]:
    """``url`` through a ``RoundTripRelay``, in plain text so the relay can read it."""
    parts = urlsplit(url)
    relay = RoundTripRelay(parts.hostname or "127.0.0.1", parts.port or 5432)
    port = await relay.start()
    user = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    query = "&".join(q for q in [parts.query, "sslmode=disable", "gssencmode=disable"] if q)
    try:
        yield urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{port}", query=query)), relay
    finally:
        await relay.close()


@pytest.mark.stores("postgres")
async def test_a_postgres_state_step_with_a_request_id_is_one_round_trip(
    store_url: str, tmp_path: Path
) -> None:
    async with relayed(store_url) as (url, relay):
        engine = await agenttx.Engine.open(url, background=False, fs_root=tmp_path / "files")
        try:
            before = relay.round_trips
            tx = (await engine.begin(request_id="b-1")).transaction_id
            begin_trips = relay.round_trips - before  # the lookup, then one statement
            # Step 1 warms the lock pool's connection (its handshake is not a step's cost).
            await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1}, request_id="s-1")
            counts = []
            for step in (2, 3):
                before = relay.round_trips
                result = await engine.execute_step(
                    tx, step, "kv.put", {"key": "a", "value": step}, request_id=f"s-{step}"
                )
                counts.append(relay.round_trips - before)
                assert result.next_step_id == step + 1
            before = relay.round_trips
            again = await engine.execute_step(
                tx, 3, "kv.put", {"key": "a", "value": 3}, request_id="s-3"
            )
            replay_trips = relay.round_trips - before
            # One pipeline, one Sync (so one server transaction too): the transaction-scoped
            # lock, then CAS + step row + reply in one statement.
            assert counts == [1, 1]
            assert begin_trips == 2
            # A retry names a step the image has passed: straight to the locked call (lock +
            # row + stored reply, unlock); nothing written.
            assert replay_trips == 2
            assert again == result
            stored = await engine.store.get_request("default", "s-3")
            assert stored is not None
            assert not stored.claimed_only
        finally:
            await engine.close()


@pytest.mark.stores("postgres")
async def test_a_postgres_commit_is_one_round_trip_under_the_lock(
    store_url: str, tmp_path: Path
) -> None:
    async with relayed(store_url) as (url, relay):
        engine = await agenttx.Engine.open(url, background=False, fs_root=tmp_path / "files")
        try:
            counts = []
            for run in range(2):  # the first run warms both pools' connections
                tx = (await engine.begin()).transaction_id
                for step in (1, 2, 3):
                    await engine.execute_step(
                        tx, step, "kv.put", {"key": f"k{run}{step}", "value": 1}
                    )
                before = relay.round_trips
                done = await engine.commit(tx, request_id=f"c-{run}")
                counts.append(relay.round_trips - before)
                assert done.committed
            # The lock with the row, the chain's head and the request's lookup; the commit
            # (heads, the success and the conflict statements) in one pipeline; the unlock.
            assert counts[1] == 3
            assert await engine.store.read_state("default", "kv/k13", None) == ("1", 2)
            stored = await engine.store.get_request("default", "c-1")
            assert stored is not None
            assert json.loads(stored.reply_json)["ok"]["committed"] is True
        finally:
            await engine.close()


# ----------------------------------------------------------------- an id taken meanwhile


async def test_an_id_taken_while_a_state_step_ran_rolls_the_step_back(
    open_engine: Any,
) -> None:
    holder: dict[str, Any] = {}

    @agenttx.tool(name="test.race_state")
    async def race_state(ctx: agenttx.ToolContext, key: str) -> dict[str, str]:
        # A twin on another transaction stores its reply under the same id while we run.
        engine = holder["engine"]
        twin = StoredReply("shared-id", "execute_step", "another-payload", '{"ok": {}}', 1.0)
        await engine.store.put_request("default", twin)
        await ctx.state.put(key, "written")
        return {"key": key}

    engine = await open_engine(tools=[race_state])
    holder["engine"] = engine
    tx = (await engine.begin()).transaction_id
    with pytest.raises(agenttx.AlreadyExists, match="different execute_step request"):
        await engine.execute_step(tx, 1, "test.race_state", {"key": "k"}, request_id="shared-id")
    info = await engine.get_transaction(tx)
    assert info.next_step_id == 1  # the step's write was rolled back with its reply
    assert info.steps == []
    # The image was reloaded: the transaction goes on as if the call had never been made.
    ok = await engine.execute_step(tx, 1, "kv.put", {"key": "k", "value": 1}, request_id="own")
    assert ok.status is agenttx.StepStatus.SUCCESS
    await engine.commit(tx)
    assert (await engine.get_transaction(tx)).status == "COMMITTED"


async def test_an_outside_step_holds_its_id_before_the_outside_call(open_engine: Any) -> None:
    holder: dict[str, Any] = {}

    @agenttx.tool(name="test.charge", effect="compensatable")
    async def charge(ctx: agenttx.ToolContext, order: str) -> dict[str, str]:
        await ctx.register_undo({"order": order})
        # While the outside call is under way, another request tries the same id.
        engine = holder["engine"]
        with pytest.raises(agenttx.AlreadyExists):
            await engine.execute_step(
                holder["other"], 1, "kv.put", {"key": "x", "value": 1}, request_id="pay-1"
            )
        holder["refused"] = True
        return {"order": order}

    @charge.undo
    async def refund(ctx: Any, order: str) -> None:
        return None

    engine = await open_engine(tools=[charge])
    holder["engine"] = engine
    tx = (await engine.begin()).transaction_id
    holder["other"] = (await engine.begin()).transaction_id
    first = await engine.execute_step(tx, 1, "test.charge", {"order": "o-1"}, request_id="pay-1")
    assert holder["refused"]
    assert first.status is agenttx.StepStatus.SUCCESS
    assert (await engine.get_transaction(holder["other"])).next_step_id == 1
    again = await engine.execute_step(tx, 1, "test.charge", {"order": "o-1"}, request_id="pay-1")
    assert again == first  # the claim was filled in with the step's reply
    stored = await engine.store.get_request("default", "pay-1")
    assert stored is not None
    assert not stored.claimed_only


async def test_a_request_id_reused_on_another_transaction_is_refused_before_it_runs(
    engine: agenttx.Engine,
) -> None:
    a = (await engine.begin()).transaction_id
    b = (await engine.begin()).transaction_id
    await engine.execute_step(a, 1, "kv.put", {"key": "a", "value": 1}, request_id="once")
    with pytest.raises(agenttx.AlreadyExists):
        await engine.execute_step(b, 1, "kv.put", {"key": "a", "value": 1}, request_id="once")
    with pytest.raises(agenttx.AlreadyExists):
        await engine.commit(b, request_id="once")
    with pytest.raises(agenttx.AlreadyExists):
        await engine.begin(request_id="once")
    assert (await engine.get_transaction(b)).next_step_id == 1
    assert (await engine.get_transaction(b)).status == "ACTIVE"


async def test_twin_begins_on_two_engines_agree_on_one_transaction(open_engine: Any) -> None:
    first, second = await open_engine(), await open_engine()
    a, b = await asyncio.gather(
        first.begin(agent_id="twin", request_id="twin-1"),
        second.begin(agent_id="twin", request_id="twin-1"),
    )
    assert a == b
    listed = await first.list_transactions(agent_id="twin")
    assert [t.transaction_id for t in listed] == [a.transaction_id]


async def test_a_commit_stores_its_reply_with_the_commit(engine: agenttx.Engine) -> None:
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "c", "value": 1})
    done = await engine.commit(tx, request_id="c-1")
    stored = await engine.store.get_request("default", "c-1")
    assert stored is not None
    assert json.loads(stored.reply_json)["ok"]["committed"] is True
    assert await engine.commit(tx, request_id="c-1") == done
