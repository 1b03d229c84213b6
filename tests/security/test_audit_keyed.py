"""Keyed audit chains (``--audit-key``, issue 30.6), on both stores: with a key every record is
an HMAC-SHA256 of its body naming its key's id, and such a chain verifies; rewritten and
re-hashed without the key — keeping the keyed fields, going back to plain records, or plain
records after keyed ones — it is BAD, so is a wrong key; keys rotate (a ring checks old
records by their id); a verifier without the key says it cannot check (not ok) and what to
give it, on the engine, the CLI on a store, gRPC, HTTP and the CLI over a real server; and a
chain without a key is exactly what it was."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import agenttx
from agenttx.audit import (
    EMPTY,
    AuditKey,
    AuditKeys,
    ChainHead,
    canonical,
    digest,
    make_record,
    verify_chain,
)
from agenttx.audit_keys import new_key_toml, parse_audit_keys, read_audit_keys
from agenttx.cli.audit import BAD_CHAIN_EXIT, UNCHECKED_EXIT
from agenttx.errors import InvalidArgument
from agenttx.wire import agenttx_pb2 as pb
from audit_helpers import cli, committed, run_sql
from http_harness import http_base, request, start_http_server
from server_process import agenttx_command, server_env

if TYPE_CHECKING:
    from served_engine import Served

pytest_plugins = ["served_engine"]

K1 = AuditKey("k1", bytes(range(32)))
K2 = AuditKey("k2", bytes(range(32, 64)))
RING1 = AuditKeys.of(K1)


def key_file(path: Path, *keys: AuditKey, sign: str = "") -> Path:
    """A key file of ``keys`` (mode 600), the first signing unless ``sign`` says."""
    text = f'sign = "{sign or keys[0].id}"\n' + "".join(
        f'[[key]]\nid = "{k.id}"\nsecret = "{k.secret.hex()}"\n' for k in keys
    )
    path.write_text(text)
    path.chmod(0o600)
    return path


async def with_effect(engine: agenttx.Engine) -> str:
    """A committed transaction with a delivered effect: its delivery record is appended by
    the store, outside the engine's lock."""
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "k", "value": 1})
    await engine.execute_step(tx, 2, "effect.stage", {"channel": "c", "payload": {"n": 1}})
    await engine.commit(tx)
    return tx


def rewrite(
    store_url: str,
    records: list[Any],
    *,
    key: AuditKey | None = None,
    keep_fields: bool = False,
    head: ChainHead = EMPTY,
) -> None:
    """Re-hash ``records`` in place after ``head``, record 2's data changed (what someone with
    the store's password but not the audit key can do): plain records; with ``keep_fields``
    the bodies still say ``hmac-sha256`` and their key id but are hashed with plain SHA-256;
    with ``key``, keyed with that key instead."""
    for rec in records:
        content = rec.content()
        data = dict(content["data"], forged=True) if rec.seq == 2 else content["data"]
        new = make_record(
            head,
            tx_id=rec.tx_id,
            tenant=content["tenant"],
            kind=rec.kind,
            at=rec.at,
            revision=content["revision"],
            data=data,
            key=key or (K1 if keep_fields else None),
        )
        hashed = digest(new.body) if keep_fields and key is None else new.hash
        run_sql(
            store_url,
            "UPDATE audit SET body = ?, hash = ? WHERE tx_id = ? AND seq = ?",
            (new.body, hashed, rec.tx_id, rec.seq),
        )
        head = ChainHead(new.seq, hashed)


async def test_a_keyed_chain_verifies_and_every_record_names_its_key(open_engine: Any) -> None:
    engine = await open_engine(audit_keys=RING1)
    tx = await with_effect(engine)
    records = await engine.audit_records(tx)
    assert [r.kind for r in records][-1] == "delivery"
    for rec in records:
        content = rec.content()
        assert (content["scheme"], content["key_id"]) == ("hmac-sha256", "k1")
        assert rec.hash == K1.mac(rec.body) != digest(rec.body)
        # An exported line checks with the key alone: drop hash, canonical JSON, HMAC it.
        line = json.loads(rec.line())
        assert K1.mac(canonical({k: v for k, v in line.items() if k != "hash"})) == line["hash"]
    v = await engine.verify_audit(tx)
    assert (v.ok, v.records, v.first_bad, v.reason, v.unchecked) == (True, 5, 0, "", 0)


