"""Isolation levels as a user sees them (``docs/isolation.md``), checked with real concurrent
histories: asyncio tasks interleaving the steps of several transactions on one engine, and two
engines on one SQLite file (as two processes would be)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import agenttx
from agenttx import StepStatus, TxStatus
from pg import create_database, drop_database, require_postgres, url_for

SNAPSHOT, SERIALIZABLE, READ_COMMITTED = "snapshot", "serializable", "read_committed"
LEVELS = [SNAPSHOT, SERIALIZABLE, READ_COMMITTED]
# The engines fixture picks its stores itself (SQLite and PostgreSQL, one or two engines).
pytestmark = pytest.mark.stores("sqlite")


@agenttx.tool(name="counter.incr", effect="state")
async def counter_incr(ctx: agenttx.ToolContext, key: str) -> int:
    value = int(await ctx.state.get(key, 0))
    await asyncio.sleep(0)  # let other transactions' steps and commits run in between
    await ctx.state.put(key, value + 1)
    return value + 1


@agenttx.tool(name="state.read", effect="read")
async def state_read(ctx: agenttx.ToolContext, key: str) -> Any:
    return await ctx.state.get(key)


@agenttx.tool(name="state.write", effect="state")
async def state_write(ctx: agenttx.ToolContext, key: str, value: Any) -> Any:
    await ctx.state.put(key, value)
    return value


@agenttx.tool(name="oncall.leave", effect="state")
async def oncall_leave(ctx: agenttx.ToolContext, me: str, other: str) -> dict[str, bool]:
    """Go off call, but only if the other doctor is on call (the invariant: one stays)."""
    mine = bool(await ctx.state.get(f"oncall/{me}", False))
    theirs = bool(await ctx.state.get(f"oncall/{other}", False))
    if not (mine and theirs):
        raise RuntimeError(f"{other} is not on call, so {me} must stay on call")
    await ctx.state.put(f"oncall/{me}", False)
    return {"me": False, "other": theirs}


@agenttx.tool(name="state.expect", effect="read")
async def state_expect(ctx: agenttx.ToolContext, key: str, value: Any) -> Any:
    """Fail unless ``key`` holds ``value`` (a check an agent runs before deciding)."""
    actual = await ctx.state.get(key)
    if actual != value:
        raise ValueError(f"{key} is {json.dumps(actual)}, expected {json.dumps(value)}")
    return actual


TOOLS = [counter_incr, state_read, state_write, oncall_leave, state_expect]


@pytest.fixture(
    params=[
        "one_engine",
        "two_engines",
        pytest.param("postgres_one_engine", marks=pytest.mark.postgres),
        pytest.param("postgres_two_replicas", marks=pytest.mark.postgres),
    ]
)
async def engines(
    request: pytest.FixtureRequest, open_engine: Any
) -> AsyncIterator[tuple[agenttx.Engine, agenttx.Engine]]:
    """Two handles for the histories: the same engine twice, or two engines on one store —
    one SQLite file, or one PostgreSQL database (two replicas)."""
    database = ""
    kwargs: dict[str, Any] = {}
    if request.param.startswith("postgres"):
        require_postgres()
        database = create_database()
        kwargs["url"] = url_for(database)
    a = await open_engine(tools=TOOLS, **kwargs)
    b = (
        a
        if request.param.endswith("one_engine")
        else await open_engine(tools=TOOLS, background=False, **kwargs)
    )
    try:
        yield a, b
    finally:
        if database:
            await a.close()
            await b.close()
            drop_database(database)


async def fresh_read(engine: agenttx.Engine, key: str) -> Any:
    """What a brand-new transaction reads for ``key``."""
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(tx, 1, "state.read", {"key": key})
    assert r.status is StepStatus.SUCCESS
    await engine.rollback(tx)
    return r.output


async def seed(engine: agenttx.Engine, **values: Any) -> None:
    tx = (await engine.begin()).transaction_id
    for step, (key, value) in enumerate(values.items(), start=1):
        r = await engine.execute_step(tx, step, "state.write", {"key": key, "value": value})
        assert r.status is StepStatus.SUCCESS
    await engine.commit(tx)


async def write_and_commit(engine: agenttx.Engine, key: str, value: Any) -> None:
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(tx, 1, "state.write", {"key": key, "value": value})
    assert r.status is StepStatus.SUCCESS
    await engine.commit(tx)


# ----------------------------------------------------------------- concurrent increments


@dataclass
class Tally:
    commits: int = 0
    conflicts: list[agenttx.CommitConflict] = field(default_factory=list)


async def increment_once(
    engine: agenttx.Engine, isolation: str, key: str, pattern: str, tally: Tally
) -> None:
    """One client's increment: a transaction per try, a new one after each CommitConflict."""
    while True:
        tx = (await engine.begin(isolation=isolation)).transaction_id
        if pattern == "one_step":
            r = await engine.execute_step(tx, 1, "counter.incr", {"key": key})
        else:  # read_then_write: the client reads in one step and writes in the next
            seen = (await engine.execute_step(tx, 1, "state.read", {"key": key})).output or 0
            await asyncio.sleep(0)
            r = await engine.execute_step(tx, 2, "state.write", {"key": key, "value": seen + 1})
        assert r.status is StepStatus.SUCCESS
        try:
            await engine.commit(tx)
        except agenttx.CommitConflict as exc:
            tally.conflicts.append(exc)
            continue
        tally.commits += 1
        return


