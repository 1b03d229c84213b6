"""Dead letters are kept ``dead_letter_retention_days`` (default 90) after their last attempt,
then maintenance deletes them — and the ended transaction each one kept goes in the same pass.
Never while their transaction is open; a retried one counts from its new death; 0 (or
``retention_days = 0``) keeps them forever. With a fake clock, on both stores; and the
``--dead-letter-retention-days`` flag of ``agenttx serve``."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

import agenttx
from agenttx import NotFound, PermanentDeliveryError
from agenttx.cli import main
from agenttx.server import ServeConfig
from agenttx.store.contract import TxUpdate
from conftest import FakeClock

pytest_plugins = ["serve_capture"]

DAY = 86_400.0


class Refusing:
    """A channel whose receiver refuses every effect for good: they become dead letters."""

    async def deliver(self, effect: agenttx.Effect) -> None:
        raise PermanentDeliveryError("the receiver said 410: gone")


async def open_clocked(open_engine: Any, clock: FakeClock, **kw: Any) -> agenttx.Engine:
    kw.setdefault("retention_days", 30)
    kw.setdefault("audit_retention_days", 365)
    engine: agenttx.Engine = await open_engine(
        clock=clock,
        background=False,
        dispatch_max_attempts=1,
        channels={"refused": Refusing()},
        **kw,
    )
    return engine


async def dead_letter(engine: agenttx.Engine) -> tuple[str, int]:
    """A committed transaction whose one effect died at once; (its id, the effect's id)."""
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "effect.stage", {"channel": "refused", "payload": {"n": 1}})
    await engine.commit(tx)
    [effect] = (await engine.list_effects(transaction_id=tx)).effects
    assert effect.status == "dead"
    return tx, effect.effect_id


async def dead_ids(engine: agenttx.Engine) -> set[int]:
    return {e.effect_id for e in (await engine.list_effects(statuses=["dead"])).effects}


async def test_a_dead_letter_goes_after_its_retention_with_the_transaction_it_kept(
    open_engine: Any, clock: FakeClock
) -> None:
    engine = await open_clocked(open_engine, clock)
    old_tx, old = await dead_letter(engine)
    clock.advance(30 * DAY)
    young_tx, young = await dead_letter(engine)

    clock.advance(59 * DAY)  # old: 89 days dead, its transaction 89 days ended
    pruned = await engine.prune_retained()
    assert (pruned.dead_letters, pruned.transactions) == (0, 0)
    assert await dead_ids(engine) == {old, young}

    clock.advance(2 * DAY)  # old: 91 days; young: 61
    pruned = await engine.prune_retained()
    assert (pruned.dead_letters, pruned.transactions) == (1, 1)
    assert await dead_ids(engine) == {young}
    with pytest.raises(NotFound):
        await engine.get_transaction(old_tx)
    with pytest.raises(NotFound):
        await engine.retry_effect(old)
    # What the dead letter said is still in the chain, whole and verifiable.
    assert (await engine.verify_audit(old_tx)).ok
    kinds = [r.kind for r in await engine.store.load_audit(old_tx)]
    assert "delivery" in kinds
    # The younger one and its transaction stay until their own time.
    assert (await engine.get_transaction(young_tx)).transaction_id == young_tx
    assert (await engine.prune_retained()).total == 0

    clock.advance(30 * DAY)
    pruned = await engine.prune_retained()
    assert (pruned.dead_letters, pruned.transactions) == (1, 1)
    assert await engine.store.outbox_counts() == {
        "pending": 0,
        "delivering": 0,
        "delivered": 0,
        "dead": 0,
    }


async def test_the_retention_is_its_own_setting(open_engine: Any, clock: FakeClock) -> None:
    engine = await open_clocked(open_engine, clock, dead_letter_retention_days=7)
    _, effect = await dead_letter(engine)
    clock.advance(6 * DAY)
    assert (await engine.prune_retained()).dead_letters == 0
    clock.advance(2 * DAY)
    pruned = await engine.prune_retained()
    # The dead letter went; its transaction ended 8 days ago, inside --retention-days (30).
    assert (pruned.dead_letters, pruned.transactions) == (1, 0)
    assert effect not in await dead_ids(engine)