async def test_a_chain_without_a_key_is_as_before(engine: agenttx.Engine) -> None:
    tx = await with_effect(engine)
    for rec in await engine.audit_records(tx):
        assert not {"scheme", "key_id"} & set(rec.content())
        assert rec.hash == digest(rec.body)
    assert (await engine.verify_audit(tx)).ok


@pytest.mark.parametrize(
    ("keep_fields", "reason", "unchecked"),
    [
        (True, "record 1 does not match its HMAC under audit key 'k1'", 0),
        # Back to plain: the key cannot vouch for it (never ok), as for a chain older than it.
        (False, "none of its 5 records is keyed, so audit key 'k1' cannot check it", 5),
    ],
    ids=["keyed-fields-plain-hash", "back-to-plain"],
)
async def test_a_keyed_chain_rewritten_without_the_key_is_bad(
    open_engine: Any, store_url: str, keep_fields: bool, reason: str, unchecked: int
) -> None:
    engine = await open_engine(audit_keys=RING1)
    tx = await with_effect(engine)
    rewrite(store_url, await engine.audit_records(tx), keep_fields=keep_fields)
    # Without the key the plain rewrite passes, as any unkeyed chain would: what the key adds.
    reader = await open_engine()
    if not keep_fields:
        assert (await reader.verify_audit(tx)).ok
    v = await engine.verify_audit(tx)
    assert (v.ok, v.unchecked) == (False, unchecked)
    assert reason in v.reason, v.reason


async def test_plain_records_after_keyed_ones_are_bad(open_engine: Any, store_url: str) -> None:
    engine = await open_engine(audit_keys=RING1)
    tx = await with_effect(engine)
    records = await engine.audit_records(tx)
    rewrite(store_url, records[3:], head=records[2].head)  # records 4, 5 made plain
    v = await engine.verify_audit(tx)
    assert (v.ok, v.first_bad) == (False, 4)
    assert "record 4 is not keyed (a plain SHA-256), but record 1 before it is" in v.reason


async def test_a_wrong_key_is_bad(open_engine: Any, store_url: str, tmp_path: Path) -> None:
    engine = await open_engine(audit_keys=RING1)
    tx = await committed(engine, 2)
    wrong = AuditKeys.of(AuditKey("k1", bytes(32)))
    other = await open_engine(audit_keys=wrong)
    v = await other.verify_audit(tx)
    assert (v.ok, v.first_bad, v.unchecked) == (False, 1, 0)
    assert "does not match its HMAC under audit key 'k1'" in v.reason
    assert "is not the one it was written with" in v.reason
    # And a rewrite re-keyed with that wrong key is bad for the right one.
    rewrite(store_url, await engine.audit_records(tx), key=wrong.signer)
    assert "record 1 does not match its HMAC" in (await engine.verify_audit(tx)).reason
    right = key_file(tmp_path / "right.toml", K1)
    checked = await cli("audit", "verify", tx, "--store", store_url, "--audit-key", str(right))
    assert checked.exit_code == BAD_CHAIN_EXIT, checked.output
    assert "BAD" in checked.output


