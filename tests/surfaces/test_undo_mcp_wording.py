"""Over MCP an undo or redo refusal tells the agent to send the step with ``run_step``, the
tool it has — not ``execute_step``, the embedded call; the engine's hint names no call."""

from __future__ import annotations

from typing import Any

import pytest

import agenttx
from agenttx.api.continuations import refusal_of


async def test_a_redo_refusal_names_run_step(engine: agenttx.Engine) -> None:
    tx = (await engine.begin(agent_id="a")).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "k", "value": 1})
    await engine.undo_step(tx)
    await engine.execute_step(tx, 1, "kv.put", {"key": "k", "value": 2})  # the history moved
    with pytest.raises(agenttx.RedoRefused) as caught:
        await engine.redo_step(tx)
    assert "execute_step" not in caught.value.hint  # every surface reads this hint
    assert "send step 2 again" in caught.value.hint
    refused: Any = refusal_of(caught.value, "redo_step", {})
    assert refused is not None
    instruction = refused.continuation["instruction"]
    assert "run_step" in instruction
    assert "execute_step" not in instruction
