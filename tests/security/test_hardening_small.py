"""The smaller hardening items of issue 10 (point 5's temporary files and point 9), each as a
user meets it over real gRPC or through the built-in tools: the answer names what is wrong,
never echoes a huge input in full, never shows an internal class path, and nothing a user
owns is touched."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import grpc
import pytest

import agenttx
from agenttx.core.limits import MAX_STATE_KEY_BYTES
from agenttx.tools.builtin import args as builtin_args
from agenttx.tools.builtin.fs import TMP_SUFFIX, is_temp_name, temp_path
from agenttx.wire import agenttx_pb2 as pb

pytest_plugins = ["served_engine"]

Code = grpc.StatusCode


async def _step(engine: agenttx.Engine, tool: str, args: Any) -> agenttx.StepResult:
    tx = (await engine.begin()).transaction_id
    return await engine.execute_step(tx, 1, tool, args)


# --------------------------------------------------------------------------- temporary files


async def test_writing_x_leaves_a_user_file_named_x_agenttx_tmp_alone(
    engine: agenttx.Engine, tmp_path: Path
) -> None:
    root = tmp_path / "files"
    owned = root / "x.agenttx-tmp"
    owned.parent.mkdir(parents=True, exist_ok=True)
    owned.write_text("the user's")
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(tx, 1, "fs.write", {"path": "x", "contents": "new"})
    assert r.status is agenttx.StepStatus.SUCCESS
    await engine.rollback(tx)  # the undo removes its own temporary name only
    assert owned.read_text() == "the user's"
    assert not (root / "x").exists()
    assert [p.name for p in root.iterdir()] == ["x.agenttx-tmp"]


async def test_a_write_s_temporary_name_is_unique_reserved_and_removed_by_its_undo(
    engine: agenttx.Engine, tmp_path: Path
) -> None:
    root = tmp_path / "files"
    names = {temp_path(root / "a.txt").name for _ in range(100)}
    assert len(names) == 100
    assert all(is_temp_name(n) for n in names)
    assert not is_temp_name("a.txt" + TMP_SUFFIX)  # the old fixed name is an ordinary name
    # A name of the reserved shape is refused as a target, so no user file ever has one.
    reserved = next(iter(names))
    r = await _step(engine, "fs.write", {"path": reserved, "contents": "x"})
    assert r.status is agenttx.StepStatus.ROLLBACK_TRIGGERED
    assert "reserved" in r.clean_hint
    # A crash between the temporary file and the rename leaves it; the undo, which the
    # record names, removes exactly it.
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "fs.write", {"path": "b.txt", "contents": "b"})
    undo = (await engine.store.load_undo(tx))[0]
    left = root / json.loads(undo.args_json)["tmp"]
    left.write_text("half written")
    await engine.rollback(tx)
    assert not left.exists()
    assert not (root / "b.txt").exists()


async def test_an_undo_recorded_before_unique_names_removes_no_guessed_file(
    tmp_path: Path,
) -> None:
    from agenttx.tools.builtin.fs import restore_file

    target = tmp_path / "y"
    target.write_text("new")
    user_file = tmp_path / ("y" + TMP_SUFFIX)
    user_file.write_text("the user's")
    await restore_file(None, str(target), b"old".hex())  # an old record: no "tmp"
    assert target.read_text() == "old"
    assert user_file.read_text() == "the user's"


# --------------------------------------------------------------------------- paths and ids


async def test_a_path_under_a_file_is_named_as_such(engine: agenttx.Engine) -> None:
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "fs.write", {"path": "plain.txt", "contents": "x"})
    r = await engine.execute_step(tx, 2, "fs.write", {"path": "plain.txt/sub.txt", "contents": "y"})
    assert r.status is agenttx.StepStatus.ROLLBACK_TRIGGERED
    assert "'plain.txt' is a file" in r.clean_hint
    assert "File exists" not in r.clean_hint


async def test_record_insert_refuses_references_that_are_not_an_object(
    engine: agenttx.Engine,
) -> None:
    for bad in (["customers"], "customers", 7, True):
        r = await _step(
            engine,
            "record.insert",
            {"table": "invoices", "id": "i-1", "fields": {"c": "x"}, "references": bad},
        )
        assert r.status is agenttx.StepStatus.ROLLBACK_TRIGGERED, bad
        assert "references" in r.clean_hint
        assert "object" in r.clean_hint


async def test_an_over_long_record_id_or_key_is_named_in_its_hint(engine: agenttx.Engine) -> None:
    assert builtin_args.MAX_KEY_BYTES == MAX_STATE_KEY_BYTES
    r = await _step(engine, "record.insert", {"table": "t", "id": "i" * 10_000})
    assert "record id 'iii" in r.clean_hint
    assert "at most 1014 bytes" in r.clean_hint
    assert len(r.clean_hint) <= 240
    r = await _step(engine, "record.get", {"table": "t", "id": "j" * 2000})
    assert "record id 'jjj" in r.clean_hint
    r = await _step(engine, "kv.put", {"key": "k" * 10_000, "value": 1})
    assert "state key 'kv/kkk" in r.clean_hint
    assert "1-1024 bytes" in r.clean_hint


async def test_hints_show_no_internal_class_paths(engine: agenttx.Engine) -> None:
    for tool, args in (
        ("kv.put", {"key": "k" * 2000, "value": 1}),
        ("record.insert", {"table": "t", "id": "i" * 2000}),
        ("fs.write", {"path": "../escape", "contents": "x"}),
        ("kv.put", {}),
    ):
        r = await _step(engine, tool, args)
        assert r.status is agenttx.StepStatus.ROLLBACK_TRIGGERED
        for internal in ("agenttx.", "InvalidArgument", "ToolArgumentError", "SandboxError"):
            assert internal not in r.clean_hint, r.clean_hint


@pytest.mark.parametrize("step", ["12345678901234", "4294967296", "99999999999999999999"])
async def test_a_long_step_number_in_a_reference_is_quoted_whole(
    engine: agenttx.Engine, step: str
) -> None:
    r = await _step(engine, "kv.get", {"key": f"${{steps.{step}.value}}"})
    assert r.status is agenttx.StepStatus.ROLLBACK_TRIGGERED
    assert f"${{steps.{step}.value}}" in r.clean_hint, r.clean_hint
    # Every step number the hint names is the one sent, never a cut-off prefix of it.
    named = re.findall(r"\bstep (\d+)", r.clean_hint)
    assert all(n == step for n in named), r.clean_hint


# --------------------------------------------------------------------------- over the wire


async def test_a_huge_transaction_id_is_refused_and_never_echoed_in_full(s: Any) -> None:
    for huge in ("tx_" + "a" * 10_000, "é" * 100):
        for call in (
            s.get(huge),
            s.step(huge, 1, "kv.put", {"key": "a"}),
            s.stub.CommitTransaction(pb.CommitTransactionRequest(transaction_id=huge)),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call
            assert refused.value.code() == Code.INVALID_ARGUMENT
            assert len(refused.value.details() or "") < 300
    # An id of plausible length that names nothing is NOT_FOUND, echoed in full.
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await s.get("tx_" + "b" * 60)
    assert refused.value.code() == Code.NOT_FOUND
    assert "b" * 60 in refused.value.details()


async def test_a_garbage_page_token_is_refused_not_read_as_the_first_page(s: Any) -> None:
    await s.begin()
    for token in ("garbage", "tx_" + "z" * 32, "x" * 5000):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await s.stub.ListTransactions(pb.ListTransactionsRequest(page_token=token))
        assert refused.value.code() == Code.INVALID_ARGUMENT
        assert "next_page_token" in refused.value.details()
        assert len(refused.value.details()) < 300
    first = await s.stub.ListTransactions(pb.ListTransactionsRequest(page_size=1))
    assert len(first.transactions) == 1