async def test_keys_rotate_and_a_ring_checks_old_records_by_their_id(
    open_engine: Any, store_url: str, tmp_path: Path
) -> None:
    first = await open_engine(audit_keys=RING1)
    old = await committed(first, 2)
    spanning = (await first.begin()).transaction_id  # begun under k1, ended under k2
    await first.execute_step(spanning, 1, "kv.put", {"key": "s", "value": 1})
    await first.close()
    rotated = AuditKeys.of(K2, K1)  # k2 signs, k1 still verifies
    second = await open_engine(audit_keys=rotated)
    await second.execute_step(spanning, 2, "kv.put", {"key": "s", "value": 2})
    await second.commit(spanning)
    new = await committed(second, 1)
    ids = {r.content()["key_id"] for r in await second.audit_records(spanning)}
    assert ids == {"k1", "k2"}
    for tx in (old, spanning, new):
        assert (await second.verify_audit(tx)).ok, tx
    # A ring without k1 cannot check k1's records: not ok, and it says which key it needs.
    only_k2 = await open_engine(audit_keys=AuditKeys.of(K2))
    v = await only_k2.verify_audit(spanning)
    # Its begin only: the step's record was pending and chained, with k2, by its commit.
    assert (v.ok, v.first_bad, v.unchecked) == (False, 1, 1)
    assert "keyed with audit key 'k1', which this verifier does not hold" in v.reason
    assert (await only_k2.verify_audit(new)).ok
    ring = key_file(tmp_path / "ring.toml", K2, K1)
    both = await cli("audit", "verify", "--all", "--store", store_url, "--audit-key", str(ring))
    assert both.exit_code == 0, both.output
    assert "3 chains checked, 0 bad" in both.output


async def test_without_the_key_a_keyed_chain_cannot_be_checked(
    open_engine: Any, store_url: str, tmp_path: Path
) -> None:
    engine = await open_engine(audit_keys=RING1)
    tx = await committed(engine, 2)
    keyless = await open_engine()
    v = await keyless.verify_audit(tx)
    assert (v.ok, v.first_bad, v.unchecked) == (False, 1, 4)
    assert "cannot be checked; give it the audit key file with 'k1'" in v.reason
    assert "--audit-key FILE" in v.reason
    bare = await cli("audit", "verify", tx, "--store", store_url)
    assert bare.exit_code == UNCHECKED_EXIT, bare.output
    assert bare.output.startswith(f"UNCHECKED  {tx}  record 1: 4 of its 4 records")
    keys = key_file(tmp_path / "audit.toml", K1)
    keyed = await cli("audit", "verify", tx, "--store", store_url, "--audit-key", str(keys))
    assert keyed.exit_code == 0, keyed.output
    as_json = await cli("audit", "verify", tx, "--store", store_url, "--json")
    assert json.loads(as_json.output)["unchecked"] == 4
    # A chain not checked is not anchored: an anchor would vouch for what no one checked.
    anchored = await cli("audit", "anchor", "--store", store_url)
    assert anchored.exit_code == BAD_CHAIN_EXIT, anchored.output


async def test_grpc_verifies_with_the_servers_key_and_says_when_it_has_none(
    serve: Callable[..., Awaitable[Served]],
) -> None:
    keyed = await serve(audit_keys=RING1)
    tx = await committed(keyed.engine, 1)
    (v,) = (await keyed.stub.VerifyAudit(pb.VerifyAuditRequest(transaction_id=tx))).results
    assert (v.ok, v.unchecked) == (True, 0)
    keyless = await serve()
    (u,) = (await keyless.stub.VerifyAudit(pb.VerifyAuditRequest(transaction_id=tx))).results
    assert (u.ok, u.first_bad, u.unchecked) == (False, 1, 3)
    assert "give it the audit key file with 'k1'" in u.reason
    assert await keyless.client.verify_audit(tx) == await keyless.engine.verify_audit(tx)
    over = await cli("audit", "verify", tx, "--server", keyless.target)
    assert over.exit_code == UNCHECKED_EXIT, over.output
    refused = await cli("audit", "verify", tx, "--server", keyless.target, "--audit-key", "x")
    assert refused.exit_code == 2
    assert "--audit-key works with --store" in refused.output


