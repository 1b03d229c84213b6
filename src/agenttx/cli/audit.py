"""``agenttx audit``: verify, anchor and export transactions' audit hash chains.

Every command works on a store directly (``--store URL``: no server needed, e.g. on a backup)
or on a running server (``--server``, the default). ``verify`` exits 0 when every chain it
checked is intact, 3 when one is not (edited, removed or reordered records; the first bad one
is named), 4 when none is bad but a chain could not be checked (keyed records without their
key, or a plain chain checked with a key), 1 on an error (unreachable server or store, a
transaction the store does not know: NOT_FOUND), 2 on a usage error; ``--anchor FILE`` also
holds each chain to the head ``anchor`` wrote there (``cli.audit_anchor``). ``--audit-key
FILE`` gives a ``--store`` verification the audit keys (a server verifies with its own).
``export`` writes one JSON line per record, each with everything its hash covers
(``docs/audit.md``); ``new-key`` prints a ``[[key]]`` table for the audit key file
(``agenttx.audit_keys``). ``verify`` and ``export`` are their rows' bindings
(``api/operations/cli_bindings.py``), their actions here; ``anchor`` and ``new-key`` are
written here.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sys
from collections.abc import Callable, Coroutine, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import click

from agenttx.api.operations.cli_bindings import AUDIT_KEY, STORE
from agenttx.audit import AuditKeys, AuditRecord, AuditVerification, ChainHead, verify_chain
from agenttx.cli.audit_anchor import AnchorFileError, anchor_lines, header, hold, read_anchor
from agenttx.cli.common import connected, fail, param, server_option, timeout_option
from agenttx.cli.rows import Connect, TableGroup
from agenttx.errors import AgentTxError, NotFound
from agenttx.plural import plural

T = TypeVar("T")

BAD_CHAIN_EXIT = 3  # distinct from errors (1) and usage errors (2)
UNCHECKED_EXIT = 4  # nothing bad found, but keyed records went unchecked (no key for them)

store_option = param(STORE)
audit_key_option = param(AUDIT_KEY)


@click.group(cls=TableGroup)
def audit() -> None:
    """Verify, anchor and export the audit hash chains of transactions."""


def verify(
    connect: Connect,
    transaction_id: str | None,
    check_all: bool,
    store_url: str | None,
    as_json: bool,
    quiet: bool,
    anchor_file: Path | None,
    audit_key_file: Path | None,
) -> None:
    """``audit verify``: each chain checked, on the store or the server; the exit status
    says how they stand (the module's docstring)."""
    if check_all == (transaction_id is not None):
        raise click.UsageError("give a transaction id or --all (not both)")
    keys = _keys(audit_key_file, store_url)
    results: Iterable[AuditVerification] = _verifications(transaction_id, store_url, connect, keys)
    if anchor_file is not None:
        try:
            heads = read_anchor(anchor_file)
        except (AnchorFileError, OSError) as exc:
            fail(str(exc))
        results = _anchored(
            list(results),
            heads,
            f"the anchor {anchor_file}",
            check_all,
            store_url,
            connect,
            keys,
        )
    bad = unchecked = total = 0
    for v in results:
        total += 1
        bad += not v.ok and not v.unchecked
        unchecked += bool(v.unchecked)
        if as_json:
            click.echo(json.dumps(_as_dict(v), ensure_ascii=False))
        elif not (quiet and v.ok):
            click.echo(_line(v))
    if not as_json and check_all:
        more = f", {unchecked} not checked (each UNCHECKED line says why)" if unchecked else ""
        click.echo(f"{plural(total, 'chain')} checked, {bad} bad{more}", err=True)
    if bad:
        sys.exit(BAD_CHAIN_EXIT)
    if unchecked:
        sys.exit(UNCHECKED_EXIT)


@audit.command("anchor")
@store_option
@server_option
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write to this file (replaced whole once every chain is checked), not standard output.",
)
@audit_key_option
@timeout_option
def anchor(
    store_url: str | None,
    server: str,
    output: Path | None,
    audit_key_file: Path | None,
    timeout: float,
) -> None:
    """Check every chain and write each intact one's head (id, seq, hash) as JSON lines, to
    keep where the store's writers cannot reach; exit 3 if a chain is bad or could not be
    checked (it is left out)."""
    bad = 0
    lines = [header()]
    reach = functools.partial(connected, server, timeout)
    for v in _verifications(None, store_url, reach, _keys(audit_key_file, store_url)):
        if not v.ok:
            bad += 1
            click.echo(_line(v), err=True)
        lines.extend(anchor_lines([v]))
    text = "".join(line + "\n" for line in lines)
    if output is None:
        click.echo(text, nl=False)
    else:
        # Written beside it and renamed: a failed run never leaves half an anchor behind.
        partial = output.with_name(output.name + ".partial")
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, output)
    click.echo(f"{plural(len(lines) - 1, 'chain')} anchored, {bad} bad", err=True)
    if bad:
        sys.exit(BAD_CHAIN_EXIT)