@pytest.mark.parametrize(
    ("isolation", "pattern"),
    [
        (SNAPSHOT, "one_step"),
        (SNAPSHOT, "read_then_write"),
        (SERIALIZABLE, "one_step"),
        (SERIALIZABLE, "read_then_write"),
        # A read and a write of one key in the same step are validated even here.
        (READ_COMMITTED, "one_step"),
    ],
)
async def test_concurrent_increments_lose_no_update(
    engines: tuple[agenttx.Engine, agenttx.Engine], isolation: str, pattern: str
) -> None:
    workers, increments = 4, 5
    tally = Tally()

    async def client(n: int) -> None:
        engine = engines[n % 2]
        for _ in range(increments):
            await increment_once(engine, isolation, "counter/hits", pattern, tally)

    await asyncio.gather(*(client(n) for n in range(workers)))

    assert tally.commits == workers * increments
    assert await fresh_read(engines[0], "counter/hits") == tally.commits
    assert await fresh_read(engines[1], "counter/hits") == tally.commits
    # The clients really did overlap: some of them lost the race and retried.
    assert tally.conflicts
    assert all(c.keys == ["counter/hits"] and c.code == "ABORTED" for c in tally.conflicts)


@pytest.mark.parametrize("isolation", LEVELS)
async def test_read_then_write_across_steps_loses_an_update_only_under_read_committed(
    engines: tuple[agenttx.Engine, agenttx.Engine], isolation: str
) -> None:
    """A and B both read the counter, A writes and commits, then B writes and commits.
    read_committed loses A's update; snapshot and serializable reject B."""
    a, b = engines
    await seed(a, **{"counter/c": 0})
    ta = (await a.begin(isolation=isolation)).transaction_id
    tb = (await b.begin(isolation=isolation)).transaction_id
    seen_a, seen_b = await asyncio.gather(
        a.execute_step(ta, 1, "state.read", {"key": "counter/c"}),
        b.execute_step(tb, 1, "state.read", {"key": "counter/c"}),
    )
    assert seen_a.output == seen_b.output == 0
    await a.execute_step(ta, 2, "state.write", {"key": "counter/c", "value": seen_a.output + 1})
    await a.commit(ta)
    await b.execute_step(tb, 2, "state.write", {"key": "counter/c", "value": seen_b.output + 1})

    if isolation == READ_COMMITTED:
        assert (await b.commit(tb)).committed
        # Two increments committed, the counter moved by one: A's update is lost.
        assert await fresh_read(a, "counter/c") == 1
        return
    with pytest.raises(agenttx.CommitConflict) as info:
        await b.commit(tb)
    assert info.value.keys == ["counter/c"]
    assert info.value.kind == "write"
    assert (await b.get_transaction(tb)).status is TxStatus.FAILED
    assert await fresh_read(a, "counter/c") == 1
    # The client's retry in a new transaction sees A's commit and completes the increment.
    await increment_once(b, isolation, "counter/c", "read_then_write", Tally())
    assert await fresh_read(a, "counter/c") == 2


@pytest.mark.parametrize("isolation", LEVELS)
async def test_write_written_before_the_other_commit_conflicts_at_every_level(
    engines: tuple[agenttx.Engine, agenttx.Engine], isolation: str
) -> None:
    a, b = engines
    await seed(a, **{"acct/1": 100})
    loser = (await a.begin(isolation=isolation)).transaction_id
    await a.execute_step(loser, 1, "state.write", {"key": "acct/1", "value": 50})
    await write_and_commit(b, "acct/1", 70)
    with pytest.raises(agenttx.CommitConflict) as info:
        await a.commit(loser)
    assert info.value.keys == ["acct/1"]
    assert await fresh_read(a, "acct/1") == 70


