"""The gateway over a small real SDK server (``gateway_downstream.py``, 2026-07-28 era): an
undo declared by the tool itself in ``_meta["io.agenttx/undo"]`` (mapped from its arguments
or from its output), a ``before`` capture that lets a plain write run at the step and be
restored on rollback (and stages it when the capture fails), a refreshed tool list after the
server says it changed, and ``${env:…}`` secrets masked in hints and logs."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agenttx.types import StepStatus, Strategy
from gateway_servers import gateway_engine, write_gateway
from paths import TESTS
from waiting import eventually

SERVER = TESTS.joinpath("gateway_downstream.py")
SECRET = "tok-5ecret-value-42"


@pytest.fixture
def kv_file(tmp_path: Path) -> Path:
    path = tmp_path / "store.json"
    path.write_text(json.dumps({"color": "red"}))
    return path


@pytest.fixture
async def engine(
    store_url: str, tmp_path: Path, kv_file: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Any]:
    monkeypatch.setenv("GW_TEST_TOKEN", SECRET)
    gateway = write_gateway(
        tmp_path / "gateway.toml",
        f"""
        [servers.store]
        command = "{sys.executable}"
        args = ["{SERVER}"]
        env = {{ KV_FILE = "{kv_file}", TOKEN = "${{env:GW_TEST_TOKEN}}" }}

        [servers.store.tools.put.before]
        tool = "get"
        arguments = {{ key = "${{args.key}}" }}

        [servers.store.tools.put.undo]
        tool = "put"
        arguments = {{ key = "${{args.key}}", value = "${{before.value}}" }}
        """,
    )
    engine = await gateway_engine(store_url, tmp_path / "data", gateway)
    yield engine
    await engine.close()


def state(kv_file: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(kv_file.read_text())
    return data


def flag(kv_file: Path, key: str) -> Any:
    """``key`` of the state file, or None while the server is rewriting it (a half-written
    file is not JSON yet)."""
    try:
        return state(kv_file).get(key)
    except ValueError:
        return None


async def test_effect_classes_from_annotations_meta_and_the_file(engine: Any) -> None:
    effects = {t["name"]: t["effect"] for t in engine.list_tools() if t.get("server") == "store"}
    assert effects["store.get"] == "read"  # readOnlyHint
    assert effects["store.create"] == "compensatable"  # _meta io.agenttx/undo
    assert effects["store.put"] == "compensatable"  # configured undo (with a before call)
    assert effects["store.delete"] == "staged"  # destructive, no undo: the default
    assert effects["store.add_tool"] == "staged"  # no annotations: the spec's defaults


async def test_an_undo_declared_in_meta_runs_on_rollback(engine: Any, kv_file: Path) -> None:
    tx = (await engine.begin()).transaction_id
    step = await engine.execute_step(tx, 1, "store.create", {"key": "shape", "value": "round"})
    assert step.status is StepStatus.SUCCESS, step.clean_hint
    assert state(kv_file)["shape"] == "round"  # ran at the step
    rolled = await engine.rollback(tx)
    assert rolled.compensation_errors == []
    assert "shape" not in state(kv_file)


async def test_a_call_that_failed_downstream_is_not_undone(engine: Any, kv_file: Path) -> None:
    tx = (await engine.begin()).transaction_id
    # "color" exists: create refuses (isError). Its undo (delete color) must not run when
    # the failed step is rewound.
    step = await engine.execute_step(tx, 1, "store.create", {"key": "color", "value": "x"})
    assert step.status is StepStatus.ROLLBACK_TRIGGERED
    assert "already exists" in step.clean_hint
    assert step.compensation_errors == []
    assert state(kv_file)["color"] == "red"


async def test_a_downstream_error_on_a_typed_key_retries_in_place(
    engine: Any, kv_file: Path
) -> None:
    """The server's own text ("no such key: zzz"), which no hint rule knows, on a key typed at
    the failing step: that step is sent again and the earlier ones are kept (issue 25)."""
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "store.create", {"key": "shape", "value": "round"})
    await engine.execute_step(tx, 2, "kv.put", {"key": "a", "value": 1})
    step = await engine.execute_step(tx, 3, "store.get", {"key": "zzz"})
    assert (step.strategy, step.rollback_to_step, step.next_step_id) == (Strategy.RETRY, 3, 3)
    assert "no such key: zzz" in step.clean_hint
    assert state(kv_file)["shape"] == "round"  # step 1's write was not undone
    step = await engine.execute_step(tx, 3, "store.get", {"key": "${steps.1.key}"})
    assert step.output["value"] == "round"
    assert (await engine.commit(tx)).committed


async def test_a_downstream_error_on_a_referenced_key_is_not_retried(engine: Any) -> None:
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "which", "value": "zzz"})
    await engine.execute_step(tx, 2, "kv.put", {"key": "a", "value": 1})
    step = await engine.execute_step(tx, 3, "store.get", {"key": "${steps.1.value}"})
    assert "no such key: zzz" in step.clean_hint
    # nothing names the key to trace it by: the reference's local backtrack, not a retry
    assert (step.strategy, step.next_step_id) == (Strategy.LOCAL_BACKTRACK, 2)


async def test_an_undo_mapped_from_the_output_runs_on_rollback(engine: Any, kv_file: Path) -> None:
    tx = (await engine.begin()).transaction_id
    step = await engine.execute_step(tx, 1, "store.append", {"value": "v1"})
    assert step.status is StepStatus.SUCCESS, step.clean_hint
    new_id = step.output["id"]
    assert state(kv_file)[new_id] == "v1"
    rolled = await engine.rollback(tx)
    assert rolled.compensation_errors == []
    assert new_id not in state(kv_file)


async def test_a_before_capture_lets_a_write_run_at_the_step_and_be_restored(
    engine: Any, kv_file: Path
) -> None:
    tx = (await engine.begin()).transaction_id
    step = await engine.execute_step(tx, 1, "store.put", {"key": "color", "value": "blue"})
    assert step.status is StepStatus.SUCCESS, step.clean_hint
    assert state(kv_file)["color"] == "blue"  # ran at the step: later steps read it
    read = await engine.execute_step(tx, 2, "store.get", {"key": "color"})
    assert read.output["value"] == "blue"
    await engine.rollback(tx)
    assert state(kv_file)["color"] == "red"


async def test_a_failed_before_call_stages_the_write_and_says_so(
    engine: Any, kv_file: Path
) -> None:
    tx = (await engine.begin()).transaction_id
    step = await engine.execute_step(tx, 1, "store.put", {"key": "size", "value": "xl"})
    assert step.status is StepStatus.SUCCESS, step.clean_hint
    assert step.output["io.agenttx/staged"] is True
    assert "before call get failed" in step.output["reason"]
    assert "size" not in state(kv_file)
    committed = await engine.commit(tx)
    assert committed.effects_dispatched == 1, committed.dispatch_errors
    assert state(kv_file)["size"] == "xl"


async def test_a_changed_tool_list_is_picked_up(engine: Any) -> None:
    assert engine.registry.get("store.shout") is None
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "store.add_tool", {"name": "shout"})
    committed = await engine.commit(tx)
    assert committed.effects_dispatched == 1, committed.dispatch_errors
    await eventually(lambda: engine.registry.get("store.shout"), "the tool list was relisted")
    tool = engine.registry.get("store.shout")
    assert tool is not None
    assert tool.effect.value == "read"
    tx = (await engine.begin()).transaction_id
    echoed = await engine.execute_step(tx, 1, "store.shout", {"text": "hey"})
    assert echoed.status is StepStatus.SUCCESS
    assert "hey" in str(echoed.output)


async def test_env_secrets_are_masked_in_hints_and_logs(
    engine: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    tx = (await engine.begin()).transaction_id
    # The server's error echoes the key, which is the secret here.
    step = await engine.execute_step(tx, 1, "store.get", {"key": SECRET})
    assert step.status is not StepStatus.SUCCESS
    assert SECRET not in step.clean_hint
    assert "***" in step.clean_hint
    logging.getLogger("agenttx.gateway").info("token is %s", SECRET)
    assert SECRET not in caplog.text
    assert SECRET not in json.dumps(engine.list_tools())


async def test_a_cancelled_step_cancels_the_call_downstream(engine: Any, kv_file: Path) -> None:
    tx = (await engine.begin()).transaction_id
    running = asyncio.create_task(engine.execute_step(tx, 1, "store.wait", {"seconds": 30}))
    # Cancel once the server runs the call (a fixed 1 s sleep could cancel it before it was
    # sent on a busy machine: then the server never sees a cancellation).
    await eventually(lambda: flag(kv_file, "waiting"), "the call reached the server")
    assert engine.cancel_step(tx, 1)
    step = await asyncio.wait_for(running, 30)
    assert step.status is not StepStatus.SUCCESS
    # The server saw its request cancelled.
    await eventually(lambda: flag(kv_file, "cancelled"), "the server saw the cancel")
    assert state(kv_file).get("cancelled") is True