def test_agenttx_serve_audit_key_keys_records_and_http_verifies_with_it(tmp_path: Path) -> None:
    keys = key_file(tmp_path / "audit.toml", K1)
    server = start_http_server(tmp_path / "data", "--audit-key", str(keys))
    try:
        base = http_base(server)
        tx = request(base, "POST", "/v1/transactions", {}).json["transaction_id"]
        step = {"step_id": 1, "tool_name": "kv.put", "arguments": {"key": "k", "value": 1}}
        assert request(base, "POST", f"/v1/transactions/{tx}/steps", step).status == 200
        assert request(base, "POST", f"/v1/transactions/{tx}/commit", {}).status == 200
        got = request(base, "GET", f"/v1/transactions/{tx}/audit")
        assert got.status == 200, got.raw
        (result,) = got.json["results"]
        assert (result["ok"], result.get("unchecked", 0)) == (True, 0)
    finally:
        assert server.terminate() == 0
    store = f"sqlite:///{tmp_path / 'data' / 'agenttx.db'}"

    def verify(*more: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        command = agenttx_command("audit", "verify", tx, "--store", store, *more)
        return subprocess.run(
            command, env=server_env(env), capture_output=True, text=True, timeout=60
        )

    assert verify().returncode == UNCHECKED_EXIT
    by_env = verify(env={"AGENTTX_AUDIT_KEY": str(keys)})
    assert by_env.returncode == 0, by_env.stdout + by_env.stderr
    assert by_env.stdout.startswith(f"ok   {tx}  3 records")


def test_serve_refuses_a_key_file_others_can_read(tmp_path: Path) -> None:
    keys = key_file(tmp_path / "audit.toml", K1)
    keys.chmod(0o644)
    with pytest.raises(AssertionError, match=r"chmod 600"):
        start_http_server(tmp_path / "data", "--audit-key", str(keys))


def test_the_key_file_is_checked_naming_the_entry_never_the_secret(tmp_path: Path) -> None:
    secret = "ab" * 32
    ring = parse_audit_keys(
        f'sign = "b"\n[[key]]\nid = "a"\nsecret = "{secret}"\n'
        f'[[key]]\nid = "b"\nsecret = "{"cd" * 32}"\n',
        "f",
    )
    assert (ring.signing, sorted(ring.keys)) == ("b", ["a", "b"])
    assert secret not in repr(ring)
    one = parse_audit_keys(new_key_toml("only"), "f")
    assert (one.signing, len(one.signer.secret)) == ("only", 32)
    cases = {
        "": "holds no [[key]] table",
        f'[[key]]\nid = "a"\nsecret = "{secret}"\n[[key]]\nid = "b"\nsecret = "{secret}"\n': (
            'no `sign`: name the key new records are keyed with (sign = "a")'
        ),
        '[[key]]\nid = "a"\nsecret = "abc"\n': "secret must be 64 to 256 hex digits",
        f'[[key]]\nid = "a b"\nsecret = "{secret}"\n': "id must be 1 to 64 of",
        f'sign = "z"\n[[key]]\nid = "a"\nsecret = "{secret}"\n': "names no [[key]]",
        f'[[key]]\nid = "a"\nsecret = "{secret}"\nnote = 1\n': "holds id and secret",
    }
    for text, message in cases.items():
        with pytest.raises(InvalidArgument) as got:
            parse_audit_keys(text, "f")
        assert message in got.value.message, (text, got.value.message)
        assert secret not in got.value.message
    path = key_file(tmp_path / "k.toml", K1)
    assert read_audit_keys(path).signer == K1
    if os.name == "posix":
        path.chmod(0o640)
        with pytest.raises(InvalidArgument, match="its group or others may read it"):
            read_audit_keys(path)


async def test_new_key_prints_a_table_the_file_takes() -> None:
    result = await cli("audit", "new-key", "--id", "2026-12")
    assert result.exit_code == 0, result.output
    ring = parse_audit_keys(result.output, "printed")
    assert ring.signing == "2026-12"
    bad = await cli("audit", "new-key", "--id", "no spaces")
    assert bad.exit_code == 2


async def test_an_anchor_still_finds_a_cut_in_a_chain_it_cannot_check(
    open_engine: Any, store_url: str, tmp_path: Path
) -> None:
    engine = await open_engine(audit_keys=RING1)
    tx = await committed(engine, 2)
    keys = key_file(tmp_path / "audit.toml", K1)
    anchor = tmp_path / "heads.jsonl"
    made = await cli("audit", "anchor", "--store", store_url, "--audit-key", str(keys), "-o",
                     str(anchor))  # fmt: skip
    assert made.exit_code == 0, made.output
    run_sql(store_url, "DELETE FROM audit WHERE tx_id = ? AND seq = 4", (tx,))
    run_sql(store_url, "DELETE FROM transactions WHERE id = ?", (tx,))  # no row to anchor it
    # Where a chain ends needs no key: without one, the cut is BAD, not merely unchecked.
    for more in ((), ("--audit-key", str(keys))):
        got = await cli("audit", "verify", tx, "--store", store_url, "--anchor", str(anchor), *more)
        assert got.exit_code == BAD_CHAIN_EXIT, got.output
        assert got.output.startswith(f"BAD  {tx}  record 4: the chain ends at record 3")


def test_a_record_naming_an_unknown_scheme_or_no_key_id_is_bad() -> None:
    rec = make_record(EMPTY, tx_id="tx_1", tenant="t", kind="begin", at=1.0, revision=1,
                      data={}, key=K1)  # fmt: skip
    for old, new, reason in (
        (
            '"scheme":"hmac-sha256"',
            '"scheme":"hmac-md5"',
            "names an unknown hash scheme 'hmac-md5'",
        ),
        ('"key_id":"k1",', "", "is keyed but names no key_id"),
    ):
        body = rec.body.replace(old, new)
        forged = rec._replace(body=body, hash=K1.mac(body))
        v = verify_chain("tx_1", [forged], keys=RING1)
        assert (v.ok, v.first_bad, v.reason) == (False, 1, f"record 1 {reason}")


async def test_setting_a_key_on_a_store_with_plain_chains(open_engine: Any) -> None:
    plain = await open_engine()
    ended = await committed(plain, 1)
    open_tx = (await plain.begin()).transaction_id
    await plain.execute_step(open_tx, 1, "kv.put", {"key": "o", "value": 1})
    await plain.close()
    keyed = await open_engine(audit_keys=RING1)
    await keyed.execute_step(open_tx, 2, "kv.put", {"key": "o", "value": 2})
    await keyed.commit(open_tx)
    # Open when the key was set: its keyed records bind the plain ones before them.
    kinds = [(r.kind, "key_id" in r.content()) for r in await keyed.audit_records(open_tx)]
    assert kinds[0] == ("begin", False)
    assert kinds[-1] == ("commit", True)
    assert (await keyed.verify_audit(open_tx)).ok
    # Ended before it: plain, which the key cannot tell from a rewrite: unchecked, not bad.
    old = await keyed.verify_audit(ended)
    assert (old.ok, old.first_bad, old.unchecked) == (False, 1, old.records)
    assert "written before the server had --audit-key" in old.reason
    # Without the key, the plain chain verifies as it always did.
    keyless = await open_engine()
    assert (await keyless.verify_audit(ended)).ok
    assert (await keyless.verify_audit(open_tx)).unchecked > 0


async def test_an_anchor_from_before_the_key_settles_a_plain_chain(
    open_engine: Any, store_url: str, tmp_path: Path
) -> None:
    plain = await open_engine()
    ended = await committed(plain, 2)
    anchor = tmp_path / "heads.jsonl"
    made = await cli("audit", "anchor", "--store", store_url, "-o", str(anchor))
    assert made.exit_code == 0, made.output
    await plain.close()
    keys = key_file(tmp_path / "audit.toml", K1)
    verify = ("audit", "verify", ended, "--store", store_url, "--audit-key", str(keys))
    # The key alone cannot tell a chain older than it from a rewrite: unchecked, not bad.
    alone = await cli(*verify)
    assert alone.exit_code == UNCHECKED_EXIT, alone.output
    assert "none of its" in alone.output
    # The anchor written before the key vouches for it, record by record.
    held = await cli(*verify, "--anchor", str(anchor))
    assert held.exit_code == 0, held.output
    # Re-hashed whole after the anchor was written: the anchor finds it.
    run_sql(store_url, "DELETE FROM transactions WHERE id = ?", (ended,))
    records = await (await open_engine()).audit_records(ended)
    rewrite(store_url, records)
    moved = await cli(*verify, "--anchor", str(anchor))
    assert moved.exit_code == BAD_CHAIN_EXIT, moved.output