# ----------------------------------------------------------------- write skew


@pytest.mark.parametrize("isolation", LEVELS)
async def test_write_skew_between_two_on_call_doctors(
    engines: tuple[agenttx.Engine, agenttx.Engine], isolation: str
) -> None:
    """Alice and Bob are on call; each transaction reads both flags and takes its own doctor
    off call if the other one is on. Run side by side, each sees the other on call."""
    a, b = engines
    await seed(a, **{"oncall/alice": True, "oncall/bob": True})
    t1 = (await a.begin(isolation=isolation)).transaction_id
    t2 = (await b.begin(isolation=isolation)).transaction_id
    r1, r2 = await asyncio.gather(
        a.execute_step(t1, 1, "oncall.leave", {"me": "alice", "other": "bob"}),
        b.execute_step(t2, 1, "oncall.leave", {"me": "bob", "other": "alice"}),
    )
    assert r1.status is r2.status is StepStatus.SUCCESS
    outcomes = await asyncio.gather(a.commit(t1), b.commit(t2), return_exceptions=True)
    alice = await fresh_read(a, "oncall/alice")
    bob = await fresh_read(a, "oncall/bob")

    if isolation != SERIALIZABLE:
        # Write skew: the write sets do not overlap, so both commit and nobody is on call.
        assert all(isinstance(o, agenttx.CommitResult) and o.committed for o in outcomes)
        assert (alice, bob) == (False, False)
        return
    conflicts = [o for o in outcomes if isinstance(o, agenttx.CommitConflict)]
    assert len(conflicts) == 1, outcomes
    assert sum(isinstance(o, agenttx.CommitResult) for o in outcomes) == 1
    conflict = conflicts[0]
    assert conflict.kind == "read"
    assert "read-set conflict" in str(conflict)
    # The loser read the winner's doctor, whom the winner took off call.
    loser_tx, loser_engine = (t1, a) if outcomes[0] is conflict else (t2, b)
    assert conflict.keys == (["oncall/bob"] if loser_tx == t1 else ["oncall/alice"])
    info = await loser_engine.get_transaction(loser_tx)
    assert info.status is TxStatus.FAILED
    assert conflict.keys[0] in info.abort_reason
    assert [alice, bob].count(True) == 1  # the invariant holds


@pytest.mark.parametrize("isolation", LEVELS)
async def test_second_doctor_decides_after_the_first_committed(
    engines: tuple[agenttx.Engine, agenttx.Engine], isolation: str
) -> None:
    """T2 began before T1 committed but runs its step after: read_committed sees Alice off
    call and refuses; snapshot reads the old flags and commits the skew; serializable
    rejects T2 at commit."""
    a, b = engines
    await seed(a, **{"oncall/alice": True, "oncall/bob": True})
    t1 = (await a.begin(isolation=isolation)).transaction_id
    t2 = (await b.begin(isolation=isolation)).transaction_id
    await a.execute_step(t1, 1, "oncall.leave", {"me": "alice", "other": "bob"})
    await a.commit(t1)
    r2 = await b.execute_step(t2, 1, "oncall.leave", {"me": "bob", "other": "alice"})

    if isolation == READ_COMMITTED:
        assert r2.status is not StepStatus.SUCCESS
        assert "alice is not on call" in r2.clean_hint
    elif isolation == SNAPSHOT:
        assert r2.status is StepStatus.SUCCESS
        await b.commit(t2)
        assert await fresh_read(a, "oncall/bob") is False
    else:
        assert r2.status is StepStatus.SUCCESS
        with pytest.raises(agenttx.CommitConflict) as info:
            await b.commit(t2)
        assert (info.value.kind, info.value.keys) == ("read", ["oncall/alice"])
        assert await fresh_read(a, "oncall/bob") is True


