"""Built-in tools keep the reference's names, arguments, outputs and error wording."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import agenttx
from agenttx import StepStatus


async def _step(engine: agenttx.Engine, tx: str, tool: str, args: Any) -> agenttx.StepResult:
    info = await engine.get_transaction(tx, history=False)
    return await engine.execute_step(tx, info.next_step_id, tool, args)


async def _error(engine: agenttx.Engine, tx: str, tool: str, args: Any) -> str:
    """Run a step expected to fail and return the raw error the engine recorded."""
    r = await _step(engine, tx, tool, args)
    assert r.status is StepStatus.ROLLBACK_TRIGGERED, r
    rows = await engine.store.load_steps(tx, live_only=False)
    return str(rows[-1].detail.get("hint", "")) + "\n" + r.clean_hint


@pytest.fixture
async def tx(engine: agenttx.Engine) -> str:
    return (await engine.begin()).transaction_id


async def test_kv_put_get_delete(engine: agenttx.Engine, tx: str) -> None:
    assert (await _step(engine, tx, "kv.put", {"key": "a", "value": {"n": 1}})).output == {
        "key": "a",
        "value": {"n": 1},
    }
    assert (await _step(engine, tx, "kv.get", {"key": "a"})).output == {
        "key": "a",
        "value": {"n": 1},
    }
    assert (await _step(engine, tx, "kv.put", {"key": "nil"})).output == {
        "key": "nil",
        "value": None,
    }
    assert (await _step(engine, tx, "kv.delete", {"key": "a"})).output == {
        "key": "a",
        "deleted": True,
    }
    assert (await _step(engine, tx, "kv.delete", {"key": "a"})).output == {
        "key": "a",
        "deleted": False,
    }


async def test_kv_get_of_a_missing_key_fails_with_the_reference_text(
    engine: agenttx.Engine, tx: str
) -> None:
    r = await _step(engine, tx, "kv.get", {"key": "ghost"})
    assert r.status is StepStatus.ROLLBACK_TRIGGERED
    assert r.error_category == "not_found"


async def test_kv_missing_argument_reads_like_serde(engine: agenttx.Engine, tx: str) -> None:
    r = await _step(engine, tx, "kv.put", {"value": 1})
    assert r.error_category in ("missing_field", "missing_argument")
    assert "key" in r.clean_hint


async def test_record_insert_and_get(engine: agenttx.Engine, tx: str) -> None:
    r = await _step(
        engine, tx, "record.insert", {"table": "customers", "id": "c-1", "fields": {"name": "A"}}
    )
    assert r.output == {"name": "A", "id": "c-1", "table": "customers"}
    r = await _step(engine, tx, "record.get", {"table": "customers", "id": "c-1"})
    assert r.output == {"name": "A", "id": "c-1"}
    r = await _step(engine, tx, "record.insert", {"table": "n", "id": 7})
    assert r.output == {"id": 7, "table": "n"}


async def test_record_constraints_use_postgres_wording(engine: agenttx.Engine, tx: str) -> None:
    await _step(engine, tx, "record.insert", {"table": "customers", "id": "c-1"})
    dup = await _step(engine, tx, "record.insert", {"table": "customers", "id": "c-1"})
    assert dup.error_category == "unique_violation"
    fk = await _step(
        engine,
        tx,
        "record.insert",
        {
            "table": "invoices",
            "id": "i-1",
            "fields": {"customer_id": "c-404"},
            "references": {"customer_id": "customers"},
        },
    )
    assert fk.error_category == "foreign_key"
    assert fk.hint_key == "customer_id"
    nn = await _step(
        engine,
        tx,
        "record.insert",
        {"table": "invoices", "id": "i-2", "references": {"customer_id": "customers"}},
    )
    assert nn.error_category == "not_null"
    missing = await _step(engine, tx, "record.get", {"table": "customers", "id": "nope"})
    assert missing.error_category == "not_found"


async def test_record_error_texts_are_the_references(open_engine: Any) -> None:
    from agenttx.tools.builtin.record import record_insert

    rows: dict[str, Any] = {"records/customers/c-1": {"id": "c-1"}}

    class Ctx:
        class state:  # a tiny stand-in for the managed state the tool reads
            @classmethod
            async def exists(cls, key: str) -> bool:
                return key in rows

            @classmethod
            async def put(cls, key: str, value: Any) -> None:
                rows[key] = value

    with pytest.raises(Exception) as dup:
        await record_insert.fn(Ctx(), {"table": "customers", "id": "c-1"})
    assert str(dup.value) == (
        'ERROR: duplicate key value violates unique constraint "customers_pkey"\n'
        "DETAIL: Key (id)=(c-1) already exists."
    )
    with pytest.raises(Exception) as fk:
        await record_insert.fn(
            Ctx(),
            {
                "table": "invoices",
                "id": "i",
                "fields": {"customer_id": "c-404"},
                "references": {"customer_id": "customers"},
            },
        )
    assert str(fk.value) == (
        'ERROR: insert or update on table "invoices" violates foreign key constraint '
        '"invoices_customer_id_fkey"\n'
        'DETAIL: Key (customer_id)=(c-404) is not present in table "customers".'
    )
    with pytest.raises(Exception) as bad:
        await record_insert.fn(Ctx(), {"table": "bad-name", "id": "x"})
    assert str(bad.value) == "invalid table `bad-name`: expected 1-128 chars of [A-Za-z0-9_]"
    with pytest.raises(Exception) as miss:
        await record_insert.fn(Ctx(), {"table": "t"})
    assert str(miss.value) == "missing field `id`"


async def test_fs_write_read_and_undo(engine: agenttx.Engine, tx: str, tmp_path: Path) -> None:
    root = tmp_path / "files"
    (root / "notes").mkdir(parents=True)
    (root / "notes" / "a.txt").write_text("old")
    r = await _step(engine, tx, "fs.write", {"path": "notes/a.txt", "contents": "new ✓"})
    assert r.output == {"path": "notes/a.txt", "bytes": len("new ✓".encode())}
    assert (root / "notes" / "a.txt").read_text() == "new ✓"
    await _step(engine, tx, "fs.write", {"path": "notes/b.txt", "contents": "b"})
    r = await _step(engine, tx, "fs.read", {"path": "notes/a.txt"})
    assert r.output == {"path": "notes/a.txt", "contents": "new ✓"}
    await engine.rollback(tx)
    assert (root / "notes" / "a.txt").read_text() == "old"  # prior bytes restored
    assert not (root / "notes" / "b.txt").exists()  # created file removed
    assert not list(root.rglob("*.agenttx-tmp"))


@pytest.mark.parametrize("path", ["", "/etc/passwd", "../x", "a/../../x", "./a", "a//b"])
async def test_fs_paths_cannot_escape_the_sandbox(
    engine: agenttx.Engine, tx: str, path: str
) -> None:
    r = await _step(engine, tx, "fs.write", {"path": path, "contents": "x"})
    assert r.status is StepStatus.ROLLBACK_TRIGGERED
    assert r.error_category == "path_escape"


async def test_fs_symlink_escape_is_refused(
    engine: agenttx.Engine, tx: str, tmp_path: Path
) -> None:
    root = tmp_path / "files"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, root / "link")
    r = await _step(engine, tx, "fs.write", {"path": "link/x.txt", "contents": "x"})
    assert r.error_category == "path_escape"
    assert not (outside / "x.txt").exists()


async def test_fs_read_of_a_missing_file(engine: agenttx.Engine, tx: str) -> None:
    r = await _step(engine, tx, "fs.read", {"path": "nope.txt"})
    assert r.error_category == "file_not_found"


async def test_effect_stage_output(engine: agenttx.Engine, tx: str) -> None:
    r = await _step(
        engine,
        tx,
        "effect.stage",
        {"channel": "email", "payload": {"a": 1}, "idempotency_key": "k1"},
    )
    assert r.output == {"staged": True, "channel": "email", "idempotency_key": "k1"}
    r = await _step(engine, tx, "effect.stage", {"channel": "email"})
    assert len(r.output["idempotency_key"]) == 36  # a UUID when none is given
    bad = await _step(engine, tx, "effect.stage", {"channel": "no spaces"})
    assert bad.status is StepStatus.ROLLBACK_TRIGGERED


def test_builtins_are_listed_with_schemas() -> None:
    from agenttx.tools.builtin import BUILTIN_TOOLS

    names = [t.name for t in BUILTIN_TOOLS]
    assert names == [
        "kv.put",
        "kv.get",
        "kv.delete",
        "record.insert",
        "record.get",
        "fs.write",
        "fs.read",
        "effect.stage",
    ]
    for t in BUILTIN_TOOLS:
        d = t.describe()
        assert d["input_schema"]["type"] == "object"
        assert d["examples"]
