"""The ``Store`` contract suite: every store runs these tests unchanged.

It talks to the ``Store`` ABC only (no engine). A backend binds it by subclassing
``StoreContract`` in a ``test_store_*.py`` module and providing one fixture, ``open_store``: an
async factory that returns a new, opened instance of the store on this test's database (empty
when the test starts; every call reaches the same database, as another process would). The
caller closes what it opened. Tests marked "another process" run a second instance on its own
thread and event loop, so it races the first for real.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import pytest

from agenttx.errors import AlreadyExists, RevisionConflict
from agenttx.store.contract import (
    CommitPlan,
    ReceiptRow,
    StagedEffect,
    StepRow,
    Store,
    StoredReply,
    TxRow,
    TxUpdate,
    UndoRow,
    VersionCheck,
)

T = TypeVar("T")
OpenStore = Callable[[], Awaitable[Store]]

T0 = 1_700_000_000.0
TENANT = "default"


# ----------------------------------------------------------------- row builders


def tx_row(
    tx_id: str,
    *,
    tenant: str = TENANT,
    agent_id: str = "agent",
    status: str = "ACTIVE",
    activity: float = T0,
    body: dict[str, Any] | None = None,
) -> TxRow:
    return TxRow(
        id=tx_id,
        tenant=tenant,
        agent_id=agent_id,
        status=status,
        revision=1,
        next_step_id=1,
        snapshot=0,
        isolation="snapshot",
        body=body if body is not None else {"metadata": {"task": "contract"}},
        created_at=T0,
        updated_at=T0,
        last_activity_at=activity,
    )


def cas(
    tx_id: str,
    revision: int,
    *,
    status: str = "ACTIVE",
    from_statuses: tuple[str, ...] = ("ACTIVE",),
    next_step_id: int = 1,
    body: dict[str, Any] | None = None,
    now: float = T0 + 1,
    touch_activity: bool = True,
) -> TxUpdate:
    return TxUpdate(tx_id, revision, from_statuses, status, next_step_id, body, now, touch_activity)


def step_row(
    tx_id: str, seq: int, step_id: int, *, status: str = "SUCCESS", live: bool = True
) -> StepRow:
    return StepRow(
        tx_id=tx_id,
        seq=seq,
        step_id=step_id,
        attempt=1,
        epoch=0,
        tool="kv.put",
        effect="state",
        status=status,
        live=live,
        arguments_json=f'{{"key":"k{step_id}"}}',
        output_json="" if status == "RUNNING" else f'{{"step":{step_id}}}',
        raw_context=f"why {step_id}",
        detail={"w": [[f"kv/k{step_id}", "1", 0]]} if status == "SUCCESS" else {},
        started_at=T0 + seq,
        finished_at=0.0 if status == "RUNNING" else T0 + seq + 0.5,
        lease_owner="host:1:abc" if status == "RUNNING" else "",
        lease_until=T0 + 60 if status == "RUNNING" else 0.0,
    )


def undo_row(tx_id: str, step_id: int, *, status: str = "pending") -> UndoRow:
    return UndoRow(
        id=0,
        tx_id=tx_id,
        step_id=step_id,
        handler="fs.restore_file",
        args_json=f'{{"step":{step_id}}}',
        idempotency_key=f"{tx_id}:{step_id}:undo",
        status=status,
        attempts=0,
        last_error="",
        created_at=T0,
    )


def effect(step_id: int, n: int) -> StagedEffect:
    return StagedEffect(step_id, "email", f'{{"n":{n}}}', f"fx-{step_id}-{n}")


def plan(
    row: TxRow,
    *,
    writes: dict[str, str | None] | None = None,
    effects: Sequence[StagedEffect] = (),
    checks: Sequence[VersionCheck] = (),
    now: float = T0 + 10,
) -> CommitPlan:
    return CommitPlan(
        tenant=row.tenant,
        writes=writes or {},
        effects=list(effects),
        checks=list(checks),
        on_success=cas(
            row.id, row.revision, status="COMMITTED", next_step_id=0, body={"ok": 1}, now=now
        ),
        on_conflict=cas(row.id, row.revision, status="ROLLING_BACK", body={"conflict": 1}, now=now),
    )


async def new_tx(store: Store, tx_id: str, **kwargs: Any) -> TxRow:
    return await store.create_transaction(tx_row(tx_id, **kwargs))


async def commit_writes(
    store: Store, tx_id: str, writes: dict[str, str | None], *, tenant: str = TENANT
) -> int:
    """Commit ``writes`` in a fresh transaction; returns the version they got."""
    row = await new_tx(store, tx_id, tenant=tenant)
    outcome = await store.commit(plan(row, writes=writes))
    assert outcome.committed
    return outcome.version


async def queue_effects(store: Store, tx_id: str, count: int, *, now: float = T0) -> list[int]:
    """Commit a transaction with ``count`` staged effects; returns their outbox ids."""
    row = await new_tx(store, tx_id)
    outcome = await store.commit(plan(row, effects=[effect(1, n) for n in range(count)], now=now))
    assert outcome.committed
    return outcome.outbox_ids


async def in_another_process(open_store: OpenStore, fn: Callable[[Store], Awaitable[T]]) -> T:
    """Run ``fn`` on a new store instance with its own thread and event loop."""

    async def main() -> T:
        store = await open_store()
        try:
            return await fn(store)
        finally:
            await store.close()

    return await asyncio.to_thread(asyncio.run, main())


# ----------------------------------------------------------------- the suite


class StoreContract:
    """Subclasses provide the ``open_store`` fixture (see the module docstring)."""

    @pytest.fixture
    async def store(self, open_store: OpenStore) -> AsyncIterator[Store]:
        store = await open_store()
        yield store
        await store.close()

    # -- transactions ---------------------------------------------------------------------

    async def test_create_takes_its_snapshot_from_the_commit_sequence(self, store: Store) -> None:
        assert await store.current_version() == 0
        first = await new_tx(store, "tx_1")
        assert first.snapshot == 0
        await commit_writes(store, "tx_w1", {"a": "1"})
        await commit_writes(store, "tx_w2", {"a": "2"})
        stale = tx_row("tx_2")
        stale.snapshot = 99  # whatever the caller passes is replaced
        second = await store.create_transaction(stale)
        assert second.snapshot == 2 == await store.current_version()
        got = await store.get_transaction("tx_2")
        assert got is not None
        assert got.snapshot == 2

    async def test_get_returns_the_row_as_created(self, store: Store) -> None:
        body = {"metadata": {"note": "héllo ✓"}, "nested": [1, {"x": None}], "flag": True}
        created = await new_tx(store, "tx_get", agent_id="a-1", body=body)
        got = await store.get_transaction("tx_get")
        assert got == created
        assert got is not None
        assert got.body == body
        assert got.revision == 1
        assert await store.get_transaction("tx_missing") is None

    async def test_list_filters_and_pages_in_id_order(self, store: Store) -> None:
        # Every row here was created at T0: listings go oldest first, ties by id.
        await new_tx(store, "tx_a", agent_id="x", activity=T0 + 1)
        await new_tx(store, "tx_b", agent_id="y", status="FAILED", activity=T0 + 2)
        await new_tx(store, "tx_c", agent_id="x", tenant="other", activity=T0 + 3)
        await new_tx(store, "tx_d", agent_id="x", status="COMMITTED", activity=T0 + 4)
        await new_tx(store, "tx_e", agent_id="y", activity=T0 + 5)

        async def ids(**kwargs: Any) -> list[str]:
            return [r.id for r in await store.list_transactions(**kwargs)]

        assert await ids() == ["tx_a", "tx_b", "tx_c", "tx_d", "tx_e"]
        assert await ids(statuses=["ACTIVE"]) == ["tx_a", "tx_c", "tx_e"]
        assert await ids(statuses=["FAILED", "COMMITTED"]) == ["tx_b", "tx_d"]
        assert await ids(agent_id="x") == ["tx_a", "tx_c", "tx_d"]
        assert await ids(tenant="other") == ["tx_c"]
        assert await ids(tenant=TENANT, agent_id="y") == ["tx_b", "tx_e"]
        # idle_before keeps rows whose last activity is strictly before it.
        assert await ids(idle_before=T0 + 3) == ["tx_a", "tx_b"]
        assert await ids(statuses=["ACTIVE"], idle_before=T0 + 5.5) == ["tx_a", "tx_c", "tx_e"]

        pages: list[list[str]] = []
        after = ""
        while page := await ids(limit=2, after_id=after):
            pages.append(page)
            after = page[-1]
        assert pages == [["tx_a", "tx_b"], ["tx_c", "tx_d"], ["tx_e"]]
        assert await ids(agent_id="x", limit=1, after_id="tx_a") == ["tx_c"]

    async def test_update_sets_the_fields_and_bumps_the_revision(self, store: Store) -> None:
        await new_tx(store, "tx_u")
        rev = await store.update_transaction(
            cas("tx_u", 1, status="EXECUTING", next_step_id=4, body={"b": 2}, now=T0 + 5)
        )
        assert rev == 2
        row = await store.get_transaction("tx_u")
        assert row is not None
        assert (row.status, row.revision, row.next_step_id, row.body) == (
            "EXECUTING", 2, 4, {"b": 2},
        )  # fmt: skip
        assert (row.updated_at, row.last_activity_at, row.created_at) == (T0 + 5, T0 + 5, T0)

        # body None keeps the body; touch_activity False keeps the last activity.
        rev = await store.update_transaction(
            cas(
                "tx_u", 2, from_statuses=("ACTIVE", "EXECUTING"), next_step_id=5, now=T0 + 9,
                touch_activity=False,
            )
        )  # fmt: skip
        assert rev == 3
        row = await store.get_transaction("tx_u")
        assert row is not None
        assert (row.status, row.next_step_id, row.body) == ("ACTIVE", 5, {"b": 2})
        assert (row.updated_at, row.last_activity_at) == (T0 + 9, T0 + 5)

    async def test_update_with_a_stale_revision_conflicts_and_writes_nothing(
        self, store: Store
    ) -> None:
        await new_tx(store, "tx_s")
        await store.update_transaction(cas("tx_s", 1, body={"v": 1}))
        before = await store.get_transaction("tx_s")
        with pytest.raises(RevisionConflict):
            await store.update_transaction(
                cas("tx_s", 1, status="FAILED", next_step_id=9, body={"v": 2}, now=T0 + 50)
            )
        assert await store.get_transaction("tx_s") == before

    async def test_update_from_a_status_not_listed_conflicts(self, store: Store) -> None:
        await new_tx(store, "tx_st", status="COMMITTED")
        before = await store.get_transaction("tx_st")
        with pytest.raises(RevisionConflict):
            await store.update_transaction(
                cas("tx_st", 1, from_statuses=("ACTIVE", "EXECUTING"), status="ACTIVE")
            )
        assert await store.get_transaction("tx_st") == before

    async def test_update_of_a_missing_transaction_conflicts(self, store: Store) -> None:
        with pytest.raises(RevisionConflict):
            await store.update_transaction(cas("tx_none", 1))

    # -- steps ----------------------------------------------------------------------------

    async def test_start_then_finish_replaces_the_running_attempt(self, store: Store) -> None:
        await new_tx(store, "tx_st")
        rev = await store.start_step(
            cas("tx_st", 1, status="EXECUTING"), step_row("tx_st", 1, 1, status="RUNNING")
        )
        assert rev == 2
        [running] = await store.load_steps("tx_st", live_only=False)
        assert running == step_row("tx_st", 1, 1, status="RUNNING")
        assert (running.lease_owner, running.lease_until) == ("host:1:abc", T0 + 60)
        row = await store.get_transaction("tx_st")
        assert row is not None
        assert row.status == "EXECUTING"

        done = step_row("tx_st", 1, 1)
        rev = await store.finish_step(
            cas("tx_st", 2, from_statuses=("EXECUTING",), next_step_id=2), done
        )
        assert rev == 3
        assert await store.load_steps("tx_st", live_only=False) == [done]
        row = await store.get_transaction("tx_st")
        assert row is not None
        assert (row.status, row.next_step_id) == ("ACTIVE", 2)

    async def test_steps_load_in_seq_order_and_live_only_filters(self, store: Store) -> None:
        await new_tx(store, "tx_l")
        rows = [
            step_row("tx_l", 3, 2),
            step_row("tx_l", 1, 1),
            step_row("tx_l", 2, 2, status="FAILED", live=False),
        ]
        rev = 1
        for r in rows:
            rev = await store.finish_step(cas("tx_l", rev), r)
        assert rev == 4
        assert [s.seq for s in await store.load_steps("tx_l", live_only=False)] == [1, 2, 3]
        assert [s.seq for s in await store.load_steps("tx_l", live_only=True)] == [1, 3]
        assert await store.load_steps("tx_other", live_only=False) == []

    async def test_step_units_whose_cas_fails_leave_nothing(self, store: Store) -> None:
        await new_tx(store, "tx_c")
        await store.finish_step(cas("tx_c", 1, next_step_id=2), step_row("tx_c", 1, 1))
        await store.append_undo(undo_row("tx_c", 1, status="done"))
        before = (
            await store.get_transaction("tx_c"),
            await store.load_steps("tx_c", live_only=False),
            await store.load_undo("tx_c"),
        )
        stale = cas("tx_c", 1, next_step_id=7, body={"stale": True})
        with pytest.raises(RevisionConflict):
            await store.start_step(stale, step_row("tx_c", 2, 2, status="RUNNING"))
        with pytest.raises(RevisionConflict):
            await store.finish_step(stale, step_row("tx_c", 2, 2))
        with pytest.raises(RevisionConflict):
            await store.finish_rewind(stale, 1, step_row("tx_c", 2, 2, status="FAILED"))
        after = (
            await store.get_transaction("tx_c"),
            await store.load_steps("tx_c", live_only=False),
            await store.load_undo("tx_c"),
        )
        assert after == before

    async def test_rewind_marks_later_steps_not_live_and_keeps_failed_undo(
        self, store: Store
    ) -> None:
        await new_tx(store, "tx_r")
        rev = 1
        for n in range(1, 5):
            rev = await store.finish_step(
                cas("tx_r", rev, next_step_id=n + 1), step_row("tx_r", n, n)
            )
        kept_before = await store.append_undo(undo_row("tx_r", 2, status="done"))
        failed = await store.append_undo(undo_row("tx_r", 3, status="failed"))
        await store.append_undo(undo_row("tx_r", 3, status="done"))
        await store.append_undo(undo_row("tx_r", 4, status="done"))
        other_tx = await new_tx(store, "tx_other")
        await store.append_undo(undo_row(other_tx.id, 5, status="done"))

        failure = step_row("tx_r", 5, 5, status="FAILED", live=False)
        rev = await store.finish_rewind(cas("tx_r", rev, next_step_id=3), 3, failure)
        assert rev == 6
        steps = await store.load_steps("tx_r", live_only=False)
        assert [(s.step_id, s.live) for s in steps] == [
            (1, True), (2, True), (3, False), (4, False), (5, False),
        ]  # fmt: skip
        assert steps[-1] == failure  # recorded in the same unit
        assert [s.step_id for s in await store.load_steps("tx_r", live_only=True)] == [1, 2]
        # Done undo records of rewound steps go; failed ones stay as evidence; earlier stay.
        assert [u.id for u in await store.load_undo("tx_r")] == [kept_before, failed]
        assert [u.step_id for u in await store.load_undo("tx_other")] == [5]
        row = await store.get_transaction("tx_r")
        assert row is not None
        assert row.next_step_id == 3

    @pytest.mark.parametrize("target", [0, 1])
    async def test_rewind_to_zero_or_one_drops_everything(self, store: Store, target: int) -> None:
        await new_tx(store, "tx_z")
        rev = 1
        for n in (1, 2):
            rev = await store.finish_step(cas("tx_z", rev), step_row("tx_z", n, n))
            await store.append_undo(undo_row("tx_z", n, status="done"))
        await store.finish_rewind(cas("tx_z", rev, status="ROLLED_BACK", next_step_id=0), target)
        assert await store.load_steps("tx_z", live_only=True) == []
        assert len(await store.load_steps("tx_z", live_only=False)) == 2
        assert await store.load_undo("tx_z") == []
        row = await store.get_transaction("tx_z")
        assert row is not None
        assert row.status == "ROLLED_BACK"

    async def test_rewind_records_the_failure_over_its_running_attempt(self, store: Store) -> None:
        await new_tx(store, "tx_f")
        await store.finish_step(cas("tx_f", 1, next_step_id=2), step_row("tx_f", 1, 1))
        await store.start_step(
            cas("tx_f", 2, status="EXECUTING", next_step_id=2),
            step_row("tx_f", 2, 2, status="RUNNING"),
        )
        failure = step_row("tx_f", 2, 2, status="FAILED", live=False)
        await store.finish_rewind(
            cas("tx_f", 3, from_statuses=("EXECUTING",), next_step_id=2), 2, failure
        )
        steps = await store.load_steps("tx_f", live_only=False)
        assert [(s.seq, s.status, s.live) for s in steps] == [
            (1, "SUCCESS", True), (2, "FAILED", False),
        ]  # fmt: skip

    # -- undo log -------------------------------------------------------------------------

    async def test_undo_records_keep_their_order_and_status(self, store: Store) -> None:
        await new_tx(store, "tx_u")
        ids = [await store.append_undo(undo_row("tx_u", n)) for n in (1, 2, 3)]
        assert ids == sorted(ids)
        assert len(set(ids)) == 3
        await store.set_undo_status(ids[1], "failed", 3, "OSError: disk full")
        await store.set_undo_status(ids[2], "done", 1, "")
        rows = await store.load_undo("tx_u")
        assert [(u.id, u.step_id, u.status, u.attempts, u.last_error) for u in rows] == [
            (ids[0], 1, "pending", 0, ""),
            (ids[1], 2, "failed", 3, "OSError: disk full"),
            (ids[2], 3, "done", 1, ""),
        ]
        assert rows[0] == replace(undo_row("tx_u", 1), id=ids[0])
        assert await store.load_undo("tx_none") == []

    # -- commit and managed state ---------------------------------------------------------

    async def test_commit_publishes_writes_queues_effects_and_drops_the_undo_log(
        self, store: Store
    ) -> None:
        row = await new_tx(store, "tx_c")
        await store.append_undo(undo_row("tx_c", 1, status="pending"))
        p = plan(
            row,
            writes={"kv/a": "1", "kv/b": '"x"'},
            effects=[effect(1, 0), effect(2, 1)],
            checks=[VersionCheck("kv/a", 0, "write"), VersionCheck("kv/z", 0, "read")],
            now=T0 + 10,
        )
        outcome = await store.commit(p)
        assert outcome.committed
        assert outcome.conflicts == []
        assert outcome.version == 1 == await store.current_version()
        assert outcome.revision == 2
        assert await store.read_state(TENANT, "kv/a", None) == ("1", 1)
        assert await store.read_state(TENANT, "kv/b", 1) == ('"x"', 1)

        box = await store.list_outbox(tx_id="tx_c")
        assert [r.id for r in box] == outcome.outbox_ids
        assert len(box) == 2
        assert [
            (r.tenant, r.step_id, r.channel, r.payload_json, r.idempotency_key, r.status)
            for r in box
        ] == [
            (TENANT, 1, "email", '{"n":0}', "fx-1-0", "pending"),
            (TENANT, 2, "email", '{"n":1}', "fx-2-1", "pending"),
        ]
        assert all((r.attempts, r.created_at, r.delivered_at) == (0, T0 + 10, 0) for r in box)
        assert all(r.next_attempt_at <= T0 + 10 for r in box)
        assert await store.load_undo("tx_c") == []
        tx = await store.get_transaction("tx_c")
        assert tx is not None
        assert (tx.status, tx.revision, tx.next_step_id, tx.body) == ("COMMITTED", 2, 0, {"ok": 1})

    async def test_every_commit_with_writes_gets_the_next_version(self, store: Store) -> None:
        versions = [await commit_writes(store, f"tx_{n}", {"k": f'"v{n}"'}) for n in (1, 2, 3)]
        assert versions == [1, 2, 3]
        assert await store.current_version() == 3
        # A snapshot reads the newest version at or below it.
        assert await store.read_state(TENANT, "k", 0) == (None, 0)
        assert await store.read_state(TENANT, "k", 1) == ('"v1"', 1)
        assert await store.read_state(TENANT, "k", 2) == ('"v2"', 2)
        assert await store.read_state(TENANT, "k", 7) == ('"v3"', 3)
        assert await store.read_state(TENANT, "k", None) == ('"v3"', 3)
        assert await store.read_state(TENANT, "never", None) == (None, 0)
        # A key not written by a commit keeps its older version.
        await commit_writes(store, "tx_4", {"other": "0"})
        assert await store.read_state(TENANT, "k", 4) == ('"v3"', 3)

    async def test_a_failed_check_applies_on_conflict_and_publishes_nothing(
        self, store: Store
    ) -> None:
        await commit_writes(store, "tx_w", {"k": '"theirs"'})
        row = await new_tx(store, "tx_loser")
        await store.append_undo(undo_row("tx_loser", 1))
        stale = VersionCheck("k", 0, "write")
        p = plan(
            row,
            writes={"k": '"mine"', "fresh": "1"},
            effects=[effect(1, 0)],
            checks=[VersionCheck("fresh", 0, "write"), stale],
        )
        outcome = await store.commit(p)
        assert not outcome.committed
        assert (outcome.version, outcome.outbox_ids) == (0, [])
        assert outcome.conflicts == [stale]
        assert outcome.revision == 2
        assert await store.current_version() == 1
        assert await store.read_state(TENANT, "k", None) == ('"theirs"', 1)
        assert await store.read_state(TENANT, "fresh", None) == (None, 0)
        assert await store.list_outbox() == []
        assert len(await store.load_undo("tx_loser")) == 1  # the caller compensates next
        tx = await store.get_transaction("tx_loser")
        assert tx is not None
        assert (tx.status, tx.revision, tx.body) == ("ROLLING_BACK", 2, {"conflict": 1})

    async def test_checks_compare_against_the_latest_committed_version(self, store: Store) -> None:
        await commit_writes(store, "tx_1", {"a": "1", "b": "1"})
        await commit_writes(store, "tx_2", {"b": "2"})
        row = await new_tx(store, "tx_chk")
        checks = [
            VersionCheck("a", 1, "write"),  # latest 1 <= 1: passes
            VersionCheck("b", 1, "read"),  # latest 2 > 1: fails
            VersionCheck("never", 0, "write"),  # never written: passes
            VersionCheck("a", 0, "read"),  # latest 1 > 0: fails
        ]
        outcome = await store.commit(plan(row, writes={"c": "1"}, checks=checks))
        assert not outcome.committed
        assert sorted(outcome.conflicts, key=lambda c: (c.key, c.kind)) == [
            VersionCheck("a", 0, "read"),
            VersionCheck("b", 1, "read"),
        ]
        row = await new_tx(store, "tx_ok")
        passing = [VersionCheck("a", 1, "write"), VersionCheck("b", 2, "read")]
        assert (await store.commit(plan(row, writes={"c": "1"}, checks=passing))).committed

    async def test_concurrent_commits_of_one_key_exactly_one_wins_and_versions_follow_commits(
        self, store: Store
    ) -> None:
        # On PostgreSQL each commit is on a connection of its own, at once: the losers wait on
        # the key's head, then find the winner's version past their check.
        rows = [await new_tx(store, f"tx_{n}") for n in range(4)]
        checks = [VersionCheck("k", 0, "write")]
        outcomes = await asyncio.gather(
            *(
                store.commit(plan(r, writes={"k": f'"{n}"', f"own{n}": "1"}, checks=checks))
                for n, r in enumerate(rows)
            )
        )
        won = [n for n, o in enumerate(outcomes) if o.committed]
        assert len(won) == 1
        assert all(o.conflicts == checks for o in outcomes if not o.committed)
        assert outcomes[won[0]].version == 1 == await store.current_version()
        assert await store.read_state(TENANT, "k", None) == (f'"{won[0]}"', 1)
        assert [await store.read_state(TENANT, f"own{n}", None) for n in range(4)] == [
            ("1", 1) if n == won[0] else (None, 0) for n in range(4)
        ]
        # Commits of distinct keys at once each get a version of their own, in the order
        # they became visible: every key reads at its commit's version and not before.
        rows = [await new_tx(store, f"tx_d{n}") for n in range(4)]
        done = await asyncio.gather(
            *(store.commit(plan(r, writes={f"d{n}": "1"})) for n, r in enumerate(rows))
        )
        assert sorted(o.version for o in done) == [2, 3, 4, 5]
        for n, o in enumerate(done):
            assert await store.read_state(TENANT, f"d{n}", o.version) == ("1", o.version)
            assert await store.read_state(TENANT, f"d{n}", o.version - 1) == (None, 0)

    async def test_concurrent_commits_reading_keys_never_written_do_not_write_skew(
        self, store: Store
    ) -> None:
        # Write skew on keys no commit wrote yet: each transaction read one absent key and
        # writes the other. Serializable, at most one of each pair may commit, however the
        # two commits interleave: a key that was only read needs a head to lock too.
        for n in range(12):
            a, b = f"skew{n}/a", f"skew{n}/b"
            one = await new_tx(store, f"tx_skew{n}_1")
            two = await new_tx(store, f"tx_skew{n}_2")
            outcomes = await asyncio.gather(
                store.commit(plan(one, writes={b: "1"}, checks=[VersionCheck(a, 0, "read")])),
                store.commit(plan(two, writes={a: "1"}, checks=[VersionCheck(b, 0, "read")])),
            )
            assert [o.committed for o in outcomes].count(True) == 1, (n, outcomes)

    async def test_a_commit_whose_cas_fails_publishes_nothing(self, store: Store) -> None:
        row = await new_tx(store, "tx_cas")
        await store.update_transaction(cas("tx_cas", 1))
        with pytest.raises(RevisionConflict):
            await store.commit(plan(row, writes={"k": "1"}, effects=[effect(1, 0)]))
        assert await store.read_state(TENANT, "k", None) == (None, 0)
        assert await store.current_version() == 0
        assert await store.list_outbox() == []
        tx = await store.get_transaction("tx_cas")
        assert tx is not None
        assert (tx.status, tx.revision) == ("ACTIVE", 2)

    async def test_a_deleted_key_reads_as_none_at_its_tombstone_version(self, store: Store) -> None:
        await commit_writes(store, "tx_1", {"k": '"v"'})
        deleted_at = await commit_writes(store, "tx_2", {"k": None})
        assert await store.read_state(TENANT, "k", None) == (None, deleted_at)
        assert await store.read_state(TENANT, "k", deleted_at - 1) == ('"v"', 1)
        # A write made before the delete committed conflicts with it.
        row = await new_tx(store, "tx_3")
        outcome = await store.commit(
            plan(row, writes={"k": "1"}, checks=[VersionCheck("k", 1, "write")])
        )
        assert not outcome.committed

    async def test_managed_state_is_per_tenant(self, store: Store) -> None:
        await commit_writes(store, "tx_a", {"k": '"a"'}, tenant="acme")
        assert await store.read_state("globex", "k", None) == (None, 0)
        row = await new_tx(store, "tx_b", tenant="globex")
        outcome = await store.commit(
            plan(row, writes={"k": '"b"'}, checks=[VersionCheck("k", 0, "write")])
        )
        assert outcome.committed
        assert await store.read_state("acme", "k", None) == ('"a"', 1)
        assert await store.read_state("globex", "k", None) == ('"b"', 2)

    async def test_prune_keeps_what_snapshots_at_the_horizon_can_see(self, store: Store) -> None:
        await commit_writes(store, "tx_1", {"a": '"a1"', "b": '"b1"'})  # v1
        await commit_writes(store, "tx_2", {"a": '"a2"'})  # v2
        await commit_writes(store, "tx_3", {"b": None})  # v3
        await commit_writes(store, "tx_4", {"a": '"a4"'})  # v4
        await commit_writes(store, "tx_5", {"c": '"c5"'}, tenant="other")  # v5
        keys = [(TENANT, "a"), (TENANT, "b"), ("other", "c")]

        async def visible() -> list[tuple[str | None, int]]:
            return [await store.read_state(t, k, at) for t, k in keys for at in (3, 4, 5, None)]

        before = await visible()
        removed = await store.prune_versions(3)
        assert removed == 2  # a@v1 (a@v2 is what snapshot 3 reads) and b@v1 (under b's tombstone)
        assert await visible() == before
        assert await store.prune_versions(3) == 0
        assert await store.read_state(TENANT, "b", None) == (None, 3)
        # A later horizon lets go of what only older snapshots saw.
        assert await store.prune_versions(5) == 1  # a@v2
        assert await store.read_state(TENANT, "a", 5) == ('"a4"', 4)

    # -- outbox ---------------------------------------------------------------------------

    async def test_claimed_rows_are_leased_until_the_lease_expires(self, store: Store) -> None:
        ids = await queue_effects(store, "tx_o", 3, now=T0)
        claimed = await store.claim_outbox(now=T0, lease_secs=30, limit=10)
        assert [r.id for r in claimed] == ids
        assert all(r.status == "delivering" and r.attempts == 0 for r in claimed)
        assert await store.claim_outbox(now=T0 + 29.9, lease_secs=30, limit=10) == []
        assert {r.status for r in await store.list_outbox()} == {"delivering"}
        # A claimer that died never settles: once its lease expires the rows go out again.
        again = await store.claim_outbox(now=T0 + 30, lease_secs=30, limit=10)
        assert [r.id for r in again] == ids
        assert await store.claim_outbox(now=T0 + 59, lease_secs=30, limit=10) == []

    async def test_claim_takes_due_rows_oldest_first_within_limit_and_ids(
        self, store: Store
    ) -> None:
        ids = await queue_effects(store, "tx_o", 5, now=T0)
        assert [r.id for r in await store.claim_outbox(now=T0, lease_secs=30, limit=2)] == ids[:2]
        only = await store.claim_outbox(now=T0, lease_secs=30, limit=10, ids=[ids[4], ids[0]])
        assert [r.id for r in only] == [ids[4]]  # ids[0] is leased already
        rest = await store.claim_outbox(now=T0, lease_secs=30, limit=10)
        assert [r.id for r in rest] == ids[2:4]
        # Rows not yet due are not claimed.
        later = await queue_effects(store, "tx_later", 1, now=T0 + 100)
        assert await store.claim_outbox(now=T0 + 50, lease_secs=1, limit=10, ids=later) == []
        got = await store.claim_outbox(now=T0 + 100, lease_secs=1, limit=10, ids=later)
        assert [r.id for r in got] == later

    async def test_settle_records_delivered_retry_and_dead(self, store: Store) -> None:
        ok, retry, dead = await queue_effects(store, "tx_o", 3, now=T0)
        await store.claim_outbox(now=T0, lease_secs=30, limit=10)
        await store.settle_outbox(
            ok, status="delivered", attempts=1, next_attempt_at=T0 + 1, error="", now=T0 + 1
        )
        await store.settle_outbox(
            retry, status="pending", attempts=1, next_attempt_at=T0 + 100, error="HTTP 503",
            now=T0 + 1,
        )  # fmt: skip
        await store.settle_outbox(
            dead, status="dead", attempts=8, next_attempt_at=T0 + 1, error="gone", now=T0 + 1
        )
        rows = {r.id: r for r in await store.list_outbox()}
        assert (rows[ok].status, rows[ok].attempts, rows[ok].delivered_at) == (
            "delivered", 1, T0 + 1,
        )  # fmt: skip
        assert (rows[retry].status, rows[retry].last_error, rows[retry].next_attempt_at) == (
            "pending", "HTTP 503", T0 + 100,
        )  # fmt: skip
        assert (rows[dead].status, rows[dead].attempts, rows[dead].last_error) == (
            "dead", 8, "gone",
        )  # fmt: skip
        # Only the retry comes back, and not before its time, even long after the lease.
        assert await store.claim_outbox(now=T0 + 99, lease_secs=30, limit=10) == []
        [back] = await store.claim_outbox(now=T0 + 100, lease_secs=30, limit=10)
        assert (back.id, back.attempts, back.status) == (retry, 1, "delivering")
        assert await store.claim_outbox(now=T0 + 10_000, lease_secs=30, limit=10) != []
        assert {r.id for r in await store.list_outbox(statuses=["delivered", "dead"])} == {
            ok, dead,
        }  # fmt: skip

    async def test_list_outbox_filters_oldest_first(self, store: Store) -> None:
        first = await queue_effects(store, "tx_1", 2)
        second = await queue_effects(store, "tx_2", 3)
        assert [r.id for r in await store.list_outbox()] == first + second
        assert [r.id for r in await store.list_outbox(tx_id="tx_2")] == second
        assert [r.id for r in await store.list_outbox(limit=3)] == (first + second)[:3]
        await store.claim_outbox(now=T0, lease_secs=30, limit=1)
        assert [r.id for r in await store.list_outbox(statuses=["delivering"])] == first[:1]
        assert [r.id for r in await store.list_outbox(statuses=["pending"], tx_id="tx_1")] == (
            first[1:]
        )
        assert await store.list_outbox(tx_id="tx_none") == []

    async def test_requeue_moves_only_dead_rows_back(self, store: Store) -> None:
        pending, delivered, dead = await queue_effects(store, "tx_o", 3, now=T0)
        await store.claim_outbox(now=T0, lease_secs=30, limit=10, ids=[delivered, dead])
        await store.settle_outbox(
            delivered, status="delivered", attempts=1, next_attempt_at=T0, error="", now=T0
        )
        await store.settle_outbox(
            dead, status="dead", attempts=8, next_attempt_at=T0, error="boom", now=T0
        )
        assert not await store.requeue_outbox(pending, now=T0 + 5)
        assert not await store.requeue_outbox(delivered, now=T0 + 5)
        assert not await store.requeue_outbox(10_000_000, now=T0 + 5)
        assert await store.requeue_outbox(dead, now=T0 + 5)
        assert not await store.requeue_outbox(dead, now=T0 + 5)  # no longer dead
        [row] = [r for r in await store.list_outbox() if r.id == dead]
        assert row.status == "pending"
        assert row.next_attempt_at <= T0 + 5
        assert await store.claim_outbox(now=T0 + 4, lease_secs=30, limit=10, ids=[dead]) == []
        [back] = await store.claim_outbox(now=T0 + 5, lease_secs=30, limit=10, ids=[dead])
        assert back.id == dead

    # -- several instances, group commit, durability ---------------------------------------

    async def test_several_instances_may_open_a_fresh_database_at_once(
        self, open_store: OpenStore
    ) -> None:
        async def create(name: str) -> None:
            async def unit(store: Store) -> None:
                await new_tx(store, name)

            await in_another_process(open_store, unit)

        await asyncio.gather(*(create(f"tx_{n}") for n in range(4)))
        store = await open_store()
        try:
            assert [r.id for r in await store.list_transactions()] == [f"tx_{n}" for n in range(4)]
        finally:
            await store.close()

    async def test_concurrent_cas_from_two_processes_exactly_one_wins(
        self, store: Store, open_store: OpenStore
    ) -> None:
        rounds = 25
        for n in range(rounds):
            await new_tx(store, f"tx_{n:02}")
        barrier = threading.Barrier(2, timeout=30)

        def contender(name: str) -> Callable[[Store], Awaitable[list[bool]]]:
            async def run(other: Store) -> list[bool]:
                won = []
                for n in range(rounds):
                    barrier.wait()  # both fire at the same row at the same moment
                    try:
                        await other.update_transaction(
                            cas(f"tx_{n:02}", 1, status="EXECUTING", body={"winner": name})
                        )
                        won.append(True)
                    except RevisionConflict:
                        won.append(False)
                return won

            return run

        left, right = await asyncio.gather(
            in_another_process(open_store, contender("left")),
            in_another_process(open_store, contender("right")),
        )
        assert all(a != b for a, b in zip(left, right, strict=True))
        for n in range(rounds):
            row = await store.get_transaction(f"tx_{n:02}")
            assert row is not None
            assert row.revision == 2
            assert row.body == {"winner": "left" if left[n] else "right"}

    async def test_concurrent_cas_within_one_instance_exactly_one_wins(self, store: Store) -> None:
        await new_tx(store, "tx_race")
        results = await asyncio.gather(
            *(
                store.finish_step(cas("tx_race", 1, next_step_id=2), step_row("tx_race", n, 1))
                for n in (1, 2, 3)
            ),
            return_exceptions=True,
        )
        assert sum(r == 2 for r in results) == 1
        assert sum(isinstance(r, RevisionConflict) for r in results) == 2
        assert len(await store.load_steps("tx_race", live_only=False)) == 1

    async def test_concurrent_claims_from_two_processes_never_share_a_row(
        self, store: Store, open_store: OpenStore
    ) -> None:
        ids = await queue_effects(store, "tx_o", 60, now=T0)
        barrier = threading.Barrier(2, timeout=30)

        async def claimer(other: Store) -> list[int]:
            got: list[int] = []
            barrier.wait()
            while rows := await other.claim_outbox(now=T0 + 1, lease_secs=300, limit=4):
                got.extend(r.id for r in rows)
            return got

        left, right = await asyncio.gather(
            in_another_process(open_store, claimer), in_another_process(open_store, claimer)
        )
        assert not set(left) & set(right)
        assert sorted(left + right) == ids

    async def test_group_commit_keeps_each_unit_atomic_and_durable(
        self, open_store: OpenStore
    ) -> None:
        count = 40
        store = await open_store()
        try:
            for n in range(count):
                await new_tx(store, f"tx_{n:02}")
            await new_tx(store, "tx_stale")
            await store.update_transaction(cas("tx_stale", 1))
            units = [
                store.finish_step(
                    cas(f"tx_{n:02}", 1, next_step_id=2), step_row(f"tx_{n:02}", 1, 1)
                )
                for n in range(count)
            ]
            # One unit in the middle of the batch loses its compare-and-set.
            units.insert(
                count // 2, store.finish_step(cas("tx_stale", 1), step_row("tx_stale", 1, 1))
            )
            results = await asyncio.gather(*units, return_exceptions=True)
        finally:
            await store.close()

        assert isinstance(results.pop(count // 2), RevisionConflict)
        assert results == [2] * count

        reopened = await open_store()
        try:
            for n in range(count):
                row = await reopened.get_transaction(f"tx_{n:02}")
                assert row is not None
                assert (row.revision, row.next_step_id) == (2, 2)
                assert await reopened.load_steps(f"tx_{n:02}", live_only=True) == [
                    step_row(f"tx_{n:02}", 1, 1)
                ]
            stale = await reopened.get_transaction("tx_stale")
            assert stale is not None
            assert stale.revision == 2
            assert await reopened.load_steps("tx_stale", live_only=False) == []
        finally:
            await reopened.close()

    async def test_commits_outbox_and_undo_survive_a_reopen(self, open_store: OpenStore) -> None:
        store = await open_store()
        try:
            await commit_writes(store, "tx_w", {"k": '"v"'})
            ids = await queue_effects(store, "tx_o", 2)
            await new_tx(store, "tx_u")
            undo_id = await store.append_undo(undo_row("tx_u", 1))
        finally:
            await store.close()
        reopened = await open_store()
        try:
            assert await reopened.current_version() == 1
            assert await reopened.read_state(TENANT, "k", None) == ('"v"', 1)
            assert [r.id for r in await reopened.list_outbox()] == ids
            assert [u.id for u in await reopened.load_undo("tx_u")] == [undo_id]
            # The sequence carries on where it was.
            assert await commit_writes(reopened, "tx_w2", {"k": '"w"'}) == 2
        finally:
            await reopened.close()

    # ------------------------------------------------------------- stored replies

    async def test_the_first_stored_reply_wins_and_is_read_back(self, store: Store) -> None:
        first = StoredReply("req-1", "execute_step", "hash-a", '{"ok": 1}', T0)
        assert await store.put_request(TENANT, first) is first  # stored now: handed back
        twin = StoredReply("req-1", "execute_step", "hash-b", '{"ok": 2}', T0 + 1)
        assert await store.put_request(TENANT, twin) == first  # a racing retry: the first
        assert await store.get_request(TENANT, "req-1") == first
        assert await store.get_request("other-tenant", "req-1") is None
        assert await store.prune_requests(T0 + 0.5) == 1
        assert await store.get_request(TENANT, "req-1") is None

    # ------------------------------------------------------------- replies in the call's own write

    async def test_a_begin_stores_its_reply_with_the_transaction(self, store: Store) -> None:
        reply = StoredReply("req-b", "begin", "hash-b", '{"ok": {"n": 1}}', T0)
        await store.create_transaction(tx_row("tx_b1"), reply)
        assert await store.get_request(TENANT, "req-b") == reply
        # The same id again: first wins, and the losing transaction is not created either.
        twin = StoredReply("req-b", "begin", "hash-b", '{"ok": {"n": 2}}', T0 + 1)
        with pytest.raises(AlreadyExists):
            await store.create_transaction(tx_row("tx_b2"), twin)
        assert await store.get_transaction("tx_b2") is None
        assert await store.get_request(TENANT, "req-b") == reply

    async def test_a_step_stores_its_reply_in_its_own_write(self, store: Store) -> None:
        await new_tx(store, "tx_s")
        reply = StoredReply("req-s", "execute_step", "hash-s", '{"ok": {"s": 1}}', T0)
        assert (
            await store.finish_step(cas("tx_s", 1, next_step_id=2), step_row("tx_s", 1, 1), reply)
            == 2
        )
        assert await store.get_request(TENANT, "req-s") == reply
        # An id held already: neither the CAS nor the step row nor the reply is written.
        other = StoredReply("req-s", "execute_step", "hash-other", '{"ok": {"s": 2}}', T0)
        with pytest.raises(AlreadyExists):
            await store.finish_step(cas("tx_s", 2, next_step_id=3), step_row("tx_s", 2, 2), other)
        row = await store.get_transaction("tx_s")
        assert row is not None
        assert (row.revision, row.next_step_id) == (2, 2)
        assert [st.step_id for st in await store.load_steps("tx_s", live_only=False)] == [1]
        assert await store.get_request(TENANT, "req-s") == reply
        # The transaction goes on: the rolled-back unit left nothing behind.
        assert await store.finish_step(cas("tx_s", 2, next_step_id=3), step_row("tx_s", 2, 2)) == 3

    async def test_a_step_that_takes_the_lock_itself_is_one_unit(self, store: Store) -> None:
        """``lock_and_finish_step``: the write ``finish_step`` makes, by a caller that does not
        hold the transaction's lock; a stale revision or a taken request id leaves nothing."""
        await new_tx(store, "tx_u")
        reply = StoredReply("req-u", "execute_step", "hash-u", '{"ok": {"u": 1}}', T0)
        update = cas("tx_u", 1, next_step_id=2)
        assert await store.lock_and_finish_step(update, step_row("tx_u", 1, 1), reply, 5.0) == 2
        assert await store.get_request(TENANT, "req-u") == reply
        before = (
            await store.get_transaction("tx_u"),
            await store.load_steps("tx_u", live_only=False),
        )
        with pytest.raises(RevisionConflict):  # revision 1 is gone
            await store.lock_and_finish_step(update, step_row("tx_u", 2, 2), None, 5.0)
        other = StoredReply("req-u", "execute_step", "hash-other", '{"ok": {}}', T0)
        with pytest.raises(AlreadyExists):
            await store.lock_and_finish_step(
                cas("tx_u", 2, next_step_id=3), step_row("tx_u", 2, 2), other, 5.0
            )
        after = (
            await store.get_transaction("tx_u"),
            await store.load_steps("tx_u", live_only=False),
        )
        assert after == before
        # The lock went with each unit: the transaction goes on, and a locked call gets in.
        assert (
            await store.lock_and_finish_step(
                cas("tx_u", 2, next_step_id=3), step_row("tx_u", 2, 2), None, 5.0
            )
            == 3
        )
        async with store.transaction_lock("tx_u", 1.0):
            pass

    async def test_a_claim_holds_the_id_until_its_reply_fills_it(self, store: Store) -> None:
        await new_tx(store, "tx_c")
        claim = StoredReply("req-c", "execute_step", "hash-c", "", T0)
        running = step_row("tx_c", 1, 1, status="RUNNING", live=False)
        update = cas("tx_c", 1, status="EXECUTING", next_step_id=1)
        assert await store.start_step(update, running, claim) == 2
        held = await store.get_request(TENANT, "req-c")
        assert held is not None
        assert held.claimed_only
        # Another request cannot take the id: its step write is refused, whole.
        await new_tx(store, "tx_c2")
        intruder = StoredReply("req-c", "execute_step", "hash-x", '{"ok": {}}', T0)
        with pytest.raises(AlreadyExists):
            await store.finish_step(
                cas("tx_c2", 1, next_step_id=2), step_row("tx_c2", 1, 1), intruder
            )
        assert await store.load_steps("tx_c2", live_only=False) == []
        assert await store.put_request(TENANT, intruder) == held  # not filled by another
        claim_x = StoredReply("req-c", "execute_step", "hash-x", "", T0)
        with pytest.raises(AlreadyExists):
            await store.start_step(
                cas("tx_c2", 1, status="EXECUTING"),
                step_row("tx_c2", 1, 1, status="RUNNING"),
                claim_x,
            )
        assert await store.load_steps("tx_c2", live_only=False) == []
        # The same request claims again (a retry after a crash): it takes its claim over.
        retry = cas("tx_c", 2, status="EXECUTING", from_statuses=("EXECUTING",))
        assert await store.start_step(retry, running, claim) == 3
        # Its reply fills the claim in; from then on the id holds that reply.
        reply = StoredReply("req-c", "execute_step", "hash-c", '{"ok": {"c": 1}}', T0 + 1)
        assert await store.put_request(TENANT, reply) is reply
        assert await store.get_request(TENANT, "req-c") == reply
        assert await store.put_request(TENANT, replace(reply, reply_json='{"ok": 0}')) == reply

    async def test_a_commit_stores_its_reply_only_when_it_commits(self, store: Store) -> None:
        row = await new_tx(store, "tx_k")
        reply = StoredReply("req-k", "commit", "hash-k", '{"ok": {"committed": true}}', T0)
        taken = StoredReply("req-k2", "commit", "hash-k2", '{"ok": {}}', T0)
        await store.put_request(TENANT, replace(taken, payload_hash="someone-else"))
        # A taken id: nothing is published, the transaction stays as it was.
        with pytest.raises(AlreadyExists):
            await store.commit(replace(plan(row, writes={"k": '"v"'}), reply=taken))
        assert await store.current_version() == 0
        again = await store.get_transaction("tx_k")
        assert again is not None
        assert again.status == "ACTIVE"
        outcome = await store.commit(replace(plan(row, writes={"k": '"v"'}), reply=reply))
        assert outcome.committed
        assert await store.get_request(TENANT, "req-k") == reply
        # A conflict applies on_conflict and stores no reply (its reply is an error, later).
        row2 = await new_tx(store, "tx_k3")
        conflicted = replace(
            plan(row2, writes={"k": '"w"'}, checks=[VersionCheck("k", 0, "write")]),
            reply=replace(reply, request_id="req-k3"),
        )
        assert not (await store.commit(conflicted)).committed
        assert await store.get_request(TENANT, "req-k3") is None

    async def test_every_write_of_a_reply_keeps_the_transaction_it_names(
        self, store: Store
    ) -> None:
        """What finds a transaction by a request id (``Engine.find_transaction``): each of
        the five writes that store a reply or a claim keeps its ``tx_id``, read back by the
        primary key; a receipt is found by its own key with its transaction and tenant."""
        begin = StoredReply("t-begin", "begin", "h1", '{"ok": {}}', T0, "tx_t1")
        await store.create_transaction(tx_row("tx_t1"), begin)
        step = StoredReply("t-step", "execute_step", "h2", '{"ok": {}}', T0, "tx_t1")
        await store.finish_step(cas("tx_t1", 1, next_step_id=2), step_row("tx_t1", 1, 1), step)
        claim = StoredReply("t-claim", "execute_step", "h3", "", T0, "tx_t1")
        running = step_row("tx_t1", 2, 2, status="RUNNING", live=False)
        await store.start_step(cas("tx_t1", 2, status="EXECUTING", next_step_id=2), running, claim)
        filled = replace(claim, reply_json='{"ok": {"filled": true}}')
        assert await store.put_request(TENANT, filled) is filled
        refusal = StoredReply("t-refused", "rollback", "h4", '{"error": {}}', T0, "tx_t2")
        await store.put_request(TENANT, refusal)
        row = await new_tx(store, "tx_t3")
        commit = StoredReply("t-commit", "commit", "h5", '{"ok": {}}', T0, "tx_t3")
        assert (await store.commit(replace(plan(row), reply=commit))).committed
        found = {
            rid: stored.tx_id if (stored := await store.get_request(TENANT, rid)) else None
            for rid in ("t-begin", "t-step", "t-claim", "t-refused", "t-commit", "t-none")
        }
        assert found == {
            "t-begin": "tx_t1",
            "t-step": "tx_t1",
            "t-claim": "tx_t1",
            "t-refused": "tx_t2",
            "t-commit": "tx_t3",
            "t-none": None,
        }
        assert await store.get_request("other-tenant", "t-begin") is None
        preview = ReceiptRow("rcpt_t", "tx_t1", "acme", 1, "hash", "issued", T0, T0 + 900)
        await store.put_receipt(preview)
        got = await store.get_receipt("rcpt_t")
        assert got is not None
        assert (got.tx_id, got.tenant) == ("tx_t1", "acme")

    async def test_the_lock_reads_the_stored_reply_with_the_row(self, store: Store) -> None:
        await new_tx(store, "tx_l")
        reply = StoredReply("req-l", "rollback", "hash-l", '{"ok": {}}', T0)
        await store.put_request(TENANT, reply)
        async with store.transaction_lock("tx_l", 5.0, request=(TENANT, "req-l")) as held:
            if held is not None:  # a shared store answers in the lock's round trip
                assert held.row is not None
                assert held.row.id == "tx_l"
                assert held.reply == reply
        async with store.transaction_lock("tx_l", 5.0, request=(TENANT, "none")) as held:
            if held is not None:
                assert held.reply is None
        async with store.transaction_lock("tx_l", 5.0) as held:
            if held is not None:
                assert held.reply is None

    # ------------------------------------------------------------- effects claimed at commit

    async def test_effects_claimed_by_their_commit_wait_for_its_lease(self, store: Store) -> None:
        row = await new_tx(store, "tx_claimed")
        claimed = replace(
            plan(row, effects=[effect(1, 0), effect(1, 1)], now=T0), claim_until=T0 + 30
        )
        outcome = await store.commit(claimed)
        assert outcome.committed
        rows = await store.list_outbox(tx_id="tx_claimed")
        assert [r.status for r in rows] == ["delivering", "delivering"]
        # A background pass finds nothing to take while the committing call holds them ...
        assert await store.claim_outbox(now=T0 + 29, lease_secs=30, limit=10) == []
        # ... and takes them once its lease has run out (the call died before delivering).
        again = await store.claim_outbox(now=T0 + 31, lease_secs=30, limit=10)
        assert [r.id for r in again] == outcome.outbox_ids

    async def test_released_claims_are_due_at_once(self, store: Store) -> None:
        row = await new_tx(store, "tx_released")
        claimed = replace(plan(row, effects=[effect(1, 0)], now=T0), claim_until=T0 + 30)
        outcome = await store.commit(claimed)
        assert await store.release_claims(now=T0 + 1) == 1
        again = await store.claim_outbox(now=T0 + 1, lease_secs=30, limit=10)
        assert [r.id for r in again] == outcome.outbox_ids
        assert await store.release_claims(now=T0 + 2) == 1  # the new claim, released again

    # ------------------------------------------------------------- retention

    async def test_prune_ended_deletes_ended_transactions_whole(self, store: Store) -> None:
        for tx_id, status in (("tx_done", "COMMITTED"), ("tx_open", "ACTIVE")):
            await new_tx(store, tx_id)
            await store.finish_step(cas(tx_id, 1, next_step_id=2), step_row(tx_id, 1, 1))
            await store.append_undo(undo_row(tx_id, 1, status="done"))
            if status != "ACTIVE":
                await store.update_transaction(cas(tx_id, 2, status=status, now=T0 + 5))
        assert await store.prune_ended(T0 + 5) == 0  # changed at T0 + 5: not before it
        assert await store.prune_ended(T0 + 6) == 1
        assert await store.get_transaction("tx_done") is None
        assert await store.load_steps("tx_done", live_only=False) == []
        assert await store.load_undo("tx_done") == []
        # The open one keeps everything, however old.
        assert await store.get_transaction("tx_open") is not None
        assert len(await store.load_steps("tx_open", live_only=False)) == 1
        assert await store.prune_ended(T0 + 10**9) == 0

    async def test_prune_ended_keeps_a_transaction_with_an_effect_to_deliver(
        self, store: Store
    ) -> None:
        [fx] = await queue_effects(store, "tx_fx", 1)  # committed at T0 + 10
        assert await store.prune_ended(T0 + 100) == 0
        await store.settle_outbox(
            fx, status="delivered", attempts=1, next_attempt_at=0, error="", now=T0 + 20
        )
        assert await store.prune_delivered(T0 + 20) == 0  # delivered at T0 + 20: kept
        assert await store.prune_ended(T0 + 100) == 1  # nothing left to deliver: it goes
        assert await store.prune_delivered(T0 + 21) == 1
        assert await store.list_outbox(tx_id="tx_fx") == []

    async def test_prune_delivered_keeps_pending_and_dead_rows(self, store: Store) -> None:
        ids = await queue_effects(store, "tx_three", 3)
        for row_id, status in zip(ids, ("delivered", "dead", "pending"), strict=True):
            await store.settle_outbox(
                row_id, status=status, attempts=1, next_attempt_at=T0, error="x", now=T0 + 1
            )
        assert await store.prune_delivered(T0 + 10**9) == 1
        assert [r.status for r in await store.list_outbox(tx_id="tx_three")] == ["dead", "pending"]

    async def test_prune_audit_deletes_whole_chains_of_gone_transactions(
        self, store: Store
    ) -> None:
        from agenttx.audit import ChainHead, chain_records

        for tx_id in ("tx_a", "tx_b"):
            await new_tx(store, tx_id)
            await store.append_audit(
                chain_records(
                    ChainHead(0, ""),
                    tx_id=tx_id,
                    tenant=TENANT,
                    at=T0,
                    revision=1,
                    events=[("begin", {}), ("note", {"n": 1}), ("note", {"n": 2})],
                )
            )
        await store.update_transaction(cas("tx_a", 1, status="COMMITTED", now=T0 + 1))
        assert await store.prune_audit(T0 + 10) == 0  # both rows still there
        assert await store.prune_ended(T0 + 2) == 1  # tx_a's row goes, its chain stays
        assert len(await store.load_audit("tx_a")) == 3
        assert await store.prune_audit(T0) == 0  # its newest record is not older than T0
        assert await store.prune_audit(T0 + 10) == 1
        assert await store.load_audit("tx_a") == []  # every record, not a prefix
        assert len(await store.load_audit("tx_b")) == 3  # an existing transaction's chain stays