def export(
    connect: Connect, transaction_id: str, store_url: str | None, output: Path | None
) -> None:
    """``audit export``: the chain's records, one JSON line each, on the store or the server."""
    out = output.open("w", encoding="utf-8") if output is not None else None
    try:
        for rec in _records(transaction_id, store_url, connect):
            click.echo(rec.line(), file=out)
    finally:
        if out is not None:
            out.close()


@audit.command("new-key")
@click.option("--id", "key_id", default="", help="The key's id.  [default: now, UTC]")
def new_key(key_id: str) -> None:
    """Print a [[key]] table with a fresh secret, for the --audit-key file (mode 600, kept
    apart from the store); name it in `sign` to key new records with it."""
    from agenttx.audit_keys import new_key_toml
    from agenttx.errors import InvalidArgument

    try:
        click.echo(new_key_toml(key_id), nl=False)
    except InvalidArgument as exc:
        raise click.UsageError(f"--id: {exc.message}") from None


# -- where the chains come from ---------------------------------------------------------------


def _keys(path: Path | None, store_url: str | None) -> AuditKeys | None:
    """The audit keys of ``--audit-key`` for a ``--store`` verification. A server verifies
    with its own: a file named on the command line then is a usage error, one named by the
    environment (as on the server's host) is not used."""
    if path is None:
        return None
    if store_url is None:
        source = click.get_current_context().get_parameter_source("audit_key_file")
        if source is click.core.ParameterSource.COMMANDLINE:
            raise click.UsageError(
                "--audit-key works with --store; a server verifies with its own "
                "(agenttx serve --audit-key FILE)"
            )
        return None
    from agenttx.audit_keys import read_audit_keys
    from agenttx.errors import InvalidArgument

    try:
        return read_audit_keys(path)
    except InvalidArgument as exc:
        fail(exc.message)


def _verifications(
    transaction_id: str | None,
    store_url: str | None,
    connect: Connect,
    keys: AuditKeys | None = None,
) -> Iterator[AuditVerification]:
    if store_url is not None:

        async def on_store(reader: Any) -> list[AuditVerification]:
            if transaction_id is not None:
                return [await reader.verify(transaction_id)]
            return [v async for v in reader.verify_all()]

        yield from _on_store(store_url, on_store, keys)
        return
    with connect() as client:
        if transaction_id is not None:
            yield client.verify_audit(transaction_id)
        else:
            yield from client.iter_audit_verifications()