async def test_a_dead_letter_of_an_open_transaction_stays(
    open_engine: Any, clock: FakeClock
) -> None:
    engine = await open_clocked(open_engine, clock)
    tx, effect = await dead_letter(engine)
    # The store's own compare-and-set puts the row back in an open status, as a transaction
    # with effects still moving would be: its dead letters are not retention's to delete.
    row = await engine.store.get_transaction(tx)
    assert row is not None
    await engine.store.update_transaction(
        TxUpdate(
            tx_id=tx,
            expected_revision=row.revision,
            from_statuses=(row.status,),
            status="COMPENSATING",
            next_step_id=row.next_step_id,
            body=None,
            now=clock(),
        )
    )
    clock.advance(3650 * DAY)
    pruned = await engine.prune_retained()
    assert (pruned.dead_letters, pruned.transactions) == (0, 0)
    assert await dead_ids(engine) == {effect}


async def test_a_retried_dead_letter_counts_from_its_new_death(
    open_engine: Any, clock: FakeClock
) -> None:
    engine = await open_clocked(open_engine, clock)
    tx, effect = await dead_letter(engine)
    clock.advance(85 * DAY)
    retried = await engine.retry_effect(effect)
    assert (retried.status, retried.next_attempt_at) == ("dead", clock())  # refused again
    clock.advance(10 * DAY)  # 95 days since the first death, 10 since the last
    assert (await engine.prune_retained()).dead_letters == 0
    clock.advance(81 * DAY)
    pruned = await engine.prune_retained()
    assert (pruned.dead_letters, pruned.transactions) == (1, 1)
    with pytest.raises(NotFound):
        await engine.get_transaction(tx)


@pytest.mark.parametrize(
    "settings",
    [
        {"dead_letter_retention_days": 0},
        {"retention_days": 0, "audit_retention_days": 0},
    ],
    ids=["dead-letter-retention-0", "retention-0"],
)
async def test_zero_keeps_dead_letters_forever(
    open_engine: Any, clock: FakeClock, settings: dict[str, int]
) -> None:
    engine = await open_clocked(open_engine, clock, **settings)
    tx, effect = await dead_letter(engine)
    clock.advance(3650 * DAY)
    pruned = await engine.prune_retained()
    assert (pruned.dead_letters, pruned.transactions) == (0, 0)
    assert await dead_ids(engine) == {effect}
    assert (await engine.get_transaction(tx)).transaction_id == tx


async def test_out_of_range_is_refused(open_engine: Any) -> None:
    with pytest.raises(
        agenttx.InvalidArgument,
        match=r"dead_letter_retention_days must be a number of days from 0 to 36,500, got -1",
    ):
        await open_engine(dead_letter_retention_days=-1)


# -- agenttx serve --dead-letter-retention-days -------------------------------------------------


@pytest.mark.stores("sqlite")
@pytest.mark.parametrize(
    ("args", "env", "days"),
    [
        ((), {}, 90),
        (("--dead-letter-retention-days", "14"), {}, 14),
        ((), {"AGENTTX_DEAD_LETTER_RETENTION_DAYS": "0"}, 0),
    ],
    ids=["default", "flag", "env"],
)
def test_serve_takes_the_dead_letter_retention(
    captured: list[ServeConfig], args: tuple[str, ...], env: dict[str, str], days: int
) -> None:
    result = CliRunner().invoke(main, ["serve", *args], env=env)
    assert result.exit_code == 0, result.output
    assert captured[0].dead_letter_retention_days == days


@pytest.mark.stores("sqlite")
def test_serve_refuses_a_dead_letter_retention_out_of_range(
    captured: list[ServeConfig],
) -> None:
    result = CliRunner().invoke(main, ["serve", "--dead-letter-retention-days", "40000"])
    assert result.exit_code == 2
    assert "--dead-letter-retention-days" in result.output
    assert captured == []
