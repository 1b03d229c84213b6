"""Over MCP an undo or redo refusal tells the agent to send the step with ``run_step``, the
tool it has — not ``execute_step``, the embedded call the engine's hint names."""

from __future__ import annotations

from typing import Any

import pytest

import agenttx
from agenttx.api.mcp.undo import refusal


async def test_a_redo_refusal_names_run_step(engine: agenttx.Engine) -> None:
    tx = (await engine.begin(agent_id="a")).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "k", "value": 1})
    await engine.undo_step(tx)
    await engine.execute_step(tx, 1, "kv.put", {"key": "k", "value": 2})  # the history moved
    with pytest.raises(agenttx.RedoRefused) as caught:
        await engine.redo_step(tx)
    assert "execute_step" in caught.value.hint  # the embedded wording, kept for the API
    refused: Any = refusal(caught.value)
    assert refused is not None
    instruction = refused.continuation["instruction"]
    assert "run_step" in instruction
    assert "execute_step" not in instruction