def _anchored(
    results: list[AuditVerification],
    heads: dict[str, ChainHead],
    source: str,
    check_all: bool,
    store_url: str | None,
    connect: Connect,
    keys: AuditKeys | None,
) -> list[AuditVerification]:
    """``results`` held to the anchored heads (``audit_anchor.hold``): each anchored chain's
    record at its anchored seq is read; with ``check_all``, the anchored chains the store did
    not list are verified too (each then says it is gone)."""
    seen = {v.transaction_id for v in results}
    missing = sorted(set(heads) - seen) if check_all else []
    if store_url is not None:

        async def on_store(reader: Any) -> list[AuditVerification]:
            async def at(tx: str, seq: int) -> AuditRecord | None:
                page = await reader.records(tx, after_seq=seq - 1, limit=1)
                return page[0] if page else None

            async def verified(tx: str) -> AuditVerification:
                try:
                    v: AuditVerification = await reader.verify(tx)
                    return v
                except NotFound:
                    return _gone(tx)

            gone = [await verified(tx) for tx in missing]
            return [
                hold(v, await at(v.transaction_id, heads[v.transaction_id].seq), heads, source)
                if v.transaction_id in heads
                else v
                for v in [*results, *gone]
            ]

        return _on_store(store_url, on_store, keys)
    with connect() as client:

        def at(tx: str, seq: int) -> AuditRecord | None:
            found, _ = client.audit_records(tx, after_seq=seq - 1, page_size=1)
            return found[0] if found else None

        def verified(tx: str) -> AuditVerification:
            try:
                return client.verify_audit(tx)
            except NotFound:
                return _gone(tx)

        gone = [verified(tx) for tx in missing]
        return [
            hold(v, at(v.transaction_id, heads[v.transaction_id].seq), heads, source)
            if v.transaction_id in heads
            else v
            for v in [*results, *gone]
        ]


def _records(transaction_id: str, store_url: str | None, connect: Connect) -> Iterator[AuditRecord]:
    if store_url is not None:

        async def on_store(reader: Any) -> list[AuditRecord]:
            return [rec async for rec in reader.chain(transaction_id)]

        yield from _on_store(store_url, on_store)
        return
    with connect() as client:
        yield from client.iter_audit_records(transaction_id)


def _on_store(
    url: str, fn: Callable[[Any], Coroutine[Any, Any, list[T]]], keys: AuditKeys | None = None
) -> list[T]:
    """Open the store at ``url`` (no engine: nothing is recovered or delivered), run ``fn`` on
    an ``AuditReader`` over it (verifying with ``keys``), close it. Errors become one line and
    exit status 1."""
    from agenttx.core.audit import AuditReader
    from agenttx.store.factory import open_store

    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
        fail(f"no SQLite store at {url.removeprefix('sqlite:///')}")

    async def run() -> list[T]:
        store = open_store(url)
        await store.open()
        try:
            return await fn(AuditReader(store, keys))
        finally:
            await store.close()

    try:
        return asyncio.run(run())
    except AgentTxError as exc:  # as a server's refusal reads: the code, then the message
        fail(f"{exc.code}: {exc.message}")


def _gone(transaction_id: str) -> AuditVerification:
    """An anchored chain the store no longer knows at all: bad from record 1 ("no audit
    records"), which ``hold`` then reports against the anchored head."""
    return verify_chain(transaction_id, [])


def _as_dict(v: AuditVerification) -> dict[str, Any]:
    return {
        "transaction_id": v.transaction_id,
        "ok": v.ok,
        "records": v.records,
        "first_bad": v.first_bad,
        "reason": v.reason,
        "head_hash": v.head_hash,
        "pending": v.pending,
        "unchecked": v.unchecked,
    }


def _line(v: AuditVerification) -> str:
    if v.ok:
        line = f"ok   {v.transaction_id}  {plural(v.records, 'record')}  head {v.head_hash[:16]}"
        if v.pending:  # an active transaction's steps since its last write with records
            line += f"  ({plural(v.pending, 'step record')} pending: chained by its next write)"
        return line
    if v.unchecked:  # nothing found wrong, but keyed records went unchecked
        return f"UNCHECKED  {v.transaction_id}  record {v.first_bad}: {v.reason}"
    return f"BAD  {v.transaction_id}  record {v.first_bad}: {v.reason}"


__all__ = ["audit"]
