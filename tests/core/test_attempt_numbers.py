"""Every attempt of a step has its own number (issue 22 point 2.12): a step sent again after a
rewind (the controller's or the caller's), after an undo and a redo, or after a restart, is
the next try of that step, never "try 1" a second time — so the history, ``tx show`` and the
dashboard never show two ``#3.1``. On both stores."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

from click.testing import CliRunner

import agenttx
from agenttx import StepStatus
from agenttx.cli import main
from agenttx.client import AgentTxClient
from server_process import start_server


@agenttx.tool(name="tries.charge", effect="compensatable")
async def charge(ctx: agenttx.ToolContext, n: int) -> dict[str, int]:
    """An outside call whose answer was lost the first time only."""
    await ctx.register_undo({"n": n})
    if n == 1:
        raise agenttx.UncertainOutcome("the provider did not answer", operation_id=f"op-{n}")
    return {"n": n}


@charge.undo
async def refund(ctx: agenttx.ToolContext, n: int) -> None:
    pass


def _tries(info: agenttx.TransactionInfo) -> list[tuple[int, int]]:
    return [(s.step_id, s.attempt) for s in info.steps]


async def _rewound_once(engine: agenttx.Engine) -> str:
    """Steps 1 and 2, then a step 3 whose bad value came from step 1: rewound to step 1."""
    tx = (await engine.begin(agent_id="tries")).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "user", "value": {"id": 7}})
    await engine.execute_step(tx, 2, "kv.put", {"key": "note", "value": "x"})
    failed = await engine.execute_step(
        tx, 3, "record.get", {"table": "users", "id": "${steps.1.value.id}"}
    )
    assert failed.status is StepStatus.ROLLBACK_TRIGGERED, failed
    assert failed.rollback_to_step == 1
    return tx


async def test_steps_sent_again_after_a_rewind_are_their_next_try(open_engine: Any) -> None:
    engine = await open_engine(background=False)
    tx = await _rewound_once(engine)
    await engine.execute_step(tx, 1, "kv.put", {"key": "user", "value": {"id": 8}})
    await engine.execute_step(tx, 2, "kv.put", {"key": "note", "value": "y"})
    await engine.execute_step(tx, 3, "kv.get", {"key": "user"})
    info = await engine.get_transaction(tx)
    assert _tries(info) == [(1, 1), (2, 1), (3, 1), (1, 2), (2, 2), (3, 2)]
    # The caller's own rewind: step 3 once more is its third try, and step 2's too.
    await engine.rollback(tx, to_step=2)
    await engine.execute_step(tx, 2, "kv.put", {"key": "note", "value": "z"})
    await engine.execute_step(tx, 3, "kv.get", {"key": "note"})
    info = await engine.get_transaction(tx)
    assert _tries(info)[-2:] == [(2, 3), (3, 3)]
    assert max(Counter(_tries(info)).values()) == 1
    # The controller's decision is the failed attempt's, by its own number.
    assert [(s.step_id, s.attempt) for s in info.steps if s.strategy] == [(3, 1)]


async def test_an_undone_and_redone_step_is_a_new_try(open_engine: Any) -> None:
    engine = await open_engine(background=False)
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1})
    await engine.undo_step(tx)
    await engine.redo_step(tx)
    await engine.undo_step(tx)
    await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 2})
    assert _tries(await engine.get_transaction(tx)) == [(1, 1), (1, 2), (1, 3)]


async def test_the_numbering_survives_a_restart(open_engine: Any) -> None:
    first = await open_engine(background=False)
    tx = await _rewound_once(first)
    await first.close()
    again = await open_engine(background=False)
    r = await again.execute_step(tx, 1, "kv.put", {"key": "user", "value": {"id": 8}})
    assert r.status is StepStatus.SUCCESS
    assert _tries(await again.get_transaction(tx))[-1] == (1, 2)


def test_tx_show_numbers_each_try_of_a_step_once(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data")
    with server.killed_on_error(), AgentTxClient(server.address) as client:
        tx = client.begin(agent_id="tries").transaction_id
        client.execute_step(tx, 1, "kv.put", {"key": "user", "value": {"id": 7}})
        client.execute_step(tx, 2, "kv.put", {"key": "note", "value": "x"})
        client.execute_step(tx, 3, "record.get", {"table": "users", "id": "${steps.1.value.id}"})
        client.execute_step(tx, 1, "kv.put", {"key": "user", "value": {"id": 8}})
        result = CliRunner().invoke(
            main, ["tx", "show", tx, "--server", server.address], env={"COLUMNS": "240"}
        )
    assert server.terminate() == 0
    assert result.exit_code == 0, result.output
    rows = re.findall(r"^\W*(\d+)\W+(\d+)\W+(kv\.put|record\.get)\b", result.output, re.M)
    assert rows == [
        ("1", "1", "kv.put"),
        ("2", "1", "kv.put"),
        ("3", "1", "record.get"),
        ("1", "2", "kv.put"),
    ], result.output


async def test_a_step_sent_again_after_its_call_did_not_happen_is_its_next_try(
    open_engine: Any,
) -> None:
    engine = await open_engine(tools=[charge], background=False)
    tx = (await engine.begin()).transaction_id
    unknown = await engine.execute_step(tx, 1, "tries.charge", {"n": 1})
    assert unknown.status is StepStatus.OUTCOME_UNKNOWN
    await engine.resolve_step(tx, 1, "not_happened", reason="the provider has no such charge")
    again = await engine.execute_step(tx, 1, "tries.charge", {"n": 2})
    assert again.status is StepStatus.SUCCESS
    assert _tries(await engine.get_transaction(tx)) == [(1, 1), (1, 2)]
