"""Staged effects: dropped on rewind and abort, released after commit at least once with
their idempotency key, retried with backoff, dead-lettered, resumed after a restart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import agenttx
from agenttx.effects import Effect, PermanentDeliveryError


class Recorder:
    def __init__(self, fail_times: int = 0, permanent: bool = False) -> None:
        self.fail_times = fail_times
        self.permanent = permanent
        self.seen: list[Effect] = []

    async def deliver(self, effect: Effect) -> None:
        self.seen.append(effect)
        if self.permanent:
            raise PermanentDeliveryError("address rejected")
        if self.fail_times > 0:
            self.fail_times -= 1
            raise ConnectionError("smtp down")


def _outbox(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "outbox.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_effects_are_released_once_after_commit(
    engine: agenttx.Engine, tmp_path: Path
) -> None:
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(
        tx, 1, "effect.stage", {"channel": "email", "payload": {"to": "a"}, "idempotency_key": "e1"}
    )
    assert _outbox(tmp_path) == []  # nothing escapes before commit
    c = await engine.commit(tx)
    assert (c.effects_dispatched, c.dispatch_errors) == (1, [])
    lines = _outbox(tmp_path)
    assert [(x["tx_id"], x["step_id"], x["channel"], x["idempotency_key"]) for x in lines] == [
        (tx, 1, "email", "e1")
    ]
    assert lines[0]["payload"] == {"to": "a"}
    assert list(lines[0]) == [
        "tx_id",
        "committed_at_ms",
        "step_id",
        "channel",
        "payload",
        "idempotency_key",
    ]


async def test_rewind_and_abort_drop_staged_effects(engine: agenttx.Engine, tmp_path: Path) -> None:
    tx = (await engine.begin()).transaction_id
    for i in range(1, 4):
        await engine.execute_step(
            tx, i, "effect.stage", {"channel": "email", "idempotency_key": f"k{i}"}
        )
    await engine.rollback(tx, to_step=2)
    await engine.execute_step(tx, 2, "effect.stage", {"channel": "email", "idempotency_key": "k2b"})
    await engine.commit(tx)
    assert [x["idempotency_key"] for x in _outbox(tmp_path)] == ["k1", "k2b"]

    aborted = (await engine.begin()).transaction_id
    await engine.execute_step(
        aborted, 1, "effect.stage", {"channel": "email", "idempotency_key": "x"}
    )
    await engine.rollback(aborted)
    assert "x" not in [x["idempotency_key"] for x in _outbox(tmp_path)]


async def test_a_failed_step_stages_nothing(open_engine: Any, tmp_path: Path) -> None:
    @agenttx.tool(name="mail.then_fail", effect="state")
    async def then_fail(ctx: agenttx.ToolContext) -> None:
        ctx.stage_effect("email", {"to": "z"}, "never")
        raise RuntimeError("boom after staging")

    engine = await open_engine(tools=[then_fail])
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "mail.then_fail", {})
    await engine.execute_step(tx, 1, "kv.put", {"key": "a"})
    await engine.commit(tx)
    assert _outbox(tmp_path) == []


async def test_user_channel_retries_with_backoff_then_delivers(
    open_engine: Any, clock: Any
) -> None:
    mail = Recorder(fail_times=2)
    engine = await open_engine(
        channels={"email": mail}, clock=clock, background=False, dispatch_backoff_s=1.0
    )
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "effect.stage", {"channel": "email", "idempotency_key": "r1"})
    c = await engine.commit(tx)
    assert c.effects_dispatched == 0
    assert "smtp down" in c.dispatch_errors[0]
    assert await engine.dispatcher.run_once() == 0  # backing off: not due yet
    clock.advance(1.0)
    assert await engine.dispatcher.run_once() == 1  # second attempt fails, backoff doubles
    clock.advance(1.5)
    assert await engine.dispatcher.run_once() == 0
    clock.advance(0.5)
    assert await engine.dispatcher.run_once() == 1
    assert [e.idempotency_key for e in mail.seen] == ["r1", "r1", "r1"]
    assert [e.attempt for e in mail.seen] == [1, 2, 3]
    rows = await engine.store.list_outbox()
    assert [(r.status, r.attempts) for r in rows] == [("delivered", 3)]


async def test_dead_letters_are_listed_and_can_be_requeued(open_engine: Any, clock: Any) -> None:
    mail = Recorder(permanent=True)
    engine = await open_engine(channels={"email": mail}, clock=clock, background=False)
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "effect.stage", {"channel": "email", "idempotency_key": "d1"})
    c = await engine.commit(tx)
    assert "address rejected" in c.dispatch_errors[0]
    dead = await engine.store.list_outbox(statuses=["dead"])
    assert [r.idempotency_key for r in dead] == ["d1"]
    assert dead[0].last_error == "address rejected"
    mail.permanent = False
    assert await engine.store.requeue_outbox(dead[0].id, now=clock())
    assert await engine.dispatcher.run_once() == 1
    assert (await engine.store.list_outbox(statuses=["delivered"]))[0].idempotency_key == "d1"


async def test_retries_stop_at_max_attempts(open_engine: Any, clock: Any) -> None:
    mail = Recorder(fail_times=100)
    engine = await open_engine(
        channels={"email": mail},
        clock=clock,
        background=False,
        dispatch_max_attempts=3,
        dispatch_backoff_s=0.1,
    )
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "effect.stage", {"channel": "email", "idempotency_key": "m"})
    await engine.commit(tx)
    for _ in range(10):
        clock.advance(10)
        await engine.dispatcher.run_once()
    assert len(mail.seen) == 3
    assert [r.status for r in await engine.store.list_outbox()] == ["dead"]


async def test_undelivered_effects_resume_after_a_restart(
    open_engine: Any, clock: Any, tmp_path: Path
) -> None:
    mail = Recorder(fail_times=1)
    first = await open_engine(channels={"email": mail}, clock=clock, background=False)
    tx = (await first.begin()).transaction_id
    await first.execute_step(tx, 1, "effect.stage", {"channel": "email", "idempotency_key": "z"})
    await first.commit(tx)  # first attempt fails
    await first.close()
    clock.advance(60)
    second = await open_engine(channels={"email": mail}, clock=clock, background=False)
    assert await second.dispatcher.run_once() == 1
    assert [e.idempotency_key for e in mail.seen] == ["z", "z"]


async def test_jsonl_channel_writes_each_key_once(tmp_path: Path) -> None:
    channel = agenttx.JsonlChannel(tmp_path / "o.jsonl")
    effect = Effect(1, "tx", 1, "email", {"a": 1}, "same-key", 1, 0.0)
    await channel.deliver(effect)
    await channel.deliver(effect)
    # A new channel object (a restarted process) still knows the key is already written.
    await agenttx.JsonlChannel(tmp_path / "o.jsonl").deliver(effect)
    assert len((tmp_path / "o.jsonl").read_text().splitlines()) == 1


# SQLite only: a SQLite store has one owner, so a new start releases a dead predecessor's
# claims at once; a PostgreSQL store is shared by replicas, so there the claim lease runs out.
@pytest.mark.stores("sqlite")
async def test_effects_a_dead_process_had_claimed_go_out_at_the_next_start(
    open_engine: Any, tmp_path: Path
) -> None:
    first = await open_engine()
    tx = (await first.begin()).transaction_id
    await first.execute_step(
        tx, 1, "effect.stage", {"channel": "email", "payload": {}, "idempotency_key": "k1"}
    )

    async def die_before_delivering(rows: Any) -> tuple[int, list[str]]:
        return 0, []  # as if the process died right after the durable commit

    first.committer.release = die_before_delivering  # type: ignore[method-assign]
    assert (await first.commit(tx)).effects_queued == 1
    assert [r.status for r in await first.store.list_outbox()] == ["delivering"]  # claimed
    await first.close()
    assert _outbox(tmp_path) == []

    # The next start owns the store alone: the claim is released, not waited out (30 s).
    second = await open_engine()
    await second.dispatcher.run_once()
    assert [x["idempotency_key"] for x in _outbox(tmp_path)] == ["k1"]
