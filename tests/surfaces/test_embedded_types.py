"""The embedded API checks its argument types: a wrong type is ``InvalidArgument`` naming the
argument — never a ``TypeError`` from inside, a silent conversion (``1.0`` or ``True`` as a
step id) or a store write failing on a lone surrogate — and the JSON policy holds for
arguments given as Python values. Both stores.

Every test here begins its own transaction and none reads another's, so one engine per store
serves the whole module (the checks run before the store is touched; an engine per test spent
40 of the file's 43 s opening and closing stores)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio

import agenttx
from agenttx import InvalidArgument, StepStatus
from pg import fresh_database

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def store_backend(request: pytest.FixtureRequest) -> str:
    """The backend of this module's engine (``conftest.pytest_generate_tests`` sets it)."""
    return str(request.param)


@pytest.fixture(scope="module")
def store_url(store_backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if store_backend == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('types') / 'agenttx.db'}"
        return
    with fresh_database() as url:
        yield url


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(
    store_url: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[agenttx.Engine]:
    root = tmp_path_factory.mktemp("types-files")
    opened = await agenttx.Engine.open(
        store_url, fs_root=root / "files", outbox_path=root / "outbox.jsonl"
    )
    yield opened
    await opened.close()


def ok(result: agenttx.StepResult) -> bool:
    return result.status is StepStatus.SUCCESS


@pytest_asyncio.fixture(loop_scope="module")  # on the engine's loop: its pool lives there
async def tx(engine: agenttx.Engine) -> str:
    return (await engine.begin()).transaction_id


@pytest.mark.parametrize(
    ("step_id", "message"),
    [("1", "step_id must be an integer"), (1.0, "got float"), (True, "got bool"), (None, "got")],
)
async def test_a_step_id_must_be_an_int(
    engine: agenttx.Engine, tx: str, step_id: Any, message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        await engine.execute_step(tx, step_id, "kv.put", {"key": "k", "value": 1})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tool_name": None}, "tool_name must be a string"),
        ({"tool_name": b"kv.put"}, "tool_name must be a string"),
        ({"raw_context": 5}, "raw_context must be a string"),
        ({"raw_context": "why \ud800"}, "raw_context is not valid UTF-8"),
        ({"request_id": 7}, "request_id must be a string"),
        ({"arguments": {"key": "k\udc00", "value": 1}}, "json_utf8"),
        ({"arguments": {"key": "k", "value": float("nan")}}, "JSON"),
        ({"arguments": {"key": "k", "value": {1: "a"}}}, "json_keys"),
        ({"arguments": {"key": "k", "value": 10**200}}, "json_integer_digits"),
        ({"arguments": '{"key": "k\ud800"}'}, "not valid UTF-8"),
        ({"arguments": b'{"key": "\xff"}'}, "not valid UTF-8"),
    ],
)
async def test_bad_step_arguments_are_invalid_argument(
    engine: agenttx.Engine, tx: str, kwargs: dict[str, Any], message: str
) -> None:
    call: dict[str, Any] = {"tool_name": "kv.put", "arguments": {"key": "k", "value": 1}}
    call.update(kwargs)
    with pytest.raises(InvalidArgument, match=message):
        await engine.execute_step(tx, 1, **call)
    # Nothing happened: step 1 is still next, and runs.
    assert ok(await engine.execute_step(tx, 1, "kv.put", {"key": "k", "value": 1}))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"policy": {"max_local_dept": 1}}, "unknown key"),
        ({"policy": {"max_local_depth": "2"}}, "must be an integer"),
        ({"policy": {"max_local_depth": True}}, "must be an integer"),
        ({"policy": {"replay_budget_factor": "2"}}, "must be a number"),
        ({"policy": ["max_local_depth"]}, "policy must be"),
        ({"agent_id": None}, "agent_id must be a string"),
        ({"agent_id": "a\ud800"}, "not valid UTF-8"),
        ({"metadata": {"k": 1}}, "metadata"),
        ({"metadata": "k=v"}, "metadata must be a mapping"),
        ({"labels": "urgent"}, "labels must be a list"),
        ({"labels": [1]}, "labels"),
        ({"isolation": 3}, "isolation must be a string"),
    ],
)
async def test_bad_begin_arguments_are_invalid_argument(
    engine: agenttx.Engine, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        await engine.begin(**kwargs)


async def test_known_policy_keys_still_work(engine: agenttx.Engine) -> None:
    begun = await engine.begin(policy={"max_local_depth": 1, "replay_budget_factor": 3})
    info = await engine.get_transaction(begun.transaction_id)
    assert info.policy.max_local_depth == 1
    assert info.policy.replay_budget_factor == 3.0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda e, tx: e.rollback(tx, to_step="1"), "to_step must be an integer"),
        (lambda e, tx: e.rollback(tx, reason=None), "reason must be a string"),
        (lambda e, tx: e.commit(None), "transaction_id must be a string"),
        (lambda e, tx: e.get_transaction(5), "transaction_id must be a string"),
        (lambda e, tx: e.execute_step(["tx"], 1, "kv.put", {}), "transaction_id must be"),
    ],
)
async def test_other_calls_check_their_types(
    engine: agenttx.Engine, tx: str, call: Any, message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        await call(engine, tx)