@pytest.mark.parametrize("observed_by", ["failed_check", "rewound_step"])
async def test_serializable_validates_reads_the_agent_acted_on_even_if_undone(
    open_engine: Any, observed_by: str
) -> None:
    """Bob's agent first looks at Alice's flag; that attempt fails (or the agent rewinds it)
    but tells it Alice is on call, so it takes Bob off call. Meanwhile Alice went off call.
    Bob's decision rests on a read that is no longer current: serializable must reject it."""
    a = b = await open_engine(tools=TOOLS)
    await seed(a, **{"oncall/alice": True, "oncall/bob": True})
    t1 = (await a.begin(isolation=SERIALIZABLE)).transaction_id
    t2 = (await b.begin(isolation=SERIALIZABLE)).transaction_id
    if observed_by == "failed_check":
        r = await b.execute_step(t2, 1, "state.expect", {"key": "oncall/alice", "value": False})
        assert r.status is StepStatus.ROLLBACK_TRIGGERED
        assert "oncall/alice is true" in r.clean_hint  # what the agent now knows
    else:
        r = await b.execute_step(t2, 1, "state.read", {"key": "oncall/alice"})
        assert r.output is True
        await b.rollback(t2, to_step=1)
    assert (await b.get_transaction(t2)).next_step_id == 1
    await b.execute_step(t2, 1, "state.write", {"key": "oncall/bob", "value": False})

    await a.execute_step(t1, 1, "oncall.leave", {"me": "alice", "other": "bob"})
    await a.commit(t1)

    with pytest.raises(agenttx.CommitConflict) as info:
        await b.commit(t2)
    assert (info.value.kind, info.value.keys) == ("read", ["oncall/alice"])
    assert await fresh_read(a, "oncall/bob") is True


# ----------------------------------------------------------------- what reads see


@pytest.mark.parametrize("isolation", LEVELS)
async def test_reads_see_the_begin_snapshot_or_the_latest_commit(
    engines: tuple[agenttx.Engine, agenttx.Engine], isolation: str
) -> None:
    a, b = engines
    await seed(a, **{"doc/x": "old"})
    reader = (await a.begin(isolation=isolation)).transaction_id
    await write_and_commit(b, "doc/x", "new")
    await write_and_commit(b, "doc/y", "created later")

    x = (await a.execute_step(reader, 1, "state.read", {"key": "doc/x"})).output
    y = (await a.execute_step(reader, 2, "state.read", {"key": "doc/y"})).output
    if isolation == READ_COMMITTED:
        assert (x, y) == ("new", "created later")
    else:
        assert (x, y) == ("old", None)

    # Non-repeatable read: the same key read again after another commit.
    await write_and_commit(b, "doc/x", "newer")
    again = (await a.execute_step(reader, 3, "state.read", {"key": "doc/x"})).output
    assert again == ("newer" if isolation == READ_COMMITTED else "old")

    # A transaction that begins now sees every commit.
    assert await fresh_read(b, "doc/x") == "newer"

    if isolation == SERIALIZABLE:
        # Even a read-only transaction cannot commit once what it read was overwritten.
        with pytest.raises(agenttx.CommitConflict) as info:
            await a.commit(reader)
        assert info.value.kind == "read"
        assert sorted(info.value.keys) == ["doc/x", "doc/y"]
    else:
        assert (await a.commit(reader)).committed


@pytest.mark.parametrize("isolation", LEVELS)
async def test_own_writes_come_first_and_a_rewind_takes_them_back(
    engines: tuple[agenttx.Engine, agenttx.Engine], isolation: str
) -> None:
    a, b = engines
    await seed(a, **{"doc/a": "committed"})
    tx = (await a.begin(isolation=isolation)).transaction_id

    async def step(n: int, tool: str, **args: Any) -> Any:
        r = await a.execute_step(tx, n, tool, args)
        assert r.status is StepStatus.SUCCESS, r.clean_hint
        return r.output

    await step(1, "state.write", key="doc/a", value="one")
    await step(2, "state.write", key="doc/a", value="two")
    await step(3, "state.write", key="doc/b", value="new")
    assert await step(4, "state.read", key="doc/a") == "two"
    assert await step(5, "state.read", key="doc/b") == "new"
    # Nobody else sees them before the commit (no dirty reads).
    assert await fresh_read(b, "doc/a") == "committed"
    assert await fresh_read(b, "doc/b") is None

    await a.rollback(tx, to_step=3)
    assert await step(3, "state.read", key="doc/b") is None
    assert await step(4, "state.read", key="doc/a") == "two"
    await a.rollback(tx, to_step=2)
    assert await step(2, "state.read", key="doc/a") == "one"
    await a.rollback(tx, to_step=1)
    assert await step(1, "state.read", key="doc/a") == "committed"
    await a.rollback(tx, to_step=1)

    # Writes that were rewound are neither published nor validated: another transaction may
    # commit the same key meanwhile without making this one conflict. Serializable is the
    # exception: the agent READ doc/a in a (rewound) step and may have acted on it, so every
    # read it made is validated (see docs/isolation.md).
    await write_and_commit(b, "doc/a", "theirs")
    await step(1, "state.write", key="doc/c", value="mine")
    if isolation == "serializable":
        with pytest.raises(agenttx.CommitConflict, match="doc/a"):
            await a.commit(tx)
        return
    assert (await a.commit(tx)).committed
    assert await fresh_read(b, "doc/a") == "theirs"
    assert await fresh_read(b, "doc/b") is None
    assert await fresh_read(b, "doc/c") == "mine"


