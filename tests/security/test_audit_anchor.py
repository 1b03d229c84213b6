"""``agenttx audit anchor`` and ``agenttx audit verify --anchor FILE``, on both stores, on a
store directly and on a running server: a chain rewritten and re-hashed whole — which verifies
``ok`` on its own, its transaction row agreeing — is BAD against the anchor, so are records
cut off the end and a chain removed whole; a chain that grew since it was anchored stays ok;
a file that is not an anchor is refused naming the line."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import agenttx
from agenttx.audit import ChainHead, make_record
from agenttx.cli.audit import BAD_CHAIN_EXIT
from audit_helpers import cli, committed, run_sql

if TYPE_CHECKING:
    from click.testing import Result

    from served_engine import Served

pytest_plugins = ["served_engine"]


async def rehash_whole(engine: agenttx.Engine, store_url: str, tx: str) -> None:
    """Rewrite record 2's data and re-hash it and every record after it: a chain consistent
    in itself, of the same length and revisions (what someone with the store's password can
    do)."""
    records = await engine.audit_records(tx)
    head = records[0].head
    for rec in records[1:]:
        content = rec.content()
        data = dict(content["data"], forged=True) if rec.seq == 2 else content["data"]
        new = make_record(
            head,
            tx_id=tx,
            tenant=content["tenant"],
            kind=rec.kind,
            at=rec.at,
            revision=content["revision"],
            data=data,
        )
        run_sql(
            store_url,
            "UPDATE audit SET body = ?, hash = ? WHERE tx_id = ? AND seq = ?",
            (new.body, new.hash, tx, rec.seq),
        )
        head = ChainHead(new.seq, new.hash)


def bad_lines(result: Result) -> dict[str, str]:
    return {line.split()[1]: line for line in result.output.splitlines() if line.startswith("BAD")}


async def test_an_anchor_finds_a_rewrite_a_cut_and_a_removal_on_a_store(
    engine: agenttx.Engine, store_url: str, tmp_path: Path
) -> None:
    rewritten, cut, removed = [await committed(engine, 2) for _ in range(3)]
    grown = (await engine.begin()).transaction_id  # open: its chain grows after the anchor
    await engine.execute_step(grown, 1, "kv.put", {"key": "k", "value": 1})
    anchor = tmp_path / "heads.jsonl"
    written = await cli("audit", "anchor", "--store", store_url, "-o", str(anchor))
    assert written.exit_code == 0, written.output
    assert "4 chains anchored, 0 bad" in written.output
    lines = anchor.read_text().splitlines()
    assert json.loads(lines[0]) == {"format": "agenttx-audit-anchor", "version": 1}
    assert {json.loads(line)["tx"] for line in lines[1:]} == {rewritten, cut, removed, grown}

    await rehash_whole(engine, store_url, rewritten)
    assert (await engine.verify_audit(rewritten)).ok  # alone, the rewrite passes
    run_sql(store_url, "DELETE FROM audit WHERE tx_id = ? AND seq = 4", (cut,))
    run_sql(store_url, "DELETE FROM transactions WHERE id = ?", (cut,))  # no row to anchor it
    run_sql(store_url, "DELETE FROM audit WHERE tx_id = ?", (removed,))
    run_sql(store_url, "DELETE FROM transactions WHERE id = ?", (removed,))
    await engine.execute_step(grown, 2, "kv.put", {"key": "k", "value": 2})
    await engine.commit(grown)

    checked = await cli("audit", "verify", "--all", "--store", store_url, "--anchor", str(anchor))
    assert checked.exit_code == BAD_CHAIN_EXIT, checked.output
    bad = bad_lines(checked)
    assert set(bad) == {rewritten, cut, removed}, checked.output
    assert f"the anchor {anchor} recorded (hash" in bad[rewritten]
    assert "the chain was rewritten" in bad[rewritten]
    assert "its newest records were removed" in bad[cut]
    assert "it was removed whole" in bad[removed]
    one = await cli("audit", "verify", grown, "--store", store_url, "--anchor", str(anchor))
    assert one.exit_code == 0, one.output
    # Without the anchor the rewrite and the cut verify ok: what the anchor adds.
    alone = await cli("audit", "verify", "--all", "--store", store_url)
    assert set(bad_lines(alone)) == set()


async def test_an_anchor_is_checked_over_a_server(
    serve: Callable[..., Awaitable[Served]], store_url: str, tmp_path: Path
) -> None:
    s = await serve()
    tx = await committed(s.engine, 2)
    anchor = tmp_path / "heads.jsonl"
    written = await cli("audit", "anchor", "--server", s.target)
    assert written.exit_code == 0, written.output
    anchor.write_text("".join(line + "\n" for line in written.output.splitlines()[:2]))
    ok = await cli("audit", "verify", tx, "--server", s.target, "--anchor", str(anchor))
    assert ok.exit_code == 0, ok.output
    await rehash_whole(s.engine, store_url, tx)
    bad = await cli("audit", "verify", "--all", "--server", s.target, "--anchor", str(anchor))
    assert bad.exit_code == BAD_CHAIN_EXIT, bad.output
    assert "the chain was rewritten" in bad_lines(bad)[tx]


async def test_a_file_that_is_no_anchor_is_refused_naming_the_line(
    engine: agenttx.Engine, store_url: str, tmp_path: Path
) -> None:
    tx = await committed(engine, 1)
    anchor = tmp_path / "heads.jsonl"
    header = '{"format":"agenttx-audit-anchor","version":1}\n'

    def entry(seq: int, digest: str) -> str:
        return json.dumps({"tx": tx, "seq": seq, "hash": digest}) + "\n"

    for text, says in (
        ("", "empty"),
        ('{"tx": "x"}\n', "not an anchor file"),
        (header + "not json\n", "line 2: not a JSON object"),
        (header + entry(0, "a" * 64), "line 2: seq"),
        (header + entry(1, "xyz"), "line 2: hash"),
        (header + ("x" * 2000) + "\n", "line 2: over the limit of 1024 bytes"),
        (header + entry(1, "a" * 64) * 2, "anchored twice"),
    ):
        anchor.write_text(text)
        refused = await cli("audit", "verify", tx, "--store", store_url, "--anchor", str(anchor))
        assert refused.exit_code == 1, (text, refused.output)
        assert says in refused.output, (text, refused.output)
