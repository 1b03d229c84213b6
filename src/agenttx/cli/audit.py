"""``agenttx audit``: verify and export transactions' audit hash chains.

Both commands work on a store directly (``--store URL``: no server needed, e.g. on a backup)
or on a running server (``--server``, the default). ``verify`` exits 0 when every chain it
checked is intact, 3 when one is not (edited, removed or reordered records; the first bad one
is named), 1 on an error (unreachable server or store), 2 on a usage error. ``export`` writes
one JSON line per record, each with everything its hash covers (``docs/audit.md``).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import click

from agenttx.audit import AuditRecord, AuditVerification
from agenttx.cli.common import call, fail, server_option, timeout_option

T = TypeVar("T")

BAD_CHAIN_EXIT = 3  # distinct from errors (1) and usage errors (2)

store_option = click.option(
    "--store",
    "store_url",
    envvar="AGENTTX_STORE",
    show_envvar=True,
    default=None,
    help="Work on this store directly (sqlite:///path.db, postgresql://…), not on a server.",
)


@click.group()
def audit() -> None:
    """Verify and export the audit hash chains of transactions."""


@audit.command("verify")
@click.argument("transaction_id", required=False)
@click.option("--all", "check_all", is_flag=True, help="Check every chain of the store.")
@store_option
@server_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per chain.")
@click.option("--quiet", "-q", is_flag=True, help="Print only the chains that are bad.")
@timeout_option
def verify(
    transaction_id: str | None,
    check_all: bool,
    store_url: str | None,
    server: str,
    as_json: bool,
    quiet: bool,
    timeout: float,
) -> None:
    """Check a transaction's audit chain (or, with --all, every one); exit 3 if one is bad."""
    if check_all == (transaction_id is not None):
        raise click.UsageError("give a transaction id or --all (not both)")
    results = _verifications(transaction_id, store_url, server, timeout)
    bad = total = 0
    for v in results:
        total += 1
        bad += not v.ok
        if as_json:
            click.echo(json.dumps(_as_dict(v), ensure_ascii=False))
        elif not (quiet and v.ok):
            click.echo(_line(v))
    if not as_json and check_all:
        click.echo(f"{total} chain(s) checked, {bad} bad", err=True)
    if bad:
        sys.exit(BAD_CHAIN_EXIT)


@audit.command("export")
@click.argument("transaction_id")
@store_option
@server_option
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write to this file instead of standard output.",
)
@timeout_option
def export(
    transaction_id: str, store_url: str | None, server: str, output: Path | None, timeout: float
) -> None:
    """Write a transaction's audit chain as JSON lines, oldest record first."""
    out = output.open("w", encoding="utf-8") if output is not None else None
    try:
        for rec in _records(transaction_id, store_url, server, timeout):
            click.echo(rec.line(), file=out)
    finally:
        if out is not None:
            out.close()


# -- where the chains come from ---------------------------------------------------------------


def _verifications(
    transaction_id: str | None, store_url: str | None, server: str, timeout: float
) -> Iterator[AuditVerification]:
    if store_url is not None:

        async def on_store(reader: Any) -> list[AuditVerification]:
            if transaction_id is not None:
                return [await reader.verify(transaction_id)]
            return [v async for v in reader.verify_all()]

        yield from _on_store(store_url, on_store)
        return
    from agenttx.wire import agenttx_pb2 as pb

    def one(stub: Any) -> list[AuditVerification]:
        reply = stub.VerifyAudit(
            pb.VerifyAuditRequest(transaction_id=transaction_id), timeout=timeout
        )
        return [_from_wire(v) for v in reply.results]

    if transaction_id is not None:
        yield from call(server, one)
        return
    token = ""
    while True:

        def page(stub: Any, token: str = token) -> Any:
            return stub.VerifyAudit(
                pb.VerifyAuditRequest(all=True, page_token=token), timeout=timeout
            )

        reply = call(server, page)
        yield from (_from_wire(v) for v in reply.results)
        token = reply.next_page_token
        if not token:
            return


def _records(
    transaction_id: str, store_url: str | None, server: str, timeout: float
) -> Iterator[AuditRecord]:
    if store_url is not None:

        async def on_store(reader: Any) -> list[AuditRecord]:
            return [rec async for rec in reader.chain(transaction_id)]

        yield from _on_store(store_url, on_store)
        return
    from agenttx.wire import agenttx_pb2 as pb

    after = 0
    while True:

        def page(stub: Any, after: int = after) -> Any:
            req = pb.ListAuditRecordsRequest(transaction_id=transaction_id, after_seq=after)
            return stub.ListAuditRecords(req, timeout=timeout)

        reply = call(server, page)
        for m in reply.records:
            yield AuditRecord(transaction_id, m.seq, m.kind, m.at, m.body, m.hash)
        after = reply.next_after_seq
        if not after:
            return


def _on_store(url: str, fn: Callable[[Any], Coroutine[Any, Any, list[T]]]) -> list[T]:
    """Open the store at ``url`` (no engine: nothing is recovered or delivered), run ``fn`` on
    an ``AuditReader`` over it, close it. Errors become one line and exit status 1."""
    from agenttx.core.audit import AuditReader
    from agenttx.errors import AgentTxError
    from agenttx.store.factory import open_store

    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
        fail(f"no SQLite store at {url.removeprefix('sqlite:///')}")

    async def run() -> list[T]:
        store = open_store(url)
        await store.open()
        try:
            return await fn(AuditReader(store))
        finally:
            await store.close()

    try:
        return asyncio.run(run())
    except AgentTxError as exc:
        fail(exc.message)


def _from_wire(v: Any) -> AuditVerification:
    return AuditVerification(v.transaction_id, v.ok, v.records, v.first_bad, v.reason, v.head_hash)


def _as_dict(v: AuditVerification) -> dict[str, Any]:
    return {
        "transaction_id": v.transaction_id,
        "ok": v.ok,
        "records": v.records,
        "first_bad": v.first_bad,
        "reason": v.reason,
        "head_hash": v.head_hash,
        "pending": v.pending,
    }


def _line(v: AuditVerification) -> str:
    if v.ok:
        line = f"ok   {v.transaction_id}  {v.records} records  head {v.head_hash[:16]}"
        if v.pending:  # an active transaction's steps since its last write with records
            line += f"  ({v.pending} step records pending: chained by its next write)"
        return line
    return f"BAD  {v.transaction_id}  record {v.first_bad}: {v.reason}"


__all__ = ["audit"]