# ----------------------------------------------------------------- the losing transaction


async def test_commit_conflict_fails_the_loser_compensates_and_sends_nothing(
    engines: tuple[agenttx.Engine, agenttx.Engine], tmp_path: Path
) -> None:
    a, b = engines
    files = tmp_path / "files"
    files.mkdir(exist_ok=True)
    (files / "notes.txt").write_text("original")
    outbox = tmp_path / "outbox.jsonl"

    loser = (await a.begin()).transaction_id
    steps = [
        ("fs.write", {"path": "notes.txt", "contents": "loser was here"}),
        ("state.write", {"key": "acct/42", "value": "loser"}),
        ("effect.stage", {"channel": "email", "payload": {"to": "x"}, "idempotency_key": "L"}),
    ]
    for n, (tool, args) in enumerate(steps, start=1):
        assert (await a.execute_step(loser, n, tool, args)).status is StepStatus.SUCCESS
    assert (files / "notes.txt").read_text() == "loser was here"  # files are not isolated

    winner = (await b.begin()).transaction_id
    await b.execute_step(winner, 1, "state.write", {"key": "acct/42", "value": "winner"})
    await b.execute_step(
        winner,
        2,
        "effect.stage",
        {"channel": "email", "payload": {"to": "y"}, "idempotency_key": "W"},
    )
    await b.commit(winner)

    with pytest.raises(agenttx.CommitConflict) as info:
        await a.commit(loser)
    err = info.value
    assert err.code == "ABORTED"
    assert err.keys == ["acct/42"]
    assert "acct/42" in str(err)
    assert err.compensation_errors == []

    tx_info = await a.get_transaction(loser)
    assert tx_info.status is TxStatus.FAILED
    assert "acct/42" in tx_info.abort_reason
    assert not any(s.live for s in tx_info.steps)
    # Its compensation ran: the file has its old bytes back.
    assert (files / "notes.txt").read_text() == "original"
    assert await fresh_read(a, "acct/42") == "winner"
    with pytest.raises(agenttx.NotActive):
        await a.commit(loser)

    # The winner's effect went out; the loser's staged effect never will.
    await a.dispatcher.run_once()
    await b.dispatcher.run_once()
    delivered = [json.loads(line)["idempotency_key"] for line in outbox.read_text().splitlines()]
    assert delivered == ["W"]
    assert await a.store.list_outbox(tx_id=loser) == []


@pytest.mark.parametrize("isolation", LEVELS)
async def test_two_inserts_of_one_record_id_one_wins(
    engines: tuple[agenttx.Engine, agenttx.Engine], isolation: str
) -> None:
    a, b = engines
    t1 = (await a.begin(isolation=isolation)).transaction_id
    t2 = (await b.begin(isolation=isolation)).transaction_id

    def insert(name: str) -> dict[str, Any]:
        return {"table": "customers", "id": "c-1", "fields": {"name": name}}

    r1, r2 = await asyncio.gather(
        a.execute_step(t1, 1, "record.insert", insert("Acme")),
        b.execute_step(t2, 1, "record.insert", insert("Globex")),
    )
    assert r1.status is r2.status is StepStatus.SUCCESS  # neither sees the other's insert
    outcomes = await asyncio.gather(a.commit(t1), b.commit(t2), return_exceptions=True)
    conflicts = [o for o in outcomes if isinstance(o, agenttx.CommitConflict)]
    assert len(conflicts) == 1, outcomes
    assert conflicts[0].keys == ["records/customers/c-1"]
    winner_name = "Acme" if isinstance(outcomes[0], agenttx.CommitResult) else "Globex"

    reader = (await a.begin()).transaction_id
    got = await a.execute_step(reader, 1, "record.get", {"table": "customers", "id": "c-1"})
    assert got.output == {"name": winner_name, "id": "c-1"}

    # The loser's retry sees the committed row and gets the unique-key failure as a hint.
    retry = (await b.begin(isolation=isolation)).transaction_id
    r = await b.execute_step(retry, 1, "record.insert", insert("Initech"))
    assert r.status is not StepStatus.SUCCESS
    assert "already exists" in r.clean_hint


