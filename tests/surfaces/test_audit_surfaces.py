"""The audit chain from every surface, on every store: the ListAuditRecords RPC and VerifyAudit's
pages, the sync and async clients, and ``agenttx audit verify|export`` on a store directly
(``--store``) and on a running server (``--server``), with their exit codes. One chain's check
on every surface is the conformance table's (``tests/surfaces/cases.py``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner, Result

import agenttx
from agenttx.audit import canonical, digest
from agenttx.cli import main
from agenttx.cli.audit import BAD_CHAIN_EXIT
from agenttx.client import AgentTxClient, RetryPolicy
from agenttx.wire import agenttx_pb2 as pb
from audit_helpers import committed, run_sql

if TYPE_CHECKING:
    from served_engine import Served

pytest_plugins = ["served_engine"]


async def cli(*args: str) -> Result:
    """Run the command line on a worker thread: the in-process server needs the loop."""
    return await asyncio.to_thread(CliRunner().invoke, main, list(args))


async def test_the_async_client_lists_the_records_a_page_at_a_time(s: Served) -> None:
    # VerifyAudit of one transaction on every surface is the conformance table's.
    tx = await committed(s.engine, 3)
    records = [r async for r in s.client.iter_audit_records(tx)]
    assert records == await s.engine.audit_records(tx)
    page, after = await s.client.audit_records(tx, page_size=2)
    assert [r.seq for r in page] == [1, 2]
    assert after == 2


async def test_verify_all_pages_over_grpc(s: Served) -> None:
    txs = {await committed(s.engine, 1) for _ in range(5)}
    seen = [v async for v in s.client.iter_audit_verifications(page_size=2)]
    assert {v.transaction_id for v in seen} == txs
    assert all(v.ok for v in seen)
    first = await s.stub.VerifyAudit(pb.VerifyAuditRequest(all=True, page_size=2))
    assert len(first.results) == 2
    assert first.next_page_token


async def test_the_sync_client_reads_the_same_chain(s: Served) -> None:
    tx = await committed(s.engine, 2)

    def read() -> tuple[Any, list[Any]]:
        with AgentTxClient(s.target, retry=RetryPolicy(max_attempts=1), timeout=10) as c:
            return c.verify_audit(tx), list(c.iter_audit_records(tx))

    v, records = await asyncio.to_thread(read)
    assert v.ok
    assert records == await s.engine.audit_records(tx)


async def test_a_page_size_over_the_limit_is_refused(s: Served) -> None:
    tx = await committed(s.engine, 1)
    with pytest.raises(agenttx.InvalidArgument, match="over the limit"):
        await s.client.audit_records(tx, page_size=5000)


async def test_cli_verify_and_export_on_a_server(
    serve: Callable[..., Awaitable[Served]], store_url: str
) -> None:
    s = await serve()
    tx = await committed(s.engine, 2)
    ok = await cli("audit", "verify", tx, "--server", s.target)
    assert ok.exit_code == 0, ok.output
    assert ok.output.startswith("ok ")
    assert tx in ok.output
    exported = await cli("audit", "export", tx, "--server", s.target)
    assert exported.exit_code == 0, exported.output
    lines = [json.loads(line) for line in exported.output.splitlines()]
    assert [line["seq"] for line in lines] == [1, 2, 3, 4]
    for line in lines:  # each line carries what its hash covers
        given = line.pop("hash")
        assert digest(canonical(line)) == given
    run_sql(store_url, "DELETE FROM audit WHERE tx_id = ? AND seq = 2", (tx,))
    bad = await cli("audit", "verify", tx, "--server", s.target)
    assert bad.exit_code == BAD_CHAIN_EXIT, bad.output
    assert "BAD" in bad.output
    assert "record 2" in bad.output
    every = await cli("audit", "verify", "--all", "--server", s.target, "--json")
    assert every.exit_code == BAD_CHAIN_EXIT
    (result,) = [json.loads(line) for line in every.output.splitlines() if line.startswith("{")]
    assert (result["ok"], result["first_bad"]) == (False, 2)


async def test_cli_verify_and_export_on_a_store(engine: agenttx.Engine, store_url: str) -> None:
    good = await committed(engine, 1)
    edited = await committed(engine, 1)
    ok = await cli("audit", "verify", good, "--store", store_url)
    assert ok.exit_code == 0, ok.output
    every = await cli("audit", "verify", "--all", "--store", store_url)
    assert every.exit_code == 0, every.output
    assert "2 chains checked, 0 bad" in every.output
    exported = await cli("audit", "export", good, "--store", store_url)
    assert len(exported.output.splitlines()) == 3
    run_sql(store_url, "UPDATE audit SET body = body || ' ' WHERE tx_id = ? AND seq = 2", (edited,))
    bad = await cli("audit", "verify", "--all", "--store", store_url, "--quiet")
    assert bad.exit_code == BAD_CHAIN_EXIT
    assert edited in bad.output
    assert good not in bad.output.split("chains checked")[0]
    assert "was edited" in bad.output


async def test_cli_verify_of_an_unknown_transaction_is_not_found_exit_1(
    serve: Callable[..., Awaitable[Served]], store_url: str
) -> None:
    s = await serve()
    known = await committed(s.engine, 1)
    for where in (("--server", s.target), ("--store", store_url)):
        nope = await cli("audit", "verify", "tx_nope", *where)
        assert nope.exit_code == 1, (where, nope.output)
        assert nope.output.startswith("Error: NOT_FOUND: transaction `tx_nope` not found"), (
            nope.output
        )
        assert "BAD" not in nope.output
    # Records removed from a transaction the store still has: a bad chain (exit 3), as before.
    run_sql(store_url, "DELETE FROM audit WHERE tx_id = ?", (known,))
    for where in (("--server", s.target), ("--store", store_url)):
        bad = await cli("audit", "verify", known, *where)
        assert bad.exit_code == BAD_CHAIN_EXIT, (where, bad.output)
        assert f"BAD  {known}  record 1: the transaction has no audit records" in bad.output


async def test_cli_errors_and_usage() -> None:
    missing = await cli("audit", "verify", "tx_x", "--store", "sqlite:///no/such/file.db")
    assert missing.exit_code == 1
    assert "no SQLite store" in missing.output
    neither = await cli("audit", "verify", "--store", "sqlite:///x.db")
    assert neither.exit_code == 2
    assert "transaction id or --all" in neither.output
    unreachable = await cli("audit", "verify", "tx_x", "--server", "127.0.0.1:1", "--timeout", "1")
    assert unreachable.exit_code == 1
