"""``agenttx audit verify|export --store``: the audit chains read from a store directly, with
no server (what an operator runs on a copy of the database), on both stores, with their exit
statuses. The chain's check on every surface, over a server, is the conformance table's
(``tests/surfaces/cases.py``); the CLI's text over a server is in
``tests/surfaces/test_safety.py``."""

from __future__ import annotations

import agenttx
from agenttx.cli.audit import BAD_CHAIN_EXIT
from audit_helpers import cli, committed, run_sql


async def test_verify_and_export_on_a_store(engine: agenttx.Engine, store_url: str) -> None:
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


async def test_an_unknown_transaction_is_not_found_and_one_without_records_is_bad(
    engine: agenttx.Engine, store_url: str
) -> None:
    known = await committed(engine, 1)
    nope = await cli("audit", "verify", "tx_nope", "--store", store_url)
    assert nope.exit_code == 1, nope.output
    assert nope.output.startswith("Error: NOT_FOUND: transaction `tx_nope` not found"), nope.output
    assert "BAD" not in nope.output
    # Records removed from a transaction the store still has: a bad chain (exit 3).
    run_sql(store_url, "DELETE FROM audit WHERE tx_id = ?", (known,))
    bad = await cli("audit", "verify", known, "--store", store_url)
    assert bad.exit_code == BAD_CHAIN_EXIT, bad.output
    assert f"BAD  {known}  record 1: the transaction has no audit records" in bad.output


async def test_errors_and_usage() -> None:
    missing = await cli("audit", "verify", "tx_x", "--store", "sqlite:///no/such/file.db")
    assert missing.exit_code == 1
    assert "no SQLite store" in missing.output
    neither = await cli("audit", "verify", "--store", "sqlite:///x.db")
    assert neither.exit_code == 2
    assert "transaction id or --all" in neither.output
    unreachable = await cli("audit", "verify", "tx_x", "--server", "127.0.0.1:1", "--timeout", "1")
    assert unreachable.exit_code == 1