class _Crash(BaseException):
    """Stands for the process dying at this point."""


async def test_a_commit_conflict_interrupted_by_a_crash_is_finished_by_recovery(
    open_engine: Any, tmp_path: Path
) -> None:
    engine = await open_engine(tools=TOOLS, background=False)
    files = tmp_path / "files"
    files.mkdir(exist_ok=True)
    (files / "notes.txt").write_text("original")
    loser = (await engine.begin()).transaction_id
    await engine.execute_step(loser, 1, "fs.write", {"path": "notes.txt", "contents": "new"})
    await engine.execute_step(loser, 2, "state.write", {"key": "acct/7", "value": "loser"})
    await write_and_commit(engine, "acct/7", "winner")

    async def crash(*args: Any, **kwargs: Any) -> Any:
        raise _Crash

    # The conflict is durable (the transaction is ROLLING_BACK) but the process dies before
    # compensating; the next engine to open the file finishes the abort.
    engine.rewinder.rewind = crash  # type: ignore[method-assign]
    with pytest.raises(_Crash):
        await engine.commit(loser)
    restarted = await open_engine(tools=TOOLS, background=False)
    info = await restarted.get_transaction(loser)
    assert info.status is TxStatus.FAILED
    assert (files / "notes.txt").read_text() == "original"
    assert await fresh_read(restarted, "acct/7") == "winner"
    # The user can still tell why it failed.
    assert "conflict" in info.abort_reason


@pytest.mark.parametrize("action", ["commit", "rollback"])
async def test_an_engine_with_a_stale_image_of_the_transaction_recovers_after_one_conflict(
    open_engine: Any, action: str
) -> None:
    """Any replica takes any call: B ran step 2 of a transaction A began, so A's cached image
    is stale. A's next call may lose its compare-and-set once (RevisionConflict); the client
    resends it and it goes through against the fresh state."""
    a = await open_engine(tools=TOOLS)
    b = await open_engine(tools=TOOLS, background=False)
    tx = (await a.begin()).transaction_id
    await a.execute_step(tx, 1, "state.write", {"key": "r/1", "value": 1})
    await b.execute_step(tx, 2, "state.write", {"key": "r/2", "value": 2})

    async def call() -> Any:
        return await (a.commit(tx) if action == "commit" else a.rollback(tx))

    try:
        result = await call()
    except agenttx.RevisionConflict:
        result = await call()
    if action == "commit":
        assert result.steps_committed == 2
        assert await fresh_read(b, "r/2") == 2
        assert (await b.get_transaction(tx)).status is TxStatus.COMMITTED
    else:
        assert result.transaction_status is TxStatus.ROLLED_BACK
        assert await fresh_read(b, "r/2") is None


async def test_a_second_engine_opening_the_file_leaves_a_running_step_alone(
    open_engine: Any,
) -> None:
    """Two engines on one file in one process (say, one per tenant): opening the second runs
    crash recovery, which must not mistake the first engine's running step for a dead one."""
    started, release = asyncio.Event(), asyncio.Event()
    undone: list[str] = []

    @agenttx.tool(name="slow.effect", effect="compensatable", idempotent=True)
    async def slow_effect(ctx: agenttx.ToolContext, name: str) -> str:
        await ctx.register_undo({"name": name})
        started.set()
        await release.wait()
        return name

    @slow_effect.undo
    async def undo_slow_effect(ctx: Any, name: str) -> None:
        undone.append(name)

    a = await open_engine(tools=[*TOOLS, slow_effect])
    tx = (await a.begin()).transaction_id
    running = asyncio.create_task(a.execute_step(tx, 1, "slow.effect", {"name": "x"}))
    await started.wait()
    await open_engine(tools=[*TOOLS, slow_effect], background=False)
    release.set()
    r = await running
    assert undone == []
    assert r.status is StepStatus.SUCCESS
    assert (await a.commit(tx)).committed
