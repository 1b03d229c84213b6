"""Tenants and principals in the engine: a call carrying a ``Caller`` sees only its tenant's
transactions, state, records, files and stored replies, and only its own transactions unless
its roles say otherwise (``core.access``). Both stores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import agenttx
from agenttx import Caller, NotFound, PermissionDenied, Role, StepStatus


def caller(principal: str, tenant: str, *roles: Role) -> Caller:
    return Caller(principal, tenant, frozenset(roles or (Role.AGENT,)))


ALICE = caller("alice", "acme")
BOB = caller("bob", "globex")  # another tenant
CAROL = caller("carol", "acme")  # alice's tenant, another principal
ADMIN = caller("root", "acme", Role.ADMIN)
REVIEWER = caller("rita", "acme", Role.APPROVER)


async def step(engine: agenttx.Engine, who: Caller, tx: str, tool: str, args: Any) -> Any:
    info = await engine.get_transaction(tx, history=False, caller=who)
    r = await engine.execute_step(tx, info.next_step_id, tool, args, caller=who)
    assert r.status is StepStatus.SUCCESS, r
    return r.output


async def committed(engine: agenttx.Engine, who: Caller, steps: list[tuple[str, Any]]) -> str:
    tx = (await engine.begin(agent_id=who.principal, caller=who)).transaction_id
    for tool, args in steps:
        await step(engine, who, tx, tool, args)
    await engine.commit(tx, caller=who)
    return tx


async def test_two_tenants_share_nothing(engine: agenttx.Engine, tmp_path: Path) -> None:
    await committed(
        engine,
        ALICE,
        [
            ("kv.put", {"key": "plan", "value": "acme's"}),
            ("record.insert", {"table": "users", "id": "1", "fields": {"n": "a"}}),
            ("fs.write", {"path": "notes.txt", "contents": "acme only"}),
        ],
    )
    tx = (await engine.begin(caller=BOB)).transaction_id
    # The same key, table row and path in another tenant: nothing of acme's is there.
    for tool, args in (
        ("kv.get", {"key": "plan"}),
        ("record.get", {"table": "users", "id": "1"}),
        ("fs.read", {"path": "notes.txt"}),
    ):
        missed = await engine.execute_step(tx, 1, tool, args, caller=BOB)
        assert missed.status is StepStatus.ROLLBACK_TRIGGERED, (tool, missed)
        assert missed.next_step_id == 1
    await step(engine, BOB, tx, "kv.put", {"key": "plan", "value": "globex's"})
    # (the same primary key: no duplicate-key error, as the tables are per tenant)
    await step(
        engine, BOB, tx, "record.insert", {"table": "users", "id": "1", "fields": {"n": "b"}}
    )
    await step(engine, BOB, tx, "fs.write", {"path": "notes.txt", "contents": "globex only"})
    await engine.commit(tx, caller=BOB)

    check = (await engine.begin(caller=ALICE)).transaction_id
    assert (await step(engine, ALICE, check, "kv.get", {"key": "plan"}))["value"] == "acme's"
    assert (await step(engine, ALICE, check, "fs.read", {"path": "notes.txt"}))[
        "contents"
    ] == "acme only"
    got = await step(engine, ALICE, check, "record.get", {"table": "users", "id": "1"})
    assert got == {"n": "a", "id": "1"}
    # Each tenant's sandbox is its own directory, neither inside the other.
    acme = tmp_path / "files.tenants" / "acme" / "notes.txt"
    globex = tmp_path / "files.tenants" / "globex" / "notes.txt"
    assert acme.read_text() == "acme only"
    assert globex.read_text() == "globex only"
    assert not (tmp_path / "files" / "notes.txt").exists()


async def test_another_tenants_transaction_does_not_exist(engine: agenttx.Engine) -> None:
    tx = (await engine.begin(caller=ALICE)).transaction_id
    missing = "tx_" + "0" * 32
    with pytest.raises(NotFound) as unknown:
        await engine.get_transaction(missing, caller=BOB)
    for call in (
        engine.get_transaction(tx, caller=BOB),
        engine.execute_step(tx, 1, "kv.get", {"key": "k"}, caller=BOB),
        engine.commit(tx, caller=BOB),
        engine.rollback(tx, caller=BOB),
        engine.audit_records(tx, caller=BOB),
        engine.verify_audit(tx, caller=BOB),
    ):
        with pytest.raises(NotFound) as refused:
            await call
        # Word for word what an unknown id gets, so a taken id cannot be told apart.
        assert refused.value.message == unknown.value.message.replace(missing, tx)
    with pytest.raises(NotFound):
        async for _ in engine.watch(tx, caller=BOB):
            pass
    # And it is untouched: alice carries on.
    assert (await engine.get_transaction(tx, caller=ALICE)).next_step_id == 1


async def test_another_principal_needs_admin(engine: agenttx.Engine) -> None:
    tx = (await engine.begin(caller=ALICE)).transaction_id
    for call in (
        engine.get_transaction(tx, caller=CAROL),
        engine.execute_step(tx, 1, "kv.get", {"key": "k"}, caller=CAROL),
        engine.commit(tx, caller=CAROL),
        engine.rollback(tx, caller=CAROL),
    ):
        with pytest.raises(PermissionDenied, match="admin"):
            await call
    # An approver reads it but does not act on it; an admin of the tenant does anything.
    assert (await engine.get_transaction(tx, caller=REVIEWER)).transaction_id == tx
    with pytest.raises(PermissionDenied):
        await engine.execute_step(tx, 1, "kv.get", {"key": "k"}, caller=REVIEWER)
    await step(engine, ADMIN, tx, "kv.put", {"key": "k", "value": 1})
    assert (await engine.commit(tx, caller=ADMIN)).committed


async def test_listings_show_the_callers_own(engine: agenttx.Engine) -> None:
    mine = {(await engine.begin(caller=ALICE)).transaction_id for _ in range(3)}
    carols = {(await engine.begin(caller=CAROL)).transaction_id}
    bobs = {(await engine.begin(caller=BOB)).transaction_id}
    local = {(await engine.begin()).transaction_id}  # embedded use: the engine's own tenant

    async def listed(who: Caller | None) -> set[str]:
        page = await engine.list_transactions_page(page_size=2, caller=who)
        seen = {t.transaction_id for t in page.transactions}
        while page.next_page_token:
            page = await engine.list_transactions_page(
                page_size=2, page_token=page.next_page_token, caller=who
            )
            seen |= {t.transaction_id for t in page.transactions}
        return seen

    assert await listed(ALICE) == mine
    assert await listed(BOB) == bobs
    assert await listed(ADMIN) == mine | carols
    assert await listed(REVIEWER) == mine | carols
    assert await listed(None) == mine | carols | bobs | local
    assert {t.transaction_id for t in await engine.list_transactions(caller=CAROL)} == carols


async def test_effects_show_only_the_transactions_a_caller_may_read(
    engine: agenttx.Engine,
) -> None:
    # An effect's payload (recipients, subject, body) is its transaction's data: the store
    # query filters by owner (``core.access.read_owner``), so a page holds only readable ones.
    staged = ("effect.stage", {"channel": "mail", "payload": {"body": "the secret price"}})
    alices = await committed(engine, ALICE, [staged, staged])
    carols = await committed(engine, CAROL, [staged])

    async def listed(who: Caller, tx: str = "") -> list[str]:
        page = await engine.list_effects(transaction_id=tx, limit=1, caller=who)
        seen = [e.transaction_id for e in page.effects]
        while page.next_after_id:
            page = await engine.list_effects(
                transaction_id=tx, after_id=page.next_after_id, limit=1, caller=who
            )
            seen += [e.transaction_id for e in page.effects]
        return seen

    assert await listed(CAROL) == [carols]
    assert await listed(ALICE) == [alices, alices]
    assert await listed(ALICE, alices) == [alices, alices]
    assert await listed(ADMIN) == await listed(REVIEWER) == [alices, alices, carols]
    assert await listed(BOB) == []
    with pytest.raises(PermissionDenied, match="admin or approver"):
        await engine.list_effects(transaction_id=alices, caller=CAROL)
    with pytest.raises(NotFound):
        await engine.list_effects(transaction_id=alices, caller=BOB)


async def test_request_ids_are_per_tenant(engine: agenttx.Engine) -> None:
    a = await engine.begin(request_id="req-1", caller=ALICE)
    b = await engine.begin(request_id="req-1", caller=BOB)
    assert a.transaction_id != b.transaction_id  # the same id in two tenants: two requests
    again = await engine.begin(request_id="req-1", caller=BOB)
    assert again.transaction_id == b.transaction_id  # a retry in one tenant: the stored reply
    r1 = await engine.execute_step(
        b.transaction_id, 1, "kv.put", {"key": "k", "value": 1}, request_id="s", caller=BOB
    )
    r2 = await engine.execute_step(
        b.transaction_id, 1, "kv.put", {"key": "k", "value": 1}, request_id="s", caller=BOB
    )
    assert r1.revision == r2.revision  # replayed, not run twice


async def test_the_owner_is_in_the_audit_chain(engine: agenttx.Engine) -> None:
    tx = (await engine.begin(caller=ALICE)).transaction_id
    [begun] = await engine.audit_records(tx, caller=ALICE)
    assert '"principal":"alice"' in begun.body.replace(" ", "")


async def test_verifying_every_chain_is_for_the_operator(engine: agenttx.Engine) -> None:
    with pytest.raises(PermissionDenied, match="audit verify"):
        await engine.verify_audit_page(caller=ADMIN)
    assert (await engine.verify_audit_page())[1] == ""


async def test_a_listing_cursor_of_another_tenant_is_no_cursor(engine: agenttx.Engine) -> None:
    theirs = (await engine.begin(caller=BOB)).transaction_id
    missing = "tx_" + "f" * 32
    with pytest.raises(agenttx.InvalidArgument) as unknown:
        await engine.list_transactions_page(page_token=missing, caller=ALICE)
    with pytest.raises(agenttx.InvalidArgument) as refused:
        await engine.list_transactions_page(page_token=theirs, caller=ALICE)
    assert refused.value.message == unknown.value.message.replace(missing, theirs)
    assert (await engine.list_transactions_page(page_token=theirs, caller=BOB)).transactions == []
