"""Undo and redo, unknown outcomes, compensation, the audit chain and the outbox
(``cases.SAFETY``) on every surface, as ``test_lifecycle.py`` runs the lifecycle; and the
table's promises about itself: every operation of the service contract has a case, each
surface offers every operation but those ``LACKS`` names, and those it really lacks. Then
what the table cannot say of the audit chain, on the same surfaces: its records a page at a
time (no operation of the contract: the engine answers a list, the clients a page), every
chain's check a page at a time, and the CLI's text and export; the CLI's words for an
unknown outcome and an operator's settling of one; and undo, redo and dry runs in each
surface's own form (the CLI's text, MCP's, gRPC's tool listing, the clients' transaction
helpers)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import agenttx
import undo_tools
from agenttx.audit import canonical, digest
from agenttx.wire import agenttx_pb2 as pb
from audit_helpers import run_sql
from surfaces.cases import (
    AUDITED,
    BAD_CHAIN_EXIT,
    BEGIN,
    CASES,
    DRY_RUNS,
    LACKS,
    PUT_1,
    SAFETY,
    UNASKED_UNDO,
    UNHANDLED_STEP,
    UNKNOWN_UNDO,
    UNSURE_STEP,
    dry,
)
from surfaces.drivers import Driver
from surfaces.runner import conformance_test, prepared
from undo_outcome_tools import calls

pytestmark = pytest.mark.asyncio(loop_scope="module")

test_each_surface_gives_the_engines_outcome = conformance_test(SAFETY)


@pytest.mark.parametrize(("surface", "operation"), list(LACKS), ids=[f"{s}-{o}" for s, o in LACKS])
async def test_a_surface_lacks_what_the_table_says(
    surface: str, operation: str, drivers: dict[str, Driver]
) -> None:
    assert not await drivers[surface].offers(operation), LACKS[surface, operation]
    assert await drivers["embedded"].offers(operation)


async def test_the_table_covers_every_operation_of_the_contract(
    drivers: dict[str, Driver],
) -> None:
    operations = {name for name in vars(agenttx.TransactionService) if not name.startswith("_")}
    assert operations <= {case.call.operation for case in CASES}
    for surface, driver in drivers.items():
        for operation in sorted(operations):
            if (surface, operation) not in LACKS:
                assert await driver.offers(operation), (surface, operation)


# -- the audit chain in each surface's own form ------------------------------------------------


async def test_the_clients_read_the_records_the_engine_wrote_a_page_at_a_time(
    drivers: dict[str, Driver], tmp_path: Path
) -> None:
    engine = drivers["embedded"].service  # type: ignore[attr-defined]
    client = drivers["client"].service  # type: ignore[attr-defined]
    blocking = drivers["sync-client"].service  # type: ignore[attr-defined]
    ours = await prepared(AUDITED, drivers["embedded"], tmp_path / "embedded")
    theirs = await prepared(AUDITED, drivers["client"], tmp_path / "client")
    kinds = [(r.seq, r.kind) for r in await engine.audit_records(ours["tx"])]
    assert len(kinds) == 4
    records = [r async for r in client.iter_audit_records(theirs["tx"])]
    assert [(r.seq, r.kind) for r in records] == kinds
    assert {r.tx_id for r in records} == {theirs["tx"]}
    page, after = await client.audit_records(theirs["tx"], page_size=2)
    assert page == records[:2]
    assert after == 2
    assert await asyncio.to_thread(lambda: list(blocking.iter_audit_records(theirs["tx"]))) == (
        records
    )
    with pytest.raises(agenttx.InvalidArgument, match="over the limit"):
        await client.audit_records(theirs["tx"], page_size=5000)


async def test_every_chain_is_checked_a_page_at_a_time(
    drivers: dict[str, Driver], tmp_path: Path
) -> None:
    # The server holds every case's transactions (some chains edited on purpose): these five
    # are each in one page, once, and intact.
    txs = {(await prepared(AUDITED, drivers["client"], tmp_path / str(n)))["tx"] for n in range(5)}
    client = drivers["client"].service  # type: ignore[attr-defined]
    seen = [v async for v in client.iter_audit_verifications(page_size=2)]
    ids = [v.transaction_id for v in seen]
    assert len(ids) == len(set(ids))
    assert all(v.ok for v in seen if v.transaction_id in txs)
    assert txs <= set(ids)
    stub = drivers["grpc"].stub  # type: ignore[attr-defined]
    first = await stub.VerifyAudit(pb.VerifyAuditRequest(all=True, page_size=2))
    assert len(first.results) == 2
    assert first.next_page_token


async def test_the_cli_says_how_a_chain_stands_and_exports_it(
    drivers: dict[str, Driver], tmp_path: Path
) -> None:
    cli = drivers["cli"]
    tx = (await prepared(AUDITED, cli, tmp_path / "s"))["tx"]
    ok = await cli.as_a_person_runs_it("audit", "verify", tx)  # type: ignore[attr-defined]
    assert ok.exit_code == 0, ok.output
    assert ok.output.startswith("ok ")
    assert tx in ok.output
    exported = await cli.as_a_person_runs_it("audit", "export", tx)  # type: ignore[attr-defined]
    assert exported.exit_code == 0, exported.output
    lines = [json.loads(line) for line in exported.output.splitlines()]
    assert [line["seq"] for line in lines] == [1, 2, 3, 4]
    for line in lines:  # each line carries what its hash covers
        given = line.pop("hash")
        assert digest(canonical(line)) == given
    sql = "DELETE FROM audit WHERE tx_id = ? AND seq = 2"
    await asyncio.to_thread(run_sql, cli.store_url, sql, (tx,))
    bad = await cli.as_a_person_runs_it("audit", "verify", tx)  # type: ignore[attr-defined]
    assert str(bad.exit_code) == BAD_CHAIN_EXIT, bad.output
    assert "BAD" in bad.output
    assert "record 2" in bad.output
    every = await cli.as_a_person_runs_it("audit", "verify", "--all", "--json")  # type: ignore[attr-defined]
    assert str(every.exit_code) == BAD_CHAIN_EXIT
    results = [json.loads(line) for line in every.output.splitlines() if line.startswith("{")]
    [result] = [r for r in results if r["transaction_id"] == tx]
    assert (result["ok"], result["first_bad"]) == (False, 2)
    # Records removed from a transaction the server still has: a bad chain, not NOT_FOUND.
    await asyncio.to_thread(run_sql, cli.store_url, "DELETE FROM audit WHERE tx_id = ?", (tx,))
    gone = await cli.as_a_person_runs_it("audit", "verify", tx)  # type: ignore[attr-defined]
    assert str(gone.exit_code) == BAD_CHAIN_EXIT, gone.output
    assert f"BAD  {tx}  record 1: the transaction has no audit records" in gone.output


# -- an unknown outcome in the CLI's own words -------------------------------------------------


async def test_the_cli_shows_a_step_that_awaits_reconciliation(
    drivers: dict[str, Driver], tmp_path: Path
) -> None:
    cli = drivers["cli"]
    tx = (await prepared(UNSURE_STEP, cli, tmp_path / "s"))["tx"]
    shown = await cli.as_a_person_runs_it("tx", "show", tx)  # type: ignore[attr-defined]
    assert shown.exit_code == 0, shown.output
    line = " ".join(shown.output.split())
    assert "step 1 awaits reconciliation · operation psp:op-" in line
    assert f"agenttx tx reconcile {tx} 1" in line


async def test_the_cli_takes_an_operators_word_as_json_and_says_what_follows(
    drivers: dict[str, Driver], tmp_path: Path
) -> None:
    cli = drivers["cli"]
    tx = (await prepared(UNHANDLED_STEP, cli, tmp_path / "s"))["tx"]
    resolve = ("tx", "resolve", tx, "1", "happened", "--output")
    bad = await cli.as_a_person_runs_it(*resolve, "{no")  # type: ignore[attr-defined]
    assert bad.exit_code == 2
    assert "not JSON" in bad.output
    ok = await cli.as_a_person_runs_it(*resolve, '{"charge": "x"}')  # type: ignore[attr-defined]
    assert ok.exit_code == 0, ok.output
    assert "happened" in ok.output
    assert "continue with step 2" in " ".join(ok.output.split())  # rich wraps lines


# -- undo, redo and dry runs in each surface's own form -----------------------------------------


async def test_the_cli_undoes_and_redoes_in_words(
    drivers: dict[str, Driver], tmp_path: Path
) -> None:
    cli = drivers["cli"]
    tx = (await prepared((BEGIN, PUT_1), cli, tmp_path / "s"))["tx"]
    undone = await cli.as_a_person_runs_it("tx", "undo", tx)  # type: ignore[attr-defined]
    assert undone.exit_code == 0, undone.output
    assert "undid step 1" in undone.output
    assert "next step 1" in undone.output
    assert "redo" in undone.output
    redone = await cli.as_a_person_runs_it("tx", "redo", tx)  # type: ignore[attr-defined]
    assert redone.exit_code == 0, redone.output
    shown = await cli.as_a_person_runs_it("tx", "show", tx)  # type: ignore[attr-defined]
    assert shown.exit_code == 0, shown.output
    assert "1 of 100000 (99999 left); can undo, commit, rollback" in shown.output  # revisions


async def test_the_cli_shows_an_unknown_undo_and_an_operator_settles_it(
    drivers: dict[str, Driver], tmp_path: Path
) -> None:
    cli = drivers["cli"]
    bound = await prepared(UNASKED_UNDO, cli, tmp_path / "s")
    shown = await cli.as_a_person_runs_it("tx", "show", bound["tx"])  # type: ignore[attr-defined]
    assert shown.exit_code == 0, shown.output
    line = " ".join(shown.output.split())
    assert "the undo of step 1 awaits reconciliation" in line
    assert "never run again blindly" in line
    settle = ("tx", "resolve", bound["tx"], "1", "not-happened", "--reason", "no refund")
    ok = await cli.as_a_person_runs_it(*settle)  # type: ignore[attr-defined]
    assert ok.exit_code == 0, ok.output
    assert calls(bound["dir"], "pay.unasked") == 1  # the charge ran once, its undo not blindly


async def test_mcp_says_a_waiting_rollback_is_not_resumed_by_a_step(
    drivers: dict[str, Driver], tmp_path: Path
) -> None:
    mcp = drivers["mcp-stdio"]
    bound = await prepared(UNKNOWN_UNDO[:2], mcp, tmp_path / "s")
    waiting = await mcp.call("rollback", transaction_id=bound["tx"])
    assert "never run again" in waiting.text
    assert "Resume with run_step" not in waiting.text
    assert (await mcp.call("reconcile_step", transaction_id=bound["tx"], step_id=1)).ok
    assert calls(bound["dir"], "pay.uncertain") == 1


async def test_mcp_takes_a_dry_run_sent_as_text_and_names_run_step_alone(
    drivers: dict[str, Driver], tmp_path: Path
) -> None:
    mcp = drivers["mcp-stdio"]
    tx = (await prepared((BEGIN, PUT_1), mcp, tmp_path / "s"))["tx"]
    step = {"transaction_id": tx, "step_id": 2, "tool_name": "kv.put"}
    would_fail = await mcp.call("execute_step", **step, arguments={"key": 3}, dry_run="true")
    assert would_fail.view(("status", "report.would_succeed"))["fields"] == {
        "status": "FAILED",
        "report.would_succeed": False,
    }
    twice = await mcp.call("redo_step", transaction_id=tx)
    assert set(twice.next) == {"kind", "tool", "instruction"}, twice.next  # nothing else


async def test_grpc_lists_each_tools_dry_run_levels_and_undo(drivers: dict[str, Driver]) -> None:
    stub = drivers["grpc"].stub  # type: ignore[attr-defined]
    tools = {t.name: t for t in (await stub.ListTools(pb.ListToolsRequest())).tools}
    assert (tools["t.unvalidated"].dry_run, tools["t.unvalidated"].dry_run_reached) == (
        "downstream_validation",
        "policy_and_schema",  # no validate handler: the level it can reach, below its declared
    )
    assert tools["kv.put"].dry_run_reached == "full_simulation"
    assert tools["kv.put"].undoable
    assert not tools["t.irreversible"].undoable


async def test_a_dry_run_runs_no_tool(drivers: dict[str, Driver], tmp_path: Path) -> None:
    # The embedded engine's: its tools run in this process, where CALLS records them.
    undo_tools.CALLS.clear()
    await prepared(
        (BEGIN, PUT_1, *DRY_RUNS, dry(2, "t.validated", {"amount": -5})),
        drivers["embedded"],
        tmp_path / "s",
    )
    assert undo_tools.CALLS == []


async def test_the_blocking_clients_transaction_undoes_redoes_and_dry_runs(
    drivers: dict[str, Driver],
) -> None:
    blocking = drivers["sync-client"].service  # type: ignore[attr-defined]

    def drive() -> tuple[Any, ...]:
        with blocking.transaction() as t:
            t.step("kv.put", {"key": "x", "value": 1})
            t.step("kv.put", {"key": "y", "value": 2})
            preview = t.dry_run("kv.put", {"key": "z", "value": "${steps.2.value}"})
            undone = t.undo()
            after_undo = (t.next_step_id, dict(t.outputs))
            redone = t.redo()
            after_redo = (t.next_step_id, dict(t.outputs))
            tx = t.transaction_id
        return preview, undone, after_undo, redone, after_redo, blocking.get_transaction(tx)

    preview, undone, after_undo, redone, after_redo, committed = await asyncio.to_thread(drive)
    assert preview.status is agenttx.StepStatus.SUCCESS
    assert preview.next_step_id == 3
    # A reference resolves as it would for the real step.
    assert preview.dry_run.changes["writes"] == [{"key": "kv/z", "before": None, "after": 2}]
    assert undone.step_id == 2
    assert after_undo == (2, {1: {"key": "x", "value": 1}})
    assert redone.next_step_id == 3
    assert after_redo == (3, {1: {"key": "x", "value": 1}, 2: {"key": "y", "value": 2}})
    assert committed.status.value == "COMMITTED"
    assert committed.revision_count == 2


async def test_the_async_clients_transaction_undoes_redoes_and_dry_runs(
    drivers: dict[str, Driver],
) -> None:
    client = drivers["client"].service  # type: ignore[attr-defined]
    async with client.transaction() as t:
        await t.step("kv.put", {"key": "x", "value": 1})
        preview = await t.dry_run("kv.put", {"key": "x", "value": 2})
        assert preview.dry_run is not None
        assert preview.dry_run.changes["writes"] == [{"key": "kv/x", "before": 1, "after": 2}]
        assert t.next_step_id == 2
        undone = await t.undo()
        assert (undone.step_id, t.next_step_id, t.outputs) == (1, 1, {})
        await t.redo()
        assert (t.next_step_id, t.outputs) == (2, {1: {"key": "x", "value": 1}})
        await t.undo()
        await t.step("kv.put", {"key": "y", "value": 3})  # the redo is gone now
        with pytest.raises(agenttx.RedoRefused):
            await t.redo()
        tx = t.transaction_id
    info = await client.get_transaction(tx)
    assert info.status.value == "COMMITTED"
    assert [s.output for s in info.steps if s.live] == [{"key": "y", "value": 3}]
